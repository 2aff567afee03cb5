"""``calibration="gaussian"`` of the GP regressors (Student-t process, mixed activation),
and their ``"student_t"`` (the default of both), which reads the same residuals."""

import warnings
from unittest import mock

import numpy as np
import pytest
from scipy import stats

import skbnngp._student_t as st
from skbnngp import (
    MixedActivationGPRegressor,
    StudentTProcessClassifier,
    StudentTProcessRegressor,
)
from skbnngp._backend import fit_t, fit_t_df, student_t_calibration
from skbnngp.datasets import load_cpu_performance

#: 30 optimiser iterations: the properties below hold at any hyperparameters.
_FAST = {"device": "cpu", "random_state": 0, "max_iter": 30}


REGRESSORS = [
    pytest.param(lambda **kw: StudentTProcessRegressor(
        **{**_FAST, "calibration": "gaussian", **kw}), id="student_t"),
    pytest.param(lambda **kw: MixedActivationGPRegressor(
        **{**_FAST, "calibration": "gaussian", **kw}), id="mixed_nystrom"),
    pytest.param(lambda **kw: MixedActivationGPRegressor(
        **{**_FAST, "calibration": "gaussian", "approx": "exact", **kw}), id="mixed_exact"),
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
_PLAIN = {StudentTProcessRegressor: {"normalize_X": False, "normalize_y": False,
                                      "ard": False},
          MixedActivationGPRegressor: {"normalize_X": False, "normalize_y": False,
                                       "approx": "exact"}}


def _frozen(model):
    if isinstance(model, StudentTProcessRegressor):
        hp = model.hyperparameters_
        return {"optimizer": None, "weight_variance": hp["weight_variance"],
                "bias_variance": hp["bias_variance"], "alpha": hp["alpha"]}
    return {"optimizer": None, "sigma_b2": model.sigma_b2_, "sigma_v2": model.sigma_v2_,
            "sigma_u2": model.sigma_u2_, "sigma_a2": model.sigma_a2_,
            "leaky_slope": model.leaky_slope_, "weights": model.weights_,
            "noise_variance": model.noise_variance_}


def _loo_brute_force(model, make, X, y, plain):
    """Leave-one-out by refitting without each row, hyperparameters frozen (no closed form);
    a row whose input repeats is left out with its repeats (the calibration's rule).

    Returns the residuals over the unit-amplitude predictive standard deviation.
    """
    z = []
    for i in range(len(y)):
        keep = np.flatnonzero(~np.all(X == X[i], axis=1))
        m = _fit(make, X[keep], y[keep], calibration=None, **plain, **_frozen(model))
        mu, V = m._latent(X[i:i + 1])
        z.append(float((y[i] - mu[0, 0]) / np.sqrt(V[0])))
    return np.array(z)


@pytest.mark.parametrize("make", REGRESSORS)
def test_calibration_scales_the_variance_and_keeps_the_mean(make):
    X, y, Xt, _ = _cpu()
    cal, raw = _fit(make, X, y), _fit(make, X, y, calibration=None)
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
    with mock.patch.object(st, "PREDICTIVE", "ntk_trained"):
        ntk = _fit(REGRESSORS[0].values[0], X[:80], y[:80])
    assert ntk.calibration_factor_ == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = StudentTProcessClassifier(device="cpu", random_state=0, max_iter=30).fit(
            X[:80], y[:80] > 30)
    assert clf.regressor_.calibration_factor_ == 1.0


def test_invalid_variance_calibration_is_rejected():
    X, y, _, _ = _cpu()
    for est in (StudentTProcessRegressor, MixedActivationGPRegressor):
        with pytest.raises(ValueError, match="calibration"):
            est(calibration="cv").fit(X, y)


# ------------------------------------------------------ "student_t" (the default of both)
STUDENT_T = [pytest.param(REGRESSORS[0].values[0], id="student_t"),
             pytest.param(REGRESSORS[2].values[0], id="mixed_exact")]


def _unit_t(model):
    """Squared scale and degrees of freedom of the uncalibrated predictive at unit variance."""
    if isinstance(model, StudentTProcessRegressor):
        return model.posterior_scale_ / model.posterior_shape_, model.df_
    return 1.0, np.inf


@pytest.mark.parametrize("make", STUDENT_T)
def test_student_t_reads_the_leave_one_out_residuals(make):
    """Against explicit refits without each row: the degrees of freedom and the factor are
    those of :func:`student_t_calibration` for the brute-force leave-one-out residuals (the
    t-process's read against its posterior's t, whose degrees of freedom cap the fit)."""
    X, y, Xt, _ = _cpu()
    X, y = X[:60], (y[:60] - y[:60].mean()) / y[:60].std()
    plain = _PLAIN[type(make())]
    model = _fit(make, X, y, calibration="student_t", **plain)
    s0, cap = _unit_t(model)
    z = _loo_brute_force(model, make, X, y, plain) / np.sqrt(s0)
    df, k = student_t_calibration(z, max_df=cap)
    assert model.predictive_df_ == df and np.isfinite(df)  # skewed targets: heavy tails
    assert df < 20 and (np.isinf(cap) or cap > 60)  # far heavier than the posterior's own
    assert model.calibration_factor_ == pytest.approx(k, rel=1e-5)
    # the same fit without the calibration: the t has its scale times sqrt(k), the same mean
    raw = _fit(make, X, y, calibration=None, **plain)
    dist, dist0 = model.predict_dist(Xt), raw.predict_dist(Xt)
    assert isinstance(dist.dist, type(stats.t))
    np.testing.assert_allclose(dist.kwds["df"], df)
    np.testing.assert_allclose(dist.mean(), dist0.mean(), rtol=1e-10)
    unit0 = dist0.std() if np.isinf(cap) else dist0.kwds["scale"]
    np.testing.assert_allclose(dist.kwds["scale"], unit0 * np.sqrt(k), rtol=1e-8)
    std = model.predict_std(Xt)
    if df > 2:
        np.testing.assert_allclose(std, dist.std(), rtol=1e-8)
    else:
        assert np.all(np.isinf(std))


def test_student_t_process_keeps_its_own_tails_on_gaussian_residuals():
    """Gaussian noise: the residuals ask for no heavier tails than the posterior's t, whose
    degrees of freedom are kept (the cap), so the predictive is the evidence's own t up to
    the split-conformal factor."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (200, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(200)
    model = _fit(StudentTProcessRegressor, X, y, device="cpu", random_state=0, max_iter=30)
    assert model.calibration == "auto" and model.calibration_ == "student_t"  # the default
    assert model.predictive_df_ == model.df_
    loo = _fit(StudentTProcessRegressor, X, y, device="cpu", random_state=0, max_iter=30,
               calibration="gaussian")
    assert model.calibration_factor_ == pytest.approx(loo.calibration_factor_)
    np.testing.assert_allclose(model.predict_dist(X[:5]).kwds["scale"],
                               loo.predict_dist(X[:5]).kwds["scale"], rtol=1e-10)


@pytest.mark.parametrize("est", [StudentTProcessRegressor, MixedActivationGPRegressor])
def test_student_t_on_fresh_cauchy_noise(est):
    """Cauchy noise: a Gaussian predictive, calibrated or not, gives the outliers of a test
    set almost no density (NLPD about 100 nats here), the t-process's own (``df_ = 2a + n``,
    about 300) little (about 3 nats); the Student-t calibration fits their tails (df about
    1.4), keeps its 95 % intervals inside 0.92-0.98, and scores far better (about 0.4)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, 300)
    y = np.sin(2 * x) + 0.1 * rng.standard_cauchy(300)
    xt = rng.uniform(-2, 2, 20000)
    yt = np.sin(2 * xt) + 0.1 * rng.standard_cauchy(20000)

    def score(**kw):
        m = _fit(est, x[:, None], y, device="cpu", random_state=0, **kw)
        dist = m.predict_dist(xt[:, None])
        lo, hi = dist.interval(0.95)
        return m, np.mean((yt >= lo) & (yt <= hi)), -np.mean(dist.logpdf(yt))

    t, cover_t, nlpd_t = score()
    _, _, nlpd_loo = score(calibration="gaussian")
    assert t.calibration_factor_ < 0.1 and t.predictive_df_ < 3
    assert 0.92 <= cover_t <= 0.98
    assert nlpd_t < 1.0 and nlpd_loo > nlpd_t + 2.0


def test_the_degrees_of_freedom_cap():
    """``max_df``: the fits choose among the grid below the cap and the cap itself."""
    rng = np.random.default_rng(1)
    gauss = rng.standard_normal(3000)
    assert fit_t_df(gauss) == np.inf
    assert fit_t_df(gauss, max_df=40.0) == 40.0  # no Gaussian under a cap: the cap itself
    assert fit_t(2.0 * gauss, max_df=40.0)[0] == 40.0
    heavy = stats.t.rvs(3, size=3000, random_state=rng)
    assert 2.0 < fit_t_df(heavy, max_df=40.0) == fit_t_df(heavy) < 5.0  # the cap is slack
    assert fit_t_df(heavy, max_df=2.5) == 2.5  # and binding: the likelihood rises to it
    df, s = fit_t(3.0 * heavy, max_df=2.5)
    assert df == 2.5 and 2.0 < s < 4.0
    for cap in (2.5, 40.0):
        assert student_t_calibration(heavy, max_df=cap)[0] <= cap
