"""Post-hoc calibration of the predictive, one interface for every estimator.

Every estimator takes one parameter, ``calibration``, with the same values:

- ``"student_t"``: the predictive becomes a Student-t whose degrees of freedom
  (``predictive_df_``) and variance factor (``calibration_factor_``) are fitted to the
  standardised residuals of rows the predictive did not see: closed-form leave-one-out
  residuals for the Gaussian-process regressors, held-out rows for the network regressors.
- ``"gaussian"``: the predictive keeps its shape; its variance is multiplied by the smallest
  factor >= 1 under which the central 95 % interval holds 95 % of those residuals (their
  split-conformal quantile).
- ``"temperature"`` (classifiers): one temperature on the logits, fitted on held-out rows.
- ``"auto"``: the estimator's default rule (documented on each estimator).
- ``None``: the model's own predictive.

The numerics (the t fits, the conformal quantile, the temperature's optimisation) live in
:mod:`skbnngp._backend._calibration`; this module chooses among them.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ._backend._calibration import (
    T_MAX_FIT_ROWS,
    fit_t,
    loo_variance_factor,
    student_t_calibration,
    weighted_median,
)
from ._scale_mixture import Mixing
from .utils._sklearn_compat import StrOptions

#: Central interval whose held-out coverage the variance calibration matches.
CALIBRATION_LEVEL = 0.95

#: Smallest degrees of freedom the Student-t calibration chooses for a near-noiseless
#: target (:func:`near_noiseless`): the model's latent variance, not heavy-tailed noise,
#: spreads those residuals, and a t without a variance there would be an artefact of the
#: fit (an infinite ``return_std`` for a smooth deterministic function).
MIN_DF_LOW_NOISE = 3.0

#: Where the standardised residuals of the rows a model trained on fit a t (free scale) of at
#: most this many degrees of freedom, a Student-t calibration on held-out rows keeps tails at
#: least that heavy (:func:`trained_tail_df`): on heavy-tailed targets a few dozen held-out
#: rows can miss every outlier, and the calibration then narrowed a Gaussian predictive
#: around the bulk (doc/whats_new.rst). None: no such cap.
TRAINED_TAIL_DF = 4.0

#: A multi-output fit warns when its targets' residuals ask for variance factors more than
#: this many times apart: the noise variance they share is then wrong for some of them, and
#: their intervals under- or over-cover beyond what a factor per target repairs
#: (doc/whats_new.rst); below it they covered as well as fitted alone.
UNEQUAL_NOISE_RATIO = 3.0

#: Noise share (median over rows of the noise variance / held-out predictive variance)
#: below which the residuals are read as the latent function's, not the noise's.
LOW_NOISE_SHARE = 0.5

#: Median absolute held-out residual, as a fraction of the targets' standard deviation,
#: below which a target counts as near-noiseless whatever the fitted noise (an emulator).
LOW_RESIDUAL = 0.01

#: Kurtosis (``mean r^4 / mean(r^2)^2``; 3 for Gaussian residuals, 9 for a t with 5 degrees
#: of freedom) above which :func:`near_noiseless` with ``tail_check`` reads held-out
#: residuals as heavy-tailed noise, never as a near-noiseless target's. A GP's fitted noise
#: tells the two apart (its leave-one-out residuals on a noiseless target can be heavy);
#: DBK's noise share is as low on heavy-tailed data as on noiseless data, and without the
#: check the guard hid the tails the Student-t calibration is for.
HEAVY_KURTOSIS = 20.0


def trained_tail_df(residuals, weights=None):
    """The most degrees of freedom a held-out calibration may give (``max_df`` of
    :func:`fit_variance_calibration`): those of the t (free scale) fitted to ``residuals``,
    the standardised residuals of the rows the model trained on (an evenly strided subset
    of at most ``T_MAX_FIT_ROWS`` rows), when they are at most :data:`TRAINED_TAIL_DF`, else
    ``inf``. Their bulk is narrower than a new row's, which the free scale absorbs; their
    tail shape is the data's. Residuals of shape (n, C), C > 1, give one value per target
    (an array of shape (C,)): a heavy-tailed target does not cap the others, as the
    held-out calibration itself is fitted target by target."""
    z = np.asarray(residuals, dtype=np.float64)
    if z.ndim == 2 and z.shape[1] > 1:
        return np.array([trained_tail_df(z[:, j], weights) for j in range(z.shape[1])])
    if TRAINED_TAIL_DF is None:
        return math.inf
    rows = z.shape[0] if z.ndim else 0
    if rows == 0:
        return math.inf
    step = -(-rows // T_MAX_FIT_ROWS)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)[::step]
    df, _ = fit_t(z[::step], weights=w)
    return df if df <= TRAINED_TAIL_DF else math.inf


def warn_unequal_targets(name, own, stacklevel=2):
    """Warn when the targets of a multi-output fit, which share one noise variance, ask for
    variance factors (``own``: each target's, with no floor) more than
    :data:`UNEQUAL_NOISE_RATIO` apart."""
    own = np.asarray(own, dtype=np.float64)
    if own.size < 2 or not np.all(np.isfinite(own)) or own.min() <= 0:
        return
    ratio = own.max() / own.min()
    if ratio > UNEQUAL_NOISE_RATIO:
        warnings.warn(
            f"{name}: the targets share one noise variance, but their residuals ask for "
            f"variances {ratio:.1f} times apart, so some targets' intervals may be too narrow "
            f"(or too wide). Fit one {name} per target column (each with its own noise and "
            "intervals; sklearn's MultiOutputRegressor does so, and "
            "skbnngp.metrics.predictive_response gives its predictive) when their noise "
            "levels differ.", UserWarning, stacklevel=stacklevel + 1)


def near_noiseless(residuals, targets, noise_share, weights=None, target_weights=None,
                   tail_check=False):
    """Whether held-out residuals come from a near-noiseless target: the noise is under
    :data:`LOW_NOISE_SHARE` of their predictive variance, or the residuals are under
    :data:`LOW_RESIDUAL` of the targets' spread (a Nystrom or network noise term can absorb
    approximation error and stay large). With ``tail_check``, residuals whose kurtosis
    exceeds :data:`HEAVY_KURTOSIS` are never near-noiseless (for models whose noise share
    does not tell outliers from latent error). ``weights``: one per row (frequency weights);
    ``target_weights``: those of the rows of ``targets`` when these are other rows (e.g.
    every training row, the residuals being the held-out ones); default ``weights``.

    ``residuals`` and ``targets`` of shape (n,) or (n, 1) give a bool; of shape (n, C) with
    C > 1 (a multi-output fit), a bool array of shape (C,): one answer per target.
    """
    r = np.abs(np.asarray(residuals, dtype=np.float64))
    t = np.asarray(targets, dtype=np.float64)
    if r.ndim == 2 and r.shape[1] > 1:
        t = t.reshape(t.shape[0], -1)
        return np.array([near_noiseless(r[:, j], t[:, j], noise_share, weights,
                                        target_weights, tail_check)
                         for j in range(r.shape[1])])
    if weights is None:
        spread = float(np.max(np.std(t, axis=0), initial=0.0))
        tiny = spread > 0 and float(np.median(r[np.isfinite(r)])) < LOW_RESIDUAL * spread
        heavy = tail_check and _heavy(r, None)
        return bool((noise_share < LOW_NOISE_SHARE or tiny) and not heavy)
    w = np.asarray(weights, dtype=np.float64)
    wt = w if target_weights is None else np.asarray(target_weights, dtype=np.float64)
    t = t.reshape(t.shape[0], -1)
    sd = np.sqrt(np.average((t - np.average(t, axis=0, weights=wt)) ** 2, axis=0, weights=wt))
    spread = float(np.max(sd, initial=0.0))
    r = r.reshape(r.shape[0], -1)
    ok = np.all(np.isfinite(r), axis=1)
    tiny = spread > 0 and weighted_median(r[ok], w[ok]) < LOW_RESIDUAL * spread
    heavy = tail_check and _heavy(r[ok], w[ok])
    return bool((noise_share < LOW_NOISE_SHARE or tiny) and not heavy)


def _heavy(r, w):
    """Whether the residuals ``r`` of one target (weights ``w``) have a kurtosis above
    :data:`HEAVY_KURTOSIS`."""
    r = np.ravel(r)
    ok = np.isfinite(r)
    r2 = r[ok] ** 2
    if r2.size < 2:
        return False
    ww = None if w is None else np.ravel(w)[ok]
    m2 = np.average(r2, weights=ww)
    return bool(m2 > 0 and np.average(r2 ** 2, weights=ww) > HEAVY_KURTOSIS * m2 ** 2)


#: ``_parameter_constraints`` entry of a regressor's ``calibration``.
REGRESSOR_CALIBRATION = [StrOptions({"auto", "student_t", "gaussian"}), None]

#: ``_parameter_constraints`` entry of a classifier's ``calibration``.
CLASSIFIER_CALIBRATION = [StrOptions({"auto", "temperature"}), None]

_GAUSSIAN = Mixing("delta", value=1.0)


def fit_variance_calibration(method, z, *, reference=_GAUSSIAN, level=CALIBRATION_LEVEL,
                             max_test_df=math.inf, near_noiseless=False, weights=None,
                             t_shape="likelihood", min_factor=1.0, max_df=math.inf):
    """``(calibration_factor, predictive_df)`` for the standardised residuals ``z``.

    Parameters
    ----------
    method : {"student_t", "gaussian"} or None
        None returns ``(1.0, inf)``: the model's own predictive.
    z : array-like
        Residuals divided by the predictive standard deviation of the model at unit
        amplitude (non-finite entries are ignored).
    reference : Mixing, default=a point mass at 1 (a Gaussian)
        The model's own amplitude. ``"student_t"`` reads ``z`` against it and never chooses
        lighter tails than its own; ``"gaussian"`` keeps its shape and takes the conformal
        quantile at its ``(1 + level) / 2`` quantile.
    level : float, default=0.95
    max_test_df : float, default=inf
        ``"student_t"`` trusts a scale narrower than the model's only when the t fitted with
        it has at most this many degrees of freedom (see
        :func:`~skbnngp._backend._calibration.student_t_calibration`).
    near_noiseless : bool, default=False
        The residuals come from a near-noiseless target (:func:`near_noiseless`):
        ``"student_t"`` then keeps at least :data:`MIN_DF_LOW_NOISE` degrees of freedom, so
        heavy tails are read as noise only where there is noise.
    weights : array-like of shape (n_rows,), default=None
        Frequency weights of the rows of ``z`` (a residual of weight w counts w times).
    t_shape : {"likelihood", "levels"}, default="likelihood"
        How ``"student_t"`` chooses the degrees of freedom: by likelihood, or by matching
        the residuals' central intervals over the levels 0.05...0.95 (see
        :func:`~skbnngp._backend._calibration.student_t_calibration`).
    min_factor : float, default=1.0
        The least factor where nothing trusts a narrower scale than the model's: with the
        default the intervals are only widened; 0 gives the residuals' own factor.
    max_df : float, default=inf
        ``"student_t"`` chooses at most this many degrees of freedom (besides the cap of
        ``reference``): tails known from other rows than ``z``'s. A near-noiseless target
        keeps its floor of :data:`MIN_DF_LOW_NOISE` all the same.
    """
    if method is None:
        return 1.0, math.inf
    z = np.asarray(z, dtype=np.float64)
    if method == "student_t":
        s0, own_df = reference.t_reference()
        min_df = MIN_DF_LOW_NOISE if near_noiseless else 1.0
        df, factor = student_t_calibration(z / math.sqrt(s0), level,
                                           max_df=min(own_df, max(float(max_df), min_df)),
                                           max_test_df=max_test_df, min_df=min_df,
                                           weights=weights, shape=t_shape,
                                           min_factor=min_factor)
        return float(factor), float(df)
    if method == "gaussian":
        unit = reference.predictive(np.zeros(1), np.ones(1)).ppf(0.5 + level / 2)
        return loo_variance_factor(z, float(np.ravel(unit)[0]), level, floor=min_factor,
                                   weights=weights), math.inf
    raise ValueError(f"calibration must be 'student_t', 'gaussian' or None, got {method!r}.")


def relative_target_factors(factors, own):
    """Per-target variance factors of a multi-output model whose targets share one noise
    variance, where residuals are trusted to widen a predictive but not, alone, to narrow
    it (features learned on the same rows make them narrower than fresh ones).

    ``factors`` are the targets' own calibrations (at least 1 unless heavy tails narrowed
    them) and ``own`` the same fits with no floor: the factor each target's residuals ask
    for. The target whose residuals ask the most keeps its calibration; every other target
    is set at the same ratio to it as its residuals' (never wider than its own
    calibration). That optimism is shared by the targets, but a noise fitted to all targets
    at once is too wide for the quieter ones: without this, their intervals over-cover
    while the noisier targets' under-cover.
    """
    factors, own = np.asarray(factors, dtype=np.float64), np.asarray(own, dtype=np.float64)
    ref = int(np.argmax(own))
    if not (np.isfinite(own[ref]) and own[ref] > 0):
        return factors
    scaled = own * (factors[ref] / own[ref])
    # a target whose residuals vanish (or are not finite) keeps its own calibration
    return np.where(np.isfinite(scaled) & (scaled > 0), np.minimum(factors, scaled), factors)
