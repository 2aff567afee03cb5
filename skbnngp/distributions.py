"""Frozen predictive distributions returned by ``predict_dist``.

Closed-form predictives are returned as scipy.stats frozen distributions
(:func:`scipy.stats.norm`, :func:`scipy.stats.t`). A scale mixture of Gaussians (importance
sampling or quadrature over a scale prior) is returned as :class:`ScaleMixtureNormal`, which
offers the same methods. :class:`NormalMixture` is the equal-weight mixture of Gaussians with
their own locations and scales, the predictive of a deep ensemble.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats
from sklearn.utils import check_random_state

_BLOCK = 2**22  # components x points evaluated at once

# Parameter names (in scipy's positional order) and defaults of the frozen scipy
# predictives that every regressor's ``predict_dist`` may return.
_SCIPY_PARAMS = {"norm": ("loc", "scale"), "t": ("df", "loc", "scale")}
_SCIPY_DEFAULTS = {"loc": 0.0, "scale": 1.0}


def _scipy_frozen_params(dist):
    """``(name, params)`` of a frozen scipy ``norm``/``t`` (positional or keyword), else None."""
    name = getattr(getattr(dist, "dist", None), "name", None)
    if name not in _SCIPY_PARAMS or not hasattr(dist, "args") or not hasattr(dist, "kwds"):
        return None
    names = _SCIPY_PARAMS[name]
    params = dict(zip(names, dist.args))
    params.update(dist.kwds)
    for key in names:
        params.setdefault(key, _SCIPY_DEFAULTS.get(key))
    if params.get("df") is None and name == "t":
        return None
    return name, {key: np.asarray(params[key], dtype=np.float64) for key in names}



def _dist_shape(dist):
    """Batch shape of a predictive distribution (``()`` for one distribution for all y)."""
    shape = getattr(dist, "shape", None)
    if isinstance(shape, tuple):
        return shape
    frozen = _scipy_frozen_params(dist)
    if frozen is not None:
        return np.broadcast_shapes(*(np.shape(v) for v in frozen[1].values()))
    return np.shape(dist.mean())


class ScaleMixtureNormal:
    """Mixture ``sum_i w_i N(loc, s_i * base_scale**2)`` sharing one location.

    It is the predictive ``int N(y; loc, s * base_scale**2) dM(s)`` of a Gaussian process
    whose amplitude ``s`` has a discrete mixing distribution ``M = sum_i w_i delta(s_i)``
    (self-normalised importance samples or quadrature nodes).

    Parameters
    ----------
    loc : ndarray
        Location (the predictive mean), any shape.
    base_scale : ndarray, same shape as ``loc``
        Standard deviation of the unit-amplitude Gaussian.
    scales : ndarray of shape (n_components,)
        Amplitudes ``s_i > 0``.
    weights : ndarray of shape (n_components,)
        Non-negative, summing to one.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp.distributions import ScaleMixtureNormal
    >>> d = ScaleMixtureNormal(np.zeros(2), np.ones(2), np.array([1.0, 4.0]), np.array([0.5, 0.5]))
    >>> d.std()
    array([1.58113883, 1.58113883])
    """

    def __init__(self, loc, base_scale, scales, weights):
        self.loc = np.asarray(loc, dtype=float)
        self.base_scale = np.broadcast_to(np.asarray(base_scale, dtype=float), self.loc.shape)
        scales = np.asarray(scales, dtype=float).ravel()
        weights = np.asarray(weights, dtype=float).ravel()
        if scales.shape != weights.shape or scales.size == 0:
            raise ValueError("scales and weights must be non-empty 1-D arrays of equal length.")
        if np.any(scales <= 0) or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
            raise ValueError("scales must be > 0 and weights non-negative, summing to one.")
        self.scales = scales
        self.weights = weights

    # ------------------------------------------------------------------ moments
    @property
    def shape(self):
        return self.loc.shape

    def mean(self):
        return self.loc.copy()

    def median(self):
        return self.loc.copy()

    def var(self):
        return float(np.dot(self.weights, self.scales)) * self.base_scale**2

    def std(self):
        return np.sqrt(self.var())

    @property
    def effective_sample_size(self):
        """``1 / sum(w_i^2)``: the number of components that effectively contribute."""
        return float(1.0 / np.sum(self.weights**2))

    # ------------------------------------------------------------------ densities
    def _blocks(self):
        flat = self.loc.size
        step = max(1, _BLOCK // max(1, self.scales.size))
        for start in range(0, flat, step):
            yield slice(start, min(flat, start + step))

    def _reduce(self, y, fn):
        y = np.broadcast_to(np.asarray(y, dtype=float), self.loc.shape).ravel()
        loc, base = self.loc.ravel(), self.base_scale.ravel()
        out = np.empty(loc.size)
        sd = np.sqrt(self.scales)[:, None]
        for sl in self._blocks():
            out[sl] = fn(y[sl], loc[sl], base[sl] * sd)
        return out.reshape(self.loc.shape)

    def logpdf(self, y):
        logw = np.log(np.maximum(self.weights, 1e-300))[:, None]
        return self._reduce(
            y, lambda yy, mu, sd: special.logsumexp(logw + stats.norm.logpdf(yy, mu, sd), axis=0))

    def pdf(self, y):
        return np.exp(self.logpdf(y))

    def cdf(self, y):
        w = self.weights[:, None]
        return self._reduce(y, lambda yy, mu, sd: np.sum(w * stats.norm.cdf(yy, mu, sd), axis=0))

    def ppf(self, q):
        """Quantiles by bisection on the cdf (to about 1e-10 of the scale)."""
        q = np.broadcast_to(np.asarray(q, dtype=float), self.loc.shape)
        if np.any((q < 0) | (q > 1)):
            raise ValueError("q must lie in [0, 1].")
        spread = self.base_scale * np.sqrt(self.scales.max())
        zmax = stats.norm.isf(np.clip(np.minimum(q, 1 - q), 1e-300, 0.5)) + 1.0
        lo = self.loc - zmax * spread - 1e-300
        hi = self.loc + zmax * spread + 1e-300
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            below = self.cdf(mid) < q
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        out = 0.5 * (lo + hi)
        out = np.where(q == 0, -np.inf, out)
        return np.where(q == 1, np.inf, out)

    def interval(self, confidence):
        """Central interval holding ``confidence`` probability mass."""
        if not 0 <= confidence <= 1:
            raise ValueError("confidence must lie in [0, 1].")
        return self.ppf(0.5 * (1 - confidence)), self.ppf(0.5 * (1 + confidence))

    def rvs(self, size=None, random_state=None):
        """Draw samples of shape ``size + loc.shape`` (``size`` an int, tuple or None)."""
        rng = check_random_state(random_state)
        lead = () if size is None else ((size,) if np.isscalar(size) else tuple(size))
        comp = rng.choice(self.scales.size, size=lead + self.loc.shape, p=self.weights)
        z = rng.standard_normal(lead + self.loc.shape)
        return self.loc + np.sqrt(self.scales[comp]) * self.base_scale * z

    def __repr__(self):
        return (f"ScaleMixtureNormal(shape={self.loc.shape}, n_components={self.scales.size}, "
                f"effective_sample_size={self.effective_sample_size:.1f})")


class NormalMixture:
    """Equal-weight mixture ``(1/k) sum_j N(loc_j, scale_j**2)`` per point.

    The predictive of an ensemble of ``k`` Gaussian predictors (a deep ensemble), with the
    methods :mod:`skbnngp.metrics` reads. ``cdf`` and ``logpdf`` broadcast leading axes of
    their argument against the batch shape; ``ppf`` is found by bisection.

    Parameters
    ----------
    loc : array-like of shape (n_components, ...)
        Location of each component at each point.
    scale : array-like, broadcastable to ``loc``'s shape
        Standard deviation of each component (> 0).

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp.distributions import NormalMixture
    >>> d = NormalMixture(np.array([[-1.0], [1.0]]), np.ones((2, 1)))
    >>> d.mean(), d.std()
    (array([0.]), array([1.41421356]))
    """

    def __init__(self, loc, scale):
        self.loc = np.atleast_2d(np.asarray(loc, dtype=np.float64))
        self.scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), self.loc.shape)
        if np.any(~(self.scale > 0)):
            raise ValueError("scale must be > 0.")

    @property
    def shape(self):
        return self.loc.shape[1:]

    def _standardised(self, z):
        z = np.asarray(z, dtype=np.float64)
        z = np.broadcast_to(z, np.broadcast_shapes(z.shape, self.shape))
        extra = (1,) * (z.ndim - len(self.shape))
        loc = self.loc.reshape((self.loc.shape[0],) + extra + self.shape)
        scale = self.scale.reshape(loc.shape)
        return (z[None] - loc) / scale, scale

    def logpdf(self, z):
        u, scale = self._standardised(z)
        comp = -0.5 * u**2 - 0.5 * np.log(2 * np.pi) - np.log(scale)
        return special.logsumexp(comp, axis=0) - np.log(self.loc.shape[0])

    def pdf(self, z):
        return np.exp(self.logpdf(z))

    def cdf(self, z):
        u, _ = self._standardised(z)
        return np.mean(special.ndtr(u), axis=0)

    def ppf(self, q, n_iter=80):
        """Quantiles by bisection on the cdf, between the components' 40-sd bounds."""
        q = np.broadcast_to(np.asarray(q, dtype=np.float64), self.shape)
        lo = np.min(self.loc - 40 * self.scale, axis=0)
        hi = np.max(self.loc + 40 * self.scale, axis=0)
        for _ in range(n_iter):
            mid = 0.5 * (lo + hi)
            below = self.cdf(mid) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return 0.5 * (lo + hi)

    def interval(self, confidence):
        """Central interval holding ``confidence`` probability mass."""
        return self.ppf(0.5 * (1 - confidence)), self.ppf(0.5 * (1 + confidence))

    def median(self):
        return self.ppf(0.5)

    def mean(self):
        return self.loc.mean(axis=0)

    def var(self):
        return np.mean(self.scale**2 + self.loc**2, axis=0) - self.mean() ** 2

    def std(self):
        return np.sqrt(self.var())

    def __repr__(self):
        return f"NormalMixture(shape={self.shape}, n_components={self.loc.shape[0]})"


class ConformalPredictiveDistribution:
    """Conformal predictive distribution: the empirical distribution of candidate values.

    Each batch entry holds candidate values ``p_1 <= ... <= p_N`` built from ``n``
    calibration rows: ``N = n`` values (a location plus its predictive scale times a row's
    signed normalised residual), each of mass ``1 / (n + 1)``, or ``N = 2 n`` (the location
    plus and minus the scale times the absolute residual: a symmetric predictive), each of
    mass ``1 / (2 (n + 1))``; and ``1 / (2 (n + 1))`` at each of ``-inf`` and ``+inf``. It
    is the conformal predictive system of Vovk et al. (2017), returned by
    :meth:`skbnngp.ConformalRegressor.predict_dist`.

    Quantiles round outward from the median. With ``N = r n`` (``r`` = 1 or 2), ``ppf(q)``
    is ``p_k`` with ``k = ceil(r (n + 1) q) - (r - 1)`` for ``q >= 1/2`` and
    ``k = floor(r (n + 1) q)`` below (never above the rank of ``ppf(1/2)``), ``+-inf``
    outside ``1..N``. For exchangeable calibration rows the central interval
    ``interval(c)`` then covers a new target with probability at least ``c`` in finite
    samples; with ``N = n`` each of its tails also misses at most ``(1 - c) / 2``. The cdf
    is a step function, so there is no density (``logpdf``); score it with the interval
    metrics, or with :func:`~skbnngp.metrics.crps`, which scores the candidate values (the
    infinite tails' mass left out, as in :meth:`mean` and :meth:`std`).

    Frequency ``weights`` count a calibration row ``w_i`` times: ``n`` becomes their sum
    ``W`` and a rank ``k`` the first candidate whose cumulative weight reaches it, so that
    integer weights give the distribution of the rows repeated.

    Parameters
    ----------
    points : ndarray of shape batch_shape + (N,)
        Candidate values of each batch entry (sorted here along the last axis).
    n_calibration : int, default=None
        The number ``n`` of calibration rows behind the points: ``N`` (the default) or
        ``N / 2``.
    weights : ndarray of shape (n,), default=None
        Frequency weight of each calibration row (non-negative, positive sum), in the order
        of the points' rows: point ``j`` belongs to row ``j mod n``. None: every row once.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp.distributions import ConformalPredictiveDistribution
    >>> d = ConformalPredictiveDistribution(np.arange(1.0, 40.0)[None, :])
    >>> d.interval(0.9)
    (array([2.]), array([38.]))
    """

    def __init__(self, points, n_calibration=None, weights=None):
        points = np.asarray(points, dtype=float)
        if points.ndim < 1 or points.shape[-1] == 0 or np.any(np.isnan(points)):
            raise ValueError("points must be a non-empty array without NaN, its last axis "
                             "holding each entry's candidate values.")
        n_points = points.shape[-1]
        n = n_points if n_calibration is None else n_calibration
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) \
                or n_points not in (n, 2 * n):
            raise ValueError(f"n_calibration must be the number of points ({n_points}) or "
                             f"half of it; got {n_calibration!r}.")
        self.n_calibration = int(n)
        if weights is None:
            self.points, self.weights = np.sort(points, axis=-1), None
            self.total_weight = float(n)
            return
        w = np.asarray(weights, dtype=float)
        if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise ValueError(f"weights must be {n} finite non-negative numbers with a positive "
                             f"sum, one per calibration row; got shape {w.shape}.")
        order = np.argsort(points, axis=-1, kind="stable")
        self.points = np.take_along_axis(points, order, axis=-1)
        self.weights = np.tile(w, n_points // n)[order]  # each point's row weight, sorted
        self._cumulative = np.cumsum(self.weights, axis=-1)
        self.total_weight = float(w.sum())

    @property
    def _per_row(self):
        """Candidate values per calibration row: 1, or 2 for a symmetric predictive."""
        return self.n_points // self.n_calibration

    @property
    def shape(self):
        return self.points.shape[:-1]

    @property
    def n_points(self):
        return self.points.shape[-1]

    def _first_reaching(self, rank, strict=False):
        """1-based index of the first point whose cumulative weight is at least ``rank``
        (above it when ``strict``); ``n_points + 1`` when none is (every point counts 1
        without weights, so the index is then the rank rounded up)."""
        if self.weights is None:
            return np.floor(rank + 1.0) if strict else np.ceil(rank)
        below = self._cumulative <= rank[..., None] if strict else \
            self._cumulative < rank[..., None]
        return np.sum(below, axis=-1) + 1.0

    def _at_rank(self, k):
        """``p_k`` (1-based ranks of ``self.shape``; ``-inf`` below 1, ``+inf`` above n)."""
        n = self.n_points
        idx = np.clip(k, 1, n).astype(np.intp) - 1
        out = np.take_along_axis(self.points, idx[..., None], axis=-1)[..., 0]
        return np.where(k < 1, -np.inf, np.where(k > n, np.inf, out))

    def ppf(self, q):
        """Quantiles, rounded outward from the median (see the class notes)."""
        q = np.broadcast_to(np.asarray(q, dtype=float), self.shape)
        if np.any(np.isnan(q) | (q < 0) | (q > 1)):
            raise ValueError("q must lie in [0, 1].")
        r, n = self._per_row, self.total_weight
        m = r * (n + 1) * q
        # a hair of tolerance: (n + 1) * (k / (n + 1)) must give rank k, not k + 1
        upper = self._first_reaching(m - (r - 1) - 1e-9)
        middle = self._first_reaching(np.broadcast_to(r * (n + 1) / 2 - (r - 1) - 1e-9,
                                                      self.shape))  # the rank of ppf(1/2)
        lower = np.where(m + 1e-9 < 1, 0.0, self._first_reaching(m - 1 + 1e-9, strict=True))
        k = np.where(q >= 0.5, upper, np.minimum(lower, middle))
        return self._at_rank(k)

    def interval(self, confidence):
        """Central interval ``[ppf((1 - c) / 2), ppf((1 + c) / 2)]`` of coverage >= c."""
        if not 0 <= confidence <= 1:
            raise ValueError("confidence must lie in [0, 1].")
        return self.ppf(0.5 * (1 - confidence)), self.ppf(0.5 * (1 + confidence))

    def rows_needed(self, confidence):
        """The fewest calibration rows (the least total weight, with ``weights``) whose
        central interval at ``confidence`` is finite: the smallest ``n`` with the rank of
        ``ppf((1 + c) / 2)`` at most ``r n``, which is
        ``(1 + c) / (1 - c) - 2 (r - 1) / (r (1 - c))`` rounded up (``2 / (1 - c) - 1`` for
        signed scores, ``c / (1 - c)`` for symmetric ones)."""
        c = np.asarray(confidence, dtype=float)
        if np.any(np.isnan(c) | (c < 0) | (c >= 1)):
            raise ValueError("confidence must lie in [0, 1): no finite number of calibration "
                             "rows bounds a central interval of level 1.")
        r = self._per_row
        need = (1 + c) / (1 - c) - 2 * (r - 1) / (r * (1 - c))
        return np.ceil(need - 1e-9).astype(int)

    def cdf(self, y):
        """``(#{p_i <= y} / r + 1/2) / (n + 1)``, ``r`` the candidate values per row (the
        points' summed weight for the count, and ``W`` for ``n``, with ``weights``)."""
        y = np.broadcast_to(np.asarray(y, dtype=float), self.shape)
        at_or_below = self.points <= y[..., None]
        below = np.sum(at_or_below, axis=-1) if self.weights is None else \
            np.sum(self.weights * at_or_below, axis=-1)
        return (below / self._per_row + 0.5) / (self.total_weight + 1)

    def median(self):
        """``ppf(1/2)``; for a symmetric predictive the midpoint of its two central values."""
        if self._per_row == 1:
            return self.ppf(0.5)
        half = np.broadcast_to(self.total_weight, self.shape)
        return 0.5 * (self._at_rank(self._first_reaching(half - 1e-9))
                      + self._at_rank(self._first_reaching(half + 1e-9, strict=True)))

    def mean(self):
        """Mean of the candidate values (the infinite tails' mass left out)."""
        return np.average(self.points, axis=-1, weights=self.weights)

    def std(self):
        """Standard deviation of the candidate values (the infinite tails' mass left out)."""
        if self.weights is None:
            return self.points.std(axis=-1)
        mean = self.mean()
        return np.sqrt(np.average((self.points - mean[..., None]) ** 2, axis=-1,
                                  weights=self.weights))

    def rvs(self, size=None, random_state=None):
        """Draws of shape ``size + shape`` among the candidate values (in proportion to
        their weights)."""
        rng = check_random_state(random_state)
        lead = () if size is None else ((size,) if np.isscalar(size) else tuple(size))
        if self.weights is None:
            idx = rng.randint(self.n_points, size=lead + self.shape)
        else:  # the first point whose cumulative weight passes a uniform draw
            u = rng.uniform(size=lead + self.shape) * self._cumulative[..., -1]
            idx = np.minimum(np.sum(self._cumulative <= u[..., None], axis=-1),
                             self.n_points - 1)
        return np.take_along_axis(
            np.broadcast_to(self.points, lead + self.points.shape), idx[..., None],
            axis=-1)[..., 0]

    def __repr__(self):
        weighted = "" if self.weights is None else f", total_weight={self.total_weight:g}"
        return (f"ConformalPredictiveDistribution(shape={self.shape}, n_points={self.n_points}, "
                f"n_calibration={self.n_calibration}{weighted})")


class _PartedDistribution:
    """A predictive answered part by part: subclasses say, in :meth:`_each`, which part
    answers which entries; the methods below route through it."""

    @property
    def shape(self):
        return self._shape

    def _each(self, method, arg=None):
        raise NotImplementedError

    def _part_method(self, part, method):
        """``part``'s ``method``, or an AttributeError that names the whole and the part
        (a part may lack one: a transformed predictive has no ``mean`` or ``std``)."""
        fn = getattr(part, method, None)
        if not callable(fn):
            name = next(c.__name__ for c in type(self).__mro__ if not c.__name__.startswith("_"))
            raise AttributeError(f"{name} has no {method}: its part {type(part).__name__} has "
                                 "none.")
        return fn

    def cdf(self, y):
        return self._each("cdf", y)

    def ppf(self, q):
        return self._each("ppf", q)

    def interval(self, confidence):
        if not 0 <= confidence <= 1:
            raise ValueError("confidence must lie in [0, 1].")
        return self.ppf(0.5 * (1 - confidence)), self.ppf(0.5 * (1 + confidence))

    def median(self):
        return self._each("median")

    def mean(self):
        return self._each("mean")

    def std(self):
        return self._each("std")


class OutOfFoldDistribution(_PartedDistribution):
    """Row-wise union of predictive distributions, each serving its own rows.

    Returned by :func:`skbnngp.model_selection.cross_val_predict_dist` when the folds'
    predictives cannot be merged into one scipy object (different families, or a
    :class:`ScaleMixtureNormal` per fold): entry ``i`` is answered by the distribution of
    the fold that held row ``i`` out. ``logpdf`` and ``pdf`` exist when every part has
    them (not for :class:`ConformalPredictiveDistribution` parts, which have no density).

    Parameters
    ----------
    parts : list of frozen distributions
        Each of batch shape ``(len(rows[k]),)`` or ``(len(rows[k]), n_targets)``.
    rows : list of ndarray of int
        The rows each part answers; together a partition of ``range(n_samples)``.
    """

    def __init__(self, parts, rows):
        if len(parts) != len(rows) or not parts:
            raise ValueError("parts and rows must be non-empty lists of equal length.")
        self.parts = list(parts)
        self.rows = [np.asarray(r, dtype=np.intp) for r in rows]
        n = sum(r.size for r in self.rows)
        if not np.array_equal(np.sort(np.concatenate(self.rows)), np.arange(n)):
            raise ValueError("rows must partition range(n_samples).")
        shape = getattr(self.parts[0], "shape", None)  # a part may have no mean
        tail = (tuple(shape) if isinstance(shape, tuple) else np.shape(self.parts[0].mean()))[1:]
        self._shape = (n,) + tuple(tail)

    def _each(self, method, arg=None):
        out = np.empty(self._shape)
        if arg is not None:
            arg = np.broadcast_to(np.asarray(arg, dtype=float), self._shape)
        for part, rows in zip(self.parts, self.rows):
            fn = self._part_method(part, method)
            out[rows] = fn() if arg is None else fn(arg[rows])
        return out

    def __new__(cls, parts=(), rows=()):
        # the subclass with a density when every part has one, as for the stacked and
        # transformed predictives; without, a metric that needs logpdf refuses it by name
        if cls is OutOfFoldDistribution and parts and all(
                callable(getattr(p, "logpdf", None)) for p in parts):
            cls = _OutOfFoldDensity
        return super().__new__(cls)

    def __repr__(self):
        return f"OutOfFoldDistribution(shape={self._shape}, n_parts={len(self.parts)})"


class _OutOfFoldDensity(OutOfFoldDistribution):
    """An :class:`OutOfFoldDistribution` whose parts all have a density: adds ``logpdf``
    and ``pdf``."""

    def logpdf(self, y):
        return self._each("logpdf", y)

    def pdf(self, y):
        return self._each("pdf", y)


class TransformedDistribution:
    """The distribution of ``y = inverse(z)`` for ``z`` drawn from a predictive ``base``.

    The predictive of a regressor fitted on transformed targets ``z = forward(y)``, such as
    scikit-learn's ``TransformedTargetRegressor`` (``func=np.log`` for a positive, skewed
    target): :func:`skbnngp.metrics.predictive_response` returns it, so the package's
    scorers and :func:`~skbnngp.model_selection.cross_val_predict_dist` score the model in
    the units of ``y``. The map must be strictly monotone in each entry (increasing or
    decreasing; checked at the base's quartiles), so quantiles and intervals map across
    and a central interval keeps its coverage; a quantile beyond the transform's range is
    the infinite end it points to. ``logpdf`` (present when ``base`` has one)
    adds ``log |d forward / dy|``, from a central difference of ``inverse`` on the base's
    scale. There is no ``mean`` or ``std``: they need not exist (``exp`` of a Student-t has
    no mean); ``median`` and ``interval`` do.

    Parameters
    ----------
    base : frozen distribution
        The predictive of ``z``, with ``cdf`` and ``ppf``, of batch shape ``shape``.
    forward, inverse : callable
        Elementwise maps ``y -> z`` and ``z -> y`` on arrays of any shape whose trailing
        axes are the batch shape's.
    """

    def __init__(self, base, forward, inverse):
        self.base, self.forward, self.inverse = base, forward, inverse
        self._shape = tuple(_dist_shape(base))
        # the direction of the map at each entry, from the base's quartiles (where they are
        # finite: a conformal predictive on very few rows may have none)
        q = [np.broadcast_to(np.asarray(base.ppf(p), dtype=float), self._shape)
             for p in (0.25, 0.75)]
        known = np.isfinite(q[0]) & np.isfinite(q[1]) & (q[0] < q[1])
        lo, hi = (np.asarray(inverse(np.where(known, a, 0.0)), dtype=float) for a in q)
        if not np.all(~known | (np.isfinite(lo) & np.isfinite(hi) & (lo != hi))):
            raise TypeError("the target transform's inverse is not finite or not strictly "
                            "monotone at the predictive's quartiles (they map to NaN, an "
                            "infinity or one value), so it gives no predictive distribution "
                            "of y; a transform of bounded range (Yeo-Johnson with a negative "
                            "lambda) cannot map a predictive's tail back.")
        self._decreasing = known & (hi < lo)

    @property
    def shape(self):
        return self._shape

    def _flip(self, q):
        q = np.asarray(q, dtype=float)
        return np.where(self._decreasing, 1.0 - q, q)

    def cdf(self, y):
        y = np.asarray(y, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.asarray(self.forward(y), dtype=float)
        F = self._flip(np.asarray(self.base.cdf(np.where(np.isnan(z), 0.0, z)), dtype=float))
        # y outside the map's domain lies beyond one end of the range of y: below it when
        # under the median, so no mass is below y; above it, all of it
        return np.where(np.isnan(z), (y >= self.median()).astype(float), F)

    def _back(self, z, upper):
        """``inverse(z)``, where a quantile ``z`` of the base beyond the transform's range
        (no y maps to it: Yeo-Johnson with a negative lambda) is the infinite end it
        points to (``upper``: the quantile of y is above the median), not NaN."""
        z = np.asarray(z, dtype=float)
        with np.errstate(invalid="ignore", over="ignore"):
            y = np.asarray(self.inverse(z), dtype=float)
        return np.where(np.isnan(y) & ~np.isnan(z), np.where(upper, np.inf, -np.inf), y)

    def ppf(self, q):
        q = np.broadcast_to(np.asarray(q, dtype=float), np.broadcast_shapes(np.shape(q),
                                                                           self._shape))
        return self._back(self.base.ppf(self._flip(q)), q >= 0.5)

    def interval(self, confidence):
        if not 0 <= confidence <= 1:
            raise ValueError("confidence must lie in [0, 1].")
        lo, hi = (np.broadcast_to(np.asarray(v, dtype=float), self._shape)
                  for v in self.base.interval(confidence))  # the base's own rounding
        a, b = self._back(lo, self._decreasing), self._back(hi, ~self._decreasing)
        return np.minimum(a, b), np.maximum(a, b)

    def median(self):
        return self.ppf(0.5)

    def rvs(self, size=None, random_state=None):
        """Draws ``inverse(z)`` of ``z`` from the base, of shape ``size + shape``."""
        z = np.asarray(self.base.rvs(
            size=None if size is None else ((size,) if np.isscalar(size) else tuple(size))
            + self._shape, random_state=random_state), dtype=float)
        upper = (z >= np.asarray(self.base.median(), dtype=float)) != self._decreasing
        return self._back(z, upper)

    def __repr__(self):
        return f"TransformedDistribution(shape={self._shape}, base={type(self.base).__name__})"


class TransformedDensity(TransformedDistribution):
    """A :class:`TransformedDistribution` whose base has a density: adds ``logpdf`` and
    ``pdf`` (the change of variables)."""

    def logpdf(self, y):
        y = np.asarray(y, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.asarray(self.forward(y), dtype=float)
        inside = np.isfinite(z)  # elsewhere y lies outside the map's range: no density
        zs = np.where(inside, z, 0.0)
        h = 1e-6 * np.maximum(np.abs(zs), 1.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            slope = (np.asarray(self.inverse(zs + h), dtype=float)
                     - np.asarray(self.inverse(zs - h), dtype=float)) / (2.0 * h)
            out = np.asarray(self.base.logpdf(zs), dtype=float) - np.log(np.abs(slope))
        return np.where(inside, out, -np.inf)

    def pdf(self, y):
        return np.exp(self.logpdf(y))


class StackedDistribution(_PartedDistribution):
    """Column-wise stack of single-target predictives: target ``j`` of every entry is
    answered by ``parts[j]``.

    The predictive of scikit-learn's ``MultiOutputRegressor`` (one regressor per target),
    which :func:`skbnngp.metrics.predictive_response` returns: the targets are treated as
    independent, as the per-target regressors model them. ``logpdf`` and ``pdf`` exist when
    every part has them; ``mean`` and ``std`` are each part's.

    Parameters
    ----------
    parts : list of frozen distributions
        One per target, each of batch shape ``(n_samples,)``.
    """

    def __init__(self, parts):
        self.parts = list(parts)
        shapes = {tuple(_dist_shape(p)) for p in self.parts}
        if not self.parts or len(shapes) != 1 or len(next(iter(shapes))) != 1:
            raise ValueError("parts must be one or more predictives of one batch shape "
                             f"(n_samples,); got shapes {sorted(shapes)}.")
        self._shape = next(iter(shapes)) + (len(self.parts),)

    def _each(self, method, arg=None):
        if arg is None:
            outs = [self._part_method(p, method)() for p in self.parts]
        else:
            arg = np.asarray(arg, dtype=float)
            arg = np.broadcast_to(arg, np.broadcast_shapes(arg.shape, self._shape))
            outs = [self._part_method(p, method)(arg[..., j]) for j, p in enumerate(self.parts)]
        return np.stack([np.asarray(o, dtype=float) for o in outs], axis=-1)

    def interval(self, confidence):
        if not 0 <= confidence <= 1:
            raise ValueError("confidence must lie in [0, 1].")
        bounds = [p.interval(confidence) for p in self.parts]  # each part's own rounding
        return tuple(np.stack([np.asarray(b[k], dtype=float) for b in bounds], axis=-1)
                     for k in (0, 1))

    def rvs(self, size=None, random_state=None):
        """Independent draws of every target, of shape ``size + shape``."""
        rng = check_random_state(random_state)
        lead = () if size is None else ((size,) if np.isscalar(size) else tuple(size))
        return np.stack([np.asarray(p.rvs(size=lead + self._shape[:1], random_state=rng),
                                    dtype=float) for p in self.parts], axis=-1)

    def __repr__(self):
        return f"StackedDistribution(shape={self._shape})"


class StackedDensity(StackedDistribution):
    """A :class:`StackedDistribution` whose parts all have a density: adds ``logpdf`` and
    ``pdf``."""

    def logpdf(self, y):
        return self._each("logpdf", y)

    def pdf(self, y):
        return self._each("pdf", y)


def _stacked(parts):
    """:class:`StackedDensity` when every part has a ``logpdf``, else
    :class:`StackedDistribution`."""
    dense = all(callable(getattr(p, "logpdf", None)) for p in parts)
    return (StackedDensity if dense else StackedDistribution)(parts)


def _transformed(base, forward, inverse):
    """:class:`TransformedDensity` when ``base`` has a ``logpdf``, else
    :class:`TransformedDistribution`."""
    cls = TransformedDensity if callable(getattr(base, "logpdf", None)) \
        else TransformedDistribution
    return cls(base, forward, inverse)


__all__ = ["ConformalPredictiveDistribution", "NormalMixture", "OutOfFoldDistribution",
           "ScaleMixtureNormal", "StackedDistribution", "TransformedDistribution"]
