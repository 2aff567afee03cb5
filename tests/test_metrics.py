"""Tests for skbnngp.metrics: closed forms against quadrature, Monte-Carlo calibration checks,
scorers inside model selection, and input validation."""

import itertools

import numpy as np
import pytest
from scipy import integrate, stats
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.datasets import load_iris
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_val_score, cross_validate

from skbnngp.distributions import ScaleMixtureNormal
from skbnngp.metrics import (
    calibration_curve_regression,
    coverage_error,
    crps,
    expected_calibration_error,
    get_scorer,
    get_scorer_names,
    interval_coverage,
    interval_width,
    make_predictive_scorer,
    neg_calibration_error_scorer,
    neg_coverage_error_scorer,
    neg_crps_scorer,
    neg_ece_scorer,
    neg_interval_width_scorer,
    neg_nlpd_scorer,
    nlpd,
    ood_auroc,
    predictive_response,
    regression_calibration_error,
)

Y_GRID = np.array([-1e3, -30.0, -4.0, -1.0, -0.2, 0.0, 0.5, 1.0, 2.5, 7.0, 40.0])


class CdfOnly:
    """A dist-like object that hides its family, so crps must integrate numerically."""

    def __init__(self, dist):
        self._dist = dist

    def cdf(self, y):
        return self._dist.cdf(y)

    def ppf(self, q):
        return self._dist.ppf(q)

    def mean(self):
        return self._dist.mean()


def crps_by_quad(y, cdf):
    """Reference CRPS of one scalar y: adaptive quadrature of (F(z) - 1{z >= y})^2."""
    opts = {"epsabs": 1e-13, "epsrel": 1e-12, "limit": 500}
    left = integrate.quad(lambda z: cdf(z) ** 2, -np.inf, y, **opts)[0]
    right = integrate.quad(lambda z: (1 - cdf(z)) ** 2, y, np.inf, **opts)[0]
    return left + right


def mixture(n, loc=0.0, base=2.0):
    return ScaleMixtureNormal(np.full(n, loc), np.full(n, base), np.array([0.25, 1.0, 6.0]),
                              np.array([0.3, 0.5, 0.2]))


# ---------------------------------------------------------------------------- NLPD
def test_nlpd_is_minus_mean_logpdf_and_gaussian_closed_form():
    rng = np.random.RandomState(0)
    mu, sigma = rng.randn(50), np.exp(rng.randn(50))
    y = rng.randn(50)
    closed = np.mean(0.5 * np.log(2 * np.pi * sigma**2) + (y - mu) ** 2 / (2 * sigma**2))
    assert nlpd(y, stats.norm(mu, sigma)) == pytest.approx(closed, rel=1e-12)
    for dist in (stats.t(3.0, mu, sigma), mixture(50)):
        assert nlpd(y, dist) == pytest.approx(-np.mean(dist.logpdf(y)), rel=1e-12)


def test_nlpd_multioutput_and_sample_weight():
    rng = np.random.RandomState(1)
    mu, y = rng.randn(30, 3), rng.randn(30, 3)
    dist = stats.norm(loc=mu, scale=0.5)
    raw = nlpd(y, dist, multioutput="raw_values")
    assert raw.shape == (3,)
    np.testing.assert_allclose(raw, -dist.logpdf(y).mean(axis=0), rtol=1e-12)
    assert nlpd(y, dist) == pytest.approx(raw.mean())
    w = rng.uniform(size=30)
    expected = np.mean(np.average(-dist.logpdf(y), axis=0, weights=w))
    assert nlpd(y, dist, sample_weight=w) == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------- CRPS
@pytest.mark.parametrize("family, df", [("norm", None), ("t", 1.5), ("t", 3.0), ("t", 30.0)])
def test_crps_closed_form_matches_quadrature(family, df):
    loc, scale = 0.7, 1.3
    ref_dist = stats.norm(loc, scale) if df is None else stats.t(df, loc, scale)
    ref = np.array([crps_by_quad(y, ref_dist.cdf) for y in Y_GRID])
    n = Y_GRID.size
    dist = stats.norm(np.full(n, loc), scale) if df is None else stats.t(df, np.full(n, loc), scale)
    closed = crps(Y_GRID, dist, method="closed_form", multioutput="raw_values")  # pooled
    per_entry = np.array([crps(Y_GRID[i:i + 1], stats.norm(loc, scale) if df is None
                               else stats.t(df, loc, scale), method="closed_form")
                          for i in range(n)])
    np.testing.assert_allclose(per_entry, ref, rtol=1e-9)
    assert closed[0] == pytest.approx(ref.mean(), rel=1e-9)
    # The package's own quadrature (the path for objects without a closed form).
    numerical = np.array([crps(Y_GRID[i:i + 1], CdfOnly(ref_dist)) for i in range(n)])
    np.testing.assert_allclose(numerical, ref, rtol=1e-8)


def test_crps_keyword_and_positional_scipy_parameters_agree():
    y = np.array([0.1, -2.0, 3.0])
    a = crps(y, stats.t(4.0, np.zeros(3), 2.0))
    b = crps(y, stats.t(df=4.0, loc=np.zeros(3), scale=2.0))
    c = crps(y, stats.t(4.0, scale=2.0, loc=np.zeros(3)))
    d = crps(y, stats.t(4.0, np.zeros(3), 2.0), method="numerical")
    assert a == pytest.approx(b, rel=1e-14) and a == pytest.approx(c, rel=1e-14)
    assert a == pytest.approx(d, rel=1e-9)


def test_crps_vectorised_numerical_equals_closed_form_for_a_batch():
    rng = np.random.RandomState(2)
    mu, sigma, y = rng.randn(40, 2), np.exp(rng.randn(40, 2)), 3 * rng.randn(40, 2)
    for dist in (stats.norm(mu, sigma), stats.t(2.5, mu, sigma)):
        closed = crps(y, dist, multioutput="raw_values")
        numerical = crps(y, CdfOnly(dist), multioutput="raw_values")
        assert closed.shape == (2,)
        np.testing.assert_allclose(numerical, closed, rtol=1e-9)


def test_crps_t_tends_to_gaussian():
    y = np.linspace(-4, 4, 9)
    gauss = crps(y, stats.norm(np.zeros(9), 1.5))
    gaps = [abs(crps(y, stats.t(df, np.zeros(9), 1.5)) - gauss) for df in (3, 30, 300, 3e4)]
    assert all(a > b for a, b in itertools.pairwise(gaps))  # monotone, O(1/df)
    assert gaps[-1] < 1e-5
    assert crps(y, stats.t(np.inf, np.zeros(9), 1.5)) == pytest.approx(gauss, rel=1e-12)


def test_crps_of_a_degenerate_gaussian_is_the_absolute_error():
    y = np.array([-2.0, 0.0, 0.3, 5.0])
    mu = np.array([0.0, 0.0, 1.0, -1.0])
    for scale in (1e-6, 1e-10):
        assert crps(y, stats.norm(mu, scale)) == pytest.approx(np.mean(np.abs(y - mu)), abs=scale)
    assert crps(y, stats.norm(mu, 0.0)) == np.mean(np.abs(y - mu))


def test_crps_scale_mixture_closed_form_matches_quadrature():
    ref = np.array([crps_by_quad(y, lambda z: float(mixture(1, 0.5).cdf(np.array([z]))[0]))
                    for y in Y_GRID])
    n = Y_GRID.size
    closed = np.array([crps(Y_GRID[i:i + 1], mixture(1, 0.5)) for i in range(n)])
    np.testing.assert_allclose(closed, ref, rtol=1e-9)
    # ScaleMixtureNormal.cdf does not broadcast a leading axis: the quadrature loops instead.
    numerical = crps(Y_GRID, mixture(n, 0.5), method="numerical", multioutput="raw_values")
    assert numerical[0] == pytest.approx(ref.mean(), rel=1e-9)


def test_crps_student_t_with_df_at_most_one():
    y = np.array([-3.0, 0.2, 10.0])
    for df in (1.0, 0.8):
        ref = np.mean([crps_by_quad(v, stats.t(df).cdf) for v in y])
        assert crps(y, stats.t(df, np.zeros(3), 1.0)) == pytest.approx(ref, rel=1e-5)
    assert crps(y, stats.t(0.4, np.zeros(3), 1.0)) == np.inf  # (1 - F)^2 not integrable
    with pytest.raises(ValueError, match="closed-form"):
        crps(y, stats.t(0.8, np.zeros(3), 1.0), method="closed_form")


# ---------------------------------------------------------------------------- intervals
@pytest.mark.parametrize("make", [
    lambda n: stats.norm(np.linspace(-1, 1, n), np.linspace(0.5, 2, n)),
    lambda n: stats.t(2.5, np.zeros(n), 0.7),
    lambda n: mixture(n),
])
def test_coverage_of_own_samples_is_nominal(make):
    """Monte Carlo: n = 20000 draws from the predictive itself; tolerance 4 binomial sd."""
    n = 20_000
    dist = make(n)
    y = dist.rvs(random_state=np.random.RandomState(3))
    for confidence in (0.5, 0.9, 0.95):
        tol = 4 * np.sqrt(confidence * (1 - confidence) / n)
        assert abs(interval_coverage(y, dist, confidence) - confidence) < tol
    lo, hi = dist.interval(0.9)
    inside = np.mean((y >= lo) & (y <= hi))
    assert interval_coverage(y, dist, 0.9) == pytest.approx(inside, abs=2 / n)


def test_interval_width_of_a_gaussian():
    sigma = np.array([1.0, 2.0, 0.5])
    z = stats.norm.ppf(0.975)
    assert interval_width(stats.norm(np.zeros(3), sigma)) == pytest.approx(2 * z * sigma.mean())
    raw = interval_width(stats.norm(np.zeros((3, 2)), 1.0), 0.5, multioutput="raw_values")
    np.testing.assert_allclose(raw, 2 * stats.norm.ppf(0.75))


def test_regression_calibration_detects_miscalibration():
    n = 5000
    rng = np.random.RandomState(4)
    y = rng.standard_normal(n)
    good, narrow, wide = (stats.norm(np.zeros(n), s) for s in (1.0, 0.3, 3.0))
    for kind in ("central", "quantile"):
        assert regression_calibration_error(y, good, kind=kind) < 0.02
        assert regression_calibration_error(y, narrow, kind=kind) > 0.1
    nominal, observed = calibration_curve_regression(y, narrow)
    np.testing.assert_allclose(nominal, np.arange(1, 20) / 20)
    assert np.all(observed < nominal)  # over-confident: intervals cover too little
    _, observed = calibration_curve_regression(y, wide)
    assert np.all(observed > nominal)


# ---------------------------------------------------------------------------- classification
def test_ece_small_when_calibrated_large_when_overconfident():
    rng = np.random.RandomState(5)
    n = 20_000
    proba = rng.dirichlet(np.ones(4), size=n)
    y = (proba.cumsum(axis=1) < rng.uniform(size=(n, 1))).sum(axis=1)  # y ~ Categorical(proba)
    assert expected_calibration_error(y, proba) < 0.02
    sharp = proba**5 / (proba**5).sum(axis=1, keepdims=True)
    assert expected_calibration_error(y, sharp) > 0.15


def test_ece_by_hand_labels_and_binary_vector():
    proba = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    y = np.array([0, 0, 1, 1])
    # Bins (0.8, 1], (0.6, 0.8], (0.4, 0.6] hold confidences {0.9}, {0.8, 0.7}, {0.6}; the
    # first three predictions are right and the last is wrong.
    expected = 0.25 * abs(1 - 0.9) + 0.5 * abs(1 - 0.75) + 0.25 * abs(0 - 0.6)
    assert expected_calibration_error(y, proba, n_bins=5) == pytest.approx(expected)
    labels = np.array(["cat", "dog"])
    assert expected_calibration_error(labels[y], proba, n_bins=5, labels=labels) == \
        pytest.approx(expected)
    assert expected_calibration_error(y, proba[:, 1], n_bins=5) == pytest.approx(expected)


def test_ood_auroc():
    rng = np.random.RandomState(6)
    assert ood_auroc(rng.uniform(0, 1, 100), rng.uniform(2, 3, 50)) == 1.0
    assert ood_auroc(rng.uniform(2, 3, 100), rng.uniform(0, 1, 50)) == 0.0
    same = ood_auroc(rng.randn(5000), rng.randn(5000))
    assert abs(same - 0.5) < 0.03  # sd of the AUROC here is about 0.006


# ---------------------------------------------------------------------------- scorers
class GPRWithDist(RegressorMixin, BaseEstimator):
    """Stand-in regressor: sklearn's GPR whose predict_dist returns scipy.stats.norm."""

    def __init__(self, alpha=1e-2):
        self.alpha = alpha

    def fit(self, X, y):
        kernel = RBF(1.0) + WhiteKernel(0.05, noise_level_bounds="fixed")
        self.gpr_ = GaussianProcessRegressor(kernel, alpha=self.alpha, normalize_y=True,
                                             random_state=0).fit(X, y)
        return self

    def predict(self, X):
        return self.gpr_.predict(X)

    def predict_dist(self, X):
        mean, std = self.gpr_.predict(X, return_std=True)
        return stats.norm(mean, std)


@pytest.fixture(scope="module")
def toy_regression():
    rng = np.random.RandomState(7)
    X = rng.uniform(-3, 3, size=(60, 1))
    y = np.sin(X[:, 0]) + 0.2 * rng.randn(60)
    return X, y


def test_scorers_equal_direct_metric_calls(toy_regression):
    X, y = toy_regression
    est = GPRWithDist().fit(X[:40], y[:40])
    Xt, yt = X[40:], y[40:]
    dist = est.predict_dist(Xt)
    assert neg_nlpd_scorer(est, Xt, yt) == pytest.approx(-nlpd(yt, dist))
    assert neg_crps_scorer(est, Xt, yt) == pytest.approx(-crps(yt, dist))
    assert neg_coverage_error_scorer(est, Xt, yt) == pytest.approx(
        -abs(interval_coverage(yt, dist, 0.95) - 0.95))
    assert neg_interval_width_scorer(est, Xt, yt) == pytest.approx(-interval_width(dist))
    assert neg_calibration_error_scorer(est, Xt, yt) == pytest.approx(
        -regression_calibration_error(yt, dist))
    assert get_scorer("neg_coverage_error_80")(est, Xt, yt) == pytest.approx(
        -abs(interval_coverage(yt, dist, 0.8) - 0.8))
    w = np.linspace(0.1, 1, 20)
    assert neg_nlpd_scorer(est, Xt, yt, sample_weight=w) == pytest.approx(
        -nlpd(yt, dist, sample_weight=w))


def test_scorers_inside_model_selection(toy_regression):
    X, y = toy_regression
    search = GridSearchCV(GPRWithDist(), {"alpha": [1e-3, 1.0]}, scoring=neg_nlpd_scorer, cv=3)
    search.fit(X, y)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    scores = cross_val_score(GPRWithDist(), X, y, scoring=get_scorer("neg_crps"), cv=3)
    assert np.all(np.isfinite(scores)) and np.all(scores < 0)
    res = cross_validate(GPRWithDist(), X, y, cv=3,
                         scoring={"nlpd": neg_nlpd_scorer, "cov": neg_coverage_error_scorer,
                                  "r2": "r2"})
    assert np.all((res["test_cov"] <= 0) & (res["test_cov"] >= -0.95))
    assert np.all(np.isfinite(res["test_nlpd"]))


def test_ece_scorer_uses_classes():
    X, y = load_iris(return_X_y=True)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = LogisticRegression(max_iter=500).fit(X, names)
    expected = expected_calibration_error(names, clf.predict_proba(X), labels=clf.classes_)
    assert neg_ece_scorer(clf, X, names) == pytest.approx(-expected)
    assert get_scorer("neg_ece") is neg_ece_scorer
    scores = cross_val_score(LogisticRegression(max_iter=500), X, names, cv=3,
                             scoring=neg_ece_scorer)
    assert np.all(np.isfinite(scores)) and np.all(scores <= 0)


def test_get_scorer_names_and_fallback():
    assert get_scorer("neg_nlpd") is neg_nlpd_scorer
    assert get_scorer("neg_crps") is neg_crps_scorer
    assert get_scorer("neg_coverage_error_95") is neg_coverage_error_scorer
    with pytest.raises(ValueError, match="not a valid scoring value"):
        get_scorer("coverage_95")  # greater-is-better coverage rewards wide intervals
    assert "neg_interval_width_90" in repr(get_scorer("neg_interval_width_90")) or \
        "confidence=0.9" in repr(get_scorer("neg_interval_width_90"))
    assert get_scorer("r2")._score_func.__name__ == "r2_score"  # sklearn's scorer
    assert get_scorer(neg_nlpd_scorer) is neg_nlpd_scorer
    assert {"neg_nlpd", "neg_crps", "neg_coverage_error_95", "neg_ece", "r2"} <= set(get_scorer_names())
    for bad in ("neg_nlpdd", "coverage_100", 3):
        with pytest.raises(ValueError, match="not a valid scoring"):
            get_scorer(bad)
    scorer = make_predictive_scorer(crps, greater_is_better=False, method="numerical")
    assert "greater_is_better=False" in repr(scorer)


# ---------------------------------------------------------------------------- validation
def test_bad_inputs_raise_value_errors_naming_the_argument():
    dist = stats.norm(np.zeros(3), 1.0)
    y = np.zeros(3)
    with pytest.raises(ValueError, match="y_true"):
        nlpd(np.array([0.0, np.nan, 1.0]), dist)
    with pytest.raises(ValueError, match="y_true"):
        crps(np.zeros(4), dist)
    with pytest.raises(ValueError, match="y_true"):
        interval_coverage(np.zeros((3, 2)), dist)
    with pytest.raises(ValueError, match="dist"):
        nlpd(y, object())
    with pytest.raises(ValueError, match="dist"):
        crps(y, stats.norm(np.zeros(3), -1.0))  # negative scale gives NaN
    with pytest.raises(ValueError, match="confidence"):
        interval_coverage(y, dist, confidence=1.5)
    with pytest.raises(ValueError, match="sample_weight"):
        nlpd(y, dist, sample_weight=np.ones(2))
    with pytest.raises(ValueError, match="multioutput"):
        crps(y, dist, multioutput="variance_weighted")
    with pytest.raises(ValueError, match="proba"):
        expected_calibration_error([0, 1], np.array([[0.5, 0.6], [0.2, 0.8]]))
    with pytest.raises(ValueError, match="y_true"):
        expected_calibration_error([0, 2], np.array([[0.5, 0.5], [0.2, 0.8]]))
    with pytest.raises(ValueError, match="y_true"):
        expected_calibration_error(["a", "c"], np.array([[0.5, 0.5], [0.2, 0.8]]),
                                   labels=["a", "b"])
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error([0, 1], np.array([[0.5, 0.5], [0.2, 0.8]]), n_bins=0)
    with pytest.raises(ValueError, match="scores_in"):
        ood_auroc(np.zeros((3, 2)), np.ones(3))
    with pytest.raises(ValueError, match="scores_out"):
        ood_auroc(np.zeros(3), [1.0, np.inf])


def test_y_of_shape_n_by_1_matches_a_flat_distribution():
    dist = stats.norm(np.zeros(5), 1.0)
    y = np.linspace(-1, 1, 5)
    assert crps(y[:, None], dist) == pytest.approx(crps(y, dist))
    assert nlpd(y, stats.norm(np.zeros((5, 1)), 1.0)) == pytest.approx(nlpd(y, dist))


# ---------------------------------------------------------------------------- point masses
POINT_MASSES = [
    lambda loc: stats.norm(loc, np.zeros_like(loc)),
    lambda loc: stats.t(3.0, loc, np.zeros_like(loc)),
    lambda loc: ScaleMixtureNormal(loc, np.zeros_like(loc), [0.5, 2.0], [0.3, 0.7]),
]


@pytest.mark.parametrize("make", POINT_MASSES, ids=["norm", "t", "scale_mixture"])
def test_zero_scale_is_a_point_mass_in_every_metric(make):
    """Issue 18 item 8: std = 0 gave CRPS |y - mu| but NaN errors in NLPD and coverage."""
    loc = np.array([0.0, 1.0, -2.0, 3.0])
    y = np.array([0.0, 1.5, -2.0, 2.0])  # on the atom, off, on, off
    dist = make(loc)
    assert crps(y, dist) == pytest.approx(np.mean(np.abs(y - loc)))
    np.testing.assert_array_equal(crps(y[:, None], make(loc[:, None]), multioutput="raw_values"),
                                  [np.mean(np.abs(y - loc))])
    assert interval_coverage(y, dist, 0.9) == 0.5
    assert interval_width(dist, 0.9) == 0.0
    assert nlpd(y, dist) == np.inf  # two entries are ruled out
    assert nlpd(y[[0, 2]], make(loc[[0, 2]])) == -np.inf  # every entry on its atom
    # zero weights leave the ruled-out entries out
    assert nlpd(y, dist, sample_weight=[1, 0, 1, 0]) == -np.inf
    _, observed = calibration_curve_regression(y, dist, n_levels=4)
    np.testing.assert_array_equal(observed, [0.5] * 4)
    _, below = calibration_curve_regression(y, dist, n_levels=4, kind="quantile")
    np.testing.assert_array_equal(below, [0.75] * 4)  # y <= mu for all but 1.5 > 1.0
    assert regression_calibration_error(y, dist) == pytest.approx(
        np.mean(np.abs(0.5 - np.arange(1, 20) / 20)))


def test_point_mass_next_to_a_proper_predictive():
    """Mixed entries: only the zero-scale ones are point masses."""
    loc, scale = np.zeros(4), np.array([0.0, 1.0, 1.0, 0.0])
    y = np.array([0.0, 0.5, 3.0, 0.2])
    dist = stats.norm(loc, scale)
    proper = stats.norm(loc[1:3], scale[1:3])
    assert nlpd(y, dist) == np.inf
    assert nlpd(y[:3], dist.__class__(dist.dist, loc[:3], scale[:3])) == -np.inf
    assert interval_coverage(y, dist, 0.95) == pytest.approx(
        (1 + 2 * interval_coverage(y[1:3], proper, 0.95)) / 4)
    assert interval_width(dist, 0.95, multioutput="raw_values") == pytest.approx(
        interval_width(proper, 0.95) / 2)
    expected = (0.0 + 2 * crps(y[1:3], proper) + 0.2) / 4
    assert crps(y, dist) == pytest.approx(expected)
    # NaN scales are still refused
    with pytest.raises(ValueError, match="NaN"):
        nlpd(y, stats.norm(loc, np.array([0.0, np.nan, 1.0, 1.0])))


# ---------------------------------------------------------------------------- scorer checks
SCORERS = {"neg_nlpd": neg_nlpd_scorer, "neg_crps": neg_crps_scorer, "coverage": neg_coverage_error_scorer,
           "neg_interval_width_95": neg_interval_width_scorer,
           "neg_calibration_error": neg_calibration_error_scorer}


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_scorers_check_y(name, toy_regression):
    """Issue 18 item 8: neg_interval_width_95 accepted a y of the wrong length or all NaN."""
    X, y = toy_regression
    est = GPRWithDist().fit(X[:40], y[:40])
    scorer = SCORERS[name]
    Xt, yt = X[40:], y[40:]
    for bad, match in [(yt[:-1], "y has 19 entries but X has 20 rows"),
                       (np.r_[yt, 0.0], "y has 21 entries"),
                       (np.full(20, np.nan), "y"), (np.r_[yt[:-1], np.inf], "y"),
                       (None, "y is required")]:
        with pytest.raises(ValueError, match=match):
            scorer(est, Xt, bad)
    assert np.isfinite(scorer(est, Xt, yt))


def test_classification_scorer_checks_y():
    X, y = load_iris(return_X_y=True)
    clf = LogisticRegression(max_iter=500).fit(X, y)
    with pytest.raises(ValueError, match="y has 149 entries but X has 150 rows"):
        neg_ece_scorer(clf, X, y[:-1])
    with pytest.raises(ValueError, match="y contains NaN"):
        neg_ece_scorer(clf, X, np.where(y == 0, np.nan, y))
    names = np.array(["a", "b", "c"])[y]
    clf_named = LogisticRegression(max_iter=500).fit(X, names)
    assert np.isfinite(neg_ece_scorer(clf_named, X, names))


def test_coverage_error_is_best_at_the_nominal_level_not_the_widest():
    """A coverage score cannot be gamed by widening: scaling a calibrated predictive's
    spread up or down both lose (issue 47 item 5)."""
    rng = np.random.default_rng(0)
    y = rng.standard_normal(4000)
    scores = {k: coverage_error(y, stats.norm(np.zeros_like(y), k), 0.9)
              for k in (0.5, 1.0, 3.0)}
    assert scores[1.0] < 0.02  # Monte-Carlo error sqrt(0.09 / 4000) = 0.005
    assert scores[0.5] > 0.2 and scores[3.0] > 0.09  # 3 sd covers ~1.0: error ~0.1


def test_scorers_accept_a_pipeline_and_equal_the_prescaled_score(toy_regression):
    """A scorer on Pipeline(StandardScaler, est) equals the score of est fitted and scored on
    pre-scaled data (the scorer applies the pipeline's transforms, then predict_dist)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = toy_regression
    X = 10.0 * X + 3.0
    pipe = make_pipeline(StandardScaler(), GPRWithDist()).fit(X[:40], y[:40])
    scaler = StandardScaler().fit(X[:40])
    est = GPRWithDist().fit(scaler.transform(X[:40]), y[:40])
    Xt = scaler.transform(X[40:])
    for scorer in (neg_nlpd_scorer, neg_crps_scorer, neg_coverage_error_scorer,
                   neg_calibration_error_scorer):
        assert scorer(pipe, X[40:], y[40:]) == pytest.approx(scorer(est, Xt, y[40:]))
    dist = predictive_response(pipe, X[40:])
    np.testing.assert_allclose(dist.mean(), est.predict(Xt))
    search = GridSearchCV(make_pipeline(StandardScaler(), GPRWithDist()),
                          {"gprwithdist__alpha": [1e-3, 1.0]}, scoring=neg_nlpd_scorer, cv=3)
    search.fit(X, y)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert neg_nlpd_scorer(search, X, y) == pytest.approx(
        neg_nlpd_scorer(search.best_estimator_, X, y))


def test_scorer_without_a_predictive_distribution_raises_naming_it(toy_regression):
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = toy_regression
    with pytest.raises(TypeError, match="Ridge has no predict_dist"):
        neg_nlpd_scorer(Ridge().fit(X, y), X, y)
    pipe = make_pipeline(StandardScaler(), Ridge()).fit(X, y)
    with pytest.raises(TypeError, match=r"Ridge \(the final step of Pipeline\) has no"):
        neg_nlpd_scorer(pipe, X, y)


def _package_cases():
    from skbnngp.utils import all_estimators

    from .conftest import FAST

    for name, Est in all_estimators():
        yield pytest.param(Est, FAST.get(name, {}), id=name)


@pytest.mark.parametrize("Est, params", list(_package_cases()))
def test_package_scorers_on_a_pipeline_equal_the_prescaled_estimator(Est, params):
    """Issue 47 item 1: every scorer of the package on Pipeline(StandardScaler, est) equals
    the same scorer on ``est`` fitted and scored on the pre-scaled data (it gave NaN)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3)) * [1.0, 10.0, 100.0] + 5.0
    classifier = "Classifier" in Est.__name__
    y = (X[:, 0] > 5.0).astype(int) if classifier else np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)

    def make():
        return Est(**{**params, "random_state": 0})

    pipe = make_pipeline(StandardScaler(), make()).fit(X[:40], y[:40])
    scaler = StandardScaler().fit(X[:40])
    est = make().fit(scaler.transform(X[:40]), y[:40])
    scorers = [neg_ece_scorer] if classifier else [neg_nlpd_scorer, neg_crps_scorer,
                                                   neg_coverage_error_scorer]
    for scorer in scorers:
        got = scorer(pipe, X[40:], y[40:])
        assert np.isfinite(got)
        assert got == pytest.approx(scorer(est, scaler.transform(X[40:]), y[40:]), rel=1e-9)


def test_calibration_metrics_integer_weights_equal_repeated_samples(rng):
    """Integer ``sample_weight`` equals the samples repeated (zero: dropped) in the
    regression calibration curve and error, the ECE and the OoD AUROC; unit weights equal
    none."""
    n = 60
    y = rng.standard_t(3, size=(n, 2))
    loc, scale = rng.normal(size=(n, 2)), rng.uniform(0.5, 2, size=(n, 2))
    w = rng.integers(0, 4, size=n)
    rep = np.repeat(np.arange(n), w)
    for kind in ("central", "quantile"):
        _, obs = calibration_curve_regression(y, stats.norm(loc, scale), kind=kind,
                                                sample_weight=w)
        _, obs_r = calibration_curve_regression(y[rep], stats.norm(loc[rep], scale[rep]),
                                                    kind=kind)
        np.testing.assert_allclose(obs, obs_r, rtol=1e-12)
        assert regression_calibration_error(
            y[:, 0], stats.norm(loc[:, 0], scale[:, 0]), kind=kind, sample_weight=w) == \
            pytest.approx(regression_calibration_error(
                y[rep, 0], stats.norm(loc[rep, 0], scale[rep, 0]), kind=kind), rel=1e-12)
        np.testing.assert_array_equal(
            calibration_curve_regression(y, stats.norm(loc, scale), kind=kind,
                                         sample_weight=np.ones(n))[1],
            calibration_curve_regression(y, stats.norm(loc, scale), kind=kind)[1])
    proba = rng.dirichlet(np.ones(3), size=n)
    labels = rng.integers(0, 3, size=n)
    assert expected_calibration_error(labels, proba, sample_weight=w) == pytest.approx(
        expected_calibration_error(labels[rep], proba[rep]), rel=1e-12)
    assert expected_calibration_error(labels, proba, sample_weight=np.ones(n)) == \
        pytest.approx(expected_calibration_error(labels, proba), rel=1e-14)
    s_in, s_out = rng.normal(size=n), rng.normal(1.0, size=n)
    w_out = rng.integers(0, 3, size=n)
    assert ood_auroc(s_in, s_out, sample_weight_in=w, sample_weight_out=w_out) == \
        pytest.approx(ood_auroc(s_in[rep], np.repeat(s_out, w_out)), rel=1e-12)


def test_calibration_metrics_reject_bad_weights_naming_them():
    y = np.zeros(5)
    dist = stats.norm(np.zeros(5), 1.0)
    with pytest.raises(ValueError, match="sample_weight"):
        calibration_curve_regression(y, dist, sample_weight=-np.ones(5))
    with pytest.raises(ValueError, match="sample_weight"):
        regression_calibration_error(y, dist, sample_weight=np.ones(4))
    with pytest.raises(ValueError, match="sample_weight"):
        expected_calibration_error(np.zeros(5, int), np.full((5, 2), 0.5),
                                   sample_weight=np.zeros(5))
    with pytest.raises(ValueError, match="sample_weight_out"):
        ood_auroc(np.zeros(3), np.ones(3), sample_weight_out=[1.0, -1.0, 1.0])


def test_scorers_take_sample_weight_through_metadata_routing_as_sklearns_do():
    """With scikit-learn's metadata routing on, weights passed to ``cross_validate`` reach
    a scorer only if it requests them, and an unset request is an error, as for
    scikit-learn's scorers. Before, the package's scorers had no request: the weights
    were silently left out of the score."""
    import sklearn
    from sklearn.exceptions import UnsetMetadataPassedError
    from sklearn.model_selection import KFold

    from skbnngp import StudentTProcessRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = X[:, 0] + 0.3 * rng.normal(size=60)
    w = rng.integers(1, 4, size=60).astype(float)
    cv = KFold(3)
    requested = neg_crps_scorer.set_score_request(sample_weight=True)
    assert requested is not neg_crps_scorer  # the shared scorer keeps its (unset) request
    assert neg_crps_scorer.get_metadata_routing().score.requests["sample_weight"] is None
    with sklearn.config_context(enable_metadata_routing=True):
        est = StudentTProcessRegressor(max_iter=5).set_fit_request(sample_weight=True)
        with pytest.raises(UnsetMetadataPassedError, match="sample_weight"):
            cross_validate(est, X, y, scoring=neg_crps_scorer, cv=cv,
                           params={"sample_weight": w})
        scores = cross_validate(est, X, y, scoring=requested, cv=cv,
                                params={"sample_weight": w})["test_score"]
    for score, (train, test) in zip(scores, cv.split(X)):
        model = StudentTProcessRegressor(max_iter=5).fit(X[train], y[train],
                                                         sample_weight=w[train])
        assert score == pytest.approx(-crps(y[test], model.predict_dist(X[test]),
                                            sample_weight=w[test]), rel=1e-10)


def test_a_multi_metric_search_with_weights_passes_them_to_the_scorers():
    """scikit-learn's searches (without metadata routing) ask each scorer of a dict
    ``scoring`` whether it takes ``sample_weight`` before passing on the weights given to
    ``fit``. The package's scorers had no answer: ``GridSearchCV(scoring={"nlpd":
    neg_nlpd_scorer, ...}).fit(X, y, sample_weight=w)`` raised an AttributeError."""
    from sklearn.model_selection import KFold

    from skbnngp import StudentTProcessRegressor

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2))
    y = X[:, 0] + 0.3 * rng.normal(size=60)
    w = rng.integers(1, 4, size=60).astype(float)
    cv = KFold(3)
    search = GridSearchCV(StudentTProcessRegressor(max_iter=5), {"depth": [1, 2]},
                          scoring={"nlpd": neg_nlpd_scorer, "crps": neg_crps_scorer,
                                   "r2": "r2"},
                          refit="nlpd", cv=cv, error_score="raise").fit(X, y, sample_weight=w)
    train, test = next(cv.split(X))
    for k, depth in enumerate((1, 2)):
        model = StudentTProcessRegressor(max_iter=5, depth=depth).fit(
            X[train], y[train], sample_weight=w[train])
        expected = -nlpd(y[test], model.predict_dist(X[test]), sample_weight=w[test])
        assert search.cv_results_["split0_test_nlpd"][k] == pytest.approx(expected, rel=1e-10)
