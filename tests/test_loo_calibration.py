"""``variance_calibration="loo"`` of the GP regressors (Student-t process, mixed activation)."""

import warnings

import numpy as np
import pytest
from scipy import stats

from skbnngp import (MixedActivationGPRegressor, StudentTProcessClassifier,
                     StudentTProcessRegressor)
from skbnngp.datasets import load_cpu_performance

#: 30 optimiser iterations: the properties below hold at any hyperparameters.
_FAST = dict(device="cpu", random_state=0, max_iter=30)
REGRESSORS = [
    pytest.param(lambda **kw: StudentTProcessRegressor(**{**_FAST, **kw}), id="student_t"),
    pytest.param(lambda **kw: MixedActivationGPRegressor(**{**_FAST, **kw}),
                 id="mixed_nystrom"),
    pytest.param(lambda **kw: MixedActivationGPRegressor(**{**_FAST, "approx": "exact", **kw}),
                 id="mixed_exact"),
]


def _cpu():
    X, y = load_cpu_performance(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    return X[idx[:160]], y[idx[:160]], X[idx[160:]], y[idx[160:]]


def _fit(make, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make(**kw).fit(X, y)


#: Fixed input and target scaling, so that a refit without one row is the same model.
_PLAIN = {StudentTProcessRegressor: dict(normalize_X=False, normalize_y=False, ard=False),
          MixedActivationGPRegressor: dict(input_scaling=None, normalize_y=False,
                                            approx="exact")}


def _frozen(model):
    if isinstance(model, StudentTProcessRegressor):
        hp = model.hyperparameters_
        return dict(optimizer=None, weight_variance=hp["weight_variance"],
                    bias_variance=hp["bias_variance"], alpha=hp["alpha"])
    return dict(optimizer=None, sigma_b2=model.sigma_b2_, sigma_v2=model.sigma_v2_,
                sigma_u2=model.sigma_u2_, sigma_a2=model.sigma_a2_,
                leaky_slope=model.leaky_slope_, weights=model.weights_,
                noise_variance=model.noise_variance_)


def _loo_brute_force(model, make, X, y, plain):
    """Leave-one-out by refitting without each row, hyperparameters frozen (no closed form).

    Returns the residuals over the unit-amplitude predictive standard deviation.
    """
    z = []
    for i in range(len(y)):
        keep = np.delete(np.arange(len(y)), i)
        m = _fit(make, X[keep], y[keep], variance_calibration=None, **plain, **_frozen(model))
        mu, V = m._latent(X[i:i + 1])
        z.append(float((y[i] - mu[0, 0]) / np.sqrt(V[0])))
    return np.array(z)


@pytest.mark.parametrize("make", REGRESSORS)
def test_calibration_scales_the_variance_and_keeps_the_mean(make):
    X, y, Xt, _ = _cpu()
    cal, raw = _fit(make, X, y), _fit(make, X, y, variance_calibration=None)
    assert raw.calibration_factor_ == 1.0
    # a skewed, heteroscedastic target: the evidence fits the kernel too tightly
    k = cal.calibration_factor_
    assert k > 1.2
    m1, s1 = cal.predict(Xt, return_std=True)
    m0, s0 = raw.predict(Xt, return_std=True)
    np.testing.assert_allclose(m1, m0)
    np.testing.assert_allclose(s1, s0 * np.sqrt(k), rtol=1e-10)
    c1, c0 = cal.predict(Xt[:5], return_cov=True)[1], raw.predict(Xt[:5], return_cov=True)[1]
    np.testing.assert_allclose(c1, c0 * k, rtol=1e-10)
    lo1, hi1 = cal.predict_dist(Xt).interval(0.95)
    lo0, hi0 = raw.predict_dist(Xt).interval(0.95)
    np.testing.assert_allclose(hi1 - lo1, (hi0 - lo0) * np.sqrt(k), rtol=1e-8)
    assert raw.log_marginal_likelihood_value_ == pytest.approx(
        cal.log_marginal_likelihood_value_)


@pytest.mark.parametrize("make", REGRESSORS[:2])
def test_calibrated_intervals_hold_95_percent_of_the_leave_one_out_residuals(make):
    """Against explicit refits without each row (the closed form is not used here)."""
    X, y, _, _ = _cpu()
    X, y = X[:60], (y[:60] - y[:60].mean()) / y[:60].std()
    plain = _PLAIN[type(make())]
    model = _fit(make, X, y, **plain)
    z = _loo_brute_force(model, make, X, y, plain)
    unit_q = 1.959963984540054  # the 97.5 % point of the predictive at unit variance
    if isinstance(model, StudentTProcessRegressor):
        unit_q = stats.t.ppf(0.975, model.df_) * np.sqrt(
            model.posterior_scale_ / model.posterior_shape_)
    half = unit_q * np.sqrt(model.calibration_factor_)
    assert model.calibration_factor_ > 1  # these 60 rows need widening
    assert np.mean(np.abs(z) <= half * (1 + 1e-6)) >= 0.95
    # the smallest such widening: the 58th smallest |z| (ceil(61 * 0.95)) is on the edge
    assert np.sort(np.abs(z))[57] == pytest.approx(half, rel=1e-5)


@pytest.mark.parametrize("make", REGRESSORS)
def test_well_specified_data_keep_a_factor_near_one(make):
    # y drawn from a smooth function with Gaussian noise of constant variance
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (200, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(200)
    k = _fit(make, X, y).calibration_factor_
    # the 95 % quantile of 200 |z| has a sampling sd of about 0.26 around 1.96
    assert 1.0 <= k < 1.6


def test_not_applied_where_the_predictive_is_not_the_gp_posterior():
    X, y, _, _ = _cpu()
    ntk = _fit(REGRESSORS[0].values[0], X[:80], y[:80], predictive="ntk_trained")
    assert ntk.calibration_factor_ == 1.0
    paper = _fit(REGRESSORS[1].values[0], X[:80], y[:80], preset="paper")
    assert paper.calibration_factor_ == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = StudentTProcessClassifier(device="cpu", random_state=0, max_iter=30).fit(
            X[:80], y[:80] > 30)
    assert clf.regressor_.calibration_factor_ == 1.0


def test_invalid_variance_calibration_is_rejected():
    X, y, _, _ = _cpu()
    for est in (StudentTProcessRegressor, MixedActivationGPRegressor):
        with pytest.raises(ValueError, match="variance_calibration"):
            est(variance_calibration="cv").fit(X, y)
