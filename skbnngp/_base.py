"""Estimator glue shared by every skbnngp estimator (no numerics here: see ``_backend``)."""

from __future__ import annotations

import copy
import functools
import math
import numbers
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from sklearn.utils import check_random_state

from ._backend import (as_tensor, loo_variance_factor, minimize, resolve_device, resolve_dtype,
                       stable_cholesky, student_t_calibration, to_numpy)
from ._backend._train import mlp_from_state, mlp_to_state
from ._scale_mixture import Mixing
from .exceptions import DeviceWarning, NumericalWarning
from .utils._sklearn_compat import Interval, StrOptions, validate_parameter_constraints

#: Constraints reused by every estimator's ``_parameter_constraints``.
DEVICE_CONSTRAINT = [str, torch.device]
DTYPE_CONSTRAINT = [StrOptions({"float64", "float32"})]
BOUNDS_CONSTRAINT = [StrOptions({"fixed"}), tuple, list]
BATCH_SIZE_CONSTRAINT = [Interval(numbers.Integral, 1, None, closed="left"), None]
VERBOSE_CONSTRAINT = ["verbose"]


def plain(value):
    """``value`` with NumPy scalars and arrays turned into Python numbers and lists, so that a
    message shows ``25.0`` rather than ``np.float64(25.0)``."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return type(value)(plain(v) for v in value)
    return value


def check_bounds(name, bounds, value, enforce=True):
    """Validate a ``(low, high)`` pair or ``"fixed"`` for the positive parameter ``name``.

    ``enforce`` also requires the initial ``value`` to lie inside (when it will be optimised).
    """
    if isinstance(bounds, str):
        return "fixed"
    if len(bounds) != 2:
        raise ValueError(f"{name}_bounds must be 'fixed' or a pair (low, high), got {plain(bounds)!r}.")
    lo, hi = (float(b) for b in bounds)
    if not (0 < lo <= hi < np.inf):
        raise ValueError(
            f"{name}_bounds must satisfy 0 < low <= high < inf, got {plain(bounds)!r}.")
    if enforce and not lo <= value <= hi:
        raise ValueError(
            f"{name}={plain(value)!r} lies outside {name}_bounds={plain(bounds)!r}.")
    return (lo, hi)


def check_class_labels(y):
    """Refuse class labels of mixed types, which cannot be sorted into ``classes_``.

    Labels of one kind (all numbers, or all strings) pass unchanged; ``["a", 1]`` as an object
    array would otherwise fail deep in ``np.unique`` with ``'<' not supported``.

    Parameters
    ----------
    y : array-like of shape (n_samples,)

    Raises
    ------
    TypeError
        Naming ``y`` and the mixed types, e.g. "mixed types: str and int".
    """
    y = np.asarray(y)
    if y.dtype.kind != "O":
        return
    seen = {}  # kind -> first type name: strings, numbers, anything else by its type
    for value in y.ravel():
        if isinstance(value, (str, np.str_)):
            kind = "0str"
        elif isinstance(value, (bytes, np.bytes_)):
            kind = "1bytes"
        elif isinstance(value, (numbers.Number, np.bool_)) and not isinstance(value, bool):
            kind = "2number"
        else:
            kind = f"3{type(value).__name__}"
        seen.setdefault(kind, type(value).__name__)
    if len(seen) > 1:
        names = [seen[k] for k in sorted(seen)]
        raise TypeError(f"y has class labels of mixed types: {' and '.join(names)}; use labels "
                        "of one type (e.g. all strings: np.asarray(y).astype(str)).")


def check_predict_params(estimator, *names):
    """Validate the constructor parameters ``names`` that a predict-time method reads.

    ``fit`` validates every parameter, but ``set_params`` after ``fit`` does not; a method
    that reads a parameter at predict time (a batch size, a number of Monte-Carlo draws or
    quadrature nodes, the kind of predictive) checks it here against the same
    ``_parameter_constraints``. Raises sklearn's ``InvalidParameterError`` (a ``ValueError``
    and ``TypeError``) naming the parameter.
    """
    constraints = type(estimator)._parameter_constraints
    validate_parameter_constraints({name: constraints[name] for name in names},
                                   {name: getattr(estimator, name) for name in names},
                                   caller_name=type(estimator).__name__)


def warn_convergence(estimator, result, what="hyperparameter optimisation"):
    """Raise sklearn's ConvergenceWarning for an :class:`~._backend.OptimResult`."""
    if not result.converged:
        warnings.warn(
            f"{type(estimator).__name__}: {what} did not converge ({result.message}; "
            f"final loss {result.fun:.6g}). Increase max_iter, loosen tol, or fix some "
            "hyperparameters with *_bounds='fixed'.",
            ConvergenceWarning,
            stacklevel=3,
        )


@contextmanager
def fit_transaction(estimator, rollback=None):
    """Run a fit so that an exception (or ``KeyboardInterrupt``) leaves the estimator as it
    was before: its attributes are restored from a shallow copy, and ``rollback()`` (if
    given) undoes in-place changes such as training an existing network.
    """
    saved = dict(estimator.__dict__)
    try:
        yield
    except BaseException:
        if rollback is not None:
            rollback()
        estimator.__dict__.clear()
        estimator.__dict__.update(saved)
        raise


def input_scaling(X, method="standard", enabled=True):
    """Per-column ``(offset, scale)`` of the inputs, as sklearn's scalers handle them.

    ``method``: ``"standard"`` (mean, std), ``"minmax_center"`` (mid-range, range) or
    ``"minmax_half"`` (mid-range, half range). The statistics are taken after dividing each
    column by its largest magnitude, so columns near 1e300 do not overflow when squared or
    subtracted; a scale below ``10 eps`` of the column's magnitude (a constant or
    near-constant column, up to round-off) counts as 1, so the column is only centred and
    never divided by a tiny range. ``enabled=False`` gives zeros and ones.
    """
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    if not enabled:
        return np.zeros(d), np.ones(d)
    big = np.abs(X).max(axis=0) if X.shape[0] else np.ones(d)
    big = np.where((big > 0) & np.isfinite(big), big, 1.0)
    Xn = X / big
    if method == "standard":
        off, sc = Xn.mean(axis=0), Xn.std(axis=0)
    else:
        lo, hi = Xn.min(axis=0), Xn.max(axis=0)
        sc = hi - lo if method == "minmax_center" else 0.5 * (hi - lo)
        off = lo + 0.5 * (hi - lo)
    eps = np.finfo(np.float64).eps
    const = sc <= 10 * eps * np.maximum(np.abs(off), 1.0)
    with np.errstate(over="ignore"):
        scale = np.where(const, 1.0, np.minimum(sc * big, np.finfo(np.float64).max))
    return off * big, scale


def check_hidden_layer_sizes(sizes):
    """``hidden_layer_sizes`` as a tuple of positive ints, or a ValueError naming it."""
    out = tuple(sizes)
    if not all(isinstance(h, numbers.Integral) and not isinstance(h, bool) and h >= 1
               for h in out):
        raise ValueError("hidden_layer_sizes must be a tuple of positive integers, got "
                         f"{sizes!r}.")
    return out


def user_network(estimator, factory_args, n_features, device, dtype):
    """The estimator's ``network`` parameter as a module on ``device``/``dtype``, and its
    output on a probe batch of two zero rows.

    A module is deep-copied (``fit`` never changes a parameter); a callable is called with
    ``factory_args``. Errors name the estimator and the parameter.
    """
    name = type(estimator).__name__
    spec = estimator.network
    if isinstance(spec, torch.nn.Module):
        net = copy.deepcopy(spec)
    else:
        net = spec(*factory_args)
        if not isinstance(net, torch.nn.Module):
            raise TypeError(f"{name}: network{factory_args!r} must return a torch.nn.Module, "
                            f"got {type(net).__name__}.")
    net = net.to(device=device, dtype=dtype)
    probe = torch.zeros(2, n_features, dtype=dtype, device=device)
    try:
        with torch.no_grad():
            out = net.eval()(probe)
    except Exception as exc:  # a foreign error from the user's module
        raise ValueError(f"{name}: network failed on a (2, {n_features}) input: "
                         f"{exc}") from exc
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{name}: network must return a tensor, got {type(out).__name__}.")
    return net, out


def transactional(fit):
    """Decorator: run ``fit`` inside :func:`fit_transaction`, so that an exception or an
    interruption leaves the estimator as it was before the call."""

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        with fit_transaction(self):
            return fit(self, *args, **kwargs)
    return wrapper


class TorchEstimatorMixin:
    """Device handling, caches and pickling for estimators with a torch backend.

    Fitted state the user sees is NumPy; tensors on ``device_`` live in ``self._cache``
    (rebuilt lazily by ``_build_cache``), which is dropped when pickling so that no live GPU
    tensor is ever pickled.
    """

    def _resolve_runtime(self):
        self.device_ = resolve_device(self.device)
        self._dtype = resolve_dtype(self.dtype)
        return self.device_, self._dtype

    def _get_cache(self):
        # Rebuilt from fitted attributes only (device_ and the fitted _dtype), never from a
        # parameter that set_params may have changed since fit (issue 18 item 3).
        cache = self.__dict__.get("_cache")
        if cache is None:
            if "_dtype" not in self.__dict__:  # a model pickled before _dtype was saved
                self._dtype = resolve_dtype(self.dtype)
            cache = self._cache = self._build_cache()
        return cache

    @staticmethod
    def _host_copy(cache, key, tensor):
        """Read-only NumPy copy of a device tensor of ``cache``, made on first use and kept
        under ``key`` (a rebuilt cache makes a new one). Read-only because on the CPU it
        shares memory with the tensor the predictive uses."""
        if key not in cache:
            cache[key] = to_numpy(tensor)
            cache[key].setflags(write=False)
        return cache[key]

    def _build_cache(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def __getstate__(self):
        """Plain state: NumPy arrays and Python values (what skops can load), never a live
        device tensor. A network made by ``build_mlp`` is saved as its plan and weights; a
        user's own module is kept as a module (moved to the CPU)."""
        state = self.__dict__.copy()
        state.pop("_cache", None)
        net = state.get("network_")
        if isinstance(net, torch.nn.Module):
            plain = mlp_to_state(net)
            if plain is not None:
                state["network_"] = plain
            elif any(t.device.type != "cpu" for t in list(net.parameters())
                     + list(net.buffers())):
                state["network_"] = copy.deepcopy(net).to("cpu")
        dev = state.get("device_")
        if isinstance(dev, torch.device):
            state["device_"] = str(dev)
        if isinstance(state.get("_dtype"), torch.dtype):
            state["_dtype"] = str(state["_dtype"]).replace("torch.", "")
        return state

    def __setstate__(self, state):
        if isinstance(state.get("_dtype"), str):
            state["_dtype"] = resolve_dtype(state["_dtype"])
        dev = state.get("device_")
        if isinstance(dev, str):
            try:
                state["device_"] = resolve_device(dev)
            except ValueError:
                warnings.warn(
                    f"{type(self).__name__} was fitted on {dev!r}, which is not available here; "
                    "it will predict on the CPU.", DeviceWarning, stacklevel=2)
                state["device_"] = torch.device("cpu")
        net = state.get("network_")
        if isinstance(net, dict) and "mlp_plan" in net:
            state["network_"] = mlp_from_state(net, state.get("device_", "cpu")).eval()
        self.__dict__.update(state)


class PredictDistMixin:
    """``predict_std`` for regressors that implement ``predict(X, return_std=True)``."""

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


class GPRegressorMixin(PredictDistMixin):
    """Target normalisation and ``predict`` assembly shared by the GP-type regressors.

    A subclass implements ``_latent(X, full_cov)`` returning the normalised predictive mean
    (m x C) and the unit-amplitude variance (m,) or covariance (m x m), and may override
    ``_variance_multiplier()`` (1 by default; ``E[s | y]`` for a scale mixture).
    """

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

    #: Central interval whose leave-one-out coverage ``variance_calibration="loo"`` matches.
    _calibration_level = 0.95

    def _calibrate_variance(self, engine, state, params, unit_quantile):
        """Set ``calibration_factor_`` from the leave-one-out residuals of the fitted ``state``.

        ``unit_quantile`` is the ``(1 + level) / 2`` quantile of the predictive at unit
        variance. 1 unless ``variance_calibration`` is ``"loo"`` (see
        :func:`loo_variance_factor`) or ``"student_t"`` (also sets ``predictive_df_``; see
        :func:`student_t_calibration`). The Student-t fit reads the residuals against the
        model's own amplitude (:meth:`_model_mixing`), and never chooses lighter tails than
        its own (:meth:`Mixing.t_reference`).
        """
        self.calibration_factor_ = 1.0
        if self.variance_calibration not in ("loo", "student_t"):
            return
        r, v = engine.loo(state, params)
        z = to_numpy(r) / np.sqrt(np.maximum(to_numpy(v), 1e-300))[:, None]
        if self.variance_calibration == "student_t":  # the predictive made a t
            s0, max_df = self._model_mixing().t_reference()
            self.predictive_df_, self.calibration_factor_ = student_t_calibration(
                z / math.sqrt(s0), self._calibration_level, max_df=max_df)
        else:
            self.calibration_factor_ = loo_variance_factor(z, unit_quantile,
                                                           self._calibration_level)

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
        df = getattr(self, "predictive_df_", math.inf)  # inf: uncalibrated, or an older pickle
        if math.isinf(df):
            return mix
        s0 = mix.t_reference()[0]
        return Mixing("invgamma", shape=df / 2.0, scale=df / 2.0 * s0)

    def _variance_multiplier(self):
        return self._mixing().mean()  # inf where df <= 2: a t without a variance

    def _sample_scales(self, n_samples, rng):
        """Amplitude of each joint draw (1 for a Gaussian process; a scale mixture draws s)."""
        return self._mixing().sample(n_samples, rng)

    def _predictive_dist(self, X):
        """Frozen ``scipy.stats`` predictive of y at ``X``: ``norm``, or ``t`` under a
        Student-t mixing, at the scale of the unit-amplitude variance."""
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

    def _predict_moments(self, X, return_std=False, return_cov=False):
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
        if return_std:  # sqrt before scaling: no overflow for targets near the float limit
            std = np.sqrt(np.asarray(V, dtype=np.float64)[:, None] * mult) * self._y_train_std
            std = std[:, 0] if self._y_1d else std
            return y_mean, (self._check_finite(std, "std") if exists else std)
        cov = np.asarray(V, dtype=np.float64)[:, :, None] * (mult * self._y_train_std**2)
        cov = cov[:, :, 0] if self._y_1d else cov
        return y_mean, (self._check_finite(cov, "covariance") if exists else cov)

    def _check_finite(self, values, what):
        """Raise (instead of returning NaN or inf) when a prediction is not finite."""
        if not np.all(np.isfinite(values)):
            raise ValueError(
                f"{type(self).__name__}: the predictive {what} at X is not finite (X may lie "
                "far outside the training range, or the targets' scale exceeds float64); "
                "rescale X or y.")
        return values


def fit_hyperparameters(estimator, engine, raw, free, bounds, rng, *, method, max_iter, tol,
                        learning_rate, subset_size=None, refine_iter=0, restarts=0,
                        penalty=None, n_iter_no_change=20):
    """Minimise a GP's per-datum negative log marginal likelihood over ``raw[free]``.

    The objective is ``engine.value_and_grad(raw)`` (plus ``penalty(raw) -> (value, grad)``,
    e.g. a log hyperprior) divided by ``n * n_targets``. When the engine has more than
    ``subset_size`` rows, the first stage runs on a random subset (``engine.subset``) and a
    second stage refines on all rows for ``refine_iter`` iterations. ``restarts`` extra starts,
    drawn uniformly inside ``bounds`` (in the optimised coordinates), are tried in the first
    stage. Sets ``n_iter_``, ``loss_curve_`` and ``converged_`` (of the first stage, which warns
    with ``ConvergenceWarning``) on ``estimator`` and returns the new ``raw``.
    """
    from .exceptions import NumericalError

    estimator.n_iter_, estimator.converged_, estimator.loss_curve_ = 0, True, []
    if not free:
        return raw
    stages = [(engine, max_iter, restarts)]
    if subset_size is not None and engine.n > subset_size:
        idx = np.sort(rng.choice(engine.n, subset_size, replace=False))
        stages = [(engine.subset(torch.as_tensor(idx, device=raw.device)), max_iter, restarts),
                  (engine, refine_iter, 0)]
    for stage, (eng, iters, n_restarts) in enumerate(stages):
        if iters == 0:
            continue
        N = eng.n * eng.C

        def fun(x, eng=eng, N=N, base=raw):
            th = base.clone()
            th[free] = x
            try:
                nll, g = eng.value_and_grad(th)
            except NumericalError:
                return torch.tensor(float("inf"), dtype=x.dtype), torch.zeros_like(x)
            if penalty is not None:
                pv, pg = penalty(th)
                nll, g = nll + pv, g + pg
            return nll / N, g[free] / N

        starts = [raw[free]]
        for _ in range(n_restarts):
            u = torch.as_tensor(rng.uniform(size=len(free)), device=raw.device, dtype=raw.dtype)
            starts.append(bounds[0] + u * (bounds[1] - bounds[0]))
        best = None
        for x0 in starts:
            res = minimize(fun, x0, bounds=bounds, method=method, max_iter=iters, tol=tol,
                           learning_rate=learning_rate, n_iter_no_change=n_iter_no_change,
                           verbose=estimator.verbose,
                           label=f"{type(estimator).__name__} stage {stage + 1}")
            estimator.n_iter_ += res.n_iter
            estimator.loss_curve_.extend(res.loss_curve)
            if best is None or res.fun < best.fun:
                best = res
        if not np.isfinite(best.fun):
            raise NumericalError(
                f"{type(estimator).__name__}: the objective could not be evaluated at any "
                "starting point: X or y may be badly scaled (rescale them) or the noise "
                "parameter too small (increase it).")
        if stage == 0:
            estimator.converged_ = best.converged
            warn_convergence(estimator, best)
        raw = raw.clone()
        raw[free] = best.x
    return raw
