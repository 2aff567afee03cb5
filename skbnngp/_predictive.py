"""The predictive layer shared by every estimator: ``predict`` and its distributions.

:class:`RegressorPredictiveMixin` owns ``predict(X, return_std, return_cov)``,
``predict_std``, ``predict_dist`` and ``sample_y`` for the four regressors; each regressor
supplies only its latent moments (:meth:`RegressorPredictiveMixin._latent_moments`).
:class:`ClassifierPredictiveMixin` owns ``predict``, ``predict_log_proba`` and
``decision_function`` on top of a classifier's ``predict_proba``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from scipy import stats
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._backend import (
    as_tensor,
    iter_slices,
    leave_group_out,
    leave_one_copy_out,
    stable_cholesky,
    to_numpy,
    weighted_median,
)
from ._base import check_n_samples, check_predict_params, threaded
from ._calibration import (
    fit_variance_calibration,
    near_noiseless,
    relative_target_factors,
    warn_unequal_targets,
)
from ._intervals import central_intervals
from ._rows import duplicate_groups, rows_replicate
from ._scale_mixture import Mixing
from .exceptions import HeavyTailWarning, NumericalWarning
from .utils._sklearn_compat import validate_data


def clip_variances(estimator, V, full_cov):
    """Clip negative predictive variances to 0, warning when they are not round-off.

    ``V`` is a NumPy vector of variances or a covariance matrix (its diagonal is clipped).
    """
    diag = np.diagonal(V) if full_cov else V
    scale = max(1.0, float(np.abs(diag).max(initial=0.0)))
    if np.any(diag < -1e-8 * scale):
        # in single precision the cancellation in k** - k*' K^-1 k* is the usual cause
        hint = ("; single precision cannot resolve them here: fit with dtype='float64'"
                if getattr(estimator, "_dtype", None) == torch.float32 else "")
        warnings.warn(f"{type(estimator).__name__}: predicted variances down to "
                      f"{diag.min():.3g} were clipped to 0{hint}.", NumericalWarning,
                      stacklevel=4)
    if full_cov:
        V = V.copy()
        np.fill_diagonal(V, np.maximum(diag, 0.0))
        return V
    return np.maximum(V, 0.0)



#: Rows per block of a prediction: each block's features, kernels and Jacobians are freed
#: before the next, so predicting 10^6 rows costs a block's memory, not the rows'.
PREDICT_BLOCK_ROWS = 8192


def loo_new_rows(engine, state, params, noise, leave_groups=True):
    """The closed-form leave-one-out residuals ``r`` (n, C) of a fitted Gaussian-process
    ``engine`` and the predictive variances ``v`` (n,) of one new observation at each
    training row, as NumPy, with each residual's frequency weight (``engine.weights``, or
    None).

    Replicates of a design (:func:`~skbnngp._rows.rows_replicate`) are left out one copy at a
    time (a new row at a merged row's input meets the other copies); otherwise, with
    ``leave_groups``, rows that repeat one input are left out together (a twin left in the
    training set predicts its row exactly). A weighted row's variance is one observation's
    (noise ``noise``, not its own ``noise / w``)."""
    r, v = engine.loo(state, params)
    w = getattr(engine, "weights", None)
    groups = duplicate_groups(to_numpy(engine.X))
    recur = rows_replicate(groups, engine.n, None if w is None else to_numpy(w))
    if leave_groups and groups and not recur:
        r, v = leave_group_out(engine, state, params, r, v, groups)
    if w is not None and recur:
        r, v = leave_one_copy_out(r, v, w, noise)
        w = to_numpy(w)
    elif w is not None:
        w = to_numpy(w)
        v = to_numpy(v) + float(noise) * (1.0 - 1.0 / w)
    return to_numpy(r), np.maximum(to_numpy(v), 1e-300), w


class RegressorPredictiveMixin:
    """``predict``, ``predict_std``, ``predict_dist``, ``predict_interval`` and ``sample_y``
    of a regressor.

    The path is the same for every regressor: validate ``X`` -> scale it with the fitted
    input scaling -> latent moments (the subclass) -> multiply by ``calibration_factor_`` ->
    clip round-off negatives -> unscale to y's units under the predictive's amplitude
    (a Gaussian, or a scale mixture: a Student-t).

    A subclass implements ``_latent_moments(Xq, full_cov)``: at the scaled inputs ``Xq`` (a
    tensor on ``device_``), the normalised predictive mean (m x C) and the unit-amplitude
    variance (m,) or covariance (m x m), before calibration, as NumPy arrays. It lists the
    constructor parameters that prediction reads in ``_predict_params`` (validated at every
    call, since ``set_params`` after fit is not) and may override ``_model_mixing`` (the
    fitted amplitude: a point mass at 1 for a Gaussian process).

    Fitted state it reads: ``_X_offset``, ``_X_scale`` (from :func:`fit_input_scaling`),
    the target statistics of :meth:`_normalise_targets`, ``calibration_factor_`` and
    ``predictive_df_``.
    """

    #: Constructor parameters read at predict time.
    _predict_params = ()

    def _normalise_targets(self, y, sample_weight=None):
        """Store the target statistics and return ``y`` as a normalised (n, C) array.

        The statistics are computed in float64 after dividing by the largest magnitude, so
        that targets near the float limits (1e30 in float32, 1e155 in float64) neither
        overflow when squared nor lose the mean. ``sample_weight`` weights the mean and std
        (a row counted that many times).
        """
        self._y_1d = y.ndim == 1
        Y = np.asarray(y.reshape(-1, 1) if self._y_1d else y, dtype=np.float64)
        if Y.shape[1] == 0:
            raise ValueError("y has 0 targets; at least one is required.")
        if self.normalize_y:
            big = np.abs(Y).max(axis=0)
            big = np.where(big > 0, big, 1.0)
            Ys = Y / big
            if sample_weight is None:
                mean, std = Ys.mean(axis=0), Ys.std(axis=0)
            else:
                mean = np.average(Ys, axis=0, weights=sample_weight)
                std = np.sqrt(np.average((Ys - mean) ** 2, axis=0, weights=sample_weight))
            tiny = 10 * np.finfo(np.float64).eps * np.maximum(np.abs(mean), 1e-300)
            self._y_train_mean = mean * big
            self._y_train_std = np.where(std > tiny, std * big, np.where(
                np.abs(mean) > 0, np.abs(self._y_train_mean), 1.0))
            return (Ys - mean) * (big / self._y_train_std)
        self._y_train_mean, self._y_train_std = np.zeros(Y.shape[1]), np.ones(Y.shape[1])
        return Y

    def _unscale(self, mean):
        out = mean * self._y_train_std + self._y_train_mean
        return out[:, 0] if self._y_1d else out

    def _fit_calibration(self, method, z, *, near_noiseless=False, relative_targets=False,
                         **options):
        # ``options`` may hold ``weights``: one frequency weight per row of ``z``
        """Set ``calibration_factor_`` and ``predictive_df_`` from the standardised
        residuals ``z`` of rows the predictive did not see (see
        :func:`~skbnngp._calibration.fit_variance_calibration`; ``options`` go to it).

        A multi-output ``z`` (n, C) is calibrated target by target: both attributes become
        arrays of shape (C,), so one heavy-tailed or near-noiseless target does not set the
        tails of the others (``near_noiseless`` may then be a bool per target, and the
        ``max_df`` of ``options`` one cap per target).
        ``relative_targets``: for a model whose noise is shared by the targets and whose
        residuals are not trusted to narrow a target on their own (see
        :func:`relative_target_factors`). The factors each target's residuals ask for, with
        no floor, are returned (None for one target), and a fit whose targets ask for
        factors far apart warns (:func:`~skbnngp._calibration.warn_unequal_targets`).
        """
        reference = self._model_mixing()
        z = np.asarray(z, dtype=np.float64)
        max_df = np.asarray(options.pop("max_df", math.inf), dtype=np.float64)
        if method is not None and z.ndim == 2 and z.shape[1] > 1:
            flags = np.broadcast_to(np.asarray(near_noiseless, dtype=bool), (z.shape[1],))
            caps = np.broadcast_to(max_df, (z.shape[1],))

            def fit(min_factor):
                return [fit_variance_calibration(method, z[:, j], reference=reference,
                                                 near_noiseless=bool(flag),
                                                 min_factor=min_factor, max_df=float(cap),
                                                 **options)
                        for j, (flag, cap) in enumerate(zip(flags, caps))]
            fits = fit(1.0)
            factors = np.array([factor for factor, _ in fits])
            own = np.array([factor for factor, _ in fit(0.0)])  # what each target asks for
            if relative_targets:
                factors = relative_target_factors(factors, own)
            self.calibration_factor_ = factors
            self.predictive_df_ = np.array([df for _, df in fits])
            warn_unequal_targets(type(self).__name__, own, stacklevel=6)
            return own
        self.calibration_factor_, self.predictive_df_ = fit_variance_calibration(
            method, z, reference=reference, near_noiseless=bool(np.all(near_noiseless)),
            max_df=float(np.min(max_df)), **options)

    def _calibrate_from_loo(self, method, engine, state, params):
        """:meth:`_fit_calibration` on the closed-form leave-one-out residuals of a fitted
        Gaussian-process ``engine`` (one O(n^3) pass over its factor; none when ``method``
        is None).

        Rows that share an input are left out together, unless the rows are replicates of a
        design (:func:`~skbnngp._rows.rows_replicate`: categories, where a new row's input was
        most likely seen and holding out a whole category would score an extrapolation).
        With row weights ``w`` (``engine.weights``: distinct rows standing for ``w`` repeats,
        :func:`~skbnngp._rows.collapse_rows`) each residual counts ``w`` times and its
        variance is that of one new observation (noise ``s``, not the row's ``s / w``); a
        row is left out with all its repeats (rows given twice), or, for replicates, one
        copy at a time."""
        if method is None:
            self.calibration_factor_, self.predictive_df_ = 1.0, math.inf
            return
        noise = state.get("noise")
        noise = params["noise_variance"] if noise is None else noise
        r, v, w = loo_new_rows(engine, state, params, noise)
        share = weighted_median(np.minimum(float(noise) / v, 1.0), w)
        self._fit_calibration(method, r / np.sqrt(v)[:, None], near_noiseless=near_noiseless(
            r, to_numpy(engine.Y), share, weights=w), weights=w)

    def _model_mixing(self):
        """The fitted model's own amplitude, before any calibration: a point mass at 1 (a
        Gaussian process). The Student-t process overrides it with its posterior."""
        return Mixing("delta", value=1.0)

    def _per_target_t(self):
        """The degrees of freedom (C,) of a per-target Student-t calibration that chose a
        finite df for some target, or None (one shared predictive: :meth:`_mixing`).

        Target j is then a Student-t at the model's squared scale ``s0``
        (:meth:`Mixing.t_reference`) with ``df[j]`` degrees of freedom, or, where its
        calibration kept the model's shape (``inf``), the model's own t (a point mass: a
        Gaussian; a sampled mixing is read at its mean amplitude, as the calibration read
        it)."""
        df = self.predictive_df_
        if np.ndim(df) == 0 or np.all(np.isinf(df)):
            return None
        return np.where(np.isinf(df), self._model_mixing().t_reference()[1], df)

    def _target_std(self):
        """Per-target factor from the normalised to y's standard deviation: the targets'
        scale, times the square root of a per-target calibration factor (a shared factor is
        applied to the latent variance by :meth:`_latent`)."""
        if np.ndim(self.calibration_factor_) > 0:
            return self._y_train_std * np.sqrt(self.calibration_factor_)
        return self._y_train_std

    def _mixing(self):
        """The predictive's amplitude as a scale mixture of the Gaussian, shared by the
        targets: the model's own (:meth:`_model_mixing`) or, after a Student-t calibration,
        ``InvGamma(df/2, df s0 / 2)`` with ``df = predictive_df_`` (a Student-t at the
        model's squared scale ``s0``, :meth:`Mixing.t_reference`). A per-target calibration
        is :meth:`_per_target_t`'s."""
        mix = self._model_mixing()
        df = self.predictive_df_
        if np.all(np.isinf(df)):
            return mix
        s0 = mix.t_reference()[0]
        return Mixing("invgamma", shape=df / 2.0, scale=df / 2.0 * s0)

    def _variance_multiplier(self):
        """Multiplier of the unit-amplitude variance: a scalar, or one per target (C,) for
        a per-target calibration; ``inf`` where the predictive is a t with df <= 2."""
        df = self._per_target_t()
        if df is None:
            return self._mixing().mean()  # inf where df <= 2: a t without a variance
        s0 = self._model_mixing().t_reference()[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.isinf(df), s0, np.where(df > 2, s0 * df / (df - 2.0), np.inf))

    def _predictive_dist(self, loc, std):
        """Frozen predictive at ``loc`` with unit-amplitude std ``std`` (y's units)."""
        df = self._per_target_t()
        if df is None:
            return self._mixing().predictive(loc, std=std)
        s0 = self._model_mixing().t_reference()[0]
        return stats.t(df=df, loc=loc, scale=math.sqrt(s0) * np.asarray(std))

    def _sample_scales(self, n_samples, rng):
        """Amplitude of each joint draw (1 for a Gaussian process; a scale mixture draws s):
        shape (n_samples,), or (C, n_samples) for a per-target calibration."""
        df = self._per_target_t()
        if df is None:
            return self._mixing().sample(n_samples, rng)
        s0 = self._model_mixing().t_reference()[0]
        return np.stack([np.full(n_samples, s0) if math.isinf(d)
                         else s0 * d / rng.chisquare(d, size=n_samples) for d in df])

    @threaded
    def _latent(self, X, *, full_cov=False):
        """Calibrated normalised predictive mean (m x C) and variance (m,) or covariance
        (m x m) at the raw inputs ``X``."""
        check_is_fitted(self)
        if self._predict_params:
            check_predict_params(self, *self._predict_params)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        Xs = (X - self._X_offset) / self._X_scale
        if full_cov or Xs.shape[0] <= PREDICT_BLOCK_ROWS:
            mean, V = self._latent_moments(as_tensor(Xs, self.device_, self._dtype), full_cov)
        else:  # row blocks: the extra memory of a prediction does not grow with the rows
            # copies: a block's outputs may be views that would keep its temporaries alive
            parts = [tuple(np.array(a) for a in self._latent_moments(
                         as_tensor(Xs[sl], self.device_, self._dtype), False))
                     for sl in iter_slices(Xs.shape[0], PREDICT_BLOCK_ROWS)]
            mean = np.concatenate([m for m, _ in parts])
            V = np.concatenate([v for _, v in parts])
        # a per-target factor is applied to each target's scale (:meth:`_target_std`)
        factor = self.calibration_factor_ if np.ndim(self.calibration_factor_) == 0 else 1.0
        return mean, clip_variances(self, np.asarray(V) * factor, full_cov)

    def _latent_moments(self, Xq, full_cov):  # pragma: no cover - every regressor overrides
        raise NotImplementedError

    def predict(self, X, return_std=False, return_cov=False):
        """Predictive mean, and optionally its standard deviation or covariance.

        The std and covariance are those of a new target y (noise included) unless
        ``include_noise=False``, after the fitted calibration.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the predictive standard deviation (``inf`` where the predictive is
            a Student-t with ``predictive_df_ <= 2``, which has no variance: use
            :meth:`predict_dist` for its intervals).
        return_cov : bool, default=False
            Also return the joint predictive covariance.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
        y_std : ndarray of shape (n_samples,) or (n_samples, n_targets), optional
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, \
n_targets), optional
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        mean, V = self._latent(X, full_cov=return_cov)
        y_mean = self._check_finite(self._unscale(mean), "mean")
        if not (return_std or return_cov):
            return y_mean
        mult = self._variance_multiplier()
        # an infinite multiplier is a true answer (a Student-t predictive with df <= 2 has no
        # variance); otherwise a non-finite std or covariance is an error
        finite = np.isfinite(mult)
        exists = bool(np.all(finite))
        if not exists:
            df, which = self.predictive_df_, ""
            if np.ndim(mult):
                which = f" for target(s) {np.flatnonzero(~finite).tolist()}"
                df = np.min(np.asarray(df)[~finite])
            warnings.warn(
                f"{type(self).__name__}: the predictive is a Student-t with "
                f"{float(df):.3g} degrees of freedom (<= 2){which}, "
                f"which has no variance, so the {'std' if return_std else 'covariance'} is "
                "infinite there; use predict_dist(X).interval(level) for finite intervals.",
                HeavyTailWarning, stacklevel=2)
        scale = self._target_std()
        if return_std:  # sqrt before scaling: no overflow for targets near the float limit
            std = np.sqrt(np.asarray(V, dtype=np.float64)[:, None] * mult) * scale
            self._check_finite(std[:, np.broadcast_to(finite, scale.shape)], "std")
            return y_mean, (std[:, 0] if self._y_1d else std)
        cov = np.asarray(V, dtype=np.float64)[:, :, None] * (mult * scale**2)
        self._check_finite(cov[:, :, np.broadcast_to(finite, scale.shape)], "covariance")
        return y_mean, (cov[:, :, 0] if self._y_1d else cov)

    def predict_std(self, X):
        """Predictive standard deviation of y at ``X`` (``inf`` where it does not exist).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        std : ndarray of shape (n_samples,) or (n_samples, n_targets)
        """
        return self.predict(X, return_std=True)[1]

    def predict_dist(self, X):
        """Frozen predictive distribution of y at ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        dist : frozen distribution
            ``scipy.stats`` ``norm``, or ``t`` with ``predictive_df_`` degrees of freedom
            (after a Student-t calibration, or a Student-t process's own posterior), or a
            :class:`~skbnngp.distributions.ScaleMixtureNormal`, with arrays of shape
            (n_samples,) or (n_samples, n_targets). It has ``mean``, ``std``, ``pdf``,
            ``logpdf``, ``cdf``, ``ppf``, ``interval`` and ``rvs``.
        """
        mean, V = self._latent(X)
        loc = self._check_finite(self._unscale(mean), "mean")
        # sqrt before scaling: no overflow for targets near the float limit
        std = np.sqrt(np.asarray(V, dtype=np.float64))[:, None] * self._target_std()[None, :]
        std = self._check_finite(std[:, 0] if self._y_1d else std, "std")
        return self._predictive_dist(loc, std)

    def predict_interval(self, X, confidence=0.9):
        """Central predictive intervals of y at ``X``, at one level or several.

        The bounds are the ``(1 - c) / 2`` and ``(1 + c) / 2`` quantiles of
        :meth:`predict_dist` (``predict_dist(X).interval(c)``), so they inherit its fitted
        calibration; for a finite-sample coverage guarantee wrap the estimator in
        :class:`~skbnngp.ConformalRegressor`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        confidence : float in (0, 1) or sequence of floats in (0, 1), default=0.9
            Probability mass of each central interval; 0.9 is a common reporting level
            that the held-out calibration estimates well.

        Returns
        -------
        lower, upper : ndarray of shape (n_samples,) or (n_samples, n_targets)
            For one level. For a sequence of ``n_levels`` levels, a trailing axis is added:
            (n_samples, n_levels) or (n_samples, n_targets, n_levels), the levels in the
            order given (as MAPIE's trailing confidence-level axis).
        """
        return central_intervals(self.predict_dist(X), confidence)

    def sample_y(self, X, n_samples=1, random_state=0):
        """Draw joint samples from the predictive at ``X`` (noise included by default).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Number of joint draws.
        random_state : int, RandomState instance or None, default=0
            Seeds the draws (as in sklearn's ``GaussianProcessRegressor.sample_y``).

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_targets,
            n_samples)
        """
        check_n_samples(n_samples)
        rng = check_random_state(random_state)
        mean, V = self._latent(X, full_cov=True)
        Lv, _ = stable_cholesky(as_tensor(V, self.device_, self._dtype),
                                context=f"{type(self).__name__}: predictive covariance")
        m, C = mean.shape
        s = self._sample_scales(n_samples, rng)
        z = as_tensor(rng.standard_normal((m, C * n_samples)), self.device_, self._dtype)
        s = np.reshape(s, (-1, n_samples))  # (1 or C, n_samples): per-target amplitudes
        draws = to_numpy(Lv @ z).reshape(m, C, n_samples) * np.sqrt(s)[None, :, :]
        out = mean[:, :, None] * self._y_train_std[None, :, None] \
            + draws * self._target_std()[None, :, None] + self._y_train_mean[None, :, None]
        return out[:, 0, :] if self._y_1d else out

    def _check_finite(self, values, what):
        """Raise (instead of returning NaN or inf) when a prediction is not finite."""
        if not np.all(np.isfinite(values)):
            raise ValueError(
                f"{type(self).__name__}: the predictive {what} at X is not finite (X may lie "
                "far outside the training range, or the targets' scale exceeds float64); "
                "rescale X or y.")
        return values




class ClassifierPredictiveMixin:
    """``predict``, ``predict_log_proba`` and ``decision_function`` from ``predict_proba``.

    A classifier implements ``predict_proba(X)`` (columns in the order of ``classes_``; it
    checks that the model is fitted and validates ``X``), and everything else follows from
    it, so the predicted class, the log-probabilities and the scores always agree.
    """

    def predict(self, X):
        """The class of largest predicted probability.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        proba = self.predict_proba(X)  # first: it raises NotFittedError before classes_ exists
        return self.classes_[np.argmax(proba, axis=1)]

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba` (floored at the smallest positive float).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        return np.log(np.maximum(self.predict_proba(X), np.finfo(np.float64).tiny))

    def decision_function(self, X):
        """Log-odds of the predictive (binary) or its log-probabilities (multi-class).

        Ranks exactly as :meth:`predict_proba` (sklearn's convention): ``predict`` takes
        the positive class exactly where the binary score is positive.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        score : ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        logp = self.predict_log_proba(X)
        return logp[:, 1] - logp[:, 0] if self.classes_.size == 2 else logp
