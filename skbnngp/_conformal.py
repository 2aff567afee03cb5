"""ConformalRegressor: a finite-sample coverage guarantee around any regressor.

The conformity score of a held-out row is its normalised residual ``(y - m(x)) / s(x)``,
where ``m`` is the median of the wrapped regressor's predictive and ``s`` half the width of
its central 50 % interval (finite for every predictive, a Student-t without a variance
included); for a model with only ``predict(X, return_std=True)`` the Gaussian's at that
std, and for a point predictor ``s = 1`` (absolute residuals). The conformalized
predictive at ``x`` is the empirical distribution of ``m(x) +- s(x) * |score_i|`` over the
calibration rows (symmetric, the default) or of ``m(x) + s(x) * score_i``
(:class:`~skbnngp.distributions.ConformalPredictiveDistribution`).
"""

from __future__ import annotations

import inspect
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    MetaEstimatorMixin,
    RegressorMixin,
    clone,
    is_classifier,
)
from sklearn.model_selection import GroupShuffleSplit, check_cv, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.utils import _safe_indexing, check_array, get_tags
from sklearn.utils.parallel import Parallel, delayed
from sklearn.utils.validation import (
    _num_samples,
    check_consistent_length,
    has_fit_parameter,
    indexable,
)

from ._base import check_n_samples
from ._intervals import central_intervals, check_confidence
from ._rows import check_weights, distinct_rows
from ._student_t import StudentTProcessRegressor
from .distributions import ConformalPredictiveDistribution
from .metrics import _answers_predict_dist, _final_step, predictive_response
from .utils._sklearn_compat import (
    HasMethods,
    Interval,
    StrOptions,
    _fit_context,
    check_is_fitted,
    validate_data,
)


def _default_estimator():
    return StudentTProcessRegressor()


def _check_2d(X):
    """sklearn's "Reshape your data" error for a 1-D ``X``; the wrapped estimator validates
    the rest (a Pipeline may take a DataFrame, which must reach it as one)."""
    if hasattr(X, "iloc") or hasattr(X, "tocsr"):
        return
    if len(getattr(X, "shape", None) or np.shape(np.asarray(X, dtype=object))) == 1:
        check_array(X, dtype=None, ensure_all_finite=False)


#: Half the interquartile range of the unit Gaussian: the scale of a model that gives a
#: standard deviation (``predict(X, return_std=True)``) in the units of the others.
_GAUSSIAN_HALF_IQR = 0.6744897501960817


def score_kind(final):
    """How :func:`predictive_location_scale` reads a fitted model's final estimator (a
    Pipeline's last step, a search's best estimator): ``"predictive"`` (it has
    ``predict_dist``), ``"std"`` (its ``predict`` takes ``return_std``, as scikit-learn's GP
    and Bayesian linear models) or ``"absolute"`` (a point prediction only: unnormalised
    residuals). A ``TransformedTargetRegressor`` or ``MultiOutputRegressor`` around
    regressors with ``predict_dist`` is ``"predictive"`` (see
    :func:`~skbnngp.metrics.predictive_response`)."""
    if _answers_predict_dist(final):
        return "predictive"
    try:
        takes_std = "return_std" in inspect.signature(final.predict).parameters
    except (AttributeError, TypeError, ValueError):
        takes_std = False
    return "std" if takes_std else "absolute"


def predictive_location_scale(estimator, X):
    """``(m, s)`` at ``X``, each of shape (n_samples,) or (n_samples, n_targets): the
    median of ``estimator``'s predictive and half the width of its central 50 % interval
    (floored at the smallest positive float); for a model with only a standard deviation,
    its mean and the Gaussian's half interquartile range at that std; for a point
    predictor, its prediction and 1. ``estimator`` may be a Pipeline."""
    # the final estimator as the metrics resolve it (nested Pipelines, a fitted search's
    # best estimator), with the transforms before it
    final, transform = _final_step(estimator)
    kind, Xt = score_kind(final), transform(X)
    if kind == "absolute":
        loc = np.asarray(final.predict(Xt), dtype=np.float64)
        return loc, np.ones_like(loc)
    if kind == "std":
        loc, std = final.predict(Xt, return_std=True)
        loc = np.asarray(loc, dtype=np.float64)
        scale = _GAUSSIAN_HALF_IQR * np.broadcast_to(np.asarray(std, dtype=np.float64),
                                                     loc.shape)
    else:
        dist = predictive_response(final, Xt)  # wrappers' predictives too
        lo, hi = dist.interval(0.5)
        loc = np.asarray(dist.median(), dtype=np.float64)
        scale = 0.5 * (np.asarray(hi, dtype=np.float64) - np.asarray(lo, dtype=np.float64))
    scale = np.where(np.isfinite(scale), scale, 0.0)  # a point mass: scipy's NaN
    return loc, np.maximum(scale, np.finfo(np.float64).tiny)


def _weight_key(estimator):
    """The ``fit`` keyword that weighs ``estimator``'s rows: ``"sample_weight"``, or
    ``"<step>__sample_weight"`` for a Pipeline whose final step takes it (the earlier steps
    see each row once); None when it takes no weights."""
    if isinstance(estimator, Pipeline):
        name, final = estimator.steps[-1]
        return f"{name}__sample_weight" if has_fit_parameter(final, "sample_weight") else None
    return "sample_weight" if has_fit_parameter(estimator, "sample_weight") else None


def _numeric(X):
    """``X`` as a dense float64 array, or None when it is not one (sparse, strings, ...)."""
    if hasattr(X, "tocsr"):
        return None
    try:
        return check_array(X, dtype=np.float64, ensure_all_finite=False, ensure_2d=True)
    except (TypeError, ValueError):
        return None


def _fit_and_score(base, X, y, train, test, fit_params):
    """A clone of ``base`` fitted on the ``train`` rows and the normalised residuals
    ``(y - m(x)) / s(x)`` of the ``test`` rows under its predictive."""
    model = clone(base).fit(_safe_indexing(X, train), y[train], **fit_params)
    loc, scale = predictive_location_scale(model, _safe_indexing(X, test))
    return model, (y[test] - loc) / scale


class ConformalRegressor(RegressorMixin, MetaEstimatorMixin, BaseEstimator):
    """Conformal predictive distributions around a regressor's own predictive.

    Wraps a regressor (or a Pipeline ending in one) and turns its predictive into a
    conformal predictive system: the central intervals of :meth:`predict_interval` cover a
    new target with probability at least the nominal level in finite samples, whatever the
    model's calibration (for ``method="split"``; see Notes for ``"cv+"``). The scores are
    normalised by the model's own predictive (``predict_dist``: every skbnngp regressor,
    also inside scikit-learn's ``TransformedTargetRegressor`` or ``MultiOutputRegressor``),
    or by its standard deviation (``predict(X, return_std=True)``: scikit-learn's
    ``GaussianProcessRegressor``, ``BayesianRidge``), so that the intervals follow its
    uncertainty; a point predictor gets intervals of one width (absolute residuals).

    Read more in the :ref:`User Guide <intervals>`.

    Parameters
    ----------
    estimator : estimator object, default=None
        The regressor to conformalize (cloned). None uses a
        :class:`~skbnngp.StudentTProcessRegressor` with its defaults, the package's first
        choice for small tables.
    method : {"split", "cv+"}, default="split"
        ``"split"``: fit ``estimator`` on part of the rows and score the rest (one fit; the
        guarantee is exact). ``"cv+"``: fit one model per fold of ``cv`` and score every row
        out of fold (uses every row for both; ``cv`` fits). Split is the default because its
        guarantee holds at the nominal level and it costs a single fit.
    cv : int, cross-validation generator or iterable, default=5
        Folds of ``method="cv+"`` (ignored by ``"split"``); each row must lie in exactly one
        test fold. Five folds keep each model on 80 % of the rows at five fits.
    calibration_size : float in (0, 1) or int, default=0.25
        Rows held out for calibration by ``method="split"`` (a fraction or a count; of
        groups when ``fit`` is given ``groups``). A quarter leaves the model most of the
        rows while a few hundred calibration rows make the 95 % interval stable.
    symmetric : bool, default=True
        True: the intervals are symmetric about the model's median in units of its scale,
        from the absolute normalised residuals; both tails share the calibration rows, so
        the intervals are narrower at the same guaranteed coverage. False: signed
        residuals and equal-tailed intervals, each tail guaranteed to miss at most
        ``(1 - c) / 2``; use it for one-sided bounds or when the residuals are skewed in a
        way the model's predictive does not follow. Symmetric is the default because the
        central interval's coverage is what most users ask for, and pooling the tails
        narrows it most where calibration rows are few.
    n_jobs : int, default=None
        Fold models of ``method="cv+"`` fitted in parallel (joblib; None: one at a time,
        -1: every core); each worker's fits keep to the threads it is given. One at a time by
        default, since a model's own fit already uses the cores it can.
    random_state : int, RandomState instance or None, default=None
        Shuffles the rows before the split of ``method="split"``.

    Attributes
    ----------
    estimators_ : list of estimator
        The fitted models: one (``"split"``) or one per fold (``"cv+"``).
    conformity_scores_ : ndarray of shape (n_calibration,) or (n_calibration, n_targets)
        Signed normalised residuals ``(y - m(x)) / s(x)`` of the calibration rows (every
        row, out of fold, for ``"cv+"``); ``symmetric`` uses their absolute values.
    calibration_indices_ : ndarray of shape (n_calibration,)
        Rows of the training set the scores belong to.
    calibration_weights_ : ndarray of shape (n_calibration,) or None
        Frequency weight of each score (``sample_weight``, repeated rows merged); None when
        every score counts once.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    skbnngp.model_selection.cross_val_predict_dist : out-of-fold predictives of any
        regressor, to check its calibration before conformalizing.

    Notes
    -----
    The predictive ``F`` of the wrapped model gives the location ``m(x)`` (its median) and
    scale ``s(x)`` (half its interquartile range), and each calibration row its score
    ``r_i = (y_i - m(x_i)) / s(x_i)``. A model with only a standard deviation ``sd(x)`` gives
    its mean and ``s(x) = 0.674 sd(x)`` (a Gaussian's half interquartile range), a point
    predictor its prediction and ``s(x) = 1``.

    With ``symmetric=True`` the predictive at ``x`` puts mass ``1 / (2 (n + 1))`` on each of
    ``m(x) - s(x) |r_i|`` and ``m(x) + s(x) |r_i|``; its central interval at level ``c`` is
    ``m(x) +- s(x) q`` with ``q`` the ``ceil((n + 1) c)``-th smallest ``|r_i|`` (infinite
    when that exceeds ``n``: the level needs more calibration rows), which covers
    exchangeable new rows with probability at least ``c`` (the normalised split-conformal
    interval of Lei et al. 2018).

    With ``symmetric=False`` it puts mass ``1 / (n + 1)`` on each ``m(x) + s(x) r_i``; its
    central interval takes the ``floor((n + 1)(1 - c) / 2)``-th and
    ``ceil((n + 1)(1 + c) / 2)``-th smallest of these, so that each tail misses at most
    ``(1 - c) / 2`` (the conformal predictive system of Vovk et al. 2017). Each tail then
    rests on half as many calibration rows, hence the wider intervals.

    With ``"cv+"``, the row ``i`` of fold ``k`` contributes through ``m_k(x)`` and
    ``s_k(x)``, the model that did not see it evaluated at ``x``: the cross-conformal
    predictive distribution, whose central intervals are the CV+ intervals of Barber et al.
    (2021) with normalised scores. Their guaranteed coverage is ``2c - 1`` (0.8 at
    c = 0.9); in practice it is close to ``c``. :meth:`predict` is then the mean of the
    fold models' medians.

    References
    ----------
    V. Vovk, J. Shen, V. Manokhin and M. Xie, "Nonparametric predictive distributions based
    on conformal prediction", COPA 2017. J. Lei et al., "Distribution-free predictive
    inference for regression", JASA 2018. R. F. Barber, E. J. Candes, A. Ramdas and R. J.
    Tibshirani, "Predictive inference with the jackknife+", Ann. Statist. 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp import ConformalRegressor, StudentTProcessRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(120, 2))
    >>> y = X[:, 0] + 0.1 * rng.normal(size=120)
    >>> reg = ConformalRegressor(StudentTProcessRegressor(max_iter=20), random_state=0)
    >>> lower, upper = reg.fit(X, y).predict_interval(X[:3], confidence=0.9)
    >>> lower.shape
    (3,)
    """

    _parameter_constraints = {
        "estimator": [HasMethods(["fit"]), None],
        "method": [StrOptions({"split", "cv+"})],
        "cv": ["cv_object"],
        "calibration_size": [Interval(Real, 0, 1, closed="neither"),
                             Interval(Integral, 1, None, closed="left")],
        "symmetric": ["boolean"],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
    }

    def __init__(self, estimator=None, *, method="split", cv=5, calibration_size=0.25,
                 symmetric=True, n_jobs=None, random_state=None):
        self.estimator = estimator
        self.method = method
        self.cv = cv
        self.calibration_size = calibration_size
        self.symmetric = symmetric
        self.n_jobs = n_jobs
        self.random_state = random_state

    def _base(self):
        return _default_estimator() if self.estimator is None else self.estimator

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y, sample_weight=None, groups=None):
        """Fit the model(s) and score the calibration rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Validated by the wrapped estimator (a Pipeline may take a DataFrame).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None
            Frequency weights: passed to the wrapped estimator's ``fit`` (a Pipeline's final
            step), and each calibration score counts ``w_i`` times in the conformal
            quantiles, so integer weights give the model and intervals of the rows repeated.
            When the wrapped estimator takes weights and ``X`` is numeric, rows of weight 0
            are dropped and repeated ``(x, y)`` rows merged into one weighted row (the rows
            then sorted) before the split, as the package's estimators do (not with
            ``groups``, nor with ``cv`` given as explicit folds, which index the rows as
            they are). None: every row once.
        groups : array-like of shape (n_samples,), default=None
            Group labels: ``method="split"`` holds out whole groups (``calibration_size``
            then counts or shares groups), and ``"cv+"`` passes them to ``cv`` (e.g.
            ``GroupKFold``), so no group is both trained on and scored. Exchangeable groups
            keep the guarantee for a new group.

        Returns
        -------
        self : ConformalRegressor
        """
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target "
                             "y is None.")
        _check_2d(X)
        validate_data(self, X, skip_check_array=True)
        X, y = indexable(X, y)  # rows are indexed below (a sparse X becomes CSR)
        y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
        if y.ndim > 2:
            raise ValueError(f"y must be 1-D or 2-D, got shape {y.shape}.")
        check_consistent_length(X, y)
        if groups is not None:
            groups = check_array(groups, ensure_2d=False, dtype=None, input_name="groups")
            check_consistent_length(X, groups)
        base = self._base()
        if is_classifier(base) or not hasattr(base, "predict"):  # a Pipeline: its last step's
            raise TypeError(f"estimator: {type(base).__name__} is not a regressor; "
                            "ConformalRegressor wraps a regressor (or a Pipeline ending in one).")
        key = _weight_key(base)
        w = check_weights(X, sample_weight)
        if w is not None and key is None:
            raise ValueError(f"sample_weight: the wrapped estimator {type(base).__name__} "
                             "does not take sample_weight in fit.")
        rows = np.arange(_num_samples(X))
        # explicit folds (an iterable of index arrays) and groups name the rows as given
        own_rows = self.method == "split" or isinstance(self.cv, Integral) or hasattr(
            self.cv, "split")
        Xn = _numeric(X) if key == "sample_weight" and groups is None and own_rows else None
        if Xn is not None:  # weights as repeated rows: the package estimators' convention
            index, merged = distinct_rows(Xn, y, w)
            if index is not None:
                rows, w = index, merged
                if rows.size < 2:
                    raise ValueError(f"{type(self).__name__} needs at least 2 distinct rows "
                                     f"of positive sample_weight; got {rows.size}.")
        Xr, yr = _safe_indexing(X, rows), y[rows]
        gr = None if groups is None else groups[rows]
        local = np.arange(rows.size)
        if self.method == "split" and gr is None:
            folds = [tuple(train_test_split(local, test_size=self.calibration_size,
                                            random_state=self.random_state))]
        elif self.method == "split":
            if np.unique(gr).size < 2:
                raise ValueError("groups: method='split' holds out whole groups and needs at "
                                 f"least 2 of them; got {np.unique(gr).size}.")
            folds = list(GroupShuffleSplit(1, test_size=self.calibration_size,
                                           random_state=self.random_state).split(
                local, groups=gr))
        else:
            folds = list(check_cv(self.cv).split(Xr, yr, gr))
            tested = np.concatenate([test for _, test in folds])
            if not np.array_equal(np.sort(tested), local):
                raise ValueError("cv must put every row in exactly one test fold for "
                                 "method='cv+' (e.g. KFold); got folds that do not.")
        fits = Parallel(n_jobs=self.n_jobs if len(folds) > 1 else None)(
            delayed(_fit_and_score)(base, Xr, yr, train, test,
                                    {} if w is None else {key: w[train]})
            for train, test in folds)
        fitted = [model for model, _ in fits]
        scores = [score for _, score in fits]
        fold_of = [np.full(test.size, k) for k, (_, test) in enumerate(folds)]
        order = np.concatenate([test for _, test in folds])
        if w is not None and not w[order].sum() > 0:
            raise ValueError("sample_weight: every calibration row has weight 0; no score "
                             "is left to calibrate with.")
        self.estimators_ = fitted
        self.calibration_indices_ = rows[order]
        self.calibration_weights_ = None if w is None else w[order]
        self.conformity_scores_ = np.concatenate(scores)
        self._fold_of = np.concatenate(fold_of)
        self._symmetric = bool(self.symmetric)
        return self

    def _location_scales(self, X):
        check_is_fitted(self)
        _check_2d(X)
        validate_data(self, X, reset=False, skip_check_array=True)
        return [predictive_location_scale(model, X) for model in self.estimators_]

    def predict(self, X, return_std=False):
        """Median of the conformalized predictive's model: the wrapped model's median (its
        mean or prediction when it has no ``predict_dist``; ``"split"``), or the mean of the
        fold models' (``"cv+"``); optionally the conformal predictive's standard deviation.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return :meth:`predict_std`, as scikit-learn's ``BayesianRidge`` does. There
            is no ``return_cov``: a conformal predictive is a distribution per row, with no
            joint covariance between rows.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_targets)
        y_std : ndarray of shape (n_samples,) or (n_samples, n_targets), optional
        """
        parts = self._location_scales(X)
        y_pred = np.mean([loc for loc, _ in parts], axis=0)
        if not return_std:
            return y_pred
        return y_pred, self._dist(parts).std()

    def predict_std(self, X):
        """Standard deviation of the conformal predictive's candidate values at ``X``.

        The conformal predictive also puts mass ``1 / (2 (n + 1))`` at each of -inf and +inf
        (the levels its ``n`` calibration scores cannot bound); the std leaves that mass out,
        so it is finite: the spread of the candidate values, each with its own weight.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        std : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        return self._dist(self._location_scales(X)).std()

    def predict_dist(self, X):
        """Conformal predictive distribution of y at ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        dist : ConformalPredictiveDistribution
            Batch shape (n_samples,) or (n_samples, n_targets), ``n_calibration`` candidate
            values per entry, twice that when ``symmetric`` (memory: n_samples x
            n_calibration per target, or twice); it has ``cdf``, ``ppf``, ``interval``,
            ``median``, ``mean``, ``std`` and ``rvs``.
        """
        return self._dist(self._location_scales(X))

    def _dist(self, parts):
        """The conformal predictive from each fitted model's ``(location, scale)``."""
        scores = np.moveaxis(self.conformity_scores_, 0, -1)  # (n,) or (n_targets, n)
        n = scores.shape[-1]
        # each score with the location and scale of the model that did not see its row
        loc, scale = (np.stack(a, axis=-1)[..., self._fold_of] for a in zip(*parts))
        weights = self.calibration_weights_
        if not self._symmetric:  # as fitted, whatever set_params did since
            return ConformalPredictiveDistribution(loc + scale * scores, weights=weights)
        spread = scale * np.abs(scores)
        return ConformalPredictiveDistribution(
            np.concatenate([loc - spread, loc + spread], axis=-1), n_calibration=n,
            weights=weights)

    def sample_y(self, X, n_samples=1, random_state=0):
        """Draw samples of y at ``X`` from the conformal predictive, row by row.

        A conformal predictive is a distribution per row with no joint law across rows, so
        the rows are drawn independently (unlike the wrapped regressors' joint draws): each
        draw is one of the row's candidate values, in proportion to its weight
        (:meth:`ConformalPredictiveDistribution.rvs`). The mass the calibration scores
        cannot bound (``1 / (2 (n + 1))`` at each of -inf and +inf) is left out, so every
        draw is finite.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Number of draws per row.
        random_state : int, RandomState instance or None, default=0
            Seeds the draws (as in scikit-learn's ``GaussianProcessRegressor.sample_y``).

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_targets,
            n_samples)
        """
        n_samples = check_n_samples(n_samples)
        draws = self.predict_dist(X).rvs(size=n_samples, random_state=random_state)
        return np.moveaxis(draws, 0, -1)

    def predict_interval(self, X, confidence=0.9):
        """Central conformal intervals of y at ``X``, at one level or several.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        confidence : float in (0, 1) or sequence of floats in (0, 1), default=0.9
            Probability mass of each central interval, as for the wrapped regressors.

        Returns
        -------
        lower, upper : ndarray of shape (n_samples,) or (n_samples, n_targets)
            For one level; a sequence of ``n_levels`` levels adds a trailing axis:
            (n_samples, n_levels) or (n_samples, n_targets, n_levels). A bound is infinite
            where the level needs more calibration rows (``c > n / (n + 1)`` when
            ``symmetric``, else ``c > 1 - 2 / (n + 1)``; ``n`` the scores' total weight).
        """
        levels, _ = check_confidence(confidence)
        dist = self.predict_dist(X)
        n, need = dist.total_weight, dist.rows_needed(levels)
        if np.any(need > n):
            # a cv+ fit (one model per fold) already scores every row
            fix = ("more rows or a lower confidence" if len(self.estimators_) > 1 else
                   "more rows, a larger calibration_size or method='cv+'")
            warnings.warn(
                f"{type(self).__name__}: {n:.10g} calibration scores cannot bound a central "
                f"{levels[need > n].max():g} interval (it needs {need.max()}), so its bounds "
                f"are infinite; use {fix}.", UserWarning, stacklevel=2)
        return central_intervals(dist, confidence)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        inner = get_tags(self._base())
        tags.input_tags.sparse = inner.input_tags.sparse
        tags.input_tags.allow_nan = inner.input_tags.allow_nan
        tags.non_deterministic = inner.non_deterministic
        if inner.regressor_tags is not None:
            tags.regressor_tags.poor_score = inner.regressor_tags.poor_score
        return tags
