"""Estimator glue shared by every skbnngp estimator (no numerics here: see ``_backend``)."""

from __future__ import annotations

import copy
import functools
import numbers
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning

from ._backend import minimize, resolve_device, resolve_dtype, to_numpy
from ._backend._threads import dense_work, low_rank_work, network_work, use_threads
from ._backend._train import mlp_from_state, mlp_to_state
from .exceptions import DeviceWarning
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


def class_weight_vector(class_weight, classes):
    """The weights of a ``class_weight`` dict, one per class of ``classes`` (1 for a class
    it leaves out).

    Raises
    ------
    ValueError
        Naming ``class_weight`` when a key is not one of the classes (a misspelt label
        would otherwise leave its class unweighted without a word) or a weight is negative
        or not finite.
    """
    known = set(np.asarray(classes).tolist())
    unknown = [k for k in class_weight if k not in known]
    if unknown:
        raise ValueError(f"class_weight has keys {plain(unknown)} that are not classes of y; "
                         f"the classes are {plain(np.asarray(classes).tolist())}.")
    weights = np.array([float(class_weight.get(c, 1.0)) for c in classes])
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("class_weight values must be finite and non-negative; got "
                         f"{plain(dict(class_weight))}.")
    return weights


def check_n_samples(n_samples, name="n_samples"):
    """``n_samples`` of a sampling method, refused (a ValueError naming it) unless it is an
    integer of at least 1."""
    if not isinstance(n_samples, numbers.Integral) or isinstance(n_samples, bool) \
            or n_samples < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {plain(n_samples)!r}.")
    return int(n_samples)


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


def warn_training(estimator, result, advice, stacklevel=4):
    """Raise sklearn's ConvergenceWarning when a network's training (a
    :class:`~._backend.TrainResult`) stopped before its stopping rule fired; ``advice`` says
    what to change (e.g. "increase max_iter")."""
    if not result.converged:
        warnings.warn(f"{type(estimator).__name__}: training {result.message} before the "
                      f"stopping rule fired; {advice}.", ConvergenceWarning,
                      stacklevel=stacklevel)


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


def input_scaling(X, method="standard", enabled=True, sample_weight=None):
    """Per-column ``(offset, scale)`` of the inputs, as sklearn's scalers handle them.

    ``method``: ``"standard"`` (mean, std), ``"minmax_center"`` (mid-range, range) or
    ``"minmax_half"`` (mid-range, half range). The statistics are taken after dividing each
    column by its largest magnitude, so columns near 1e300 do not overflow when squared or
    subtracted; a scale below ``10 eps`` of the column's magnitude (a constant or
    near-constant column, up to round-off) counts as 1, so the column is only centred and
    never divided by a tiny range. ``enabled=False`` gives zeros and ones. ``sample_weight``
    weights the mean and std (rows counted that many times).
    """
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    if not enabled:
        return np.zeros(d), np.ones(d)
    big = np.abs(X).max(axis=0) if X.shape[0] else np.ones(d)
    big = np.where((big > 0) & np.isfinite(big), big, 1.0)
    Xn = X / big
    if method == "standard" and sample_weight is not None:
        off = np.average(Xn, axis=0, weights=sample_weight)
        sc = np.sqrt(np.average((Xn - off) ** 2, axis=0, weights=sample_weight))
    elif method == "standard":
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


def fit_input_scaling(estimator, X, enabled=True, method="standard", sample_weight=None):
    """Store the per-column scaling of :func:`input_scaling` on ``estimator`` as
    ``_X_offset`` and ``_X_scale`` (what every ``predict`` applies) and return the scaled
    ``X``."""
    estimator._X_offset, estimator._X_scale = input_scaling(X, method, enabled,
                                                            sample_weight)
    return (X - estimator._X_offset) / estimator._X_scale


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
    interruption leaves the estimator as it was before the call, and with the intra-op
    threads its work calls for (:func:`fit_work`; torch's setting is restored after). A
    successful fit keeps the work of one prediction row as ``_row_work`` (what
    :func:`threaded` sizes predictions by)."""

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        X = args[0] if args else kwargs.get("X")
        rows, row_work = fit_work(self, X)
        with fit_transaction(self), use_threads(rows * row_work):
            out = fit(self, *args, **kwargs)
            self._row_work = row_work
            return out
    return wrapper


def threaded(method):
    """Decorator for a prediction method ``method(self, X, ...)``: run it with the intra-op
    threads its row blocks (up to 8,192 rows) call for, from the ``_row_work`` that ``fit``
    kept (torch's setting is restored after). Reads no constructor parameter, which may have
    changed since ``fit``."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        shape = _shape(args[0] if args else kwargs.get("X"))
        rows = min(shape[0], _PREDICT_ROWS) if shape is not None else 0
        # a model unpickled from a version without _row_work predicts on one thread
        with use_threads(rows * vars(self).get("_row_work", 0.0)):
            return method(self, *args, **kwargs)
    return wrapper


#: Rows a prediction evaluates at once (the predictive's row blocks).
_PREDICT_ROWS = 8192


def _shape(X):
    """``(n_rows, n_columns)`` of an array-like without converting it; None if unknown."""
    shape = getattr(X, "shape", None)
    try:
        if shape is not None and len(shape) == 2:
            return int(shape[0]), int(shape[1])
        return len(X), len(X[0])
    except (TypeError, IndexError, KeyError):
        return None


def fit_work(estimator, X):
    """``(rows, row_work)``: the largest repeated operation of ``estimator.fit(X)`` costs
    ``rows * row_work`` flops, and a prediction ``row_work`` per row. What
    :func:`~._backend._threads.choose_threads` sizes the threads by.

    A network estimator (one with ``hidden_layer_sizes``) repeats a training step on
    ``batch_size`` rows (256 when the batch size is chosen automatically) at a forward and
    backward pass per row; a Nystrom model an ``n x n_anchors`` solve (``n_anchors^2`` per
    row); any other model an ``n x n`` Cholesky (``n^2 / 3`` per row, ``n`` training rows).
    An input of unknown shape counts as no work (one thread).
    """
    shape = _shape(X)
    if shape is None:
        return 0, 0.0
    n, d = shape
    params = estimator.get_params(deep=False)
    if "hidden_layer_sizes" in params:
        try:
            hidden = tuple(int(h) for h in params["hidden_layer_sizes"])
        except (TypeError, ValueError):
            hidden = ()
        batch = params.get("batch_size")
        batch = batch if isinstance(batch, numbers.Integral) else 256
        return min(batch, n), network_work(1, (d, *hidden, 1))
    if params.get("approx") == "nystrom":
        rank = params.get("n_anchors")
        rank = rank if isinstance(rank, numbers.Integral) else 512
        return n, low_rank_work(1, min(rank, n))
    return n, dense_work(n) / max(n, 1)


def check_fitted_state(name, state):
    """Refuse a loaded state whose shared fitted attributes have the wrong shape or value
    (a corrupted or altered file would otherwise broadcast silently into the predictions):
    the input scaling has one entry per feature, the target statistics one per target, the
    calibration factor is positive and finite and the predictive's degrees of freedom
    positive. Raises a ValueError naming the attribute."""
    d = state.get("n_features_in_")
    problems = []
    for key in ("_X_offset", "_X_scale"):
        if key in state and d is not None and np.shape(state[key]) != (d,):
            problems.append(f"{key} has shape {np.shape(state[key])}, expected ({d},)")
    if "_X_scale" in state and not np.all(np.asarray(state["_X_scale"]) > 0):
        problems.append("_X_scale has entries <= 0")
    if "_y_train_mean" in state and "_y_train_std" in state:
        m, sd = np.shape(state["_y_train_mean"]), np.shape(state["_y_train_std"])
        if m != sd or len(m) != 1:
            problems.append(f"_y_train_mean / _y_train_std have shapes {m} / {sd}")
        elif not np.all(np.asarray(state["_y_train_std"]) > 0):
            problems.append("_y_train_std has entries <= 0")
    # a scalar, or one value per target (a per-target calibration of a multi-output fit)
    n_targets = np.shape(state.get("_y_train_std", ()))
    factor = state.get("calibration_factor_")
    if factor is not None and not (_scalar_or_per_target(factor, n_targets)
                                   and np.all((np.asarray(factor, dtype=float) > 0)
                                              & (np.asarray(factor, dtype=float) < np.inf))):
        problems.append(f"calibration_factor_={plain(factor)!r} is not a positive number")
    df = state.get("predictive_df_")
    if df is not None and not (_scalar_or_per_target(df, n_targets)
                               and np.all(np.asarray(df, dtype=float) > 0)):
        problems.append(f"predictive_df_={plain(df)!r} is not positive")
    if problems:
        raise ValueError(f"{name}: the saved state is corrupted or was altered: "
                         + "; ".join(problems) + ".")


def _scalar_or_per_target(value, n_targets):
    """A real number, or a real array of shape ``n_targets`` (the shape of ``_y_train_std``)."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return False
    return arr.ndim == 0 or (len(n_targets) == 1 and arr.shape == tuple(n_targets))


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
        # parameter that set_params may have changed since fit.
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
        check_fitted_state(type(self).__name__, state)
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
    # a meta-estimator's inner model reports under its owner's name (``_progress_label``)
    label = getattr(estimator, "_progress_label", type(estimator).__name__)
    for stage, (eng, iters, n_restarts) in enumerate(stages):
        if iters == 0:
            continue
        N = getattr(eng, "n_eff", eng.n) * eng.C

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
                           label=f"{label} stage {stage + 1}")
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
