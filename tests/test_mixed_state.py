"""The mixed-activation GP's fitted state is self-contained (issue 18, items 3 and 4)."""

import pickle

import numpy as np
import pytest

from skbnngp import MixedActivationGPRegressor


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 2))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(60)
    est = MixedActivationGPRegressor(n_anchors=15, max_iter=10, device="cpu",
                                     random_state=0).fit(X, y)
    return est, X


@pytest.mark.parametrize("change", [dict(dtype="float32"), dict(jitter=0.1),
                                    dict(activations=("relu",)), dict(approx="exact"),
                                    dict(input_scaling="standard"), dict(preset="paper")])
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
