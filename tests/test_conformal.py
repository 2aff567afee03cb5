"""Intervals at any level: ``predict_interval`` on every regressor, ``ConformalRegressor``
(split and CV+ conformal predictive distributions) and out-of-fold predictives (issue 50)."""

import pickle
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, ShuffleSplit
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbnngp import ConformalRegressor, StudentTProcessRegressor
from skbnngp.distributions import ConformalPredictiveDistribution, OutOfFoldDistribution
from skbnngp.metrics import get_scorer, interval_coverage, predictive_response
from skbnngp.model_selection import cross_val_predict_dist
from skbnngp.utils import all_estimators

from .conftest import FAST

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


class OverconfidentLine(RegressorMixin, BaseEstimator):
    """Least-squares line with a Gaussian predictive ``shrink`` times too narrow: a model
    whose own intervals badly under-cover, and that fits in microseconds (Monte Carlo)."""

    def __init__(self, shrink=0.05):
        self.shrink = shrink

    def fit(self, X, y):
        A = np.column_stack([np.ones(len(X)), X])
        self.coef_ = np.linalg.lstsq(A, y, rcond=None)[0]
        return self

    def predict(self, X):
        return np.column_stack([np.ones(len(X)), X]) @ self.coef_

    def predict_dist(self, X):
        mean, scale = self.predict(X), self.shrink * (np.abs(X[:, 0]) + 0.1)
        return stats.norm(mean, scale if mean.ndim == 1 else scale[:, None])


def _heteroscedastic(rng, n):
    """y = 2x + (|x| + 0.1) t_3 noise: heavy tails whose spread the toy's scale tracks."""
    X = rng.uniform(-1, 1, size=(n, 1))
    return X, 2 * X[:, 0] + (np.abs(X[:, 0]) + 0.1) * rng.standard_t(3, size=n)


def _fast(name):
    return dict(FAST[name])


def _data(n=60, n_targets=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, (y if n_targets is None else np.column_stack([y * (k + 1) for k in
                                                            range(n_targets)]))


# ============================================================== predict_interval (mixin)
@pytest.mark.parametrize("name, Est", all_estimators("regressor"))
def test_predict_interval_is_the_predictive_interval_at_each_level(name, Est):
    X, y = _data()
    reg = Est(**_fast(name)).fit(X, y)
    dist = reg.predict_dist(X[:7])
    lo, hi = reg.predict_interval(X[:7])  # default 0.9
    np.testing.assert_allclose((lo, hi), dist.interval(0.9), rtol=1e-12)
    lo3, hi3 = reg.predict_interval(X[:7], confidence=[0.5, 0.8, 0.95])
    assert lo3.shape == hi3.shape == (7, 3)
    for k, level in enumerate([0.5, 0.8, 0.95]):
        np.testing.assert_allclose((lo3[:, k], hi3[:, k]), dist.interval(level), rtol=1e-12)
    # nested: a higher level gives a wider interval
    assert np.all(np.diff(lo3, axis=1) < 0) and np.all(np.diff(hi3, axis=1) > 0)


def test_predict_interval_shapes_for_several_targets():
    X, Y = _data(n_targets=2)
    reg = StudentTProcessRegressor(**_fast("StudentTProcessRegressor")).fit(X, Y)
    assert reg.predict_interval(X[:5])[0].shape == (5, 2)
    lo, hi = reg.predict_interval(X[:5], confidence=(0.5, 0.9, 0.99))
    assert lo.shape == hi.shape == (5, 2, 3)
    np.testing.assert_allclose(hi[:, :, 1], reg.predict_dist(X[:5]).interval(0.9)[1])


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, np.nan, "0.9", [], [0.5, 1.0], [[0.9]],
                                 True, None])
def test_predict_interval_rejects_a_bad_confidence_naming_it(bad):
    X, y = _data(n=30)
    reg = StudentTProcessRegressor(max_iter=3).fit(X, y)
    with pytest.raises(ValueError, match="confidence"):
        reg.predict_interval(X[:2], confidence=bad)


def test_a_zero_scale_predictive_gives_a_point_interval():
    from skbnngp._intervals import central_intervals

    lo, hi = central_intervals(stats.norm(np.array([1.0, 2.0]), np.array([0.0, 1.0])), 0.9)
    assert lo[0] == hi[0] == 1.0
    np.testing.assert_allclose(hi[1], 2 + stats.norm.ppf(0.95))


# ============================================================== conformal distribution
def test_conformal_distribution_takes_the_conservative_ranks():
    n = 39  # (n + 1) (1 +- c) / 2 = 2 and 38 at c = 0.9
    d = ConformalPredictiveDistribution(np.arange(n, 0, -1.0)[None, :])  # sorted here
    for c in (0.5, 0.8, 0.9, 0.93):
        lo, hi = d.interval(c)
        assert lo[0] == np.floor((n + 1) * (1 - c) / 2 + 1e-9)
        assert hi[0] == np.ceil((n + 1) * (1 + c) / 2 - 1e-9)
    lo, hi = d.interval(0.96)  # needs rank 40 > n: the level needs more calibration rows
    assert lo[0] == -np.inf and hi[0] == np.inf
    y = np.linspace(-2, 45, 200)
    cdf = np.array([d.cdf(v)[0] for v in y])
    assert np.all(np.diff(cdf) >= 0) and cdf[0] == 0.5 / 40 and cdf[-1] == 39.5 / 40
    q = np.linspace(0.01, 0.99, 50)
    assert np.all(np.diff([d.ppf(v)[0] for v in q]) >= 0)


def test_symmetric_conformal_distribution_takes_the_symmetric_ranks():
    """n scores with both signs: interval(c) is +- the ceil((n + 1) c)-th smallest |score|
    (infinite beyond n), ppf is non-decreasing, the cdf counts each point as half a row."""
    n = 9
    a = np.arange(1.0, n + 1)
    d = ConformalPredictiveDistribution(np.concatenate([a, -a])[None, :], n_calibration=n)
    for c in (0.05, 0.1, 0.5, 0.8, 0.85, 0.9):
        lo, hi = d.interval(c)
        k = np.ceil((n + 1) * c - 1e-9)
        assert hi[0] == k and lo[0] == -k
    lo, hi = d.interval(0.95)  # rank 10 > n
    assert lo[0] == -np.inf and hi[0] == np.inf
    v = np.array([d.ppf(p)[0] for p in np.linspace(0, 1, 101)])
    assert np.all(v[1:] >= v[:-1]) and v[0] == -np.inf and v[-1] == np.inf
    assert d.median()[0] == 0.0
    cdf = [d.cdf(np.array([v]))[0] for v in (0.0, 9.0, -20.0)]
    np.testing.assert_allclose(cdf, [0.5, 9.5 / 10, 0.5 / 10])
    with pytest.raises(ValueError, match="n_calibration"):
        ConformalPredictiveDistribution(np.ones((1, 5)), n_calibration=2)


def test_symmetric_split_interval_is_the_median_plus_minus_the_scaled_score_quantile():
    """Closed form: m(x) +- s(x) q, q the ceil((n + 1) c)-th smallest |r_i| of the
    calibration rows, m and s the wrapped model's median and half interquartile range."""
    from skbnngp._conformal import predictive_location_scale

    X, y = _heteroscedastic(np.random.default_rng(3), 120)
    reg = ConformalRegressor(OverconfidentLine(), calibration_size=40, random_state=0)
    reg.fit(X, y)
    m, s = predictive_location_scale(reg.estimators_[0], X[:6])
    r = np.sort(np.abs(reg.conformity_scores_))
    lo, hi = reg.predict_interval(X[:6], confidence=[0.5, 0.9])
    for j, c in enumerate((0.5, 0.9)):
        q = r[int(np.ceil(41 * c)) - 1]
        np.testing.assert_allclose(hi[:, j], m + s * q, rtol=1e-12)
        np.testing.assert_allclose(lo[:, j], m - s * q, rtol=1e-12)
    # the equal-tailed intervals of the signed scores differ on these skewed residuals
    signed = clone(reg).set_params(symmetric=False).fit(X, y)
    assert not np.allclose(signed.predict_interval(X[:6], 0.9), (lo[:, 1], hi[:, 1]))


@pytest.mark.parametrize("symmetric", [True, False])
def test_conformal_std_is_the_scaled_rms_of_the_scores(symmetric):
    """Closed form of the split predictive's std (its infinite tails' mass left out): the
    candidate values m(x) + s(x) r_i (or m(x) +- s(x) |r_i|), equally weighted, have the
    std s(x) times the scores' std (about 0 when symmetric: their root mean square).
    ``predict(X, return_std=True)``, ``predict_std`` and ``predict_dist(X).std()`` agree."""
    from skbnngp._conformal import predictive_location_scale

    X, y = _heteroscedastic(np.random.default_rng(5), 120)
    reg = ConformalRegressor(OverconfidentLine(), calibration_size=40, symmetric=symmetric,
                             random_state=0).fit(X, y)
    m, s = predictive_location_scale(reg.estimators_[0], X[:6])
    r = reg.conformity_scores_
    spread = np.sqrt(np.mean(r**2)) if symmetric else np.std(r)
    mean, std = reg.predict(X[:6], return_std=True)
    np.testing.assert_allclose(mean, m, rtol=1e-12)
    np.testing.assert_allclose(std, s * spread, rtol=1e-10)
    np.testing.assert_allclose(reg.predict_std(X[:6]), std, rtol=1e-12)
    np.testing.assert_allclose(reg.predict_dist(X[:6]).std(), std, rtol=1e-12)
    assert np.all(np.isfinite(std)) and np.ptp(std) > 0  # follows the model's own scale
    with pytest.raises(TypeError, match="return_cov"):
        reg.predict(X[:6], return_cov=True)


@pytest.mark.parametrize("per_row", [1, 2])
def test_rows_needed_is_where_the_central_interval_becomes_finite(per_row):
    for n in range(1, 60):
        a = np.arange(1.0, n + 1)
        points = a if per_row == 1 else np.concatenate([a, -a])
        d = ConformalPredictiveDistribution(points[None, :], n_calibration=n)
        for c in (0.5, 0.8, 0.9, 0.95, 0.975):
            finite = bool(np.all(np.isfinite(d.interval(c))))
            assert finite == (n >= d.rows_needed(c)), (n, c)
    with pytest.raises(ValueError, match="confidence"):
        d.rows_needed(1.0)


# ============================================================== coverage (Monte Carlo)
@pytest.mark.parametrize("symmetric", [True, False])
def test_split_conformal_coverage_is_its_exact_finite_sample_value(symmetric):
    """For continuous scores, the split interval at level c covers a new row with
    probability exactly (k_u - k_l) / (n + 1) >= c (k_l, k_u its ranks; symmetric:
    ceil((n + 1) c) / (n + 1)), however badly the model's own intervals cover: 600 random
    splits, each with a new calibration set and 100 new rows. A split's coverage spreads by
    about 0.066 at c = 0.8 (its Beta law at n = 49 plus the 100 test rows; measured over
    3,000 splits), so the mean's standard error is at most 0.0027 and the tolerance, 0.01,
    is over 3.5 of them."""
    rng = np.random.default_rng(0)
    n_train, n_cal, reps = 50, 49, 600
    levels = np.array([0.8, 0.9, 0.95])
    covered, own = np.zeros((reps, 3)), np.zeros(reps)
    for r in range(reps):
        X, y = _heteroscedastic(rng, n_train + n_cal + 100)
        reg = ConformalRegressor(OverconfidentLine(), calibration_size=n_cal,
                                 symmetric=symmetric, random_state=r)
        reg.fit(X[:n_train + n_cal], y[:n_train + n_cal])
        lo, hi = reg.predict_interval(X[-100:], confidence=levels)
        covered[r] = np.mean((y[-100:, None] >= lo) & (y[-100:, None] <= hi), axis=0)
        own[r] = interval_coverage(y[-100:], reg.estimators_[0].predict_dist(X[-100:]), 0.8)
    if symmetric:
        exact = np.ceil((n_cal + 1) * levels - 1e-9) / (n_cal + 1)
    else:
        k_l = np.floor((n_cal + 1) * (1 - levels) / 2 + 1e-9)
        k_u = np.ceil((n_cal + 1) * (1 + levels) / 2 - 1e-9)
        exact = (k_u - k_l) / (n_cal + 1)
    assert np.all(exact >= levels)
    np.testing.assert_allclose(covered.mean(axis=0), exact, atol=0.01)
    assert own.mean() < 0.3  # the wrapped model's own 80 % intervals: far too narrow


def test_cv_plus_covers_the_nominal_level_in_practice():
    """CV+ guarantees 2c - 1; on exchangeable data it covers about c. 300 random data sets
    of 80 rows (5 folds), 100 new rows each: standard error near 0.003 at c = 0.9."""
    rng = np.random.default_rng(1)
    levels = np.array([0.8, 0.9, 0.95])
    covered = np.zeros((300, 3))
    for r in range(300):
        X, y = _heteroscedastic(rng, 180)
        reg = ConformalRegressor(OverconfidentLine(), method="cv+").fit(X[:80], y[:80])
        lo, hi = reg.predict_interval(X[80:], confidence=levels)
        covered[r] = np.mean((y[80:, None] >= lo) & (y[80:, None] <= hi), axis=0)
    assert np.all(covered.mean(axis=0) >= levels - 0.015), covered.mean(axis=0)
    assert np.all(covered.mean(axis=0) <= levels + 0.04), covered.mean(axis=0)  # not vacuous


def test_split_conformal_around_the_student_t_process_covers():
    """The real path (a Student-t process's predictive, 3 targets of different scales) on
    12 random splits of 120 rows: each target's mean coverage of 90 % intervals is at least
    0.9 up to 3 standard errors (about 0.09 / sqrt(12 x ...) ~ 0.03 with 30 calibration
    rows each: tolerance 0.06)."""
    rng = np.random.default_rng(2)
    cover = []
    for r in range(12):
        X = rng.normal(size=(170, 2))
        f = np.sin(2 * X[:, 0])
        Y = np.column_stack([f + s * rng.standard_t(3, size=170) for s in (0.05, 0.3, 1.0)])
        reg = ConformalRegressor(StudentTProcessRegressor(**_fast("StudentTProcessRegressor")),
                                 calibration_size=30, random_state=r).fit(X[:120], Y[:120])
        lo, hi = reg.predict_interval(X[120:], 0.9)
        assert lo.shape == (50, 3)
        cover.append(np.mean((Y[120:] >= lo) & (Y[120:] <= hi), axis=0))
    assert np.all(np.mean(cover, axis=0) >= 0.9 - 0.06), np.mean(cover, axis=0)


# ============================================================== meta-estimator contract
def test_conformal_shapes_and_predict_dist():
    X, Y = _data(n=80, n_targets=2)
    for method in ("split", "cv+"):
        reg = ConformalRegressor(OverconfidentLine(), method=method, random_state=0).fit(X, Y)
        n_cal = 20 if method == "split" else 80
        assert reg.conformity_scores_.shape == (n_cal, 2)
        dist = reg.predict_dist(X[:4])
        assert dist.shape == (4, 2) and dist.n_calibration == n_cal
        assert dist.n_points == 2 * n_cal  # symmetric: each score with both signs
        assert reg.predict(X[:4]).shape == (4, 2)
        lo, hi = reg.predict_interval(X[:4], [0.5, 0.9])
        assert lo.shape == hi.shape == (4, 2, 2)
        np.testing.assert_array_equal(lo[..., 1], dist.interval(0.9)[0])


@pytest.mark.parametrize("method", ["split", "cv+"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_conformal_sample_y_draws_each_rows_candidate_values(method, symmetric):
    """``sample_y`` draws every row independently among its conformal predictive's candidate
    values (finite: the unbounded tails' mass is left out), with equal frequencies."""
    X, Y = _data(n=80, n_targets=2)
    reg = ConformalRegressor(OverconfidentLine(), method=method, symmetric=symmetric,
                             random_state=0).fit(X, Y)
    dist = reg.predict_dist(X[:3])
    S = 20000
    draws = reg.sample_y(X[:3], n_samples=S)
    assert draws.shape == (3, 2, S) and np.all(np.isfinite(draws))
    assert reg.sample_y(X[:3, :], n_samples=1).shape == (3, 2, 1)
    np.testing.assert_array_equal(reg.sample_y(X[:3], n_samples=S), draws)  # random_state=0
    assert not np.array_equal(reg.sample_y(X[:3], n_samples=S, random_state=1), draws)
    for i in range(3):
        for j in range(2):
            pts = dist.points[i, j]
            assert np.all(np.isin(draws[i, j], pts))
            # each candidate drawn with probability 1 / N: a chi-square test of the counts
            counts = np.array([np.sum(draws[i, j] == v) for v in np.unique(pts)])
            mult = np.array([np.sum(pts == v) for v in np.unique(pts)])
            assert stats.chisquare(counts, S * mult / mult.sum()).pvalue > 1e-4
    # one target: (n_samples_X, n_samples)
    one = ConformalRegressor(OverconfidentLine(), random_state=0).fit(X, Y[:, 0])
    assert one.sample_y(X[:3], n_samples=4).shape == (3, 4)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_conformal_sample_y_refuses_a_bad_n_samples(bad):
    X, y = _data()
    reg = ConformalRegressor(OverconfidentLine(), random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="n_samples"):
        reg.sample_y(X[:2], n_samples=bad)


def test_conformal_with_a_pipeline_inside_and_around_and_a_grid_search():
    X, y = _data(n=90)
    X = X * [1.0, 100.0]
    inner = make_pipeline(StandardScaler(), StudentTProcessRegressor(max_iter=10))
    reg = ConformalRegressor(inner, random_state=0).fit(X, y)
    assert np.all(np.isfinite(reg.predict_interval(X[:5], 0.8)))
    outer = make_pipeline(StandardScaler(), ConformalRegressor(OverconfidentLine(),
                                                               method="cv+", cv=3))
    dist = predictive_response(outer.fit(X, y), X[:5])
    assert isinstance(dist, ConformalPredictiveDistribution)
    search = GridSearchCV(ConformalRegressor(OverconfidentLine(), random_state=0),
                          {"calibration_size": [0.3, 0.5]}, cv=3,
                          scoring=get_scorer("neg_coverage_error_90")).fit(X, y)
    assert search.best_params_["calibration_size"] in (0.3, 0.5)
    assert search.predict(X[:3]).shape == (3,)


def test_conformal_cv_plus_in_parallel_is_the_serial_one():
    """cv+ fold models fitted by two joblib workers: the same scores and intervals as one at
    a time, within 1e-8 relative (another process may sum in another thread count)."""
    X, y = _data(n=60)
    est = StudentTProcessRegressor(**_fast("StudentTProcessRegressor"))
    serial = ConformalRegressor(est, method="cv+", cv=3).fit(X, y)
    parallel = ConformalRegressor(est, method="cv+", cv=3, n_jobs=2).fit(X, y)
    np.testing.assert_allclose(parallel.conformity_scores_, serial.conformity_scores_,
                               rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(parallel.predict_interval(X[:5], 0.8),
                               serial.predict_interval(X[:5], 0.8), rtol=1e-8)


def test_conformal_predictions_read_the_fitted_state_not_later_parameters():
    """set_params after fit changes nothing until the next fit (cv+ fitted, then the
    parameters of a split, signed fit set)."""
    X, y = _data(n=60)
    reg = ConformalRegressor(OverconfidentLine(), method="cv+", cv=3).fit(X, y)
    before = reg.predict_interval(X[:5], [0.5, 0.9])
    reg.set_params(method="split", symmetric=False)
    np.testing.assert_array_equal(reg.predict_interval(X[:5], [0.5, 0.9]), before)


def test_conformal_clone_and_pickle_keep_the_intervals():
    X, y = _data(n=60)
    reg = ConformalRegressor(StudentTProcessRegressor(max_iter=5), method="cv+", cv=3).fit(X, y)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict_interval(X[:5]), reg.predict_interval(X[:5]))
    fresh = clone(reg)
    assert not hasattr(fresh, "estimators_") and fresh.get_params()["cv"] == 3


@pytest.mark.parametrize("symmetric, n_cal, need", [(False, 20, 39), (True, 15, 19)])
def test_conformal_warns_when_a_level_needs_more_calibration_rows(symmetric, n_cal, need):
    X, y = _data(n=80)
    reg = ConformalRegressor(OverconfidentLine(), calibration_size=n_cal,
                             symmetric=symmetric, random_state=0).fit(X, y)
    with pytest.warns(UserWarning, match=f"{n_cal} calibration scores .* 0.95 .* needs {need}"
                      ".*calibration_size or method='cv\\+'"):
        lo, hi = reg.predict_interval(X[:3], confidence=[0.9, 0.95])
    assert np.all(np.isfinite(lo[:, 0])) and np.all(lo[:, 1] == -np.inf)
    assert np.all(hi[:, 1] == np.inf)
    # with exactly the rows it needs the bound is finite, and no warning
    reg.set_params(calibration_size=need).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.all(np.isfinite(reg.predict_interval(X[:3], confidence=0.95)))


def test_a_cv_plus_fit_on_too_few_rows_names_the_remedies_that_apply():
    """cv+ already scores every row: its warning asks for more rows or a lower level, not
    for the calibration_size or the method it already has."""
    X, y = _data(n=12)
    reg = ConformalRegressor(OverconfidentLine(), method="cv+", cv=3).fit(X, y)
    with pytest.warns(UserWarning, match="12 calibration scores .* use more rows or a lower "
                      "confidence") as rec:
        reg.predict_interval(X[:3], confidence=0.95)
    assert "calibration_size" not in str(rec[0].message)


def test_conformal_wraps_a_student_t_process_by_default():
    X, y = _data(n=40)
    reg = ConformalRegressor(random_state=0).fit(X, y)
    assert type(reg.estimators_[0]) is StudentTProcessRegressor
    assert reg.estimator is None  # fit leaves the parameter as given


def test_conformal_refuses_folds_that_do_not_partition_the_rows():
    X, y = _data(n=40)
    with pytest.raises(ValueError, match="cv"):
        ConformalRegressor(OverconfidentLine(), method="cv+",
                           cv=ShuffleSplit(3, random_state=0)).fit(X, y)


# ============================================================== weights and groups
class WeightedLine(OverconfidentLine):
    """:class:`OverconfidentLine` fitted by weighted least squares (``sample_weight``)."""

    def fit(self, X, y, sample_weight=None):
        w = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, float)
        A = np.column_stack([np.ones(len(X)), X]) * np.sqrt(w)[:, None]
        self.coef_ = np.linalg.lstsq(A, y * np.sqrt(w), rcond=None)[0]
        return self


def test_weighted_conformal_distribution_is_the_repeated_rows_one():
    """Integer weights: every quantile, the cdf, median, mean and std of the rows repeated
    (signed and symmetric points, weights 0-3, 1-29 rows); unit weights are no weights."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, per_row = int(rng.integers(1, 30)), int(rng.integers(1, 3))
        w = rng.integers(0, 4, size=n).astype(float)
        w[0] = max(w[0], 1.0)

        def points(rows):
            base = np.sin(np.arange(3)[:, None] + 7.0 * rows[None, :])  # ties across rows
            return base if per_row == 1 else np.concatenate([base, 0.3 - base], axis=-1)

        weighted = ConformalPredictiveDistribution(points(np.arange(n)), n_calibration=n,
                                                   weights=w)
        rows = np.repeat(np.arange(n), w.astype(int))
        repeated = ConformalPredictiveDistribution(points(rows), n_calibration=rows.size)
        for q in np.linspace(0, 1, 41):
            np.testing.assert_array_equal(weighted.ppf(q), repeated.ppf(q))
        y = np.array([-0.5, 0.1, 0.9])
        np.testing.assert_allclose(weighted.cdf(y), repeated.cdf(y), rtol=1e-12)
        for stat in ("median", "mean", "std"):
            np.testing.assert_allclose(getattr(weighted, stat)(), getattr(repeated, stat)(),
                                       rtol=1e-12, atol=1e-12)
        unit = ConformalPredictiveDistribution(points(np.arange(n)), n_calibration=n,
                                               weights=np.ones(n))
        plain = ConformalPredictiveDistribution(points(np.arange(n)), n_calibration=n)
        np.testing.assert_array_equal(unit.interval(0.8), plain.interval(0.8))
    with pytest.raises(ValueError, match="weights"):
        ConformalPredictiveDistribution(np.ones((1, 4)), weights=[1.0, -1.0, 1.0, 1.0])


def test_weighted_conformal_draws_follow_the_weights():
    d = ConformalPredictiveDistribution(np.arange(4.0)[None, :], weights=[1.0, 0.0, 0.0, 3.0])
    draws = d.rvs(size=4000, random_state=0)
    assert set(np.unique(draws)) == {0.0, 3.0}
    assert abs(np.mean(draws == 3.0) - 0.75) < 0.03  # binomial sd 0.007


@pytest.mark.parametrize("method", ["split", "cv+"])
def test_conformal_integer_weights_are_repeated_rows(method):
    """Weights 0-3 against the rows repeated that many times (shuffled): the same models
    (weighted least squares), scores, weights and intervals; a weight of 0 drops the row."""
    rng = np.random.default_rng(1)
    X, y = _heteroscedastic(rng, 70)
    w = rng.integers(0, 4, size=70)
    rows = rng.permutation(np.repeat(np.arange(70), w))
    reg = ConformalRegressor(WeightedLine(), method=method, cv=3, random_state=0)
    weighted = clone(reg).fit(X, y, sample_weight=w.astype(float))
    repeated = clone(reg).fit(X[rows], y[rows])
    np.testing.assert_allclose(weighted.calibration_weights_, repeated.calibration_weights_)
    np.testing.assert_allclose(weighted.conformity_scores_, repeated.conformity_scores_,
                               rtol=1e-9, atol=1e-12)
    for c in (0.5, 0.9):
        np.testing.assert_allclose(weighted.predict_interval(X[:5], c),
                                   repeated.predict_interval(X[:5], c), rtol=1e-9)
    assert not np.isin(np.flatnonzero(w == 0), weighted.calibration_indices_).any()
    if method == "split":  # the closed form over the scores repeated by their weights
        from skbnngp._conformal import predictive_location_scale

        m, scale = predictive_location_scale(weighted.estimators_[0], X[:5])
        r = np.sort(np.repeat(np.abs(weighted.conformity_scores_),
                              weighted.calibration_weights_.astype(int)))
        q = r[int(np.ceil((r.size + 1) * 0.9 - 1e-9)) - 1]
        np.testing.assert_allclose(weighted.predict_interval(X[:5], 0.9)[1], m + scale * q,
                                   rtol=1e-12)
    kept = w > 0  # zero weights are rows dropped
    dropped = clone(reg).fit(X[kept], y[kept], sample_weight=w[kept].astype(float))
    np.testing.assert_allclose(dropped.predict_interval(X[:5], 0.9),
                               weighted.predict_interval(X[:5], 0.9), rtol=1e-9)


def test_conformal_weights_reach_a_pipelines_final_step_or_are_refused():
    X, y = _data(n=80)
    w = np.random.default_rng(2).integers(1, 4, size=80).astype(float)
    pipe = make_pipeline(StandardScaler(), WeightedLine())
    reg = ConformalRegressor(pipe, random_state=0).fit(X, y, sample_weight=w)
    train = np.setdiff1d(np.arange(80), reg.calibration_indices_)
    own = clone(pipe).fit(X[train], y[train], weightedline__sample_weight=w[train])
    np.testing.assert_allclose(reg.estimators_[0][-1].coef_, own[-1].coef_, rtol=1e-10)
    np.testing.assert_array_equal(reg.calibration_weights_, w[reg.calibration_indices_])
    with pytest.raises(ValueError, match="sample_weight"):
        ConformalRegressor(OverconfidentLine()).fit(X, y, sample_weight=w)
    with pytest.raises(ValueError, match="sample_weight"):
        ConformalRegressor(WeightedLine()).fit(X, y, sample_weight=-w)


@pytest.mark.parametrize("method", ["split", "cv+"])
def test_conformal_groups_are_never_both_trained_on_and_scored(method):
    X, y = _data(n=90)
    groups = np.repeat(np.arange(18), 5)
    reg = ConformalRegressor(WeightedLine(), method=method, cv=GroupKFold(3),
                             calibration_size=0.25, random_state=0).fit(X, y, groups=groups)
    scored = reg.calibration_indices_
    if method == "split":  # whole groups held out: a quarter of them, rounded up
        assert np.isin(groups, groups[scored]).sum() == scored.size == 25
    else:
        for k in range(3):
            mine = scored[reg._fold_of == k]
            assert not np.isin(groups[np.setdiff1d(np.arange(90), mine)], groups[mine]).any()
    assert np.all(np.isfinite(reg.predict_interval(X[:3], 0.8)))
    if method == "split":
        with pytest.raises(ValueError, match="groups"):
            clone(reg).fit(X, y, groups=np.zeros(90))


# ============================================================== out-of-fold predictives
def test_cross_val_predict_dist_is_each_folds_predictive():
    X, y = _data(n=60)
    est = StudentTProcessRegressor(**_fast("StudentTProcessRegressor"))
    cv = KFold(3, shuffle=True, random_state=0)
    dist = cross_val_predict_dist(est, X, y, cv=cv)
    assert dist.mean().shape == (60,)
    for train, test in cv.split(X):
        own = clone(est).fit(X[train], y[train]).predict_dist(X[test])
        np.testing.assert_allclose(dist.mean()[test], own.mean(), rtol=1e-10)
        np.testing.assert_allclose(dist.interval(0.9)[1][test], own.interval(0.9)[1],
                                   rtol=1e-10)


def test_cross_val_predict_dist_takes_groups_and_fit_params():
    X, y = _data(n=60)
    groups = np.repeat(np.arange(12), 5)
    w = np.random.default_rng(3).integers(1, 4, size=60).astype(float)
    pipe = make_pipeline(StandardScaler(), WeightedLine())
    cv = GroupKFold(3)
    dist = cross_val_predict_dist(pipe, X, y, groups=groups, cv=cv,
                                  params={"weightedline__sample_weight": w})
    for train, test in cv.split(X, y, groups):
        own = clone(pipe).fit(X[train], y[train], weightedline__sample_weight=w[train])
        np.testing.assert_allclose(dist.mean()[test], own.predict(X[test]), rtol=1e-10)
    unweighted = cross_val_predict_dist(pipe, X, y, groups=groups, cv=cv)
    assert not np.allclose(unweighted.mean(), dist.mean())


class CountingRidge(Ridge):
    """Ridge that counts its fits, to tell a refusal before any fold from one after."""

    fits = 0

    def fit(self, X, y, sample_weight=None):
        CountingRidge.fits += 1
        return super().fit(X, y, sample_weight=sample_weight)


@pytest.mark.parametrize("wrap", ["plain", "pipeline", "search"])
def test_cross_val_predict_dist_refuses_a_point_predictor_before_fitting(wrap):
    """A regressor with no predictive (here a Ridge, bare, as a Pipeline's last step, or in a
    search) is refused by name before any fold is fitted, pointing at ConformalRegressor;
    around it, the same regressor gets out-of-fold conformal predictives."""
    X, y = _data(n=60)
    est = {"plain": CountingRidge(), "pipeline": make_pipeline(StandardScaler(), CountingRidge()),
           "search": GridSearchCV(CountingRidge(), {"alpha": [0.1, 1.0]}, cv=2)}[wrap]
    CountingRidge.fits = 0
    with pytest.raises(TypeError, match=r"CountingRidge.* has no predict_dist.*ConformalRegressor"):
        cross_val_predict_dist(est, X, y, cv=3)
    assert CountingRidge.fits == 0
    dist = cross_val_predict_dist(ConformalRegressor(Ridge()), X, y, cv=3)
    assert np.isfinite(dist.interval(0.9)).all()
    assert dist.mean().shape == (60,)


def test_cross_val_predict_dist_in_parallel_is_the_serial_one():
    """Folds fitted by two joblib workers: the same predictives as one at a time, within
    1e-8 relative (another process may run the fits on another thread count, which moves
    the optimiser's sums in the last bits)."""
    X, y = _data(n=60)
    est = StudentTProcessRegressor(**_fast("StudentTProcessRegressor"))
    serial = cross_val_predict_dist(est, X, y, cv=3)
    parallel = cross_val_predict_dist(est, X, y, cv=3, n_jobs=2)
    np.testing.assert_allclose(parallel.mean(), serial.mean(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(parallel.interval(0.9), serial.interval(0.9), rtol=1e-8)


def test_out_of_fold_distribution_answers_each_row_with_its_part():
    parts = [stats.norm(np.zeros(2), 1.0), stats.t(3, loc=np.ones(3), scale=2.0)]
    rows = [np.array([0, 3]), np.array([1, 2, 4])]
    d = OutOfFoldDistribution(parts, rows)
    y = np.arange(5.0)
    np.testing.assert_allclose(d.cdf(y)[[0, 3]], stats.norm.cdf([0.0, 3.0]))
    np.testing.assert_allclose(d.cdf(y)[[1, 2, 4]], stats.t.cdf([1.0, 2.0, 4.0], 3, 1, 2))
    np.testing.assert_allclose(d.interval(0.9)[1][[1, 2, 4]], 1 + 2 * stats.t.ppf(0.95, 3))
    with pytest.raises(ValueError, match="partition"):
        OutOfFoldDistribution(parts, [np.array([0, 1]), np.array([1, 2, 4])])


def test_out_of_fold_conformal_predictives_have_no_density_and_nlpd_says_so():
    """Folds of conformal predictives (no density) give an out-of-fold predictive without
    ``logpdf``, so ``nlpd`` refuses it by name (it raised an AttributeError from a fold's
    part) while the CRPS and interval metrics score it; density parts keep ``logpdf``."""
    from skbnngp.metrics import crps, nlpd

    X, y = _data(n=90)
    d = cross_val_predict_dist(ConformalRegressor(Ridge(), random_state=0), X, y, cv=3)
    assert isinstance(d, OutOfFoldDistribution) and not hasattr(d, "logpdf")
    with pytest.raises(ValueError, match="logpdf"):  # sklearn's InvalidParameterError
        nlpd(y, d)
    assert np.isfinite(crps(y, d)) and 0 <= interval_coverage(y, d, 0.9) <= 1
    dense = OutOfFoldDistribution([stats.norm(np.zeros(2), 1.0), stats.t(3, np.zeros(1))],
                                  [np.array([0, 2]), np.array([1])])
    assert isinstance(dense, OutOfFoldDistribution)
    np.testing.assert_allclose(dense.logpdf(np.zeros(3)),
                               [stats.norm.logpdf(0), stats.t.logpdf(0, 3), stats.norm.logpdf(0)])
    # a part without a method (a transformed predictive has no mean): an error naming both
    from skbnngp.distributions import _transformed

    logged = OutOfFoldDistribution([_transformed(stats.norm(np.zeros(2), 1.0), np.log,
                                                  np.exp)], [np.array([0, 1])])
    np.testing.assert_allclose(logged.median(), [1.0, 1.0])
    with pytest.raises(AttributeError, match="OutOfFoldDistribution has no mean: its part "
                                             "TransformedDensity"):
        logged.mean()
    back = pickle.loads(pickle.dumps(dense))
    # a pickle round trip: compared within 1e-12 (relative), not bitwise
    np.testing.assert_allclose(back.logpdf(np.zeros(3)), dense.logpdf(np.zeros(3)),
                               rtol=1e-12)


def test_the_crps_of_a_conformal_predictive_scores_its_candidate_values():
    """``crps`` of a conformal predictive is the CRPS of its candidate values
    (``E|X - y| - E|X - X'| / 2``, their weights as repeats): equal to the O(N^2) double
    sum; as N grows, points at the mid-quantiles of a Gaussian score as the Gaussian does;
    the numerical integral, which its masses at +-inf make diverge, is refused. Before, the
    quadrature raised on fewer than about 100 calibration rows and on more summed the
    never-closing tails into a CRPS 100x too large (7.3 for intervals 0.5 wide)."""
    from skbnngp.metrics import crps

    rng = np.random.default_rng(0)
    points, y = rng.normal(size=(6, 9)), rng.normal(size=6)
    w = rng.integers(0, 4, size=9).astype(float)
    w[0] = 1.0
    m = w / w.sum()
    brute = np.mean([m @ np.abs(p - t) - 0.5 * m @ np.abs(p[:, None] - p[None, :]) @ m
                     for p, t in zip(points, y)])
    weighted = ConformalPredictiveDistribution(points, weights=w)
    assert crps(y, weighted) == pytest.approx(brute, rel=1e-12)
    repeated = ConformalPredictiveDistribution(np.repeat(points, w.astype(int), axis=1))
    assert crps(y, repeated) == pytest.approx(brute, rel=1e-12)
    q = stats.norm.ppf((np.arange(4000) + 0.5) / 4000)
    grid = ConformalPredictiveDistribution(np.tile(q, (3, 1)))
    y3 = np.array([-1.0, 0.0, 2.5])
    assert crps(y3, grid) == pytest.approx(crps(y3, stats.norm(np.zeros(3), 1.0)), rel=1e-3)
    with pytest.raises(ValueError, match="diverges"):
        crps(y, weighted, method="numerical")
    # a fitted ConformalRegressor's score is of the same order as its model's own
    X, t = _data(n=150)
    reg = ConformalRegressor(StudentTProcessRegressor(max_iter=5), method="cv+", cv=3)
    reg.fit(X[:120], t[:120])
    own = crps(t[120:], reg.estimators_[0].predict_dist(X[120:]))
    assert 0.5 * own < crps(t[120:], reg.predict_dist(X[120:])) < 2.0 * own


def test_the_nlpd_scorer_on_a_conformal_predictive_names_the_scorer_and_the_remedy():
    """A conformal predictive has no density. Inside ``cross_val_score`` the metric's own
    parameter check said "The 'dist' parameter of cross_val_score must be an object
    implementing 'logpdf'" (scikit-learn renames a nested check after the outermost
    caller), which named neither the scorer nor what to use instead."""
    from sklearn.model_selection import cross_val_score

    from skbnngp.metrics import neg_crps_scorer, neg_nlpd_scorer

    X, t = _data(n=60)
    reg = ConformalRegressor(StudentTProcessRegressor(max_iter=5), random_state=0)
    with pytest.raises(TypeError, match=r"(?s)nlpd.*ConformalRegressor.*no logpdf.*"
                                        r"neg_crps_scorer"):
        cross_val_score(reg, X, t, scoring=neg_nlpd_scorer, cv=3, error_score="raise")
    assert np.all(np.isfinite(cross_val_score(reg, X, t, scoring=neg_crps_scorer, cv=3)))


def test_out_of_fold_conformal_predictives_get_a_crps_part_by_part():
    """``cross_val_predict_dist`` of a ``ConformalRegressor`` is a union of conformal
    predictives; ``crps`` scores each part by its candidate values (it raised: the
    quadrature met their infinite tails), the row-weighted mean of the parts' scores."""
    from skbnngp.metrics import crps

    X, y = _data(n=90)
    dist = cross_val_predict_dist(ConformalRegressor(StudentTProcessRegressor(max_iter=5)),
                                  X, y, cv=KFold(3, shuffle=True, random_state=0))
    assert all(isinstance(p, ConformalPredictiveDistribution) for p in dist.parts)
    by_part = sum(len(rows) * crps(y[rows], part) for part, rows in zip(dist.parts, dist.rows))
    assert crps(y, dist) == pytest.approx(by_part / len(y), rel=1e-12)


@pytest.mark.parametrize("pipe", [False, True])
def test_a_point_predictor_gets_split_conformal_intervals_of_absolute_residuals(pipe):
    """Around a model with only ``predict`` (Ridge) the scores are the absolute residuals
    and the 90 % interval is ``prediction +- q``, ``q`` the ``ceil(0.9 (n + 1))``-th smallest
    absolute calibration residual of the same fitted model (Lei et al.'s split interval);
    a Pipeline ending in one behaves the same."""
    X, y = _data(n=120)
    est = make_pipeline(StandardScaler(), Ridge()) if pipe else Ridge()
    reg = ConformalRegressor(est, random_state=0).fit(X, y)
    model, cal = reg.estimators_[0], reg.calibration_indices_
    r = np.sort(np.abs(y[cal] - model.predict(X[cal])))
    q = r[int(np.ceil(0.9 * (r.size + 1))) - 1]
    lo, hi = reg.predict_interval(X[:7], confidence=0.9)
    np.testing.assert_allclose(lo, model.predict(X[:7]) - q, rtol=1e-12)
    np.testing.assert_allclose(hi, model.predict(X[:7]) + q, rtol=1e-12)


def test_a_model_with_a_std_gets_intervals_that_follow_it():
    """Around scikit-learn's GP (``predict(X, return_std=True)``) the scores are normalised
    by its std: the 90 % interval is ``mean +- q sd(x)`` with ``q`` the conformal quantile
    of ``|y - mean| / sd`` over the calibration rows (up to the constant 0.674 on both
    sides, which cancels), so its width follows the GP's std from row to row."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel

    X, y = _data(n=120)
    gp = GaussianProcessRegressor(RBF() + WhiteKernel(), normalize_y=True)
    reg = ConformalRegressor(gp, random_state=0).fit(X, y)
    model, cal = reg.estimators_[0], reg.calibration_indices_
    m, sd = model.predict(X[cal], return_std=True)
    r = np.sort(np.abs(y[cal] - m) / sd)
    q = r[int(np.ceil(0.9 * (r.size + 1))) - 1]
    Xq = np.vstack([X[:5], 3 * X[:2]])  # two far rows: a larger std
    mq, sq = model.predict(Xq, return_std=True)
    lo, hi = reg.predict_interval(Xq, confidence=0.9)
    np.testing.assert_allclose(hi - lo, 2 * q * sq, rtol=1e-9)
    np.testing.assert_allclose(0.5 * (lo + hi), mq, rtol=1e-9, atol=1e-12)


def test_a_classifier_is_refused_before_fitting(monkeypatch):
    from sklearn.linear_model import LogisticRegression

    monkeypatch.setattr(LogisticRegression, "fit", lambda *a, **k: pytest.fail("fitted"))
    X, y = _data(n=40)
    with pytest.raises(TypeError, match="estimator: LogisticRegression is not a regressor"):
        ConformalRegressor(LogisticRegression()).fit(X, (y > 0).astype(int))


def test_a_search_or_a_nested_pipeline_keeps_the_models_own_scale():
    """The wrapped model's final estimator is found as the metrics find it: a fitted
    search's best estimator, the last step of a nested Pipeline. Their intervals equal the
    plain model's, not the one-width intervals of a point predictor (what they got when
    only a top-level Pipeline was looked into)."""
    X, y = _data(n=120)
    search = GridSearchCV(OverconfidentLine(), {"shrink": [0.05, 0.06]}, cv=2)
    a = ConformalRegressor(search, random_state=0).fit(X, y)
    best = a.estimators_[0].best_params_["shrink"]
    plain = ConformalRegressor(OverconfidentLine(shrink=best), random_state=0).fit(X, y)
    nested = ConformalRegressor(make_pipeline(make_pipeline(OverconfidentLine(shrink=best))),
                                random_state=0).fit(X, y)
    want = plain.predict_interval(X[:6], confidence=0.9)
    for reg in (a, nested):
        np.testing.assert_allclose(reg.predict_interval(X[:6], confidence=0.9), want,
                                   rtol=1e-12)
    width = want[1] - want[0]
    assert width.max() > 2 * width.min()  # the model's scale varies from row to row
