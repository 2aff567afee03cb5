"""Out-of-fold predictive distributions, to check a regressor's calibration on your data.

:func:`cross_val_predict_dist` is :func:`sklearn.model_selection.cross_val_predict` for
predictive distributions: each row's predictive comes from the model that did not see it,
so any metric of :mod:`skbnngp.metrics` on it is an honest estimate, in one line::

    dist = cross_val_predict_dist(StudentTProcessRegressor(), X, y, cv=5)
    regression_calibration_error(y, dist)
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from scipy import stats
from sklearn.base import clone, is_classifier
from sklearn.model_selection import check_cv
from sklearn.model_selection._search import BaseSearchCV
from sklearn.utils import _safe_indexing, check_array
from sklearn.utils.parallel import Parallel, delayed
from sklearn.utils.validation import _num_samples, check_consistent_length

from .distributions import OutOfFoldDistribution, _scipy_frozen_params
from .metrics import _final_step, _is_per_target, _is_target_transform, predictive_response
from .utils._sklearn_compat import HasMethods, _check_method_params, validate_params

__all__ = ["cross_val_predict_dist"]


def _merge(parts, rows, n):
    """One scipy ``norm``/``t`` over all rows when every fold's predictive is of that family
    (so the metrics' closed forms apply), else None."""
    forms = [_scipy_frozen_params(p) for p in parts]
    if any(f is None for f in forms) or len({f[0] for f in forms}) != 1:
        return None
    family = forms[0][0]
    params = {}
    for key in forms[0][1]:
        shape = (n,) + np.shape(parts[0].mean())[1:]
        out = np.empty(shape)
        for (_, p), r, part in zip(forms, rows, parts):
            out[r] = np.broadcast_to(p[key], np.shape(part.mean()))
        params[key] = out
    return getattr(stats, family)(**params)


def _unfitted_final(estimator):
    """The estimator whose ``predict_dist`` a fitted ``estimator`` would answer with: the
    metrics' final step (a Pipeline's last, a fitted search's best), or an unfitted
    search's ``estimator``."""
    final = _final_step(estimator)[0]
    if isinstance(final, BaseSearchCV) and not hasattr(final, "predict_dist"):
        return _unfitted_final(final.estimator)
    if _is_target_transform(final) and final.regressor is not None:
        return _unfitted_final(final.regressor)  # its regressor's predictive, mapped to y
    if _is_per_target(final):
        return _unfitted_final(final.estimator)  # its regressors' predictives, stacked
    return final


def _fold_predictive(estimator, X, y, train, test, params):
    """The predictive at the ``test`` rows of ``estimator`` fitted on the ``train`` rows."""
    fit_params = _check_method_params(X, params=params or {}, indices=train)
    model = clone(estimator).fit(_safe_indexing(X, train), y[train], **fit_params)
    return predictive_response(model, _safe_indexing(X, test))


@validate_params(
    {"estimator": [HasMethods(["fit"])], "X": ["array-like", "sparse matrix"],
     "y": ["array-like"], "groups": ["array-like", None], "cv": ["cv_object"],
     "n_jobs": [Integral, None], "params": [dict, None]},
    prefer_skip_nested_validation=False,
)
def cross_val_predict_dist(estimator, X, y, *, groups=None, cv=5, n_jobs=None, params=None):
    """Each row's out-of-fold predictive distribution.

    Every fold of ``cv`` fits a clone of ``estimator`` on the other rows and predicts its
    own rows with ``predict_dist`` (through a Pipeline's transforms when ``estimator`` is a
    Pipeline, as :func:`~skbnngp.metrics.predictive_response` does).

    Parameters
    ----------
    estimator : estimator object
        A regressor with ``predict_dist``, or a Pipeline ending in one, or scikit-learn's
        ``TransformedTargetRegressor`` or ``MultiOutputRegressor`` around one (see
        :func:`~skbnngp.metrics.predictive_response`).
    X : array-like of shape (n_samples, n_features)
    y : array-like of shape (n_samples,) or (n_samples, n_targets)
    groups : array-like of shape (n_samples,), default=None
        Group labels of the rows, for a group splitter such as ``GroupKFold``.
    cv : int, cross-validation generator or iterable, default=5
        As in :func:`sklearn.model_selection.cross_val_predict`; each row must lie in
        exactly one test fold. Five folds, sklearn's default, fit each model on 80 % of
        the rows.
    n_jobs : int, default=None
        Folds fitted in parallel (joblib; None: one at a time, -1: every core). Each
        worker's fits keep to the threads it is given (see the User Guide on threads).
    params : dict, default=None
        Parameters of ``estimator.fit``; those of one value per row (``sample_weight``, or
        a Pipeline's ``<step>__sample_weight``) are cut to each fold's training rows.

    Returns
    -------
    dist : frozen distribution of batch shape (n_samples,) or (n_samples, n_targets)
        A scipy ``norm`` or ``t`` (per-row ``df``) when every fold's predictive is of that
        family, else an :class:`~skbnngp.distributions.OutOfFoldDistribution`. Either
        has ``cdf``, ``ppf``, ``interval``, ``mean``, ``median`` and ``std``, so every
        metric of :mod:`skbnngp.metrics` takes it with ``y``.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp import StudentTProcessRegressor
    >>> from skbnngp.metrics import interval_coverage
    >>> from skbnngp.model_selection import cross_val_predict_dist
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(90, 2))
    >>> y = X[:, 0] + 0.1 * rng.normal(size=90)
    >>> dist = cross_val_predict_dist(StudentTProcessRegressor(max_iter=20), X, y, cv=3)
    >>> dist.mean().shape
    (90,)
    >>> 0 <= interval_coverage(y, dist, 0.9) <= 1
    True
    """
    if is_classifier(estimator):
        raise TypeError(f"estimator must be a regressor with predict_dist, got the classifier "
                        f"{type(estimator).__name__}.")
    final = _unfitted_final(estimator)
    if not callable(getattr(final, "predict_dist", None)):
        inner = "" if final is estimator else f" (the final step of {type(estimator).__name__})"
        raise TypeError(f"estimator must give a predictive distribution: {type(final).__name__}"
                        f"{inner} has no predict_dist(X). skbnngp.ConformalRegressor("
                        f"{type(final).__name__}(...)) gives one to any regressor.")
    y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
    check_consistent_length(X, y)
    n = _num_samples(X)
    folds = list(check_cv(cv, y, classifier=False).split(X, y, groups))
    tested = np.concatenate([test for _, test in folds])
    if not np.array_equal(np.sort(tested), np.arange(n)):
        raise ValueError("cv must put every row in exactly one test fold (e.g. KFold); got "
                         "folds that do not.")
    parts = Parallel(n_jobs=n_jobs)(
        delayed(_fold_predictive)(estimator, X, y, train, test, params)
        for train, test in folds)
    rows = [test for _, test in folds]
    merged = _merge(parts, rows, n)
    return OutOfFoldDistribution(parts, rows) if merged is None else merged
