"""StudentTProcessRegressor's ``ard="auto"``: the per-feature relevances are kept only when
the paired leave-one-out log predictive densities say they pay (issue 19: ARD on 167 rows of
cpu_performance left 95 % coverage at 0.914 / 0.918 on two fold seeds)."""

import numpy as np
import pytest
from scipy import stats

from skbnngp import StudentTProcessRegressor
from tests._promise import assert_same_predictions


def _fit(X, y, **kw):
    return StudentTProcessRegressor(device="cpu", random_state=0, **{"ard": "auto", **kw}).fit(X, y)


@pytest.fixture(scope="module")
def one_relevant():
    # y varies fast along feature 0 and not at all along the other three: a shared kernel
    # must either blur feature 0 or read the three noise features as signal
    rng = np.random.RandomState(0)
    X = rng.randn(120, 4)
    return X, np.sin(3 * X[:, 0]) + 0.1 * rng.randn(120)


@pytest.fixture(scope="module")
def isotropic():
    # every feature counts the same: per-feature relevances have nothing to add
    rng = np.random.RandomState(1)
    X = rng.randn(120, 4)
    return X, np.sin(X.sum(1)) + 0.1 * rng.randn(120)


def _loo_gain(ard, shared):
    a, s = ard._loo_log_density(), shared._loo_log_density()
    g = a - s
    return g.mean(), g.std(ddof=1) / np.sqrt(g.size)


def test_auto_takes_ard_where_one_feature_matters_and_is_the_explicit_fit(one_relevant):
    X, y = one_relevant
    auto, ard, shared = _fit(X, y), _fit(X, y, ard=True), _fit(X, y, ard=False)
    assert auto.ard_ and ard.ard_ and not shared.ard_
    gain, se = auto.ard_loo_gain_
    assert (gain, se) == pytest.approx(_loo_gain(ard, shared), rel=1e-8)
    assert gain > 2 * se > 0
    Xq = np.random.RandomState(2).randn(20, 4)
    assert_same_predictions(auto.predict(Xq), ard.predict(Xq))
    assert_same_predictions(auto.predict_std(Xq), ard.predict_std(Xq))
    assert auto.relevance_[0] > 10 * auto.relevance_[1:].max()
    assert ard.ard_loo_gain_ is None and shared.ard_loo_gain_ is None


def test_auto_keeps_the_shared_kernel_where_features_count_alike(isotropic):
    X, y = isotropic
    auto, shared = _fit(X, y), _fit(X, y, ard=False)
    assert not auto.ard_
    gain, se = auto.ard_loo_gain_
    assert not gain > max(2 * se, 1e-3)
    np.testing.assert_array_equal(auto.relevance_, np.ones(4))
    Xq = np.random.RandomState(3).randn(20, 4)
    assert_same_predictions(auto.predict(Xq), shared.predict(Xq))
    assert auto.get_params()["ard"] == "auto"  # the parameter is kept, the choice is ard_


def test_one_feature_needs_no_comparison(one_relevant):
    X, y = one_relevant
    auto = _fit(X[:, :1], y)
    assert auto.ard_ is False and auto.ard_loo_gain_ is None


def test_loo_log_density_is_the_density_of_each_row_given_the_others(one_relevant):
    """A Gaussian prior without calibration: each row's leave-one-out density, from the
    conditional of the fitted training covariance, as refitting without the row at the same
    hyperparameters would give it."""
    X, y = one_relevant
    X, y = X[:40], y[:40]
    reg = _fit(X, y, ard=True, prior="gaussian", variance_calibration=None)
    K = reg.L_ @ reg.L_.T  # the noisy training covariance, unit amplitude
    Y = reg.y_train_[:, 0]
    want = []
    for i in range(len(Y)):
        o = np.arange(len(Y)) != i
        w = np.linalg.solve(K[np.ix_(o, o)], K[o, i])
        mean, var = w @ Y[o], K[i, i] - K[i, o] @ w
        want.append(stats.norm(mean, np.sqrt(var * reg._variance_multiplier())).logpdf(Y[i]))
    np.testing.assert_allclose(reg._loo_log_density(), want, rtol=1e-8)


def test_an_unknown_ard_value_is_refused(one_relevant):
    X, y = one_relevant
    with pytest.raises(ValueError, match="ard"):
        StudentTProcessRegressor(ard="sometimes", device="cpu").fit(X, y)
