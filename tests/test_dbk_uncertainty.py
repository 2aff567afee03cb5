"""DBKRegressor uncertainty (issue 19 item 2): the noise and the prior scale chosen by the
held-out evidence with the features fixed, the posterior conditioned on every row (against
the dense corrected GP), the leave-one-out variance calibration, and a warning for as many
basis functions as rows. The numerics behind them are tested in ``test_dbk_numerics.py``."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.exceptions import ConvergenceWarning

import skbnngp._dbk as dbk_module
from skbnngp import DBKRegressor
from skbnngp._backend import DiagNoiseEvidence

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
DT = torch.float64
SMALL = dict(n_basis=8, hidden_layer_sizes=(16,), max_iter=30, device="cpu", random_state=0)


def assert_matches_dense_corrected_gp(reg, X, y, Xs):
    """``reg.predict(Xs)`` equals the dense GP on ``(X, y)`` whose kernel is
    ``Phi Phi^T + diag(M - |phi_i|^2)`` (eq. 12, ``M`` the data maximum) with the fitted
    features, noise and prior scale, its variance times ``calibration_factor_``; and
    ``log_marginal_likelihood()`` is eq. (5), log N(y; 0, Phi Phi^T + noise I), of these rows
    under the same features. Returns ``M``."""
    cache = reg._get_cache()
    with torch.no_grad():
        Phi = cache["feat"](torch.as_tensor(reg._scale_X(X)))
        Ps = cache["feat"](torch.as_tensor(reg._scale_X(Xs)))
    s2, kappa = reg.noise_variance_, Phi.square().sum(1)
    M = kappa.max()
    K = Phi @ Phi.T + torch.diag(M - kappa) + s2 * torch.eye(len(X), dtype=DT)
    ks = Ps @ Phi.T
    dm = ks @ torch.linalg.solve(K, torch.as_tensor(y, dtype=DT))
    dv = (torch.maximum(Ps.square().sum(1), M) - (ks * torch.linalg.solve(K, ks.T).T).sum(1)
          + s2)
    mean, std = reg.predict(Xs, return_std=True)
    np.testing.assert_allclose(mean, dm.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(std ** 2, dv.numpy() * reg.calibration_factor_, rtol=1e-8)
    Yn = torch.as_tensor((y - reg._y_train_mean[0]) / reg._y_train_std[0], dtype=DT)
    cov5 = Phi @ Phi.T + s2 * torch.eye(len(X), dtype=DT)
    lml = torch.distributions.MultivariateNormal(torch.zeros(len(X), dtype=DT), cov5)
    assert reg.log_marginal_likelihood() == pytest.approx(float(lml.log_prob(Yn)), rel=1e-8)
    return float(M)


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 2))
    return X, np.sin(3 * X[:, 0]) + 0.2 * rng.standard_normal(n)


@pytest.mark.parametrize("objective", ["bound", "evidence"])
def test_fitted_scales_maximise_the_heldout_evidence(objective, monkeypatch):
    """The fitted (prior_scale_, noise_variance_) maximise log p(y_all) - log p(y_train) of
    the corrected kernel at the fitted features, whichever exact objective trained the
    network (the private ``EXACT_OBJECTIVE``). The noise has floors (docstring of
    ``choose_scales``); on these data the evidence-trained network's noise sits on one, so
    there a smaller noise is not checked."""
    X, y = _data(120)
    monkeypatch.setattr(dbk_module, "EXACT_OBJECTIVE", objective)
    reg = DBKRegressor(**SMALL).fit(X, y)
    assert dbk_module.SCALE_SELECTION == "heldout" and reg.prior_scale_ != 1.0
    rng = np.random.RandomState(0)
    rng.randint(np.iinfo(np.int32).max)  # the seed of the network, as in fit
    perm = rng.permutation(120)
    n_val = math.ceil(reg._validation_fraction() * 120)  # 0.25 ("auto", exact)
    tr = np.sort(perm[n_val:])
    cache = reg._get_cache()
    with torch.no_grad():
        Phi = cache["feat"](torch.as_tensor(reg._scale_X(X))) / math.sqrt(reg.prior_scale_)
    Y = torch.as_tensor((y - reg._y_train_mean) / reg._y_train_std).reshape(-1, 1)
    kappa = Phi.square().sum(1)
    c = kappa.max() - kappa
    full, part = DiagNoiseEvidence(Phi, Y, c), DiagNoiseEvidence(Phi[tr], Y[tr], c[tr])

    def heldout(a, s):
        return full(a, s) - part(a, s)

    best = heldout(reg.prior_scale_, reg.noise_variance_)
    moves = [(1.05, 1), (0.95, 1), (1, 1.05)] + ([(1, 0.95)] if objective == "bound" else [])
    for fa, fs in moves:
        assert heldout(reg.prior_scale_ * fa, reg.noise_variance_ * fs) < best


def test_posterior_conditions_on_every_row():
    """With early stopping, predictions equal the dense corrected GP on ALL rows (training
    and validation) with the fitted features, noise and prior scale."""
    X, y = _data(60)
    reg = DBKRegressor(**SMALL, normalize_y=False).fit(X, y)
    assert_matches_dense_corrected_gp(reg, X, y, X[:5] + 0.3)
    assert reg.n_samples_seen_ == 60


def test_exact_posterior_matches_dense_gp_on_the_fitted_features():
    """§7.2/7.13 through the estimator: predictions equal a dense GP with kernel
    phi(x)^T phi(x') (+ correction) built from the fitted network's features."""
    X, y = _data(n=40)
    reg = DBKRegressor(**dict(SMALL, max_iter=60), early_stopping=False,
                       normalize_y=False).fit(X, y)
    M = assert_matches_dense_corrected_gp(reg, X, y, X[:5] + 0.3)
    assert reg.max_prior_var_ == pytest.approx(M)


def test_without_scale_selection_the_trained_noise_is_kept(monkeypatch):
    """``SCALE_SELECTION = None`` (private): prior scale 1 and the trained noise, here its
    initial value ``NOISE_INIT`` (a learning rate too small to move it)."""
    X, y = _data(60)
    monkeypatch.setattr(dbk_module, "SCALE_SELECTION", None)
    monkeypatch.setattr(dbk_module, "NOISE_INIT", 0.1)
    reg = DBKRegressor(**dict(SMALL, max_iter=1), learning_rate_init=1e-12).fit(X, y)
    assert reg.prior_scale_ == 1.0
    assert reg.noise_variance_ == pytest.approx(0.1, rel=1e-6)


def test_warns_when_n_basis_reaches_the_training_rows():
    X, y = _data(40)
    with pytest.warns(UserWarning, match="n_basis=30 >= the 30 training rows"):
        DBKRegressor(**dict(SMALL, n_basis=30, max_iter=2)).fit(X, y)
    with pytest.warns(UserWarning, match="n_basis=40 >= the 40 training rows"):
        DBKRegressor(**dict(SMALL, n_basis=40, max_iter=2), early_stopping=False).fit(X, y)


@pytest.mark.slow
def test_calibrated_on_diabetes():
    """Issue 19 item 2 on one split of diabetes (80/20, defaults): 95 % coverage was 0.56
    and the NLPD 8.41 against sklearn GP's 5.41."""
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    X, y = load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0)
    reg = DBKRegressor(device="cpu", random_state=0).fit(Xtr, ytr)
    mean, std = reg.predict(Xte, return_std=True)
    coverage = np.mean(np.abs(yte - mean) < 1.96 * std)
    nlpd = -stats.norm(mean, std).logpdf(yte).mean()
    assert 0.88 <= coverage <= 0.99 and nlpd < 5.8


def test_validation_fraction_auto_holds_out_a_quarter_for_exact():
    """Issue 19 item 2: ``validation_fraction="auto"`` holds out 25 % of the rows for exact
    inference (they choose the noise and the prior scale, measured better than 12.5 %), and
    the paper's 12.5 % for svi; seen through the n_basis warning,
    which counts the training rows."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(80, 2))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=80)
    small = dict(n_basis=64, hidden_layer_sizes=(8,), max_iter=2, device="cpu", random_state=0)
    with pytest.warns(UserWarning, match="the 60 training rows"):
        DBKRegressor(**small).fit(X, y)
    for extra in (dict(inference="svi"), dict(validation_fraction=0.125)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no n_basis warning
            warnings.simplefilter("ignore", ConvergenceWarning)
            DBKRegressor(**small, **extra).fit(X, y)  # 70 training rows
    assert DBKRegressor()._validation_fraction() == 0.25
    assert DBKRegressor(inference="svi")._validation_fraction() == 0.125
    assert DBKRegressor(validation_fraction=0.4)._validation_fraction() == 0.4


def test_heldout_noise_floor_prevents_a_collapsed_std():
    """One fold of the smooth benchmark set at n_basis=64, where without the floor the noise
    went to its lower bound and a test point got a std of 0.0015 (fold NLPD 166, measured on
    an AMD EPYC CPU; the trained network, and so the collapse, can differ by CPU, hence the
    mechanism is tested on fixed features above). With the floor the std stays at the scale
    of the noise."""
    from sklearn.model_selection import KFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.RandomState(0)
    X = rng.uniform(-3, 3, size=(200, 1))
    y = np.sin(3 * X[:, 0]) + 0.3 * X[:, 0] + 0.1 * rng.standard_normal(200)
    tr, te = list(KFold(5, shuffle=True, random_state=0).split(X))[2]
    m = make_pipeline(StandardScaler(), DBKRegressor(n_basis=64, device="cpu",
                                                     random_state=0)).fit(X[tr], y[tr])
    mu, sd = m.predict(X[te], return_std=True)
    nlpd = -stats.norm.logpdf(y[te], mu, sd).mean()
    assert m[-1].noise_variance_ > 1e-4 and sd.min() > 0.02 and nlpd < 0.5


def _dense_loo_z(reg, X, y):
    """Leave-one-out residuals over their standard deviations under the dense corrected GP
    of the fitted model (explicit inverse; normalised targets)."""
    cache = reg._get_cache()
    with torch.no_grad():
        Phi = cache["feat"](torch.as_tensor(reg._scale_X(X)))
    kappa = Phi.square().sum(1)
    K = (Phi @ Phi.T + torch.diag(kappa.max() - kappa)
         + reg.noise_variance_ * torch.eye(len(X), dtype=DT)).numpy()
    Ki = np.linalg.inv(K)
    Y = (y - reg._y_train_mean[0]) / reg._y_train_std[0]
    d = np.diag(Ki)
    return (Ki @ Y) / d * np.sqrt(d)


def test_calibration_factor_is_the_conformal_quantile_of_the_dense_loo_residuals():
    from skbnngp._backend import loo_variance_factor
    X, y = _data(n=120, seed=4)
    y = y + 0.6 * np.abs(X[:, 1]) * np.random.default_rng(1).standard_normal(120)
    reg = DBKRegressor(**SMALL, calibration="gaussian").fit(X, y)
    z = _dense_loo_z(reg, X, y)
    expected = loo_variance_factor(z, stats.norm.ppf(0.975))
    assert expected > 1.05  # heteroscedastic noise: the fit needs widening
    assert reg.calibration_factor_ == pytest.approx(expected, rel=1e-8)
    # the widened 95 % interval holds the ceil(0.95 (n + 1)) = 115 smallest of the 120
    # leave-one-out residuals, the 115th on its edge (the smallest such factor)
    half = stats.norm.ppf(0.975) * math.sqrt(reg.calibration_factor_)
    assert np.sum(np.abs(z) <= half * (1 + 1e-9)) == 115
    assert np.sum(np.abs(z) < half * (1 - 1e-9)) == 114


def test_gaussian_calibration_widens_only_the_variance():
    X, y = _data(n=120, seed=4)
    y = y + 0.6 * np.abs(X[:, 1]) * np.random.default_rng(1).standard_normal(120)
    cal = DBKRegressor(**SMALL, calibration="gaussian").fit(X, y)
    raw = DBKRegressor(**SMALL, calibration=None).fit(X, y)
    assert raw.calibration_factor_ == 1.0 and cal.calibration_factor_ > 1.0
    assert (raw.calibration_, cal.calibration_) == (None, "gaussian")
    m1, s1 = cal.predict(X[:7], return_std=True)
    m0, s0 = raw.predict(X[:7], return_std=True)
    np.testing.assert_allclose(m1, m0)
    np.testing.assert_allclose(s1, s0 * math.sqrt(cal.calibration_factor_), rtol=1e-10)
    np.testing.assert_allclose(cal.predict(X[:7], return_cov=True)[1],
                               raw.predict(X[:7], return_cov=True)[1] * cal.calibration_factor_,
                               rtol=1e-10)
    assert cal.noise_variance_ == raw.noise_variance_
    # svi calibrates on its validation rows (three epochs: a model far too narrow)
    svi = DBKRegressor(**{**SMALL, "max_iter": 3}, inference="svi",
                       calibration="gaussian").fit(X, y)
    assert svi.calibration_ == "gaussian" and svi.calibration_factor_ > 1.0


def test_svi_keeps_the_trained_rows_heavy_tails():
    """svi calibrates on its validation rows alone: 25 rows of 200 with 5 % outliers hold
    none at some seeds, and the calibration kept a Gaussian far too narrow for the outliers
    (doc/whats_new.rst). The trained rows' residuals fit a t of at
    most ``_calibration.TRAINED_TAIL_DF`` degrees of freedom, which now caps the held-out t
    (exact inference reads leave-one-out residuals of every row and is not affected)."""
    from skbnngp import _calibration

    def contaminated(n, rng):
        x = rng.uniform(-3, 3, n)
        y = np.sin(x) + 0.1 * rng.standard_normal(n)
        out = rng.random(n) < 0.05
        y[out] += 30 * rng.standard_normal(out.sum())
        return x[:, None], y

    rng = np.random.default_rng(0)
    X, y = contaminated(200, rng)
    Xt, yt = contaminated(2000, rng)
    for seed in range(6):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            reg = DBKRegressor(inference="svi", device="cpu", random_state=seed).fit(X, y)
        assert reg.predictive_df_ <= _calibration.TRAINED_TAIL_DF
        assert np.mean(-reg.predict_dist(Xt).logpdf(yt)) < 4.0


def test_student_t_calibration_reads_the_dense_loo_residuals():
    """The default ``"auto"`` runs ``"student_t"``: :func:`student_t_calibration` of the
    leave-one-out residuals with the scale test gated at ``DBK_MAX_TEST_DF`` degrees of
    freedom; where the
    factor is at least 1 on both, the same 95 % intervals as ``"gaussian"`` with a
    heavier-tailed density."""
    from skbnngp._backend import student_t_calibration
    from skbnngp._dbk import DBK_MAX_TEST_DF
    X, y = _data(n=150, seed=5)
    y = y + 0.5 * stats.t.rvs(1.5, size=150, random_state=2)  # heavy-tailed noise
    reg = DBKRegressor(**SMALL).fit(X, y)
    assert (reg.calibration, reg.calibration_) == ("auto", "student_t")
    z = _dense_loo_z(reg, X, y)
    df, k = student_t_calibration(z, max_test_df=DBK_MAX_TEST_DF)
    assert np.isfinite(df) and df < 10  # the residuals' tails are heavy
    assert reg.predictive_df_ == df
    assert reg.calibration_factor_ == pytest.approx(k, rel=1e-8)
    loo = DBKRegressor(**SMALL, calibration="gaussian").fit(X, y)
    assert loo.predictive_df_ == np.inf
    dist, dist0 = reg.predict_dist(X[:9]), loo.predict_dist(X[:9])
    assert isinstance(dist.dist, type(stats.t)) and isinstance(dist0.dist, type(stats.norm))
    np.testing.assert_allclose(dist.mean(), dist0.mean(), rtol=1e-10)
    width = np.subtract(*dist.interval(0.95)[::-1])
    width0 = np.subtract(*dist0.interval(0.95)[::-1])
    if k > 1.0 and loo.calibration_factor_ > 1.0:  # both on the conformal quantile
        np.testing.assert_allclose(width, width0, rtol=1e-8)
    elif k >= 1.0:  # a factor held at 1: the t's quantile is the wider
        assert np.all(width >= width0 * (1 - 1e-12))
    std = reg.predict_std(X[:9])
    if df > 2:
        np.testing.assert_allclose(std, dist.std(), rtol=1e-10)
    else:
        assert np.all(np.isinf(std))
    assert np.all(np.isfinite(reg.predict_dist(X[:9]).logpdf(y[:9])))


def test_the_gated_scale_test_narrows_only_for_heavy_tails():
    """``max_test_df``: residuals narrower than the posterior's scale keep a factor of at
    least 1 when they are light-tailed (the optimism of learned features), and narrow when
    they are Cauchy-like (an outlier-inflated noise estimate)."""
    from skbnngp._backend import student_t_calibration
    rng = np.random.default_rng(0)
    narrow = 0.7 * rng.standard_normal(400)  # light tails, scale 0.7: the test rejects
    assert student_t_calibration(narrow)[1] < 1.0  # ungated: narrowed
    assert student_t_calibration(narrow, max_test_df=2.0)[1] >= 1.0
    cauchy = 0.05 * stats.cauchy.rvs(size=400, random_state=rng)
    df, k = student_t_calibration(cauchy, max_test_df=2.0)
    assert df <= 2.0 and k < 0.1


def test_svi_caps_each_targets_tails_by_its_own_trained_rows():
    """A multi-output svi fit calibrates target by target; the trained rows' tail cap is
    also one per target, so a Cauchy-noise target does not cap a Gaussian-noise one (pooled
    over the targets, it did; doc/whats_new.rst)."""
    from skbnngp import _calibration

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(400, 2))
    Y = np.column_stack([np.sin(X[:, 0]) + 0.1 * rng.standard_normal(400),
                         np.cos(X[:, 1]) + 0.1 * rng.standard_cauchy(400)])
    Z = np.column_stack([rng.standard_normal(2000), rng.standard_cauchy(2000)])
    caps = _calibration.trained_tail_df(Z)
    assert caps.shape == (2,) and caps[0] == np.inf and caps[1] <= 2.0
    assert caps[1] == _calibration.trained_tail_df(Z[:, 1])  # each column on its own
    for seed in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reg = DBKRegressor(inference="svi", device="cpu", random_state=seed).fit(X, Y)
        assert reg.predictive_df_.shape == (2,)
        assert reg.predictive_df_[0] > _calibration.TRAINED_TAIL_DF
        assert reg.predictive_df_[1] <= _calibration.TRAINED_TAIL_DF


def test_svi_keeps_the_near_noiseless_floor_on_the_degrees_of_freedom():
    """svi's calibration reads the near-noiseless guard as exact inference and Rich-BLL do:
    on a noiseless target the held-out residuals are heavy-tailed around almost nothing,
    and without the floor (``MIN_DF_LOW_NOISE``) the calibration could choose a t without
    variance (doc/whats_new.rst)."""
    from skbnngp import _calibration

    for seed in range(3):
        rng = np.random.default_rng(seed)
        X = rng.uniform(-3, 3, size=(60, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reg = DBKRegressor(inference="svi", device="cpu", random_state=seed).fit(
                X, np.sin(X[:, 0]))
        assert reg.predictive_df_ >= _calibration.MIN_DF_LOW_NOISE
        assert np.all(np.isfinite(reg.predict(X[:5], return_std=True)[1]))
