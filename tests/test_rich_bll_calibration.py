"""RichBLLRegressor(calibration="gaussian" or "student_t"): the split-conformal factor (and
the Student-t degrees of freedom) from the rows held out of training, their effect on every
predictive output, and the settings that cannot use them. The fits here train at a constant
rate (``PLATEAU_DROPS=0``: the first plateau stops training), which keeps them short."""

import pickle
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize_scalar

from skbnngp import RichBLLRegressor, _calibration, _rich_bll
from skbnngp._backend import fit_t, loo_variance_factor, student_t_calibration, t_loglik
from skbnngp._backend import fit_t_df as _fit_df
from skbnngp._rich_bll import RichBLLRegressor as _Impl

from ._promise import assert_same_predictions
from .conftest import NO_HELD_OUT

pytestmark = NO_HELD_OUT

SMALL = {"hidden_layer_sizes": (16,), "max_iter": 400, "n_iter_no_change": 10,
         "device": "cpu", "random_state": 0}
Q95 = stats.norm.ppf(0.975)


def _heteroscedastic(n=160, seed=0):
    """Noise sd from 0.05 to 0.8 across x: a homoscedastic predictive under-covers the
    noisy end, so the held-out residuals ask for a factor above 1."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-1, 1, n))
    y = np.sin(3 * x) + (0.05 + 0.375 * (x + 1)) * rng.standard_t(3, size=n)
    return x[:, None], y


@pytest.fixture(autouse=True)
def constant_rate(monkeypatch):
    monkeypatch.setattr(_rich_bll, "PLATEAU_DROPS", 0)


@pytest.fixture
def validation_rows(monkeypatch):
    """The validation rows of each fit, as ``_train`` returns them."""
    seen = []
    orig = _Impl._train

    def _train(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        seen.append(np.asarray(out[2]))
        return out

    monkeypatch.setattr(_Impl, "_train", _train)
    return seen


def test_factor_is_the_split_conformal_quantile_of_the_held_out_rows(validation_rows):
    X, y = _heteroscedastic()
    # a fixed noise well below the residuals' scale: an over-confident predictive
    kw = dict(SMALL, noise_variance=0.01)
    cal = RichBLLRegressor(calibration="gaussian", **kw).fit(X, y)
    plain = RichBLLRegressor(calibration=None, **kw).fit(X, y)  # the same network and posterior
    va = validation_rows[0]
    np.testing.assert_array_equal(va, validation_rows[1])
    assert len(va) == int(np.ceil(0.2 * len(y)))
    mu_v, sd_v = plain.predict(X[va], return_std=True)
    z = (y[va] - mu_v) / sd_v
    expected = loo_variance_factor(z, Q95, 0.95)
    assert cal.calibration_factor_ == pytest.approx(expected, rel=1e-9)
    assert plain.calibration_factor_ == 1.0
    assert cal.calibration_factor_ > 2.0  # the residuals are far outside the intervals
    # the widened interval holds the ceil(0.95 (n_v + 1))-th smallest |z|, and no less
    a = np.sort(np.abs(z))
    rank = int(np.ceil(0.95 * (len(a) + 1))) - 1
    assert a[rank] == pytest.approx(Q95 * np.sqrt(cal.calibration_factor_), rel=1e-9)
    inside = np.abs(z) <= Q95 * np.sqrt(cal.calibration_factor_) * (1 + 1e-12)
    assert inside.mean() >= 0.95


def test_every_predictive_output_is_widened_by_the_factor():
    X, y = _heteroscedastic()
    Xq = np.linspace(-1.5, 1.5, 7)[:, None]
    cal = RichBLLRegressor(calibration="gaussian", **SMALL).fit(X, y)
    plain = RichBLLRegressor(calibration=None, **SMALL).fit(X, y)
    k = cal.calibration_factor_
    m1, s1 = cal.predict(Xq, return_std=True)
    m0, s0 = plain.predict(Xq, return_std=True)
    np.testing.assert_allclose(m1, m0, rtol=1e-12)  # the mean is unchanged
    np.testing.assert_allclose(s1, np.sqrt(k) * s0, rtol=1e-10)
    np.testing.assert_allclose(cal.predict(Xq, return_cov=True)[1],
                               k * plain.predict(Xq, return_cov=True)[1], rtol=1e-10)
    np.testing.assert_allclose(cal.predict_dist(Xq).std(), s1, rtol=1e-12)
    # the latent variance alone is scaled too (the same process with a larger amplitude)
    cal.set_params(include_noise=False), plain.set_params(include_noise=False)
    np.testing.assert_allclose(cal.predict_std(Xq), np.sqrt(k) * plain.predict_std(Xq),
                               rtol=1e-10)


def test_never_narrows():
    X, y = _heteroscedastic()
    # a fixed noise far above the residuals: every held-out row is deep inside its interval
    reg = RichBLLRegressor(calibration="gaussian", noise_variance=25.0,
                           **SMALL).fit(X, y)
    assert reg.calibration_factor_ == 1.0


def test_pickle_keeps_the_factor():
    X, y = _heteroscedastic()
    # over-confident (a fixed noise below the residuals' scale), so the factor is above 1
    reg = RichBLLRegressor(calibration="gaussian", **dict(SMALL, noise_variance=0.01)).fit(X, y)
    back = pickle.loads(pickle.dumps(reg))
    assert back.calibration_factor_ == reg.calibration_factor_ > 1.0
    # a round trip: equal under the package's repeatability promise, not bit for bit
    assert_same_predictions(back.predict_std(X[:5]), reg.predict_std(X[:5]))


@pytest.mark.parametrize("cal", ["gaussian", "student_t"])
@pytest.mark.parametrize("setting, match", [("REFIT", "REFIT"),
                                            ("early_stopping", "early_stopping")])
def test_settings_without_held_out_rows_are_refused(setting, match, cal, monkeypatch):
    X, y = _heteroscedastic(60)
    kw = dict(SMALL)
    if setting == "REFIT":
        monkeypatch.setattr(_rich_bll, "REFIT", True)
    else:
        kw["early_stopping"] = False
    with pytest.raises(ValueError, match=f"calibration.*{match}"):
        RichBLLRegressor(calibration=cal, **kw).fit(X, y)


def test_a_post_hoc_head_is_refused():
    from skbnngp._backend import build_mlp
    X, y = _heteroscedastic(60)
    net = build_mlp(1, (8,), 1, activation="relu", seed=0)
    with pytest.raises(ValueError, match="calibration.*train_network"):
        RichBLLRegressor(network=net, train_network=False, calibration="gaussian",
                         device="cpu").fit(X, y)


@pytest.mark.parametrize("value", ["loo", "validation"])
def test_invalid_value_is_refused(value):
    X, y = _heteroscedastic(60)
    with pytest.raises(ValueError, match="calibration"):
        RichBLLRegressor(calibration=value, **SMALL).fit(X, y)


# ---------------------------------------------------------------- calibration="student_t"
@pytest.mark.parametrize("df", [2.0, 5.0, 20.0])
def test_fit_df_recovers_the_degrees_of_freedom(df):
    z = stats.t.rvs(df, size=20000, random_state=np.random.default_rng(int(df)))
    est = _fit_df(z)
    assert abs(np.log(est / df)) < 0.2
    # it is the grid's maximum likelihood at unit scale
    grid = np.geomspace(1.0, 1000.0, 121)
    ll = stats.t.logpdf(z[:, None], grid[None, :]).sum(0)
    assert est == grid[np.argmax(ll)]


def test_fit_df_gives_the_gaussian_for_gaussian_residuals():
    z = np.random.default_rng(0).standard_normal(20000)
    assert _fit_df(z) >= 100  # inf (the Gaussian) or a t indistinguishable from it
    assert _fit_df(np.zeros(50)) == np.inf  # no tails at all
    assert _fit_df(np.array([np.nan, np.inf])) == np.inf


def _level_misfit(z, df, factor):
    """Squared log-quantile misfit over the levels 0.05...0.95 of the t (``df``, variance
    ``factor``) to the residuals ``z`` (what :func:`fit_t_levels` minimises)."""
    lev = np.arange(1, 20) / 20
    a = np.sort(np.abs(z))
    pos = np.arange(1, a.size + 1) - 0.5  # midpoint plotting positions
    q = np.interp(lev * a.size, pos, a)
    unit = stats.norm.ppf(0.5 + lev / 2) if np.isinf(df) else stats.t.ppf(0.5 + lev / 2, df)
    return float(np.sum((np.log(q) - np.log(unit * np.sqrt(factor))) ** 2))


def _held_out_and_trained(validation_rows, X, y, kw):
    plain = RichBLLRegressor(calibration=None, **kw).fit(X, y)  # the same network and posterior
    va = validation_rows[-1]
    tr = np.setdiff1d(np.arange(len(y)), va)
    mu_v, sd_v = plain.predict(X[va], return_std=True)
    mu_t, sd_t = plain.predict(X[tr], return_std=True)
    return (y[va] - mu_v) / sd_v, (y[tr] - mu_t) / sd_t


def test_student_t_factor_reads_the_same_residual_against_the_t_quantile(validation_rows):
    """Light-tailed noise: the likelihood's degrees of freedom and the 95 % conformal factor."""
    X, _ = _heteroscedastic()
    rng = np.random.default_rng(1)
    y = np.sin(3 * X[:, 0]) + (0.05 + 0.375 * (X[:, 0] + 1)) * rng.standard_normal(len(X))
    kw = dict(SMALL, noise_variance=0.01)  # over-confident: the factor is above 1
    tcal = RichBLLRegressor(calibration="student_t", **kw).fit(X, y)
    z, z_trained = _held_out_and_trained(validation_rows, X, y, kw)
    assert _calibration.trained_tail_df(z_trained) == np.inf  # no cap: the likelihood rule
    df, k = tcal.predictive_df_, tcal.calibration_factor_
    assert (df, k) == pytest.approx(student_t_calibration(z), rel=1e-9)
    assert k > 1.0
    q = stats.norm.ppf(0.975) if np.isinf(df) else stats.t.ppf(0.975, df)
    assert k >= loo_variance_factor(z, q, 0.95) * (1 - 1e-12)
    # the t's 95 % interval holds at least 95 % of the held-out residuals
    assert np.mean(np.abs(z) <= q * np.sqrt(k) * (1 + 1e-12)) >= 0.95


def test_heavy_trained_tails_fit_the_held_out_t_over_the_levels(validation_rows, monkeypatch):
    """t(3) noise: the trained rows' heavy tails cap the held-out t's degrees of freedom
    (``TRAINED_TAIL_DF``), and its degrees of freedom and scale are those whose central
    intervals match the held-out residuals' over the levels 0.05...0.95, which no t of
    the likelihood rule (the old one, ``HEAVY_TAIL_T_SHAPE="likelihood"``) matches better."""
    X, y = _heteroscedastic()
    kw = dict(SMALL, noise_variance=0.01)
    tcal = RichBLLRegressor(calibration="student_t", **kw).fit(X, y)
    z, z_trained = _held_out_and_trained(validation_rows, X, y, kw)
    cap = fit_t(z_trained)[0]
    assert cap <= _calibration.TRAINED_TAIL_DF
    assert _calibration.trained_tail_df(z_trained) == pytest.approx(cap)
    df, k = tcal.predictive_df_, tcal.calibration_factor_
    assert (df, k) == pytest.approx(student_t_calibration(z, max_df=cap, shape="levels"),
                                    rel=1e-9)
    assert np.isfinite(df) and df <= cap * (1 + 1e-12) and k > 1.0
    monkeypatch.setattr(_rich_bll, "HEAVY_TAIL_T_SHAPE", "likelihood")
    old = RichBLLRegressor(calibration="student_t", **kw).fit(X, y)
    old_df, old_k = old.predictive_df_, old.calibration_factor_
    assert (old_df, old_k) == pytest.approx(student_t_calibration(z, max_df=cap), rel=1e-9)
    assert (old_df, old_k) != pytest.approx((df, k), rel=1e-3)
    assert _level_misfit(z, df, k) < _level_misfit(z, old_df, old_k)


# ------------------------------------------------ the scale test of the Student-t calibration
@pytest.mark.parametrize(("df", "scale"), [(1.0, 0.05), (3.0, 0.3), (10.0, 2.0)])
def test_fit_t_recovers_degrees_of_freedom_and_scale(df, scale):
    z = scale * stats.t.rvs(df, size=20000, random_state=np.random.default_rng(int(df)))
    est_df, est_s = fit_t(z)
    assert abs(np.log(est_df / df)) < 0.2
    assert est_s == pytest.approx(scale, rel=0.05)
    # the scale is the likelihood's maximum for that df, and no grid df does better
    ll = t_loglik(z, est_df, est_s)
    assert ll >= t_loglik(z, est_df, est_s * 1.001) and ll >= t_loglik(z, est_df, est_s / 1.001)
    # no other df does better at its own best scale (found here by a bounded search)
    for d in (1.0, 2.0, 3.0, 10.0, 100.0, np.inf):
        best = minimize_scalar(lambda ls, d=d: -t_loglik(z, d, np.exp(ls)),
                               bounds=(-6.0, 3.0), method="bounded", options={"xatol": 1e-8})
        assert ll >= -best.fun - 1e-6


def test_fit_t_gaussian_and_degenerate_residuals():
    z = 0.4 * np.random.default_rng(1).standard_normal(20000)
    df, s = fit_t(z)
    assert df >= 100 and s == pytest.approx(0.4, rel=0.03)
    assert fit_t(np.zeros(10)) == (np.inf, 1.0)
    assert fit_t(np.array([np.nan])) == (np.inf, 1.0)


def test_calibration_keeps_the_posterior_scale_unless_the_residuals_reject_it():
    rng = np.random.default_rng(2)
    # residuals at the posterior's own scale: the null holds, the factor stays >= 1
    z = stats.t.rvs(5, size=300, random_state=rng)
    df, k = student_t_calibration(z)
    assert df == _fit_df(z) and k >= 1.0
    # a Gaussian noise estimate inflated by outliers: Cauchy residuals at scale 0.05
    z = 0.05 * stats.cauchy.rvs(size=300, random_state=rng)
    df, k = student_t_calibration(z)
    df1, s = fit_t(z)
    assert df == df1 and df < 3 and k < 0.1
    assert k >= s * s * (1 - 1e-12)
    q = stats.t.ppf(0.975, df)
    assert np.mean(np.abs(z) <= q * np.sqrt(k) * (1 + 1e-12)) >= 0.95  # conformal
    assert k == pytest.approx(max(s * s, loo_variance_factor(z, q, 0.95, floor=0.0)))
    # without the scale test (the unit-scale t, a factor >= 1) the interval is more than
    # twice as wide
    q0 = stats.t.ppf(0.975, _fit_df(z))
    assert q0 * np.sqrt(loo_variance_factor(z, q0, 0.95)) > 2 * q * np.sqrt(k)


def test_student_t_calibration_covers_fresh_cauchy_noise():
    """Cauchy noise: the Gaussian noise variance is inflated by the outliers, the held-out
    residuals reject the posterior's scale, and the calibrated 95 % interval covers about
    95 % of fresh points. Split conformal on 80 Cauchy residuals is itself noisy (0.94 to
    0.98 over these four data sets), so the mean is checked; the rule without the scale
    test (a unit-scale t widened only) covers 0.989 here."""
    cover = []
    for seed in (3, 4, 5, 6):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 1, 400)
        y = np.sin(3 * x) + 0.1 * rng.standard_cauchy(400)
        xt = rng.uniform(-1, 1, 4000)
        yt = np.sin(3 * xt) + 0.1 * rng.standard_cauchy(4000)
        reg = RichBLLRegressor(calibration="student_t", **SMALL).fit(x[:, None], y)
        assert reg.calibration_factor_ < 0.1 and reg.predictive_df_ < 3
        lo, hi = reg.predict_dist(xt[:, None]).interval(0.95)
        cover.append(np.mean((yt >= lo) & (yt <= hi)))
    assert 0.935 <= np.mean(cover) <= 0.98


def _heavy(n=200, seed=0):
    """t(2) noise: held-out residuals with tails well beyond a Gaussian's (the fitted t,
    3.2 degrees of freedom, has a variance)."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-1, 1, n))
    return x[:, None], np.sin(3 * x) + 0.2 * rng.standard_t(2, size=n)


def _contaminated(n, rng):
    """5 % of the rows shifted by N(0, 30^2): heavy tails that a few dozen held-out rows
    may not sample at all."""
    x = rng.uniform(-3, 3, n)
    y = np.sin(x) + 0.1 * rng.standard_normal(n)
    out = rng.random(n) < 0.05
    y[out] += 30 * rng.standard_normal(out.sum())
    return x[:, None], y


def test_heavy_tails_of_the_trained_rows_keep_the_held_out_t_heavy():
    """The 20 held-out rows of these fits hold no outlier at some seeds; calibrated on them
    alone, the predictive became a Gaussian narrowed to the bulk, far too narrow for the
    outliers (doc/whats_new.rst). The trained rows' residuals fit a t of at most
    ``TRAINED_TAIL_DF`` degrees of freedom, which now caps the held-out rows' t."""
    rng = np.random.default_rng(0)
    X, y = _contaminated(200, rng)
    Xt, yt = _contaminated(2000, rng)
    for seed in range(6):
        reg = RichBLLRegressor(calibration="student_t", validation_fraction=0.1,
                               **dict(SMALL, random_state=seed)).fit(X, y)
        assert reg.predictive_df_ <= _calibration.TRAINED_TAIL_DF
        assert np.mean(-reg.predict_dist(Xt).logpdf(yt)) < 4.0


def test_student_t_predictive_outputs_agree():
    X, y = _heavy()
    Xq = np.linspace(-1.5, 1.5, 7)[:, None]
    reg = RichBLLRegressor(calibration="student_t", **SMALL).fit(X, y)
    plain = RichBLLRegressor(calibration=None, **SMALL).fit(X, y)
    df, k = reg.predictive_df_, reg.calibration_factor_
    assert 2.0 < df < 30.0  # heavy-tailed noise: a finite df, with a variance
    dist = reg.predict_dist(Xq)
    assert isinstance(dist.dist, type(stats.t))
    np.testing.assert_allclose(dist.kwds["df"], df)
    m1, s1 = reg.predict(Xq, return_std=True)
    m0, s0 = plain.predict(Xq, return_std=True)
    np.testing.assert_allclose(m1, m0, rtol=1e-12)
    np.testing.assert_allclose(dist.mean(), m1, rtol=1e-12)
    # the scale is the Gaussian's std times sqrt(k); std and cov are the t's variance
    np.testing.assert_allclose(dist.kwds["scale"], np.sqrt(k) * s0, rtol=1e-10)
    np.testing.assert_allclose(s1, dist.std(), rtol=1e-10)
    np.testing.assert_allclose(s1, np.sqrt(k * df / (df - 2)) * s0, rtol=1e-10)
    np.testing.assert_allclose(np.diag(reg.predict(Xq, return_cov=True)[1]), s1**2,
                               rtol=1e-10)
    # joint draws: each draw's variance is scaled by s ~ InvGamma(df/2, df/2), so the
    # standardised draws follow the t (a Kolmogorov-Smirnov check on 4,000 draws)
    draws = reg.sample_y(Xq[:1], n_samples=4000, random_state=0)[0]
    u = (draws - m1[0]) / dist.kwds["scale"][0]
    assert stats.kstest(u, stats.t(df).cdf).pvalue > 1e-3
    assert stats.kstest(u, stats.norm(scale=u.std()).cdf).pvalue < 1e-3 or df > 30


def test_student_t_gaussian_residuals_keep_a_gaussian(monkeypatch):
    # no tails beyond the Gaussian's, at the posterior's own scale: the predictive stays a
    # normal, with the factor of "gaussian"
    monkeypatch.setattr("skbnngp._backend._calibration.fit_t_df",
                        lambda z, max_df=np.inf, min_df=1.0, weights=None: np.inf)
    gaussian_t = lambda z, max_df=np.inf, min_df=1.0, weights=None: (np.inf, 1.0)
    monkeypatch.setattr("skbnngp._backend._calibration.fit_t", gaussian_t)
    monkeypatch.setattr("skbnngp._calibration.fit_t", gaussian_t)  # the trained rows' tails
    X, y = _heteroscedastic()
    reg = RichBLLRegressor(calibration="student_t", **SMALL).fit(X, y)
    cal = RichBLLRegressor(calibration="gaussian", **SMALL).fit(X, y)
    assert reg.predictive_df_ == np.inf
    assert reg.calibration_factor_ == cal.calibration_factor_
    assert isinstance(reg.predict_dist(X[:3]).dist, type(stats.norm))


def test_student_t_pickles():
    X, y = _heteroscedastic()
    reg = RichBLLRegressor(calibration="student_t", **SMALL).fit(X, y)
    back = pickle.loads(pickle.dumps(reg))
    assert back.predictive_df_ == reg.predictive_df_
    assert_same_predictions(back.predict_dist(X[:5]).logpdf(y[:5]),
                            reg.predict_dist(X[:5]).logpdf(y[:5]))


def test_auto_is_the_student_t_calibration_where_rows_are_held_out():
    X, y = _heavy()
    auto = RichBLLRegressor(**SMALL).fit(X, y)
    t = RichBLLRegressor(calibration="student_t", **SMALL).fit(X, y)
    assert auto.calibration_ == "student_t"
    assert auto.predictive_df_ == t.predictive_df_
    assert auto.calibration_factor_ == t.calibration_factor_
    np.testing.assert_array_equal(auto.predict_std(X[:5]), t.predict_std(X[:5]))


@pytest.mark.parametrize("setting", ["REFIT", "early_stopping"])
def test_auto_without_held_out_rows_is_the_gaussian(setting, monkeypatch):
    X, y = _heavy(80)
    kw = dict(SMALL)
    if setting == "REFIT":
        monkeypatch.setattr(_rich_bll, "REFIT", True)
    else:
        kw["early_stopping"] = False
    reg = RichBLLRegressor(**kw).fit(X, y)  # no error, no calibration
    assert reg.calibration_ is None
    assert reg.predictive_df_ == np.inf and reg.calibration_factor_ == 1.0
    assert isinstance(reg.predict_dist(X[:3]).dist, type(stats.norm))


def test_no_held_out_rows_warns_that_the_intervals_may_be_too_narrow():
    """Without early stopping the noise comes from the rows the network trained on: on 200
    rows of ``sin(2 x0) + x1^2 / 2 + 0.2 noise`` its 90 % intervals held 0.34-0.47 of 2,000
    test rows (seeds 0-2; 0.83-0.98 with early stopping), so the fit warns. A noise of the
    user's own, or held-out rows, do not warn."""
    rng = np.random.default_rng(0)
    X, Xt = rng.normal(size=(200, 3)), rng.normal(size=(2000, 3))
    y, yt = (np.sin(2 * A[:, 0]) + A[:, 1] ** 2 / 2 + 0.2 * rng.normal(size=len(A))
             for A in (X, Xt))
    with pytest.warns(UserWarning, match="early_stopping=False holds no rows out.*narrow"):
        reg = RichBLLRegressor(early_stopping=False, random_state=0, device="cpu").fit(X, y)
    lo, hi = reg.predict_interval(Xt, 0.9)
    assert np.mean((yt > lo) & (yt < hi)) < 0.6  # the warning is warranted
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kw in ({"early_stopping": False, "noise_variance": 0.04}, {}):
            RichBLLRegressor(**dict(SMALL, **kw)).fit(X[:80], y[:80])
    # a post-hoc head reads its noise from the rows given to fit: the same warning, which
    # says why; a value of the user's own silences it
    head = {"network": reg.network_, "train_network": False, "device": "cpu"}
    with pytest.warns(UserWarning, match="train_network=False.*far too narrow"):
        RichBLLRegressor(**head).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RichBLLRegressor(noise_variance=0.04, **head).fit(X, y)


def test_calibration_fits_the_t_on_a_strided_subset_of_many_residuals(monkeypatch):
    monkeypatch.setattr("skbnngp._backend._calibration.T_MAX_FIT_ROWS", 100)
    z = 0.05 * stats.cauchy.rvs(size=1001, random_state=np.random.default_rng(4))
    df, k = student_t_calibration(z)
    sub = z[::11]  # ceil(1001 / 100) = 11: 92 residuals
    df1, s = fit_t(sub)
    assert df == df1 and df != fit_t(z)[0]
    # the conformal quantile still reads every residual
    q = stats.t.ppf(0.975, df)
    assert k == pytest.approx(max(s * s, loo_variance_factor(z, q, 0.95, floor=0.0)))
