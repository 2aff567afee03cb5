"""The mixed-activation GP's fitted state is self-contained (issue 18, items 3 and 4)."""

import pickle

import numpy as np
import pytest

from skbnngp import MixedActivationGPRegressor

from ._factor_checks import check_factor_read_on_demand
from ._promise import assert_same_predictions


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 2))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(60)
    est = MixedActivationGPRegressor(n_anchors=15, max_iter=10, device="cpu",
                                     random_state=0).fit(X, y)
    return est, X


@pytest.mark.parametrize("change", [{"dtype": "float32"}, {"jitter": 0.1},
                                    {"activations": ("relu",)}, {"approx": "exact"},
                                    {"input_scaling": "standard"}, {"preset": "paper"}])
def test_set_params_then_pickle_predicts_as_fitted(fitted, change):
    est, X = fitted
    est = pickle.loads(pickle.dumps(est))
    mean, std = est.predict(X, return_std=True)
    lml = est.log_marginal_likelihood(est.theta_)
    est.set_params(**change)
    back = pickle.loads(pickle.dumps(est))
    for model in (est, back):
        m2, s2 = model.predict(X, return_std=True)
        np.testing.assert_allclose(m2, mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(s2, std, rtol=0, atol=1e-12)
        assert model.log_marginal_likelihood(model.theta_) == pytest.approx(lml, abs=1e-10)


@pytest.mark.parametrize("param,bad", [("batch_size", 0), ("include_noise", "yes")])
def test_predict_time_parameters_are_validated(fitted, param, bad):
    est = pickle.loads(pickle.dumps(fitted[0])).set_params(**{param: bad})
    with pytest.raises(ValueError, match=param):
        est.predict(fitted[1], return_std=True)


def test_exact_cholesky_factor_is_read_on_demand_and_not_pickled():
    # the exact mode's n x n factor stays on the device: L_ is read from it when asked for,
    # is still the factor of K + noise I (L L^T dual_coef_ = y_train_), and a pickle carries
    # no n x n array (the loaded model refactorises at theta_ and predicts the same)
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(150, 2))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(150)
    est = MixedActivationGPRegressor(approx="exact", max_iter=5, device="cpu",
                                     random_state=0).fit(X, y)
    check_factor_read_on_demand(est, legacy_drop=("_L_small",))
    back = pickle.loads(pickle.dumps(est))
    m0, s0 = est.predict(X, return_std=True)
    m1, s1 = back.predict(X, return_std=True)
    assert_same_predictions(m1, m0)  # a round trip: the documented tolerance
    assert_same_predictions(s1, s0)


def test_nystrom_anchor_factor_is_saved(fitted):
    # under Nystrom L_ is the m x m anchor factor, saved with the model (an old pickle's L_
    # is kept as that factor)
    est, X = fitted
    m = est.n_anchors_
    L = est.L_
    assert L.shape == (m, m) and not L.flags.writeable
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.L_, L)
    old = {k: v for k, v in est.__getstate__().items() if k != "_L_small"}
    old["L_"] = np.array(L)
    legacy = MixedActivationGPRegressor.__new__(MixedActivationGPRegressor)
    legacy.__setstate__(old)
    np.testing.assert_array_equal(legacy.L_, L)
    assert_same_predictions(legacy.predict(X), est.predict(X))
