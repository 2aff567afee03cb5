"""The predictive layer shared by every estimator: ``predict`` and its distributions.

:class:`RegressorPredictiveMixin` owns ``predict(X, return_std, return_cov)``,
``predict_std``, ``predict_dist`` and ``sample_y`` for the four regressors; each regressor
supplies only its latent moments (:meth:`RegressorPredictiveMixin._latent_moments`).
:class:`ClassifierPredictiveMixin` owns ``predict``, ``predict_log_proba`` and
``decision_function`` on top of a classifier's ``predict_proba``.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ._backend import as_tensor, iter_slices, leave_group_out, stable_cholesky, to_numpy
from ._base import check_predict_params, duplicate_groups, plain, threaded
from ._calibration import fit_variance_calibration, near_noiseless
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
        warnings.warn(f"{type(estimator).__name__}: predicted variances down to "
                      f"{diag.min():.3g} were clipped to 0.", NumericalWarning, stacklevel=4)
    if full_cov:
        V = V.copy()
        np.fill_diagonal(V, np.maximum(diag, 0.0))
        return V
    return np.maximum(V, 0.0)



#: Rows per block of a prediction: each block's features, kernels and Jacobians are freed
#: before the next, so predicting 10^6 rows costs a block's memory, not the rows'.
PREDICT_BLOCK_ROWS = 8192


class RegressorPredictiveMixin:
    """``predict``, ``predict_std``, ``predict_dist`` and ``sample_y`` of a regressor.

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

    def _normalise_targets(self, y):
        """Store the target statistics and return ``y`` as a normalised (n, C) array.

        The statistics are computed in float64 after dividing by the largest magnitude, so
        that targets near the float limits (1e30 in float32, 1e155 in float64) neither
        overflow when squared nor lose the mean.
        """
        self._y_1d = y.ndim == 1
        Y = np.asarray(y.reshape(-1, 1) if self._y_1d else y, dtype=np.float64)
        if Y.shape[1] == 0:
            raise ValueError("y has 0 targets; at least one is required.")
        if self.normalize_y:
            big = np.abs(Y).max(axis=0)
            big = np.where(big > 0, big, 1.0)
            Ys = Y / big
            mean, std = Ys.mean(axis=0), Ys.std(axis=0)
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

    def _fit_calibration(self, method, z, **options):
        """Set ``calibration_factor_`` and ``predictive_df_`` from the standardised
        residuals ``z`` of rows the predictive did not see (see
        :func:`~skbnngp._calibration.fit_variance_calibration`; ``options`` go to it)."""
        self.calibration_factor_, self.predictive_df_ = fit_variance_calibration(
            method, z, reference=self._model_mixing(), **options)

    def _calibrate_from_loo(self, method, engine, state, params):
        """:meth:`_fit_calibration` on the closed-form leave-one-out residuals of a fitted
        Gaussian-process ``engine`` (one O(n^3) pass over its factor; none when ``method``
        is None)."""
        if method is None:
            self.calibration_factor_, self.predictive_df_ = 1.0, math.inf
            return
        r, v = engine.loo(state, params)
        # rows that repeat one input are left out together: a twin left in the training set
        # predicts its row exactly, and the calibration would collapse the intervals
        groups = duplicate_groups(to_numpy(engine.X))
        if groups:
            r, v = leave_group_out(engine, state, params, r, v, groups)
        v = np.maximum(to_numpy(v), 1e-300)
        noise = state.get("noise")
        noise = params["noise_variance"] if noise is None else noise
        r = to_numpy(r)
        share = float(np.median(np.minimum(float(noise) / v, 1.0)))
        self._fit_calibration(method, r / np.sqrt(v)[:, None], near_noiseless=near_noiseless(
            r, to_numpy(engine.Y), share))

    def _model_mixing(self):
        """The fitted model's own amplitude, before any calibration: a point mass at 1 (a
        Gaussian process). The Student-t process overrides it with its posterior."""
        return Mixing("delta", value=1.0)

    def _mixing(self):
        """The predictive's amplitude as a scale mixture of the Gaussian: the model's own
        (:meth:`_model_mixing`) or, after a Student-t calibration, ``InvGamma(df/2, df s0 /
        2)`` with ``df = predictive_df_`` (a Student-t at the model's squared scale ``s0``,
        :meth:`Mixing.t_reference`)."""
        mix = self._model_mixing()
        df = self.predictive_df_
        if math.isinf(df):
            return mix
        s0 = mix.t_reference()[0]
        return Mixing("invgamma", shape=df / 2.0, scale=df / 2.0 * s0)

    def _variance_multiplier(self):
        return self._mixing().mean()  # inf where df <= 2: a t without a variance

    def _sample_scales(self, n_samples, rng):
        """Amplitude of each joint draw (1 for a Gaussian process; a scale mixture draws s)."""
        return self._mixing().sample(n_samples, rng)

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
        return mean, clip_variances(self, np.asarray(V) * self.calibration_factor_, full_cov)

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
        exists = bool(np.isfinite(mult))
        if not exists:
            warnings.warn(
                f"{type(self).__name__}: the predictive is a Student-t with "
                f"{self._mixing().t_reference()[1]:.3g} degrees of freedom (<= 2), which has "
                f"no variance, so the {'std' if return_std else 'covariance'} is infinite; "
                "use predict_dist(X).interval(level) for finite intervals.",
                HeavyTailWarning, stacklevel=2)
        if return_std:  # sqrt before scaling: no overflow for targets near the float limit
            std = np.sqrt(np.asarray(V, dtype=np.float64)[:, None] * mult) * self._y_train_std
            std = std[:, 0] if self._y_1d else std
            return y_mean, (self._check_finite(std, "std") if exists else std)
        cov = np.asarray(V, dtype=np.float64)[:, :, None] * (mult * self._y_train_std**2)
        cov = cov[:, :, 0] if self._y_1d else cov
        return y_mean, (self._check_finite(cov, "covariance") if exists else cov)

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
        std = np.sqrt(np.asarray(V, dtype=np.float64))[:, None] * self._y_train_std[None, :]
        std = self._check_finite(std[:, 0] if self._y_1d else std, "std")
        return self._mixing().predictive(loc, std=std)

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
        if not isinstance(n_samples, numbers.Integral) or isinstance(n_samples, bool) \
                or n_samples < 1:
            raise ValueError(f"n_samples must be an integer >= 1, got {plain(n_samples)!r}.")
        rng = check_random_state(random_state)
        mean, V = self._latent(X, full_cov=True)
        Lv, _ = stable_cholesky(as_tensor(V, self.device_, self._dtype),
                                context=f"{type(self).__name__}: predictive covariance")
        m, C = mean.shape
        s = self._sample_scales(n_samples, rng)
        z = as_tensor(rng.standard_normal((m, C * n_samples)), self.device_, self._dtype)
        draws = to_numpy(Lv @ z).reshape(m, C, n_samples) * np.sqrt(s)[None, None, :]
        out = (mean[:, :, None] + draws) * self._y_train_std[None, :, None] \
            + self._y_train_mean[None, :, None]
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
