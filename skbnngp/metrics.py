"""Scores for predictive distributions and probabilistic classifiers.

Regression metrics take ``y_true`` and the object returned by ``predict_dist(X)``: a frozen
:mod:`scipy.stats` distribution (``norm`` or ``t``, vectorised over the samples) or any object
with the same methods (``logpdf``, ``cdf``, ``ppf``, ``interval``, ...), such as
:class:`skbnngp.distributions.ScaleMixtureNormal`. ``y_true`` has the distribution's batch
shape, ``(n_samples,)`` or ``(n_samples, n_targets)``.

Every metric also exists as a scorer for :class:`~sklearn.model_selection.GridSearchCV` and
:func:`~sklearn.model_selection.cross_val_score`. Scorers follow scikit-learn's sign convention:
greater is better, so losses are negated and prefixed ``neg_`` (``neg_nlpd_scorer`` returns
``-nlpd``). :func:`get_scorer` resolves names such as ``"neg_nlpd"`` or
``"neg_coverage_error_95"`` and falls back to :func:`sklearn.metrics.get_scorer` for every
other name. Scorers accept a Pipeline or a fitted search as well as an estimator
(:func:`predictive_response`), and raise instead of returning NaN.

A predictive with zero spread (a Gaussian or Student-t with ``scale = 0``, a
:class:`~skbnngp.distributions.ScaleMixtureNormal` with ``base_scale = 0``) is read as a point
mass at its location ``mu``, consistently in every metric: its CRPS is ``|y - mu|``; its
central intervals are ``[mu, mu]``, of width 0, and cover ``y`` only where ``y == mu`` exactly;
its NLPD is ``+inf`` where ``y != mu`` (the forecast ruled out what happened) and ``-inf``
where ``y == mu`` (an infinite density). A mean over entries that contains ``+inf`` is
``+inf``; one that contains ``-inf`` but no ``+inf`` is ``-inf`` (entries of zero weight do
not count).
"""

from __future__ import annotations

import re
from numbers import Integral, Real

import numpy as np
from scipy import special, stats
from sklearn.metrics import get_scorer as _sklearn_get_scorer
from sklearn.metrics import get_scorer_names as _sklearn_get_scorer_names
from sklearn.metrics import roc_auc_score
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from .distributions import (
    _SCIPY_PARAMS,
    ConformalPredictiveDistribution,
    OutOfFoldDistribution,
    ScaleMixtureNormal,
    StackedDistribution,
    TransformedDistribution,
    _dist_shape,
    _scipy_frozen_params,
    _stacked,
    _transformed,
)
from .utils._sklearn_compat import HasMethods, Interval, StrOptions, validate_params

__all__ = [
    "nlpd",
    "crps",
    "interval_coverage",
    "coverage_error",
    "predictive_response",
    "interval_width",
    "regression_calibration_error",
    "calibration_curve_regression",
    "expected_calibration_error",
    "ood_auroc",
    "make_predictive_scorer",
    "neg_nlpd_scorer",
    "neg_crps_scorer",
    "neg_coverage_error_scorer",
    "neg_interval_width_scorer",
    "neg_calibration_error_scorer",
    "neg_ece_scorer",
    "get_scorer",
    "get_scorer_names",
]

_MULTIOUTPUT = [StrOptions({"raw_values", "uniform_average"})]
_CONFIDENCE = [Interval(Real, 0, 1, closed="neither")]
# Probability levels whose quantiles are the panel edges of the numerical CRPS quadrature.
_CRPS_LEVELS = np.array([0.005, 0.05, 0.25, 0.5, 0.75, 0.95, 0.995])
_EVAL_BLOCK = 2**21  # quadrature points x batch elements evaluated per ``cdf`` call


# ============================================================================ input handling
def _check_y_dist(y_true, dist):
    """Validate ``y_true`` and bring it to the batch shape of ``dist``."""
    y = check_array(y_true, ensure_2d=False, dtype=np.float64, input_name="y_true")
    shape = _dist_shape(dist)
    if shape == () or y.shape == shape:
        return y
    if y.size == int(np.prod(shape)) and {y.ndim, len(shape)} == {1, 2} and (
            y.shape[0] == shape[0]):
        return y.reshape(shape)  # (n,) against (n, 1) or the other way round
    raise ValueError(
        f"y_true has shape {y.shape} but the predictive distribution `dist` has batch shape "
        f"{shape}; they must match (one distribution per entry of y_true).")


def _check_weights(sample_weight, n, name="sample_weight"):
    if sample_weight is None:
        return None
    w = check_array(sample_weight, ensure_2d=False, dtype=np.float64, input_name=name)
    if w.shape != (n,):
        raise ValueError(f"{name} has shape {w.shape}, expected ({n},).")
    if np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"{name} must be non-negative with a positive sum.")
    return w


def _finite_or_raise(values, what):
    values = np.asarray(values, dtype=np.float64)
    if np.any(np.isnan(values)):
        raise ValueError(
            f"{what} returned NaN; check the parameters of the predictive distribution `dist` "
            "(e.g. a negative or NaN scale).")
    return values


def _mean(values, weights=None, axis=0):
    """Weighted mean along ``axis`` in which ``+inf`` wins over ``-inf`` (never NaN from
    ``inf - inf``) and entries of zero weight are left out."""
    values = np.moveaxis(np.asarray(values, dtype=np.float64), axis, 0)
    if np.all(np.isfinite(values)):
        return np.average(values, axis=0, weights=weights)
    live = np.ones(values.shape[0], dtype=bool) if weights is None else weights > 0
    counted = values[live]
    finite = np.where(np.isfinite(values), values, 0.0)
    out = np.average(finite, axis=0, weights=weights)
    out = np.where(np.any(counted == -np.inf, axis=0), -np.inf, out)
    out = np.where(np.any(counted == np.inf, axis=0), np.inf, out)
    return np.where(np.any(np.isnan(counted), axis=0), np.nan, out)


def _aggregate(values, y, sample_weight, multioutput):
    """Average per-entry scores over samples (weighted), then over targets."""
    values = np.broadcast_to(values, y.shape)
    n = y.shape[0] if y.ndim else 1
    w = _check_weights(sample_weight, n)
    per_target = np.atleast_1d(_mean(values.reshape(n, -1), w))
    if multioutput == "raw_values":
        return per_target
    return float(_mean(per_target))


def _point_mass(dist, shape):
    """``(mask, loc)`` broadcast to ``shape``: the entries of a closed-form predictive whose
    scale is 0 (point masses at ``loc``), or None when there are none."""
    form = _closed_form(dist)
    if form is None:
        return None
    family, params = form
    scale = params["base_scale"] if family == "scale_mixture_norm" else params["scale"]
    try:
        mask = np.broadcast_to(np.asarray(scale, dtype=np.float64) == 0, shape)
        if not mask.any():
            return None
        loc = np.broadcast_to(np.asarray(params["loc"], dtype=np.float64), shape)
    except ValueError:  # shapes that do not broadcast: the caller's own checks report them
        return None
    return mask, loc


# ============================================================================ closed forms
def _closed_form(dist):
    """Recognise distributions whose CRPS has a closed form.

    Returns ``(family, params)`` with family ``"norm"``, ``"t"`` or ``"scale_mixture_norm"``,
    or None. Besides scipy frozen objects, a package object may declare itself with a
    ``family`` attribute (``"norm"`` or ``"t"``) plus ``loc``, ``scale`` (and ``df``).
    """
    frozen = _scipy_frozen_params(dist)
    if frozen is not None:
        return frozen
    if isinstance(dist, ScaleMixtureNormal):
        return "scale_mixture_norm", {
            "loc": dist.loc, "base_scale": dist.base_scale,
            "scales": dist.scales, "weights": dist.weights}
    family = getattr(dist, "family", None)
    if family in _SCIPY_PARAMS:
        try:
            return family, {k: np.asarray(getattr(dist, k), dtype=np.float64)
                            for k in _SCIPY_PARAMS[family]}
        except AttributeError:
            return None
    return None


def _check_closed_form_params(family, params):
    scale = params["base_scale"] if family == "scale_mixture_norm" else params["scale"]
    if np.any(np.isnan(scale)) or np.any(scale < 0):
        raise ValueError("The predictive distribution `dist` has a NaN or negative scale.")
    if family == "t" and (np.any(np.isnan(params["df"])) or np.any(params["df"] <= 0)):
        raise ValueError("The predictive distribution `dist` has NaN or non-positive df.")


def _crps_norm(y, loc, scale):
    """Gneiting & Raftery (2007), eq. (21): s [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (y - loc) / scale
        out = scale * (z * (2 * special.ndtr(z) - 1) + 2 * stats.norm.pdf(z) - 1 / np.sqrt(np.pi))
    # A point mass (scale 0) scores |y - loc|.
    return np.where(scale == 0, np.abs(y - loc), out)


def _crps_t(y, df, loc, scale):
    """CRPS of a location-scale Student-t with df > 1 (Jordan, Krueger & Lerch 2019, eq. 13).

    ``s [z (2 F(z) - 1) + 2 f(z) (df + z^2) / (df - 1)
    - 2 sqrt(df) B(1/2, df - 1/2) / ((df - 1) B(1/2, df/2)^2)]`` with ``z = (y - loc) / s``
    and F, f the standard t cdf and pdf; ``df = inf`` is the Gaussian.
    """
    y, df, loc, scale = np.broadcast_arrays(y, df, loc, scale)
    gauss = ~np.isfinite(df)
    dfc = np.where(gauss, 2.0, df)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (y - loc) / scale
        const = 2 * np.sqrt(dfc) / (dfc - 1) * np.exp(
            special.betaln(0.5, dfc - 0.5) - 2 * special.betaln(0.5, dfc / 2))
        out = scale * (z * (2 * special.stdtr(dfc, z) - 1)
                       + 2 * stats.t.pdf(z, dfc) * (dfc + z**2) / (dfc - 1) - const)
    out = np.where(scale == 0, np.abs(y - loc), out)
    return np.where(gauss, _crps_norm(y, loc, scale), out)


def _crps_scale_mixture_norm(y, loc, base_scale, scales, weights):
    """CRPS of ``sum_i w_i N(loc, s_i b^2)`` via ``E|X - y| - E|X - X'| / 2`` (Grimit et al. 2006).

    With ``A(m, v) = E|N(m, v)| = m (2 Phi(m / sqrt v) - 1) + 2 sqrt(v) phi(m / sqrt v)`` the
    score is ``sum_i w_i A(y - loc, s_i b^2) - b sqrt(2 / pi) / 2 sum_ij w_i w_j sqrt(s_i + s_j)``
    because the components share the location.
    """
    y = np.broadcast_to(y, loc.shape).ravel()
    mu, b = loc.ravel(), base_scale.ravel()
    sd = np.sqrt(scales)
    step = max(1, _EVAL_BLOCK // scales.size)
    spread = sum(float(weights[i:i + step] @ np.sqrt(scales[i:i + step, None] + scales[None, :])
                       @ weights) for i in range(0, scales.size, step))
    spread *= np.sqrt(2 / np.pi) / 2
    first = np.empty_like(mu)
    for start in range(0, mu.size, step):
        sl = slice(start, start + step)
        dev = np.abs(y[sl] - mu[sl])
        sig = b[sl][None, :] * sd[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(sig > 0, dev / sig, np.inf)
            a = np.where(sig > 0, dev * (2 * special.ndtr(r) - 1)
                         + 2 * sig * stats.norm.pdf(r), dev)
        first[sl] = weights @ a
    return (first - spread * b).reshape(loc.shape)


# ============================================================================ quadrature
def _eval_cdf(dist, z, batch_shape):
    """``dist.cdf`` at ``z`` of shape ``(m, *batch_shape)``, in blocks of quadrature points.

    Objects whose ``cdf`` does not broadcast a leading axis are called one point at a time.
    """
    m = z.shape[0]
    block = max(1, _EVAL_BLOCK // max(1, int(np.prod(batch_shape))))
    out = np.empty(z.shape)
    for start in range(0, m, block):
        zz = z[start:start + block]
        try:
            val = np.asarray(dist.cdf(zz), dtype=np.float64)
            ok = val.shape == zz.shape
        except (ValueError, TypeError):
            ok = False
        if not ok:
            val = np.stack([np.broadcast_to(np.asarray(dist.cdf(zi), dtype=np.float64),
                                            batch_shape) for zi in zz])
        out[start:start + block] = val
    return out


def _gauss_legendre01(n):
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1), 0.5 * w


def _crps_numerical(y, dist, n_nodes):
    """CRPS by quadrature of ``int (F(z) - 1{z >= y})^2 dz`` using ``dist.cdf`` (and ``ppf``).

    The real line is cut at the quantiles q_1 < ... < q_J of ``_CRPS_LEVELS`` and at y
    (clipped to [q_1, q_J]). Each finite panel gets ``n_nodes`` Gauss-Legendre points. Each tail
    beyond q_1 (or q_J) is written exactly, e.g. on the right
    ``int_{q_J}^inf (1 - F)^2 + (y - q_J)_+ - 2 int_{q_J}^{max(y, q_J)} (1 - F)``, so that only
    decaying tail functions are integrated. These integrals use the map
    ``z = q_J + c (t / (1 - t))^2``, t in [0, 1), with ``2 n_nodes`` Gauss-Legendre points and
    c the spread of the 99 % central interval in units of a Gaussian's.
    """
    shape = y.shape  # y is broadcast to the batch shape already
    quant = np.stack([np.broadcast_to(np.asarray(dist.ppf(p), dtype=np.float64), shape)
                      for p in _CRPS_LEVELS])
    if not np.all(np.isfinite(quant)):
        raise ValueError(
            "The quantiles of the predictive distribution `dist` are not finite; numerical CRPS "
            "needs dist.ppf(q) finite for q in (0, 1).")
    q_lo, q_hi = quant[0], quant[-1]
    c = (q_hi - q_lo) / (2 * special.ndtri(_CRPS_LEVELS[-1]))
    c_safe = np.where(c > 0, c, 1.0)
    y_clip = np.clip(y, q_lo, q_hi)

    # ---- body: panels between consecutive edges {q_1, ..., q_J, clip(y)}
    edges = np.sort(np.concatenate([quant, y_clip[None]]), axis=0)
    a, b = edges[:-1], edges[1:]
    x, w = _gauss_legendre01(n_nodes)
    expand = (-1,) + (1,) * (a.ndim)
    z = a[None] + (b - a)[None] * x.reshape(expand)
    f = _eval_cdf(dist, z.reshape((-1,) + shape), shape).reshape(z.shape)
    right_of_y = (a >= y_clip)[None]
    h = np.where(right_of_y, (1 - f) ** 2, f**2)
    body = np.sum(h * w.reshape(expand) * (b - a)[None], axis=(0, 1))

    # ---- tails
    t, wt = _gauss_legendre01(2 * n_nodes)
    t = t.reshape((-1,) + (1,) * len(shape))
    wt = wt.reshape(t.shape)

    def tail(start, sign, fn, upto=None):
        # int over z from ``start`` outwards (sign -1: to the left) of fn(F(z)),
        # up to distance ``upto`` (None: to infinity), with z = start + sign c (t/(1-t))^2.
        if upto is None:
            tt, ww = t, wt
        else:
            r = np.sqrt(upto / c_safe)
            t_max = r / (1 + r)
            tt, ww = t * t_max, wt * t_max
        r = tt / (1 - tt)
        zz = start + sign * c_safe * r**2
        dz = 2 * r / (1 - tt) ** 2
        vals = fn(_eval_cdf(dist, np.broadcast_to(zz, (t.shape[0],) + shape), shape))
        return np.where(c > 0, c_safe * np.sum(vals * dz * ww, axis=0), 0.0)

    below = np.maximum(q_lo - y, 0)
    above = np.maximum(y - q_hi, 0)
    left = (tail(q_lo, -1, np.square) + below
            - 2 * np.where(below > 0, tail(q_lo, -1, lambda F: F, below), 0.0))
    right = (tail(q_hi, 1, lambda F: (1 - F) ** 2) + above
             - 2 * np.where(above > 0, tail(q_hi, 1, lambda F: 1 - F, above), 0.0))
    return left + body + right


# ============================================================================ regression metrics
@validate_params(
    {"y_true": ["array-like"], "dist": [HasMethods(["logpdf"])],
     "sample_weight": ["array-like", None], "multioutput": _MULTIOUTPUT},
    prefer_skip_nested_validation=True,
)
def nlpd(y_true, dist, *, sample_weight=None, multioutput="uniform_average"):
    """Mean negative log predictive density, ``-mean(dist.logpdf(y_true))``.

    Lower is better. It is in the units of ``y_true`` (a log-density), so rescaling y by a
    factor ``a`` shifts it by ``log a``. An entry with zero predictive spread is a point mass
    (see the module notes): ``+inf`` where ``y`` differs from its location, ``-inf`` where it
    equals it exactly, and the mean is ``+inf`` as soon as one entry is.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        Observed targets.
    dist : predictive distribution
        Object with a vectorised ``logpdf`` and batch shape equal to ``y_true``'s, e.g. the
        return value of ``predict_dist(X)``.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the samples.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        ``"raw_values"`` returns one value per target.

    Returns
    -------
    score : float or ndarray of shape (n_targets,)

    See Also
    --------
    crps : A proper score that is less sensitive to outliers than the NLPD.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import stats
    >>> from skbnngp.metrics import nlpd
    >>> nlpd(np.zeros(3), stats.norm(np.zeros(3), 1.0))  # 0.5 * log(2 pi)
    0.9189...
    """
    y = _check_y_dist(y_true, dist)
    point = _point_mass(dist, y.shape)
    if point is None:
        values = _finite_or_raise(dist.logpdf(y), "dist.logpdf")
    else:  # -log density of a point mass: -inf at its location, +inf elsewhere
        mask, loc = point
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.broadcast_to(np.asarray(dist.logpdf(y), dtype=np.float64), y.shape)
        values = np.where(mask, np.where(y == loc, np.inf, -np.inf), values)
        _finite_or_raise(values[~mask], "dist.logpdf")
    return _aggregate(-values, y, sample_weight, multioutput)


@validate_params(
    {"y_true": ["array-like"], "dist": [HasMethods(["cdf"])],
     "sample_weight": ["array-like", None], "multioutput": _MULTIOUTPUT,
     "method": [StrOptions({"auto", "closed_form", "numerical"})],
     "n_nodes": [Interval(Integral, 2, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def crps(y_true, dist, *, sample_weight=None, multioutput="uniform_average", method="auto",
         n_nodes=16):
    r"""Mean continuous ranked probability score.

    ``CRPS(F, y) = int (F(z) - 1{z >= y})^2 dz``, in the units of y; lower is better and a
    point forecast ``mu`` scores ``|y - mu|``.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        Observed targets.
    dist : predictive distribution
        Object with a vectorised ``cdf`` (and ``ppf`` for the numerical path) whose batch shape
        equals ``y_true``'s.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the samples.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        ``"raw_values"`` returns one value per target.
    method : {"auto", "closed_form", "numerical"}, default="auto"
        ``"auto"`` uses a closed form when one is known (Gaussian, Student-t with df > 1,
        :class:`~skbnngp.distributions.ScaleMixtureNormal`) and quadrature otherwise.
        ``"closed_form"`` raises ``ValueError`` when there is none.
    n_nodes : int, default=16
        Gauss-Legendre points per panel of the numerical integral (see Notes).

    Returns
    -------
    score : float or ndarray of shape (n_targets,)

    See Also
    --------
    nlpd : Negative log predictive density.

    Notes
    -----
    Closed forms, with ``z = (y - mu) / s``:

    * Gaussian (Gneiting & Raftery 2007): ``s [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]``.
    * Student-t, df > 1 (Jordan, Krueger & Lerch 2019): ``s [z (2 F(z) - 1)
      + 2 f(z) (df + z^2)/(df - 1) - 2 sqrt(df) B(1/2, df - 1/2) / ((df - 1) B(1/2, df/2)^2)]``.
    * A scale mixture of Gaussians sharing one location: ``E|X - y| - E|X - X'| / 2``.
    * A :class:`~skbnngp.distributions.ConformalPredictiveDistribution`: the same formula
      over its candidate values. Its masses at ``-inf`` and ``+inf`` are left out, as in its
      ``mean`` and ``std``; with them the integral diverges, so ``method="numerical"``
      raises.

    Anything else (including Student-t with df <= 1, whose CRPS is finite for df > 1/2 but has
    no closed form here) is integrated numerically: the line is cut at the 0.5, 5, 25, 50, 75,
    95 and 99.5 % quantiles and at y; each panel gets ``n_nodes`` Gauss-Legendre points, and
    the two tails are mapped to [0, 1) and get ``2 * n_nodes`` points. That is
    ``8 n_nodes + 8 n_nodes`` cdf evaluations and 7 ``ppf`` calls per entry. With the default
    16 nodes the relative error is below 1e-8 for Gaussians, Student-t with df >= 1 and
    unimodal or overlapping mixtures, for y up to 1e4 scales from the centre (the tests check
    1e-8 against the closed forms and adaptive quadrature); it is about 1e-6 for
    1/2 < df < 1. Mixtures of well-separated components much narrower than their separation
    converge slowly (relative errors of 1e-4 to 1e-3 at 16 nodes): raise ``n_nodes`` for
    those.

    References
    ----------
    .. [1] Gneiting, T. and Raftery, A. E. (2007). Strictly proper scoring rules, prediction,
       and estimation. JASA 102(477), 359-378.
    .. [2] Jordan, A., Krueger, F. and Lerch, S. (2019). Evaluating probabilistic forecasts with
       scoringRules. Journal of Statistical Software 90(12).
    .. [3] Grimit, E. P. et al. (2006). The continuous ranked probability score for circular
       variables and its application to mesoscale forecast ensemble verification. QJRMS 132.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import stats
    >>> from skbnngp.metrics import crps
    >>> crps(np.zeros(2), stats.norm(np.zeros(2), 1.0))  # (sqrt(2) - 1) / sqrt(pi)
    0.2336...
    >>> crps(np.zeros(2), stats.t(3.0, np.zeros(2), 1.0), method="numerical")
    0.2...
    """
    y = _check_y_dist(y_true, dist)
    values = _finite_or_raise(_crps_values(y, dist, method, n_nodes), "The CRPS of `dist`")
    return _aggregate(values, y, sample_weight, multioutput)


def _crps_values(y, dist, method, n_nodes):
    """The CRPS of every entry (``y`` already of ``dist``'s batch shape); an out-of-fold
    union is scored part by part, each part by its own closed form where it has one."""
    if isinstance(dist, StackedDistribution):  # each target by its own part's rule
        y = np.broadcast_to(y, np.broadcast_shapes(y.shape, dist.shape))
        return np.stack([_crps_values(y[..., j], part, method, n_nodes)
                         for j, part in enumerate(dist.parts)], axis=-1)
    if isinstance(dist, TransformedDistribution) and isinstance(
            dist.base, ConformalPredictiveDistribution) and method != "numerical":
        # the candidate values mapped through the inverse transform, as for the base
        base = dist.base
        mapped = np.moveaxis(dist.inverse(np.moveaxis(base.points, -1, 0)), 0, -1)
        order = np.argsort(mapped, axis=-1, kind="stable")
        weights = None if base.weights is None else np.take_along_axis(
            np.broadcast_to(base.weights, mapped.shape), order, axis=-1)
        return _crps_points(np.broadcast_to(y, _broadcast(y, dist)),
                            np.take_along_axis(mapped, order, axis=-1), weights)
    if isinstance(dist, OutOfFoldDistribution):
        values = np.empty(np.broadcast_shapes(y.shape, dist.shape))
        y = np.broadcast_to(y, values.shape)
        for part, rows in zip(dist.parts, dist.rows):
            values[rows] = _crps_values(y[rows], part, method, n_nodes)
        return values
    if isinstance(dist, ConformalPredictiveDistribution):
        if method == "numerical":
            raise ValueError(
                "A ConformalPredictiveDistribution keeps mass at -inf and +inf, so the CRPS "
                "integral over its cdf diverges; method='auto' scores its candidate values.")
        return _crps_points(np.broadcast_to(y, _broadcast(y, dist)), dist.points,
                            dist.weights)
    form = None if method == "numerical" else _closed_form(dist)
    if form is not None:
        _check_closed_form_params(*form)
    if form is not None and form[0] == "t" and not np.all(form[1]["df"] > 1):
        if np.any(form[1]["df"] <= 0.5):
            return np.broadcast_to(np.inf, y.shape)  # (1 - F)^2 ~ |z|^(-2 df): not integrable
        form = None
    if form is None and method == "closed_form":
        raise ValueError(
            f"No closed-form CRPS is known for dist={dist!r}; use method='auto' or 'numerical'.")
    if form is None:
        if not hasattr(dist, "ppf"):
            raise ValueError("Numerical CRPS needs `dist` to implement ppf as well as cdf.")
        return _crps_numerical(np.broadcast_to(y, _broadcast(y, dist)), dist, n_nodes)
    if form[0] == "norm":
        return _crps_norm(y, form[1]["loc"], form[1]["scale"])
    if form[0] == "t":
        return _crps_t(y, form[1]["df"], form[1]["loc"], form[1]["scale"])
    return _crps_scale_mixture_norm(y, **form[1])


def _crps_points(y, points, weights=None):
    """CRPS of the discrete distribution on ``points`` (sorted along the last axis; batch
    shape ``y.shape``), each of mass ``weights / sum`` (None: equal):
    ``E|X - y| - E|X - X'| / 2``, where for sorted points with cumulative masses ``C_j``
    ``E|X - X'| = 2 sum_j m_j p_j (2 C_j - m_j - 1)`` (O(N) per entry, not O(N^2))."""
    if weights is None:
        m = np.full(points.shape[-1], 1.0 / points.shape[-1])
    else:
        m = weights / weights.sum(axis=-1, keepdims=True)
    c = np.cumsum(np.broadcast_to(m, points.shape), axis=-1)
    to_y = np.sum(m * np.abs(points - y[..., None]), axis=-1)
    spread = 2.0 * np.sum(m * points * (2.0 * c - m - 1.0), axis=-1)
    return to_y - 0.5 * spread


def _broadcast(y, dist):
    return np.broadcast_shapes(y.shape, _dist_shape(dist))


def _pit(y, dist, kind="quantile"):
    """Probability integral transform ``F(y)``, validated.

    For a point mass at ``mu`` (zero scale) ``F`` jumps at ``mu``; the entries are set so that
    ``y == mu`` lies inside every interval: ``kind="quantile"`` gives 0 for ``y <= mu`` (below
    every quantile, all of which are ``mu``) and 1 above; ``kind="central"`` gives 1/2 for
    ``y == mu`` (so ``|2 F - 1| = 0``) and 0 or 1 elsewhere.
    """
    point = _point_mass(dist, y.shape)
    if point is None:
        return np.broadcast_to(_finite_or_raise(dist.cdf(y), "dist.cdf"), y.shape)
    mask, loc = point
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.broadcast_to(np.asarray(dist.cdf(y), dtype=np.float64), y.shape)
    _finite_or_raise(u[~mask], "dist.cdf")
    if kind == "quantile":
        at = np.where(y <= loc, 0.0, 1.0)
    else:
        at = np.where(y == loc, 0.5, np.where(y < loc, 0.0, 1.0))
    return np.where(mask, at, u)


@validate_params(
    {"y_true": ["array-like"], "dist": [HasMethods(["cdf"])], "confidence": _CONFIDENCE,
     "sample_weight": ["array-like", None], "multioutput": _MULTIOUTPUT},
    prefer_skip_nested_validation=True,
)
def interval_coverage(y_true, dist, confidence=0.95, *, sample_weight=None,
                      multioutput="uniform_average"):
    """Fraction of ``y_true`` inside the central ``confidence`` predictive interval.

    A calibrated predictive gives ``confidence`` up to Monte-Carlo error
    ``sqrt(confidence (1 - confidence) / n)``. Coverage alone is not a score to maximise:
    infinitely wide intervals cover everything (see :func:`interval_width`).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        Observed targets.
    dist : predictive distribution
        Object with a vectorised ``cdf`` whose batch shape equals ``y_true``'s.
    confidence : float in (0, 1), default=0.95
        Probability mass of the central interval.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the samples.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        ``"raw_values"`` returns one value per target.

    Returns
    -------
    coverage : float or ndarray of shape (n_targets,)

    Notes
    -----
    For a continuous predictive cdf F, y lies in the central interval
    ``[F^-1((1 - c)/2), F^-1((1 + c)/2)]`` exactly when ``|2 F(y) - 1| <= c``; the latter is
    what is computed (one ``cdf`` call, no quantile search). A point mass (zero scale) covers
    ``y`` exactly when ``y`` equals its location.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import stats
    >>> from skbnngp.metrics import interval_coverage
    >>> interval_coverage(np.array([0.0, 1.0, 3.0]), stats.norm(np.zeros(3), 1.0))
    0.666...
    """
    y = _check_y_dist(y_true, dist)
    inside = np.abs(2 * _pit(y, dist, "central") - 1) <= confidence
    return _aggregate(inside.astype(np.float64), y, sample_weight, multioutput)


@validate_params(
    {"y_true": ["array-like"], "dist": [HasMethods(["cdf"])], "confidence": _CONFIDENCE,
     "sample_weight": ["array-like", None], "multioutput": _MULTIOUTPUT},
    prefer_skip_nested_validation=True,
)
def coverage_error(y_true, dist, confidence=0.95, *, sample_weight=None,
                   multioutput="uniform_average"):
    """``|coverage - confidence|`` of the central ``confidence`` predictive interval.

    Unlike :func:`interval_coverage`, it cannot be improved by widening the intervals: an
    interval that covers more than its nominal level scores as badly as one that covers
    as much less, so it can select models (its scorer is ``neg_coverage_error_<pct>``).

    Parameters
    ----------
    y_true, dist, confidence, sample_weight, multioutput
        As in :func:`interval_coverage`.

    Returns
    -------
    error : float or ndarray of shape (n_targets,)

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import stats
    >>> from skbnngp.metrics import coverage_error
    >>> round(coverage_error(np.array([0.0, 1.0, 3.0]), stats.norm(np.zeros(3), 1.0)), 3)
    0.283
    """
    cov = interval_coverage(y_true, dist, confidence, sample_weight=sample_weight,
                            multioutput=multioutput)
    return np.abs(cov - confidence) if np.ndim(cov) else abs(float(cov) - confidence)


@validate_params(
    {"dist": [HasMethods(["interval"])], "confidence": _CONFIDENCE,
     "sample_weight": ["array-like", None], "multioutput": _MULTIOUTPUT},
    prefer_skip_nested_validation=True,
)
def interval_width(dist, confidence=0.95, *, sample_weight=None, multioutput="uniform_average"):
    """Mean width of the central ``confidence`` predictive interval, ``dist.interval``.

    Parameters
    ----------
    dist : predictive distribution
        Object with a vectorised ``interval(confidence)``.
    confidence : float in (0, 1), default=0.95
        Probability mass of the central interval.
    sample_weight : array-like of shape (n_samples,), default=None
        Weights of the samples.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        ``"raw_values"`` returns one value per target.

    Returns
    -------
    width : float or ndarray of shape (n_targets,)

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import stats
    >>> from skbnngp.metrics import interval_width
    >>> interval_width(stats.norm(np.zeros(4), 1.0))  # 2 * 1.95996...
    3.9199...
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = dist.interval(confidence)
        width = np.atleast_1d(np.asarray(hi, dtype=np.float64) - lo)
    point = _point_mass(dist, width.shape)
    if point is not None:  # a point mass: [mu, mu]
        width = np.where(point[0], 0.0, width)
    width = _finite_or_raise(width, "dist.interval")
    return _aggregate(width, width, sample_weight, multioutput)


def _levels(n_levels):
    return np.arange(1, n_levels + 1) / (n_levels + 1)


@validate_params(
    {"y_true": ["array-like"], "dist": [HasMethods(["cdf"])],
     "n_levels": [Interval(Integral, 1, None, closed="left")],
     "kind": [StrOptions({"central", "quantile"})], "sample_weight": ["array-like", None]},
    prefer_skip_nested_validation=True,
)
def calibration_curve_regression(y_true, dist, *, n_levels=19, kind="central",
                                 sample_weight=None):
    """Nominal against observed coverage of predictive intervals, for a reliability diagram.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        Observed targets.
    dist : predictive distribution
        Object with a vectorised ``cdf`` whose batch shape equals ``y_true``'s.
    n_levels : int, default=19
        Number of nominal levels ``p_k = k / (n_levels + 1)``, k = 1..n_levels
        (0.05, 0.10, ..., 0.95 by default).
    kind : {"central", "quantile"}, default="central"
        ``"central"``: observed fraction inside the central ``p`` interval,
        ``mean(|2 F(y) - 1| <= p)``. ``"quantile"``: observed fraction below the ``p``
        quantile, ``mean(F(y) <= p)`` (the PIT cdf; Kuleshov et al. 2018).
    sample_weight : array-like of shape (n_samples,), default=None
        Weight of each sample (all its targets): the observed coverage is the weighted
        fraction.

    Returns
    -------
    nominal : ndarray of shape (n_levels,)
    observed : ndarray of shape (n_levels,)
        All targets are pooled.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import stats
    >>> from skbnngp.metrics import calibration_curve_regression
    >>> y = stats.norm.rvs(size=2000, random_state=0)
    >>> nominal, observed = calibration_curve_regression(y, stats.norm(np.zeros(2000), 1.0),
    ...                                                  n_levels=3)
    >>> nominal
    array([0.25, 0.5 , 0.75])
    >>> bool(np.abs(observed - nominal).max() < 0.05)
    True
    """
    y = _check_y_dist(y_true, dist)
    u = _pit(y, dist, kind).ravel()
    nominal = _levels(n_levels)
    stat = np.abs(2 * u - 1) if kind == "central" else u
    inside = stat[None, :] <= nominal[:, None]
    if sample_weight is None:
        return nominal, np.mean(inside, axis=1)
    w = _check_weights(sample_weight, y.shape[0] if y.ndim else 1)
    w = np.broadcast_to(w.reshape((-1,) + (1,) * max(y.ndim - 1, 0)), y.shape).ravel()
    return nominal, inside @ w / w.sum()


@validate_params(
    {"y_true": ["array-like"], "dist": [HasMethods(["cdf"])],
     "n_levels": [Interval(Integral, 1, None, closed="left")],
     "kind": [StrOptions({"central", "quantile"})], "sample_weight": ["array-like", None]},
    prefer_skip_nested_validation=True,
)
def regression_calibration_error(y_true, dist, *, n_levels=19, kind="central",
                                 sample_weight=None):
    """Mean absolute gap between nominal and observed interval coverage.

    ``mean_k |observed(p_k) - p_k|`` over the levels of :func:`calibration_curve_regression`.
    0 is perfect; an over-confident (too narrow) predictive has observed < nominal. With
    ``kind="quantile"`` it approximates the "miscalibration area" of Tran et al. (2020).

    Parameters
    ----------
    y_true : array-like of shape (n_samples,) or (n_samples, n_targets)
        Observed targets.
    dist : predictive distribution
        Object with a vectorised ``cdf`` whose batch shape equals ``y_true``'s.
    n_levels : int, default=19
        Number of nominal levels ``k / (n_levels + 1)``.
    kind : {"central", "quantile"}, default="central"
        Central intervals or one-sided quantiles (see :func:`calibration_curve_regression`).
    sample_weight : array-like of shape (n_samples,), default=None
        Weight of each sample in the observed coverage.

    Returns
    -------
    error : float in [0, 1)

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import stats
    >>> from skbnngp.metrics import regression_calibration_error
    >>> y = stats.norm.rvs(scale=3.0, size=2000, random_state=0)
    >>> regression_calibration_error(y, stats.norm(np.zeros(2000), 1.0)) > 0.2  # too narrow
    True
    """
    nominal, observed = calibration_curve_regression(y_true, dist, n_levels=n_levels, kind=kind,
                                                     sample_weight=sample_weight)
    return float(np.mean(np.abs(observed - nominal)))


# ============================================================================ classification
@validate_params(
    {"y_true": ["array-like"], "proba": ["array-like"],
     "n_bins": [Interval(Integral, 1, None, closed="left")], "labels": ["array-like", None],
     "sample_weight": ["array-like", None]},
    prefer_skip_nested_validation=True,
)
def expected_calibration_error(y_true, proba, *, n_bins=15, labels=None, sample_weight=None):
    """Top-label expected calibration error (Guo et al. 2017).

    The top-label confidence ``max_k proba[i, k]`` is binned into ``n_bins`` equal-width bins
    on [0, 1]; ``ECE = sum_b (n_b / n) |accuracy_b - confidence_b|``. 0 is perfect.

    Parameters
    ----------
    y_true : array-like of shape (n_samples,)
        True labels: indices ``0..n_classes-1`` into the columns of ``proba``, or values of
        ``labels``.
    proba : array-like of shape (n_samples, n_classes) or (n_samples,)
        Predicted class probabilities (rows summing to one), e.g. ``predict_proba(X)``. A 1-D
        array is the probability of the second class of a binary problem.
    n_bins : int, default=15
        Number of equal-width confidence bins.
    labels : array-like of shape (n_classes,), default=None
        Class label of each column of ``proba`` (e.g. ``estimator.classes_``).
    sample_weight : array-like of shape (n_samples,), default=None
        Weight of each sample: ``n_b`` and the bins' accuracy and confidence are weighted.

    Returns
    -------
    ece : float in [0, 1]

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp.metrics import expected_calibration_error
    >>> proba = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> expected_calibration_error(np.array([0, 0, 1, 1]), proba, n_bins=5)
    0.3...
    """
    p = check_array(proba, ensure_2d=False, dtype=np.float64, input_name="proba")
    if p.ndim == 1:
        p = np.column_stack([1 - p, p])
    if np.any(p < 0) or np.any(p > 1) or not np.allclose(p.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("proba must hold probabilities in [0, 1] whose rows sum to one.")
    y = np.asarray(y_true)
    if y.ndim != 1 or y.shape[0] != p.shape[0]:
        raise ValueError(
            f"y_true has shape {y.shape} but proba has {p.shape[0]} rows; y_true must be 1-D "
            "with one label per row of proba.")
    if labels is None:
        if not (np.issubdtype(y.dtype, np.number) and np.all(np.mod(y, 1) == 0)
                and np.all((y >= 0) & (y < p.shape[1]))):
            raise ValueError(
                f"y_true must hold column indices 0..{p.shape[1] - 1} of proba when labels is "
                "None; pass labels=estimator.classes_ for other class labels.")
        idx = y.astype(np.intp)
    else:
        labels = np.asarray(labels)
        if labels.shape != (p.shape[1],):
            raise ValueError(
                f"labels has shape {labels.shape} but proba has {p.shape[1]} columns.")
        order = np.argsort(labels)
        pos = np.searchsorted(labels, y, sorter=order)
        pos = np.clip(pos, 0, labels.size - 1)
        idx = order[pos]
        if not np.all(labels[idx] == y):
            raise ValueError("y_true contains labels that are not in labels.")
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == idx).astype(np.float64)
    bins = np.clip(np.ceil(conf * n_bins).astype(np.intp) - 1, 0, n_bins - 1)
    if sample_weight is not None:
        w = _check_weights(sample_weight, p.shape[0])
        gap = np.abs(np.bincount(bins, correct * w, n_bins) - np.bincount(bins, conf * w, n_bins))
        return float(np.sum(gap) / w.sum())
    count = np.bincount(bins, minlength=n_bins)
    gap = np.abs(np.bincount(bins, correct, n_bins) - np.bincount(bins, conf, n_bins))
    return float(np.sum(gap) / count.sum())


@validate_params(
    {"scores_in": ["array-like"], "scores_out": ["array-like"],
     "sample_weight_in": ["array-like", None], "sample_weight_out": ["array-like", None]},
    prefer_skip_nested_validation=True,
)
def ood_auroc(scores_in, scores_out, *, sample_weight_in=None, sample_weight_out=None):
    """Area under the ROC curve separating out-of-distribution inputs by an uncertainty score.

    Out-of-distribution points are the positive class, so a larger score must mean "more
    uncertain" (predictive std or variance, entropy, ...). 1 is perfect separation and 0.5
    chance. Computed with :func:`sklearn.metrics.roc_auc_score`.

    Parameters
    ----------
    scores_in : array-like of shape (n_in,)
        Scores of in-distribution inputs.
    scores_out : array-like of shape (n_out,)
        Scores of out-of-distribution inputs.
    sample_weight_in, sample_weight_out : array-like of shape (n_in,) and (n_out,), \
default=None
        Weights of the in- and out-of-distribution inputs (the weighted AUROC: a pair
        counts the product of its weights); None: 1 each.

    Returns
    -------
    auroc : float in [0, 1]

    Examples
    --------
    >>> from skbnngp.metrics import ood_auroc
    >>> ood_auroc([0.1, 0.2, 0.3], [0.25, 0.9])
    0.833...
    """
    s_in = check_array(scores_in, ensure_2d=False, dtype=np.float64, input_name="scores_in")
    s_out = check_array(scores_out, ensure_2d=False, dtype=np.float64, input_name="scores_out")
    for name, s in (("scores_in", s_in), ("scores_out", s_out)):
        if s.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {s.shape}.")
    labels = np.concatenate([np.zeros(s_in.size), np.ones(s_out.size)])
    if sample_weight_in is None and sample_weight_out is None:
        return float(roc_auc_score(labels, np.concatenate([s_in, s_out])))
    w_in = (np.ones(s_in.size) if sample_weight_in is None
            else _check_weights(sample_weight_in, s_in.size, "sample_weight_in"))
    w_out = (np.ones(s_out.size) if sample_weight_out is None
             else _check_weights(sample_weight_out, s_out.size, "sample_weight_out"))
    return float(roc_auc_score(labels, np.concatenate([s_in, s_out]),
                               sample_weight=np.concatenate([w_in, w_out])))


# ============================================================================ scorers
def _final_step(estimator):
    """``(final estimator, transform)`` of a fitted meta-estimator: a Pipeline's last step
    with its other steps' ``transform`` applied in order, a fitted search's
    ``best_estimator_``; any other estimator is its own final step."""
    from sklearn.pipeline import Pipeline

    if isinstance(estimator, Pipeline):
        final, transform = _final_step(estimator.steps[-1][1])

        def chain(X, steps=estimator.steps[:-1]):
            for _, step in steps:
                if step is not None and step != "passthrough":
                    X = step.transform(X)
            return transform(X)
        return final, chain
    best = getattr(estimator, "best_estimator_", None)
    if best is not None and not hasattr(estimator, "predict_dist"):
        return _final_step(best)
    return estimator, lambda X: X


def _is_target_transform(estimator):
    """Whether ``estimator`` is scikit-learn's ``TransformedTargetRegressor`` (its
    predictive is its regressor's, mapped back to the units of y)."""
    from sklearn.compose import TransformedTargetRegressor

    return isinstance(estimator, TransformedTargetRegressor)


def _is_per_target(estimator):
    """Whether ``estimator`` is scikit-learn's ``MultiOutputRegressor`` (its predictive
    stacks its per-target regressors' predictives)."""
    from sklearn.multioutput import MultiOutputRegressor

    return isinstance(estimator, MultiOutputRegressor)


def _answers_predict_dist(final):
    """Whether :func:`predictive_response` gives a fitted final step's predictive: it has
    ``predict_dist``, or it is a target transform or a per-target wrapper around regressors
    that have one."""
    if callable(getattr(final, "predict_dist", None)):
        return True
    if _is_target_transform(final):
        inner = getattr(final, "regressor_", None)
        return inner is not None and _answers_predict_dist(_final_step(inner)[0])
    if _is_per_target(final):
        inner = getattr(final, "estimators_", None)
        return bool(inner) and all(_answers_predict_dist(_final_step(e)[0]) for e in inner)
    return False


def _target_maps(ttr, shape):
    """``(forward, inverse)``: a fitted ``TransformedTargetRegressor``'s target transform
    and its inverse as elementwise maps on arrays whose trailing axes are ``shape`` (the
    batch shape of its regressor's predictive)."""
    if ttr.transformer is None:  # func / inverse_func (None: the identity), elementwise
        def fn(f):
            return (lambda a: np.asarray(a, dtype=np.float64)) if f is None else (
                lambda a: np.asarray(f(np.asarray(a, dtype=np.float64)), dtype=np.float64))
        return fn(ttr.func), fn(ttr.inverse_func)
    n_targets = shape[-1] if len(shape) == 2 else 1

    def rows(fn, flat):
        # rows outside the transform's domain (Box-Cox: y <= 0) give NaN, as np.log does:
        # halve a block that raises until its rows are found
        try:
            return np.asarray(fn(flat), dtype=np.float64)
        except ValueError:
            if flat.shape[0] == 1:
                return np.full(flat.shape, np.nan)
            half = flat.shape[0] // 2
            return np.concatenate([rows(fn, flat[:half]), rows(fn, flat[half:])])

    def sorted_rows(fn, col):
        # one sorted column: a monotone transform's domain is an interval, so its rows are
        # one block, found by bisection from a row inside it (O(log n) calls, not O(n))
        try:
            return np.asarray(fn(col), dtype=np.float64)
        except ValueError:
            pass

        def ok(i):
            try:
                fn(col[i:i + 1])
                return True
            except ValueError:
                return False
        n = col.shape[0]
        inside = next((i for i in np.linspace(0, n - 1, 17).astype(int) if ok(i)), None)
        if inside is None:
            return rows(fn, col)
        lo_bad, hi_ok = -1, inside  # the first row inside lies in (lo_bad, hi_ok]
        while hi_ok - lo_bad > 1:
            mid = (lo_bad + hi_ok) // 2
            lo_bad, hi_ok = (lo_bad, mid) if ok(mid) else (mid, hi_ok)
        lo_ok, hi_bad = inside, n  # the last row inside lies in [lo_ok, hi_bad)
        while hi_bad - lo_ok > 1:
            mid = (lo_ok + hi_bad) // 2
            lo_ok, hi_bad = (mid, hi_bad) if ok(mid) else (lo_ok, mid)
        out = np.full(col.shape, np.nan)
        try:
            out[hi_ok:lo_ok + 1] = np.asarray(fn(col[hi_ok:lo_ok + 1]), dtype=np.float64)
        except ValueError:  # not an interval after all
            return rows(fn, col)
        return out

    def through(method):
        fn = getattr(ttr.transformer_, method)

        def apply(a):
            a = np.asarray(a, dtype=np.float64)
            flat = a.reshape(-1, n_targets)
            if n_targets > 1:
                return rows(fn, flat).reshape(a.shape)
            order = np.argsort(flat[:, 0], kind="stable")
            out = np.empty(flat.shape)
            out[order] = sorted_rows(fn, flat[order])
            return out.reshape(a.shape)
        return apply
    return through("transform"), through("inverse_transform")


def predictive_response(estimator, X, method="predict_dist"):
    """``estimator.<method>(X)`` for any fitted estimator, a Pipeline or a fitted search
    included: a Pipeline's transforms are applied to ``X`` before its last step's method, so
    ``predictive_response(make_pipeline(StandardScaler(), reg), X)`` is the predictive
    distribution of ``reg`` on the scaled ``X``. A ``TransformedTargetRegressor``'s
    predictive is its regressor's, mapped back to the units of y through the inverse
    transform (a :class:`~skbnngp.distributions.TransformedDistribution`); a
    ``MultiOutputRegressor``'s stacks its per-target regressors' predictives (a
    :class:`~skbnngp.distributions.StackedDistribution`).

    Parameters
    ----------
    estimator : fitted estimator, Pipeline or search (e.g. GridSearchCV)
    X : array-like of shape (n_samples, n_features)
    method : {"predict_dist", "predict_proba"}, default="predict_dist"

    Returns
    -------
    response : frozen distribution (``predict_dist``) or ndarray (``predict_proba``)

    Raises
    ------
    TypeError
        When the (final) estimator has no such method, naming it: a score of its
        predictive cannot be computed, and returning NaN would mislead model selection.

    Examples
    --------
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skbnngp import StudentTProcessRegressor
    >>> from skbnngp.datasets import make_heavy_tailed
    >>> from skbnngp.metrics import predictive_response
    >>> X, y = make_heavy_tailed(n_samples=40, random_state=0)
    >>> pipe = make_pipeline(StandardScaler(), StudentTProcessRegressor(max_iter=20))
    >>> dist = predictive_response(pipe.fit(X, y), X[:3])
    >>> dist.interval(0.9)[0].shape
    (3,)
    """
    final, transform = _final_step(estimator)
    if method == "predict_dist" and _is_target_transform(final):
        check_is_fitted(final)
        dist = predictive_response(final.regressor_, transform(X), method)
        return _transformed(dist, *_target_maps(final, _dist_shape(dist)))
    if method == "predict_dist" and _is_per_target(final):
        check_is_fitted(final)
        Xt = transform(X)
        return _stacked([predictive_response(e, Xt, method) for e in final.estimators_])
    if not callable(getattr(final, method, None)):
        inner = "" if final is estimator else f" (the final step of {type(estimator).__name__})"
        raise TypeError(f"{type(final).__name__}{inner} has no {method}(X), so this score of "
                        "its predictive cannot be computed; use an estimator with a "
                        f"{'predictive distribution' if method == 'predict_dist' else method}.")
    return getattr(final, method)(transform(X))


class _PredictiveScorer:
    """Callable ``scorer(estimator, X, y, sample_weight=None)`` as GridSearchCV expects."""

    def __init__(self, score_func, response_method, sign, kwargs, sample_weight=None):
        self._score_func = score_func
        self._response_method = response_method
        self._sign = sign
        self._kwargs = kwargs
        self._sample_weight_request = sample_weight

    def set_score_request(self, *, sample_weight=None):
        """Whether ``sample_weight`` is routed to this scorer when scikit-learn's metadata
        routing is on (``sklearn.set_config(enable_metadata_routing=True)``), as
        scikit-learn's scorers' ``set_score_request``: True, False, None (an error if
        weights are passed; the default) or an alias.

        Returns a new scorer (the package's scorers are shared module objects, which a
        request must not change for every caller).
        """
        from sklearn.utils.metadata_routing import MetadataRequest

        # scikit-learn's own check of the value (True, False, None or an alias)
        MetadataRequest(owner="check").score.add_request(param="sample_weight",
                                                         alias=sample_weight)
        return _PredictiveScorer(self._score_func, self._response_method, self._sign,
                                 dict(self._kwargs), sample_weight)

    def _accept_sample_weight(self):
        """Whether the metric takes ``sample_weight``: scikit-learn's searches ask every
        scorer of a multi-metric ``scoring`` this (without metadata routing) before passing
        the weights given to ``fit`` on to it."""
        from inspect import signature

        return "sample_weight" in signature(self._score_func).parameters

    def get_metadata_routing(self):
        """The scorer's metadata request (``sample_weight`` for ``score``), read by
        scikit-learn's routing."""
        from sklearn.utils.metadata_routing import MetadataRequest

        request = MetadataRequest(owner=repr(self))
        request.score.add_request(param="sample_weight", alias=self._sample_weight_request)
        return request

    def __call__(self, estimator, X, y_true, sample_weight=None):
        y_true = self._check_y(X, y_true)
        response = predictive_response(estimator, X, self._response_method)
        self._check_response(estimator, response)
        kwargs = dict(self._kwargs)
        if sample_weight is not None:
            kwargs["sample_weight"] = sample_weight
        if self._response_method == "predict_proba":
            kwargs.setdefault("labels", getattr(estimator, "classes_", None))
            score = self._score_func(y_true, response, **kwargs)
        elif self._score_func is interval_width:
            score = self._score_func(response, **kwargs)
        else:
            score = self._score_func(y_true, response, **kwargs)
        score = self._sign * np.asarray(score, dtype=np.float64)
        if np.any(np.isnan(score)):
            raise ValueError(f"{self!r} is undefined (NaN) on these rows for "
                             f"{type(estimator).__name__}; a NaN score would make model "
                             "selection pick at random.")
        return float(score) if score.ndim == 0 else score

    def _check_response(self, estimator, response):
        """A predictive without the method this module's metric reads is an error that
        names the scorer and the estimator: the metric's own parameter check would name the
        outermost validated caller (``cross_val_score``, ``GridSearchCV``) instead."""
        need = _METHOD_READ.get(self._score_func)
        if need is None or callable(getattr(response, need, None)):
            return
        name = type(estimator).__name__
        hint = ("it has no density (its cdf is a step function); score it with "
                "neg_crps_scorer or an interval metric instead"
                if need == "logpdf" and callable(getattr(response, "cdf", None))
                else "choose a scorer that reads what it has")
        raise TypeError(f"{self!r} reads {need}() of the predictive distribution, but "
                        f"{name}'s {type(response).__name__} has no {need}: {hint}.")

    def _check_y(self, X, y_true):
        """``y`` must have one entry per row of ``X``, finite when it is numeric (every score
        of a regressor, and :func:`interval_width`, which reads only ``X``, checks it too)."""
        from sklearn.utils.validation import _num_samples

        if y_true is None:
            raise ValueError("y is required by this scorer, got None.")
        y = np.asarray(y_true)
        n_x = _num_samples(X)
        if y.ndim == 0 or y.shape[0] != n_x:
            raise ValueError(f"y has {0 if y.ndim == 0 else y.shape[0]} entries but X has "
                             f"{n_x} rows; the scorer needs one target per row of X.")
        if self._response_method == "predict_proba":
            if y.dtype.kind in "fc" and not np.all(np.isfinite(y)):
                raise ValueError("y contains NaN or infinity; class labels must be finite.")
            return y_true
        return check_array(y_true, ensure_2d=False, dtype=np.float64, input_name="y")

    def __repr__(self):
        extra = "".join(f", {k}={v!r}" for k, v in self._kwargs.items())
        sign = "" if self._sign > 0 else ", greater_is_better=False"
        return (f"make_predictive_scorer({self._score_func.__name__}{sign}, "
                f"response_method={self._response_method!r}{extra})")


@validate_params(
    {"score_func": [callable], "response_method": [StrOptions({"predict_dist", "predict_proba"})],
     "greater_is_better": ["boolean"]},
    prefer_skip_nested_validation=True,
)
def make_predictive_scorer(score_func, *, response_method="predict_dist", greater_is_better=True,
                           **kwargs):
    """Turn a metric of this module into a scorer for GridSearchCV / cross_val_score.

    The scorer calls ``estimator.<response_method>(X)`` and then
    ``score_func(y, response, **kwargs)`` (``score_func(response, **kwargs)`` for
    :func:`interval_width`). It returns ``-score`` when ``greater_is_better=False``, following
    scikit-learn's convention that the best model has the largest score.

    Parameters
    ----------
    score_func : callable
        A metric such as :func:`nlpd`.
    response_method : {"predict_dist", "predict_proba"}, default="predict_dist"
        Estimator method whose output is scored. With ``"predict_proba"`` the estimator's
        ``classes_`` are passed as ``labels``.
    greater_is_better : bool, default=True
        False for losses.
    **kwargs : dict
        Extra keyword arguments of ``score_func``.

    Returns
    -------
    scorer : callable

    Examples
    --------
    >>> from skbnngp.metrics import make_predictive_scorer, interval_coverage
    >>> make_predictive_scorer(interval_coverage, confidence=0.9)
    make_predictive_scorer(interval_coverage, response_method='predict_dist', confidence=0.9)
    """
    sign = 1.0 if greater_is_better else -1.0
    return _PredictiveScorer(score_func, response_method, sign, kwargs)


#: The method of the predictive distribution each metric of this module reads.
_METHOD_READ = {nlpd: "logpdf", crps: "cdf", interval_coverage: "cdf", coverage_error: "cdf",
                interval_width: "interval", calibration_curve_regression: "cdf",
                regression_calibration_error: "cdf"}

#: ``-nlpd``: greater is better.
neg_nlpd_scorer = make_predictive_scorer(nlpd, greater_is_better=False)
#: ``-crps``: greater is better.
neg_crps_scorer = make_predictive_scorer(crps, greater_is_better=False)
#: ``-|coverage - 0.95|`` of the central 95 % interval: best at the nominal level, so a
#: wider interval than needed scores lower, as a narrower one does.
neg_coverage_error_scorer = make_predictive_scorer(coverage_error, greater_is_better=False,
                                                   confidence=0.95)
#: ``-interval_width`` of the central 95 % interval.
neg_interval_width_scorer = make_predictive_scorer(interval_width, greater_is_better=False,
                                                   confidence=0.95)
#: ``-regression_calibration_error``: greater is better.
neg_calibration_error_scorer = make_predictive_scorer(regression_calibration_error,
                                                      greater_is_better=False)
#: ``-expected_calibration_error`` of ``predict_proba``: greater is better.
neg_ece_scorer = make_predictive_scorer(expected_calibration_error,
                                        response_method="predict_proba",
                                        greater_is_better=False)

_SCORERS = {
    "neg_nlpd": neg_nlpd_scorer,
    "neg_crps": neg_crps_scorer,
    "neg_coverage_error_95": neg_coverage_error_scorer,
    "neg_interval_width_95": neg_interval_width_scorer,
    "neg_calibration_error": neg_calibration_error_scorer,
    "neg_ece": neg_ece_scorer,
}
_LEVEL_PATTERN = re.compile(r"^(neg_coverage_error|neg_interval_width)_(\d{1,2})$")


def get_scorer_names():
    """Names accepted by :func:`get_scorer`: this module's, then scikit-learn's.

    ``neg_coverage_error_<pct>`` and ``neg_interval_width_<pct>`` accept any integer percentage 1..99;
    the listed ones use 95.

    Returns
    -------
    names : list of str

    Examples
    --------
    >>> from skbnngp.metrics import get_scorer_names
    >>> get_scorer_names()[:3]
    ['neg_calibration_error', 'neg_coverage_error_95', 'neg_crps']
    """
    return sorted(_SCORERS) + list(_sklearn_get_scorer_names())


def get_scorer(scoring):
    """Scorer from a name (or a callable, returned as is).

    Names: ``"neg_nlpd"``, ``"neg_crps"``, ``"neg_coverage_error_<pct>"`` (minus the gap
    between the observed coverage of the central ``pct`` % interval and ``pct`` %),
    ``"neg_interval_width_<pct>"``, ``"neg_calibration_error"``,
    ``"neg_ece"``; any other name goes to :func:`sklearn.metrics.get_scorer`.

    Parameters
    ----------
    scoring : str or callable
        Scorer name.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y)``; greater is better.

    Examples
    --------
    >>> from skbnngp.metrics import get_scorer
    >>> get_scorer("neg_coverage_error_90")
    make_predictive_scorer(coverage_error, greater_is_better=False, response_method='predict_dist', confidence=0.9)
    """
    if callable(scoring):
        return scoring
    if isinstance(scoring, str):
        if scoring in _SCORERS:
            return _SCORERS[scoring]
        match = _LEVEL_PATTERN.match(scoring)
        if match and 1 <= int(match.group(2)) <= 99:
            confidence = int(match.group(2)) / 100
            if match.group(1) == "neg_coverage_error":
                return make_predictive_scorer(coverage_error, greater_is_better=False,
                                              confidence=confidence)
            return make_predictive_scorer(interval_width, greater_is_better=False,
                                          confidence=confidence)
        try:
            return _sklearn_get_scorer(scoring)
        except ValueError:
            pass
    raise ValueError(
        f"scoring={scoring!r} is not a valid scoring value. Use one of {sorted(_SCORERS)} "
        "(neg_coverage_error_<pct> and neg_interval_width_<pct> take any percentage 1..99), a name from "
        "sklearn.metrics.get_scorer_names(), or a callable.")
