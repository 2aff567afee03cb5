"""Calibration numerics on standardised residuals and logits (NumPy / SciPy; no sklearn).

The conformal variance factor (:func:`loo_variance_factor`), the Student-t fits of the
residuals' shape and scale (:func:`fit_t_df`, :func:`fit_t`, :func:`student_t_calibration`).
:mod:`skbnngp._calibration` chooses among them for the estimators' ``calibration``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats


def _flat(z, weights=None):
    """The finite entries of ``z`` (any shape) as a vector, and their weights: ``weights``
    holds one per row of ``z`` (None: every entry once)."""
    z = np.asarray(z, dtype=np.float64)
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64).reshape(-1, *([1] * (z.ndim - 1)))
        w = np.broadcast_to(w, z.shape).ravel()
    z = z.ravel()
    ok = np.isfinite(z)
    return z[ok], (None if weights is None else w[ok])


def weighted_median(values, weights=None):
    """The median of ``values`` with frequency ``weights`` (``np.median`` without them;
    with integer weights, ``np.median`` of the values repeated)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if weights is None:
        return float(np.median(v))
    w = np.broadcast_to(np.asarray(weights, dtype=np.float64).reshape(-1, *([1] * (
        np.ndim(values) - 1))), np.shape(values)).ravel()
    order = np.argsort(v, kind="stable")
    v, c = v[order], np.cumsum(w[order])
    half = 0.5 * c[-1]
    lo = int(np.searchsorted(c, half, side="left"))
    hi = int(np.searchsorted(c, half, side="right"))
    return float(0.5 * (v[min(lo, v.size - 1)] + v[min(hi, v.size - 1)]))


def _mean(a, w, axis=0, keepdims=False):
    """Mean over ``axis`` with frequency weights ``w`` along it (None: plain)."""
    if w is None:
        return np.mean(a, axis=axis, keepdims=keepdims)
    shape = [1] * a.ndim
    shape[axis] = -1
    return np.sum(a * w.reshape(shape), axis=axis, keepdims=keepdims) / w.sum()


def loo_variance_factor(z, quantile, level=0.95, floor=1.0, weights=None):
    """Smallest factor ``k >= floor`` on the predictive variance whose central ``level``
    interval holds ``level`` of the leave-one-out residuals.

    ``z`` are the residuals divided by their leave-one-out standard deviations (any shape,
    non-finite entries ignored) and ``quantile`` the ``(1 + level) / 2`` quantile of the
    predictive at unit variance (1.96 for a Gaussian at 95 %). The residual quantile is the
    finite-sample (split-conformal) one, the ``ceil((n + 1) level)``-th smallest ``|z|``;
    below ``1 / (1 - level) - 1`` residuals (19 at 95 %) that rank does not exist and the
    largest ``|z|`` is used. The factor is never below ``floor``: with the default 1 the
    intervals are only widened. ``weights`` (one per row of ``z``) counts each residual that
    many times: the rank is then one of cumulative weight, as for repeated residuals.
    """
    a, w = _flat(z, weights)
    a = np.abs(a)
    if a.size == 0 or not np.isfinite(quantile) or quantile <= 0:
        return float(floor)
    order = np.argsort(a, kind="stable")
    a = a[order]
    if w is None:
        k = min(a.size, math.ceil((a.size + 1) * level)) - 1
    else:
        c = np.cumsum(w[order])
        rank = min(c[-1], math.ceil((c[-1] + 1) * level))
        k = min(a.size - 1, int(np.searchsorted(c, rank, side="left")))
    return max(float(floor), float(a[k] / quantile) ** 2)


#: Degrees of freedom scored by :func:`fit_t_df`; the largest stands for the Gaussian.
T_DF_GRID = np.geomspace(1.0, 1000.0, 121)


def _df_candidates(max_df, min_df=1.0):
    """Degrees of freedom the t fits may choose under the cap ``max_df``: the grid values
    from ``min_df`` (itself included) below it and the cap itself (``inf``: the whole grid
    and the Gaussian). A cap below ``min_df`` wins."""
    min_df = min(float(min_df), float(max_df))
    grid = T_DF_GRID[T_DF_GRID > min_df]
    grid = grid if min_df < T_DF_GRID[0] else np.append(min_df, grid)
    if math.isinf(max_df):
        return grid
    return np.append(grid[grid < max_df], float(max_df))


def fit_t_df(z, max_df=math.inf, min_df=1.0, weights=None):
    """Degrees of freedom of the unit-scale Student-t of largest likelihood for the
    standardised residuals ``z`` (on a log grid from 1 to 1000); ``inf`` (the Gaussian) when
    the largest grid value wins, or without finite residuals. A finite ``max_df`` caps the
    choice: the grid values below it and ``max_df`` itself (no Gaussian). ``weights``: one
    per residual (frequency weights)."""
    z, w = _flat(z, weights)
    if z.size == 0:
        return float(max_df)
    nu = _df_candidates(max_df, min_df)
    ll = _t_grid_loglik(z * z, np.zeros(nu.size), nu, w)
    j = int(np.argmax(ll))
    lp = stats.norm.logpdf(z)
    if math.isinf(max_df) and (j == nu.size - 1
                               or (lp.sum() if w is None else lp @ w) >= ll[j]):
        return math.inf
    return float(nu[j])


def _t_grid_loglik(z2, log_s2, nu=T_DF_GRID, w=None):
    """Log-likelihood of the residuals with squares ``z2`` under the t of every degrees of
    freedom in ``nu`` (default :data:`T_DF_GRID`), each at its own scale ``exp(log_s2 /
    2)`` (an array over ``nu``), in one (n x len(nu)) pass."""
    const = (special.gammaln((nu + 1) / 2) - special.gammaln(nu / 2)
             - 0.5 * np.log(np.pi * nu) - 0.5 * log_s2)
    u = z2[:, None] * np.exp(-log_s2)[None, :]
    if w is None:
        return z2.size * const - 0.5 * (nu + 1) * np.log1p(u / nu[None, :]).sum(axis=0)
    return w.sum() * const - 0.5 * (nu + 1) * (w @ np.log1p(u / nu[None, :]))


def t_loglik(z, df, scale=1.0, weights=None):
    """Log-likelihood of ``z`` under the Student-t (``df = inf``: the Gaussian) of the
    given scale (``weights``: one per entry of ``z``, frequency weights)."""
    u = np.asarray(z, dtype=np.float64) / scale
    lp = stats.norm.logpdf(u) if math.isinf(df) else stats.t.logpdf(u, df)
    if weights is None:
        return float(lp.sum() - u.size * math.log(scale))
    return float(lp.ravel() @ weights - np.sum(weights) * math.log(scale))


def fit_t(z, n_iter=100, tol=1e-10, max_df=math.inf, min_df=1.0, weights=None):
    """Degrees of freedom (the grid of :func:`fit_t_df` and the Gaussian) and scale of the
    Student-t of largest likelihood for ``z``, both free. Returns ``(df, scale)``;
    ``(inf, 1.0)`` without nonzero finite residuals.

    For each ``df`` the maximum-likelihood scale solves ``mean(w u) = 1`` with ``u = z^2 /
    s^2`` and ``w = (df + 1) / (df + u)`` (the EM fixed point), a decreasing function of
    ``log s^2``; Newton's method on ``log s^2`` (steps capped at 2), from the squared
    residuals' median, solves it for the whole grid at once. The Gaussian's scale is
    ``sqrt(mean(z^2))``. A finite ``max_df`` caps the degrees of freedom as in
    :func:`fit_t_df` (``(max_df, 1.0)`` without nonzero residuals). ``weights``: one per
    residual (frequency weights; the means become weighted means)."""
    z, w = _flat(z, weights)
    z2 = z * z
    if z.size == 0 or not np.any(z2 > 0):
        return float(max_df), 1.0
    cand = _df_candidates(max_df, min_df)
    nu = cand[None, :]
    med = weighted_median(z2, w)
    phi = np.full((1, cand.size), math.log(med / 0.455 if med > 0 else _mean(z2, w)))
    for _ in range(n_iter):
        u = z2[:, None] * np.exp(-phi)
        f = _mean((nu + 1.0) * u / (nu + u), w, keepdims=True) - 1.0
        df_dphi = -_mean((nu + 1.0) * nu * u / (nu + u) ** 2, w, keepdims=True)
        step = np.clip(-f / np.minimum(df_dphi, -1e-300), -2.0, 2.0)
        phi = phi + step
        if np.all(np.abs(step) <= tol):
            break
    ll = _t_grid_loglik(z2, phi[0], cand, w)  # every candidate t at its own scale
    j = int(np.argmax(ll))
    s_gauss = math.sqrt(float(_mean(z2, w)))
    if math.isinf(max_df) and t_loglik(z, math.inf, s_gauss, w) >= ll[j]:
        return math.inf, s_gauss
    return float(cand[j]), math.exp(0.5 * float(phi[0, j]))


#: Central levels over which :func:`fit_t_levels` matches the residuals' quantiles.
T_FIT_LEVELS = np.arange(1, 20) / 20


def fit_t_levels(z, max_df=math.inf, min_df=1.0, weights=None, levels=T_FIT_LEVELS):
    """Degrees of freedom (the candidates of :func:`fit_t_df`, and the Gaussian when
    ``max_df`` is infinite) and scale of the Student-t whose central intervals best match
    the residuals' at every level of ``levels``: the ``(1 + c) / 2`` quantile of the t at
    scale ``s`` against the ``c`` quantile of ``|z|``, in least squares on the log scale
    (``log s`` is then the mean log ratio). A quantile (PIT) recalibration with the t's two
    parameters, fitted over the levels rather than at one. Returns ``(df, scale)``;
    ``(max_df, 1.0)`` without nonzero finite residuals. ``weights``: one per residual
    (frequency weights; the quantiles are those of the repeated residuals)."""
    z, w = _flat(z, weights)
    a = np.abs(z)
    if a.size == 0 or not np.any(a > 0):
        return float(max_df), 1.0
    order = np.argsort(a, kind="stable")
    a = a[order]
    wo = np.ones(a.size) if w is None else w[order]
    c = np.cumsum(wo)
    # the c-quantile of |z| (its empirical CDF inverted with midpoint plotting positions,
    # interpolated): a residual of weight w spans the positions of w repeats of it
    h = np.minimum(0.5, 0.5 * wo)
    knots = np.column_stack([c - wo + h, c - h]).ravel()
    q = np.interp(np.asarray(levels) * c[-1], knots, np.repeat(a, 2))
    q = np.maximum(q, a[a > 0][0] if a[0] == 0 else 0.0)
    cand = _df_candidates(max_df, min_df)
    if math.isinf(max_df):
        cand = np.append(cand, math.inf)
    p = 0.5 + 0.5 * np.asarray(levels)
    unit = np.array([stats.norm.ppf(p) if math.isinf(nu) else stats.t.ppf(p, nu)
                     for nu in cand])  # (n_candidates, n_levels)
    d = np.log(q)[None, :] - np.log(unit)
    log_s = d.mean(axis=1)
    j = int(np.argmin(((d - log_s[:, None]) ** 2).sum(axis=1)))
    return float(cand[j]), float(np.exp(log_s[j]))


#: Level of the likelihood-ratio test (one degree of freedom) under which the held-out
#: residuals' own scale replaces the posterior's in the Student-t calibration.
T_SCALE_TEST_LEVEL = 0.01

#: Residuals beyond which :func:`student_t_calibration` fits the t on a strided subset.
T_MAX_FIT_ROWS = 20000


def _may_narrow(w_total, level):
    """Whether ``w_total`` residuals (their total weight) are enough for a variance factor
    below 1: at least ``level / (1 - level)`` (19 at 95 %), the fewest whose split-conformal
    rank exists (:func:`loo_variance_factor`). On fewer, the likelihood-ratio test's
    chi-square reference does not hold and two residuals near 0 would shrink the predictive
    variance ten-thousandfold; the calibration then only widens."""
    return w_total >= level / (1.0 - level) - 1e-9


def student_t_calibration(z, level=0.95, max_df=math.inf, max_test_df=math.inf,
                          min_df=1.0, weights=None, shape="likelihood", min_factor=1.0):
    """``(df, factor)`` of the Student-t calibration for the standardised held-out
    residuals ``z``.

    The null model is the posterior's own scale (a unit-scale t, degrees of freedom by
    :func:`fit_t_df`); the alternative frees the scale as well (:func:`fit_t`). When the
    likelihood-ratio test rejects the null at :data:`T_SCALE_TEST_LEVEL`, the alternative's
    degrees of freedom are kept and the variance factor may fall to its squared scale
    (residuals far narrower than the posterior's predictive: a Gaussian noise estimate
    inflated by outliers); otherwise the factor is at least 1. Either way the factor is
    then the split-conformal one of :func:`loo_variance_factor` at the t's own quantile.
    Above :data:`T_MAX_FIT_ROWS` residuals, the two fits and the test use an evenly strided
    subset of that many (the fits cost O(n x 121)); the conformal quantile uses them all.
    A finite ``max_df`` caps the degrees of freedom of both fits (see :func:`fit_t_df`): a
    model whose own predictive is already a t keeps at least its tails. A finite
    ``max_test_df`` keeps the alternative only when its degrees of freedom are at most that:
    a narrower scale is then trusted only as the bulk of heavy tails that inflated the
    model's noise estimate, not as a uniformly narrower spread, which residuals that are
    not fully out-of-sample also show. ``weights`` (one per row of ``z``) counts each
    residual that many times, as if repeated. ``shape="levels"`` takes the degrees of
    freedom of :func:`fit_t_levels` instead (the t's central intervals matched to the
    residuals' over the levels 0.05...0.95, not its likelihood) and its scale as the
    factor, for residuals whose bulk and tails a likelihood fit and a 95 % rule weigh
    badly (few, peaked and heavy-tailed). ``min_factor`` replaces the floor of 1 where the
    scale is not trusted to narrow (0: the residuals' own factor, narrower or not).
    """
    z, w = _flat(z, weights)
    if shape == "levels":
        return _student_t_levels(z, w, level, max_df, max_test_df, min_df, min_factor)
    stride = -(-z.size // T_MAX_FIT_ROWS) if z.size > T_MAX_FIT_ROWS else 1
    zf, wf = z[::stride], (None if w is None else w[::stride])
    df0 = fit_t_df(zf, max_df, min_df, weights=wf)
    df, floor = df0, min_factor
    if zf.size and _may_narrow(z.size if w is None else float(w.sum()), level):
        df1, s = fit_t(zf, max_df=max_df, min_df=min_df, weights=wf)
        stat = 2.0 * (t_loglik(zf, df1, s, wf) - t_loglik(zf, df0, weights=wf))
        if stat > stats.chi2.isf(T_SCALE_TEST_LEVEL, 1) and df1 <= max_test_df:
            df, floor = df1, s * s
    unit = stats.norm.ppf(0.5 + level / 2) if math.isinf(df) else stats.t.ppf(0.5 + level / 2, df)
    return df, loo_variance_factor(z, unit, level, floor=floor, weights=w)


def _student_t_levels(z, w, level, max_df, max_test_df, min_df, min_factor=1.0):
    """:func:`student_t_calibration` with ``shape="levels"``: the degrees of freedom and
    the squared scale of :func:`fit_t_levels`, which may fall below 1 only when those
    degrees of freedom are at most ``max_test_df`` (as in the likelihood rule). The 95 %
    conformal factor is not applied: it widens the central intervals that the fit over
    the levels matched (``level`` only sets the fewest residuals that may narrow it)."""
    df, s = fit_t_levels(z, max_df, min_df, weights=w)
    narrow = df <= max_test_df and _may_narrow(z.size if w is None else float(w.sum()), level)
    return df, (s * s if narrow else max(s * s, min_factor))


# ---------------------------------------------------------------------- temperature scaling
#: Range of ``log T`` searched by :func:`fit_temperature`.
LOG_T_RANGE = (np.log(0.05), np.log(20.0))
#: Prior std of ``log T`` below 0 (sharpening, ``T < 1``; a half-Gaussian there): with every
#: validation row classified right the likelihood alone drives ``T`` to 0.
LOG_T_PRIOR_SD = 0.5
#: Prior std of ``log T`` above 0 (softening, ``T > 1``): wider, since there the likelihood
#: is bounded (``log K`` a row as ``T`` grows) and every misclassified row measures ``T``; a
#: narrow prior held the temperature of over-confident networks on a handful of held-out
#: rows per class too near 1.
LOG_T_PRIOR_SD_ABOVE = 1.0


def tempered_nll(logits, y, temperature, weights=None):
    """Mean NLL of the predictive ``mean_s softmax(logits_s / T)``; ``logits`` (S, n, K);
    the ``weights``-weighted mean when given."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=2, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=2, keepdims=True))
    # log of the average over draws of each row's true-class probability
    lp = logp[:, np.arange(logp.shape[1]), y]
    m = lp.max(axis=0)
    ll = m + np.log(np.mean(np.exp(lp - m), axis=0))
    if weights is not None:
        return float(-np.average(ll, weights=weights))
    return float(-np.mean(ll))


def log_temperature_prior(v, prior_sd=LOG_T_PRIOR_SD, prior_sd_above=LOG_T_PRIOR_SD_ABOVE):
    """Negative log prior (up to a constant) of ``v = log T``: ``v^2 / (2 sd^2)`` with ``sd
    = prior_sd`` below 0 and ``prior_sd_above`` above (None: no prior on that side). Its
    weight against the summed validation NLL is fixed, so it shrinks per held-out row as
    the rows grow."""
    sd = prior_sd if v < 0 else prior_sd_above
    return 0.0 if sd is None else 0.5 * v * v / (sd * sd)


def fit_temperature(logits, y, prior_sd=LOG_T_PRIOR_SD, prior_sd_above=LOG_T_PRIOR_SD_ABOVE,
                    weights=None):
    """The temperature of largest posterior: validation NLL (summed) plus the prior of
    :func:`log_temperature_prior` on ``log T`` (``prior_sd=None``: no prior on either side,
    the plain maximum-likelihood fit), over ``log T`` in :data:`LOG_T_RANGE`; returns ``T``
    and the validation NLL (mean) at ``T``. ``weights``: frequency weights of the rows (the
    NLL of each counted ``w_i`` times, ``n = sum w``)."""
    from scipy.optimize import minimize_scalar

    n = np.asarray(logits).shape[1] if weights is None else float(np.sum(weights))
    if prior_sd is None:
        prior_sd_above = None

    def objective(v):
        return (tempered_nll(logits, y, np.exp(v), weights)
                + log_temperature_prior(v, prior_sd, prior_sd_above) / n)

    res = minimize_scalar(objective, bounds=LOG_T_RANGE, method="bounded",
                          options={"xatol": 1e-4})
    t = float(np.exp(res.x))
    return t, tempered_nll(logits, y, t, weights)
