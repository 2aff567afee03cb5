"""Predictives of scikit-learn's wrappers around package regressors: a regressor fitted on
transformed targets (``TransformedTargetRegressor``) and one regressor per target
(``MultiOutputRegressor``).

Before, ``predictive_response``, every predictive scorer and ``cross_val_predict_dist``
refused both (no ``predict_dist``), and ``ConformalRegressor`` around one used unnormalised
residuals: intervals of one width, below zero for most rows of a positive target.
"""

import numpy as np
import pytest
from scipy import stats
from sklearn.compose import TransformedTargetRegressor
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.multioutput import MultiOutputRegressor
from sklearn.preprocessing import StandardScaler

from skbnngp import ConformalRegressor, StudentTProcessRegressor
from skbnngp.distributions import (
    StackedDensity,
    StackedDistribution,
    TransformedDistribution,
)
from skbnngp.distributions import _transformed as make_transformed
from skbnngp.metrics import (
    crps,
    interval_coverage,
    neg_crps_scorer,
    neg_nlpd_scorer,
    nlpd,
    predictive_response,
)
from skbnngp.model_selection import cross_val_predict_dist

from .conftest import FAST

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _data(n=150, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 2))
    return X, np.exp(X[:, 0] + 0.5 * rng.normal(size=n))  # positive, right-skewed


def _log_model(regressor=None):
    return TransformedTargetRegressor(
        regressor or StudentTProcessRegressor(**FAST["StudentTProcessRegressor"]),
        func=np.log, inverse_func=np.exp)


def test_the_exp_of_a_gaussian_is_the_lognormal():
    """The change of variables against scipy's log-normal, and the closed-form CRPS of a
    log-normal (Baran and Lerch, 2015) against the numerical CRPS of the mapped cdf."""
    mu, s = np.array([-0.5, 0.0, 1.2]), np.array([0.3, 1.0, 0.7])
    dist = make_transformed(stats.norm(mu, s), np.log, np.exp)
    ref = stats.lognorm(s, scale=np.exp(mu))
    y = np.array([0.4, 2.5, 3.0])
    np.testing.assert_allclose(dist.cdf(y), ref.cdf(y), rtol=1e-12)
    # the map's derivative is a central difference: about 1e-10 in log units
    np.testing.assert_allclose(dist.logpdf(y), ref.logpdf(y), rtol=0, atol=1e-8)
    np.testing.assert_allclose(dist.ppf(0.1), ref.ppf(0.1), rtol=1e-12)
    np.testing.assert_allclose(dist.interval(0.9), ref.interval(0.9), rtol=1e-12)
    np.testing.assert_allclose(dist.median(), np.exp(mu), rtol=1e-12)
    # outside the map's range: no mass below y <= 0, no density there
    assert np.all(dist.cdf(np.array([0.0, -1.0, -5.0])) == 0.0)
    assert np.all(dist.logpdf(np.array([0.0, -1.0, -5.0])) == -np.inf)
    z = (np.log(y) - mu) / s
    closed = y * (2 * stats.norm.cdf(z) - 1) - 2 * np.exp(mu + s**2 / 2) * (
        stats.norm.cdf(z - s) + stats.norm.cdf(s / np.sqrt(2)) - 1)
    # the numerical CRPS (quadrature of the mapped cdf) against the closed form
    assert crps(y, dist) == pytest.approx(closed.mean(), rel=1e-5)
    draws = dist.rvs(size=20000, random_state=0)
    assert draws.shape == (20000, 3)
    assert np.all(np.abs(np.median(draws, axis=0) / np.exp(mu) - 1) < 0.05)


def test_a_decreasing_map_flips_the_tails_and_a_constant_one_is_refused():
    base = stats.norm(np.array([1.0, -2.0]), np.array([0.5, 2.0]))
    dist = make_transformed(base, np.negative, np.negative)
    ref = stats.norm(np.array([-1.0, 2.0]), np.array([0.5, 2.0]))
    y = np.array([-0.7, 3.1])
    np.testing.assert_allclose(dist.cdf(y), ref.cdf(y), rtol=1e-12)
    np.testing.assert_allclose(dist.logpdf(y), ref.logpdf(y), rtol=0, atol=1e-8)
    np.testing.assert_allclose(dist.ppf(0.2), ref.ppf(0.2), rtol=1e-12)
    lo, hi = dist.interval(0.8)
    np.testing.assert_allclose(lo, ref.interval(0.8)[0], rtol=1e-12)
    assert np.all(lo < hi)
    with pytest.raises(TypeError, match="not finite or not strictly"):
        make_transformed(base, np.log, lambda z: np.zeros_like(z))
    # a bounded range (y = z / (1 - z) maps z < 1 only): quantiles of z beyond it are an
    # infinite bound of y, never NaN
    bounded = make_transformed(stats.norm(0.0, 0.5), lambda y: y / (1 + y),
                               lambda z: np.where(z < 1, z / (1 - z), np.nan))
    lo, hi = bounded.interval(0.99)
    assert np.isfinite(lo) and hi == np.inf
    assert bounded.ppf(0.999) == np.inf and np.isfinite(bounded.ppf(0.5))


def test_a_log_target_model_gives_the_mapped_predictive_and_its_median_is_predict():
    X, y = _data()
    model = _log_model().fit(X[:100], y[:100])
    dist, base = predictive_response(model, X[100:]), model.regressor_.predict_dist(X[100:])
    yt = y[100:]
    np.testing.assert_allclose(dist.cdf(yt), base.cdf(np.log(yt)), rtol=1e-12)
    np.testing.assert_allclose(dist.logpdf(yt), base.logpdf(np.log(yt)) - np.log(yt),
                               rtol=0, atol=1e-8)
    np.testing.assert_allclose(dist.interval(0.9), np.exp(base.interval(0.9)), rtol=1e-12)
    # a Student-t base is symmetric: the median maps to what predict returns
    np.testing.assert_allclose(dist.median(), model.predict(X[100:]), rtol=1e-12)
    assert np.all(dist.interval(0.95)[0] > 0)
    assert nlpd(yt, dist) == pytest.approx(-np.mean(dist.logpdf(yt)))


def test_a_target_scaler_shifts_and_scales_the_predictive():
    X, y = _data()
    model = TransformedTargetRegressor(
        StudentTProcessRegressor(**FAST["StudentTProcessRegressor"]),
        transformer=StandardScaler()).fit(X, y)
    dist, base = predictive_response(model, X[:20]), model.regressor_.predict_dist(X[:20])
    m, s = model.transformer_.mean_[0], model.transformer_.scale_[0]
    np.testing.assert_allclose(dist.logpdf(y[:20]), base.logpdf((y[:20] - m) / s) - np.log(s),
                               rtol=0, atol=1e-8)
    np.testing.assert_allclose(dist.ppf(0.3), m + s * base.ppf(0.3), rtol=1e-12)


def test_a_transformer_that_refuses_part_of_the_line_gives_no_mass_there():
    """Box-Cox's transform raises on y <= 0 (NumPy's log gives NaN): the cdf is 0 there
    and the numerical CRPS, whose tails reach below 0, is finite."""
    from sklearn.preprocessing import PowerTransformer

    X, y = _data()
    model = TransformedTargetRegressor(
        StudentTProcessRegressor(**FAST["StudentTProcessRegressor"]),
        transformer=PowerTransformer(method="box-cox")).fit(X, y)
    dist = predictive_response(model, X[:10])
    assert np.all(dist.cdf(np.full(10, -1.0)) == 0.0)
    assert np.all(dist.logpdf(np.full(10, -1.0)) == -np.inf)
    assert np.isfinite(crps(y[:10], dist))
    # the rows it refuses are found by bisection, not one call per value: a CRPS over 150
    # rows (quadrature points below 0 among them) takes a bounded number of transforms
    calls, transform = [0], model.transformer_.transform

    def counted(a):
        calls[0] += 1
        return transform(a)
    model.transformer_.transform = counted
    assert np.isfinite(crps(y, predictive_response(model, X)))
    assert calls[0] <= 200


def test_scorers_searches_and_out_of_fold_predictives_accept_a_target_transform():
    X, y = _data()
    cv = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(_log_model(), X, y, scoring=neg_nlpd_scorer, cv=cv,
                             error_score="raise")
    assert np.all(np.isfinite(scores))
    train, test = next(cv.split(X))
    fold = _log_model().fit(X[train], y[train])
    assert scores[0] == pytest.approx(-nlpd(y[test], predictive_response(fold, X[test])))
    assert np.all(np.isfinite(cross_val_score(_log_model(), X, y, scoring=neg_crps_scorer,
                                              cv=cv)))
    search = GridSearchCV(_log_model(), {"regressor__depth": [1, 2]},
                          scoring=neg_nlpd_scorer, cv=cv, error_score="raise").fit(X, y)
    assert np.isfinite(search.best_score_)
    assert isinstance(predictive_response(search, X[:5]), TransformedDistribution)
    oof = cross_val_predict_dist(_log_model(), X, y, cv=cv)
    for k, (train, test) in enumerate(cv.split(X)):
        part = _log_model().fit(X[train], y[train])
        np.testing.assert_allclose(oof.cdf(y)[test],
                                   predictive_response(part, X[test]).cdf(y[test]),
                                   rtol=1e-10)
    assert 0.7 <= interval_coverage(y, oof, 0.9) <= 1.0


def test_conformal_around_and_inside_a_target_transform():
    """Around: the conformity scores are normalised by the mapped predictive (before,
    absolute residuals: one width everywhere). Inside: the conformal interval of log y,
    mapped back, so positive bounds and the same coverage guarantee."""
    X, y = _data(n=400)
    tr, te = slice(0, 250), slice(250, None)
    around = ConformalRegressor(_log_model(), random_state=0).fit(X[tr], y[tr])
    cal = around.calibration_indices_
    pred = predictive_response(around.estimators_[0], X[tr][cal])
    lo50, hi50 = pred.interval(0.5)
    np.testing.assert_allclose(around.conformity_scores_,
                               (y[tr][cal] - pred.median()) / (0.5 * (hi50 - lo50)),
                               rtol=1e-10)
    lo, hi = around.predict_interval(X[te], 0.9)
    assert np.std(hi - lo) > 0.1 * np.mean(hi - lo)  # widths follow the predictive
    inside = _log_model(ConformalRegressor(
        StudentTProcessRegressor(**FAST["StudentTProcessRegressor"]), random_state=0))
    inside.fit(X[tr], y[tr])
    dist = predictive_response(inside, X[te])
    conf = inside.regressor_.predict_dist(X[te])
    np.testing.assert_allclose(dist.interval(0.9), np.exp(conf.interval(0.9)), rtol=1e-12)
    assert np.all(dist.interval(0.9)[0] > 0)
    with pytest.raises(TypeError, match="no logpdf"):
        neg_nlpd_scorer(inside, X[te], y[te])
    # its CRPS scores the mapped candidate values, as for the conformal predictive itself
    # (before: the quadrature, which the masses at +-inf make diverge, raised)
    from skbnngp.metrics import _crps_points

    by_hand = _crps_points(y[te], np.exp(conf.points), conf.weights).mean()
    assert crps(y[te], dist) == pytest.approx(by_hand, rel=1e-12)


def _two_targets(n=150, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 2))
    Y = np.c_[np.sin(X[:, 0]) + 0.1 * rng.normal(size=n),
              10 + 5 * X[:, 1] + 3 * rng.standard_t(3, size=n)]
    return X, Y


def _per_target(regressor=None):
    return MultiOutputRegressor(
        regressor or StudentTProcessRegressor(**FAST["StudentTProcessRegressor"]))


def test_a_per_target_model_stacks_its_regressors_predictives():
    X, Y = _two_targets()
    model = _per_target().fit(X[:100], Y[:100])
    dist = predictive_response(model, X[100:])
    assert isinstance(dist, StackedDensity) and dist.shape == (50, 2)
    for j, est in enumerate(model.estimators_):
        own = est.predict_dist(X[100:])
        np.testing.assert_array_equal(dist.cdf(Y[100:])[:, j], own.cdf(Y[100:, j]))
        np.testing.assert_array_equal(dist.logpdf(Y[100:])[:, j], own.logpdf(Y[100:, j]))
        np.testing.assert_array_equal(dist.interval(0.9)[1][:, j], own.interval(0.9)[1])
        np.testing.assert_array_equal(dist.std()[:, j], own.std())
    np.testing.assert_allclose(dist.median(), model.predict(X[100:]), rtol=1e-12)
    per_column = [nlpd(Y[100:, j], e.predict_dist(X[100:]))
                  for j, e in enumerate(model.estimators_)]
    assert nlpd(Y[100:], dist) == pytest.approx(np.mean(per_column), rel=1e-12)
    assert dist.rvs(size=4, random_state=0).shape == (4, 50, 2)


def test_scorers_searches_and_out_of_fold_predictives_accept_a_per_target_model():
    X, Y = _two_targets()
    cv = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(_per_target(), X, Y, scoring=neg_nlpd_scorer, cv=cv,
                             error_score="raise")
    train, test = next(cv.split(X))
    fold = _per_target().fit(X[train], Y[train])
    assert scores[0] == pytest.approx(-nlpd(Y[test], predictive_response(fold, X[test])))
    search = GridSearchCV(_per_target(), {"estimator__depth": [1, 2]},
                          scoring=neg_crps_scorer, cv=cv, error_score="raise").fit(X, Y)
    assert np.isfinite(search.best_score_)
    oof = cross_val_predict_dist(_per_target(), X, Y, cv=cv)
    assert oof.shape == Y.shape
    np.testing.assert_allclose(oof.cdf(Y)[test], predictive_response(fold, X[test]).cdf(
        Y[test]), rtol=1e-10)


def test_conformal_around_and_inside_a_per_target_model():
    X, Y = _two_targets(n=300)
    around = ConformalRegressor(_per_target(), random_state=0).fit(X[:200], Y[:200])
    assert around.predict_interval(X[200:], 0.9)[0].shape == (100, 2)
    # the scores are the residuals normalised by the stacked predictive (before: absolute)
    cal = around.calibration_indices_
    pred = predictive_response(around.estimators_[0], X[:200][cal])
    lo50, hi50 = pred.interval(0.5)
    np.testing.assert_allclose(around.conformity_scores_,
                               (Y[:200][cal] - pred.median()) / (0.5 * (hi50 - lo50)),
                               rtol=1e-10)
    inside = _per_target(ConformalRegressor(
        StudentTProcessRegressor(**FAST["StudentTProcessRegressor"]), random_state=0))
    inside.fit(X[:200], Y[:200])
    dist = predictive_response(inside, X[200:])
    assert type(dist) is StackedDistribution  # the conformal parts have no density
    np.testing.assert_array_equal(dist.interval(0.9)[0][:, 1],
                                  inside.estimators_[1].predict_dist(X[200:]).interval(0.9)[0])
    with pytest.raises(TypeError, match="no logpdf"):
        neg_nlpd_scorer(inside, X[200:], Y[200:])
    per_target = [crps(Y[200:, j], e.predict_dist(X[200:]))
                  for j, e in enumerate(inside.estimators_)]
    assert crps(Y[200:], dist) == pytest.approx(np.mean(per_target), rel=1e-12)
