"""Deep basis kernel GP regression: a network's outputs are the kernel's basis functions
(Zhu, Yuchi & Xie, "Scalable Gaussian Processes with Low-Rank Deep Kernel Decomposition").

The estimator holds the parameters, their checks, the fit's orchestration and the fitted
state; the numerics (objectives, posterior, scale choice, leave-one-out residuals) are
:mod:`skbnngp._backend._dbk`.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state

from ._backend import (
    ACTIVATIONS,
    BLRPosterior,
    NetworkTrainer,
    as_tensor,
    auto_batch_size,
    build_mlp,
    to_float,
    to_numpy,
    weighted_median,
)
from ._backend import _dbk as dbk
from ._backend import _wide as wide
from ._backend._calibration import T_MAX_FIT_ROWS
from ._backend._student_t import paired_gain
from ._base import (
    DEVICE_CONSTRAINT,
    DTYPE_CONSTRAINT,
    TorchEstimatorMixin,
    check_hidden_layer_sizes,
    fit_input_scaling,
    fit_transaction,
    transactional,
    user_network,
    warn_training,
)
from ._calibration import REGRESSOR_CALIBRATION, near_noiseless, trained_tail_df
from ._predictive import RegressorPredictiveMixin
from ._rows import (
    duplicate_groups,
    held_out_split,
    network_weights,
    rows_replicate,
    warn_rare_binary_values,
)
from .exceptions import NumericalError
from .utils._sklearn_compat import (
    Interval,
    StrOptions,
    _fit_context,
    check_is_fitted,
    validate_data,
)

# Private settings: model choices measured against their alternatives (doc/whats_new and the
# User Guide of DBK give the measurements). A benchmark may patch them with
# ``unittest.mock.patch.object``; a fitted model copies what it uses and never reads them again.

#: Per inference mode: (max_iter, validation interval, n_iter_no_change) in epochs.
SCHEDULE = {"exact": (2_000, 20, 200), "svi": (2_000, 10, 200)}
#: Exact training with the correction maximises ``"evidence"``, the exact evidence of the
#: corrected kernel that predicts (eq. 12), or ``"bound"``, the paper's bound (eq. 11); SVI
#: always maximises the paper's mini-batch bound (eq. 9).
EXACT_OBJECTIVE = "evidence"
#: Weight of the trace regulariser next to the exact evidence (the bound has weight 1): it
#: keeps the network from shrinking ``|phi|^2`` over part of the inputs.
EVIDENCE_TRACE_WEIGHT = 0.1
#: Multiplier of the network's outputs: None is ``1/sqrt(n_basis)`` (an initial prior
#: variance of order one); the paper uses 1.0.
FEATURE_SCALE = None
#: Initial noise variance (normalised targets; the paper's), and its lower bound.
NOISE_INIT, NOISE_LOWER_BOUND = 1e-2, 1e-6
#: Exact inference: after training, the noise and a prior scale maximise the evidence of the
#: validation rows given the training rows (``"heldout"``), of all rows (``"evidence"``), or
#: are kept (None).
SCALE_SELECTION = "heldout"
#: ``validation_fraction="auto"`` per inference mode.
AUTO_VALIDATION_FRACTION = {"exact": 0.25, "svi": 0.125}
#: The Student-t calibration narrows to the leave-one-out residuals' own scale only when the
#: t fitted with it has at most this many degrees of freedom (heavy tails that inflated the
#: noise): features learned on these rows make their residuals narrower than fresh ones.
#: Tails as heavy as a t with 3-4 degrees of freedom inflate the noise as well, and a gate
#: at 2 left such data with intervals far too wide in the bulk (doc/whats_new.rst).
DBK_MAX_TEST_DF = 4.0
#: How the Student-t calibration chooses the degrees of freedom of the leave-one-out
#: residuals: by likelihood and the 95 % rule. The fit over the levels (``"levels"``)
#: reads these residuals, of features learned on the same rows, as narrower than fresh
#: ones and under-covers out-of-fold rows (benchmarks/results/intervals_levels.md).
T_SHAPE = "likelihood"
#: ``partial_fit`` calibrates on the residuals of the latest calls' new rows, each scored by
#: the model before it trained on them: the newest calls holding at least this many rows.
#: Older residuals come from models further from the current one, and more of them
#: under-covered in the streaming measurements of doc/whats_new.rst.
STREAM_CALIBRATION_ROWS = 100
#: Fewer residuals than this leave a streamed model uncalibrated (the calibration's own
#: floor for narrowing a predictive is 19 rows).
STREAM_MIN_ROWS = 20
#: Input-dependent noise (``noise_variance``): the prior standard deviation of the log-noise
#: over the rows (the head's shrinkage), the folds of the cross-fitted comparison that
#: ``"auto"`` reads, and its rule: the heteroscedastic model is kept when the mean per-row
#: gain in held-out log density exceeds ``NOISE_Z`` standard errors and ``NOISE_MIN_GAIN``,
#: and its mean gain on the network's validation rows is positive (a head fitted to residuals
#: of features trained on the same rows can narrow intervals where only the training fit is
#: tight: doc/whats_new.rst).
NOISE_PRIOR_SD = 1.0
NOISE_FOLDS = 5
#: Fewer rows than this: ``"auto"`` does not compare (homoscedastic).
NOISE_MIN_ROWS = 50
NOISE_Z, NOISE_MIN_GAIN = 2.0, 0.01
#: The noise head's lowest value, relative to the single fitted noise level: features that
#: can carve a notch around one training input would otherwise give a test row there an
#: interval far narrower than its neighbours' noise.
NOISE_HEAD_FLOOR = 1e-2
#: Wide data: with more than ``WIDE_RATIO`` times as many features as training rows (and
#: more than the fewest components), the built network reads the ``k`` leading whitened
#: principal components of the inputs through a frozen first layer, ``k`` the candidate
#: whose trained network has the lowest validation NLL (the first without early stopping;
#: a candidate of no fewer components than features is the network on the inputs); an
#: empty tuple: never.
WIDE_COMPONENTS = (10, 5, 20)
WIDE_RATIO = 1 / 3
#: Activations per row block in the full passes over the data (8 MiB in float64).
BLOCK_ELEMENTS = 2**20


def _newest(parts, rows):
    """The newest of ``parts`` (arrays, oldest first) that together hold at least ``rows``
    rows (all of them when they hold fewer)."""
    kept, total = [], 0
    for part in reversed(parts):
        if total >= rows:
            break
        kept.append(part)
        total += len(part)
    return kept[::-1]


class _NoPartialFit(AttributeError, ValueError):
    """``partial_fit`` in a mode without it: ``hasattr`` is False, and a bad value's error."""


class _SviOnly:
    """Method descriptor: ``partial_fit`` exists only for ``inference="svi"``, so tools that
    probe for it (scikit-learn's checks, dask-ml) see the truth, and a call in exact mode
    says why (sklearn's ``available_if`` would replace the message by a generic one)."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.fn
        if obj.inference != "svi":
            raise _NoPartialFit(
                f"{type(obj).__name__}.partial_fit needs inference='svi' (mini-batch "
                f"variational training); got inference={obj.inference!r}. Use fit for "
                "exact inference, or set inference='svi'.")
        return self.fn.__get__(obj, owner)


class DBKRegressor(RegressorPredictiveMixin, TorchEstimatorMixin, RegressorMixin, BaseEstimator):
    """Gaussian process whose kernel is the inner product of a network's outputs.

    A network maps ``x`` to ``n_basis`` features ``phi(x)`` and the kernel is
    ``k(x, x') = phi(x)^T phi(x')`` (the deep basis kernel, DBK). Inference is exact in
    O(n r^2) time through the Woodbury identity and the determinant lemma
    (``inference="exact"``, full-batch training), or by stochastic variational inference
    over the basis weights with mini-batches (``inference="svi"``, which also offers
    :meth:`partial_fit` for data that does not fit in memory). The variance correction of
    the paper regularises training towards a uniform prior variance and adds the missing
    prior variance back at prediction time.

    With exact inference, the network trains on the exact evidence of the corrected kernel
    (eq. 12) with a tenth of the paper's trace regulariser; once trained, its features are
    fixed, the noise and a prior scale are chosen by the evidence of the validation rows
    given the training rows, and the posterior conditions on every row.

    The fitted model keeps only the network and O(r^2) numbers, never the training data, and
    predicts in O(r^2) per row.

    Read more in the :ref:`User Guide <dbk>`.

    Parameters
    ----------
    n_basis : int, default=128
        Number ``r`` of basis functions (the network's output width), the kernel's rank;
        128 is the paper's.
    hidden_layer_sizes : tuple of int, default=(128, 128)
        Hidden widths of the network; two layers of 128 are the paper's.
    activation : {"tanh", "relu", "gelu", "silu", "sigmoid", "leaky_relu"}, default="tanh"
        Activation of the hidden layers; tanh, the paper's, gives smooth features.
    architecture : {"mlp", "resnet"}, default="mlp"
        ``"resnet"``: an input layer followed by residual blocks ``h + act(W h + b)`` (the
        paper's backbone for its real data sets; equal hidden widths required); the plain
        MLP is the paper's for its synthetic data and the cheaper one.
    network : torch.nn.Module, callable or None, default=None
        A user network mapping ``(batch, n_features)`` to ``(batch, n_basis)``, used instead
        of the MLP: a module (deep-copied at each fit, its weights used as they are) or a
        callable ``network(n_features, n_basis) -> Module`` called inside ``fit``.
    inference : {"exact", "svi"}, default="exact"
        ``"exact"``: full-batch training and the exact posterior, O(n r^2) per iteration;
        ``"svi"``: mini-batch maximisation of the evidence lower bound (eq. 9) over the
        network, the noise and a Gaussian ``q(w)``, for data too large for full batches.
        Exact is the default because it is the better-calibrated model at moderate n.
    variance_correction : bool or "auto", default="auto"
        Regularise training by the trace ``tr(C)/(2 noise)`` (eq. 11) and add the diagonal
        correction ``max(0, M - |phi(x)|^2)`` at prediction (eq. 12); ``False`` is the
        paper's "-c" ablation. ``"auto"``: on for exact inference, where it is essential,
        off for svi, where the mini-batch regulariser shrinks every feature norm and inflates
        the noise on large data.
    batch_size : int, default=256
        Training mini-batch size for ``inference="svi"`` (clipped to the number of rows);
        256 trades gradient noise against the time per epoch.
    max_iter : int or None, default=None
        Maximum number of epochs (full-batch iterations for exact); ``None``: 2,000, which
        early stopping rarely reaches.
    learning_rate_init : float, default=1e-2
        Adam step size for every parameter; 1e-2 matched the paper's 1e-3 in accuracy at a
        fraction of its iterations.
    weight_decay : float, default=1e-4
        L2 penalty of Adam on the network weights only (not on the noise or ``q(w)``); a
        light regularisation of the features.
    calibration : {"auto", "student_t", "gaussian"} or None, default="auto"
        How the predictive is calibrated on residuals of rows the model did not fit: with
        exact inference, the rows' closed-form leave-one-out residuals with the features
        fixed (O(n r^2)); with svi, the validation rows' (``early_stopping``; without them
        none runs, and ``fit`` warns); in :meth:`partial_fit`, the newest rows', each scored
        before the model trained on it. ``"gaussian"``: multiply the variance by the smallest factor
        ``calibration_factor_ >= 1`` under which the central 95 % interval holds 95 % of the
        residuals (their split-conformal quantile). ``"student_t"``: fit a unit-scale
        Student-t to the residuals (``predictive_df_``, ``inf`` when nothing heavier fits
        better) and take the factor at its quantile; the leave-one-out residuals' own scale
        may narrow it only when the t fitted with it has at most ``DBK_MAX_TEST_DF = 4``
        degrees of freedom; with svi, where the training rows' residuals fit a t of at most
        4 degrees of freedom the validation rows' t keeps tails that heavy (a few dozen
        validation rows can miss every outlier); ``predict_dist`` is then a
        ``scipy.stats.t``. ``"auto"`` runs
        ``"student_t"``, the best calibrated in our benchmarks; ``None`` keeps the model's
        own Gaussian. The mean is unchanged.
    noise_variance : {"auto", "homoscedastic", "heteroscedastic"}, default="auto"
        The noise model (exact inference). ``"homoscedastic"``: one noise variance for
        every input. ``"heteroscedastic"``: once the network is trained, a log-linear noise
        head ``log s(x) = b0 + [x, phi(x)] beta`` (Gaussian prior on ``beta``) and the prior
        scale maximise the exact evidence of the kernel with the diagonal noise
        ``diag(s(x_i))`` (O(n r^2)), the posterior conditions on it and the calibration reads
        the leave-one-out residuals standardised by it, so every predictive carries the
        input-dependent scale. ``"auto"``: heteroscedastic only where the held-out evidence
        supports it (the per-row gain in log predictive density of both models, cross-fitted
        over ``NOISE_FOLDS = 5`` folds with the features fixed, must be ``NOISE_Z = 2``
        standard errors and ``NOISE_MIN_GAIN = 0.01`` above zero, and positive on average
        over the validation rows, which the network did not train on; under
        ``NOISE_MIN_ROWS = 50`` rows no comparison runs), so that data with one noise level
        keep the homoscedastic model. svi is always homoscedastic.
    early_stopping : bool, default=True
        Hold out ``validation_fraction`` of the rows, score the predictive NLL on them
        periodically, stop after ``n_iter_no_change`` epochs without improvement, and keep the
        best network; on by default since the held-out rows also choose the noise and the
        prior scale. Without it, training stops when the training loss has not improved by
        ``tol`` for ``n_iter_no_change`` epochs.
    validation_fraction : float or "auto", default="auto"
        Share of the rows held out. ``"auto"``: 0.25 for exact inference (the held-out rows
        choose the noise and the prior scale and are then conditioned on, so a larger share
        costs no data) and 0.125 for svi (the paper's; its posterior never sees them).
    n_iter_no_change : int or None, default=None
        Patience in epochs; ``None``: 200, long enough for Adam's noisy progress.
    tol : float, default=1e-4
        Improvement of the per-datum training loss that counts when ``early_stopping=False``;
        scikit-learn's MLP value.
    normalize_X : bool, default=True
        Map every training column to [-1, 1] (min-max, the paper's preprocessing) inside
        ``fit``, so that the tanh units start in their active range; columns of (near-)zero
        range are only centred.
    normalize_y : bool, default=True
        Standardise the targets inside ``fit``, since the model has a zero mean.
    include_noise : bool, default=True
        Whether ``predict``'s std/cov, ``predict_dist`` and ``sample_y`` describe a noisy
        target y (the paper's predictive) or the latent f; the correction is part of the
        latent prior variance, so it is kept either way.
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device, default="auto"
        Where the network and the algebra run; ``"auto"`` picks a GPU when there is one.
    dtype : {"float64", "float32"}, default="float64"
        float64 keeps the evidence and the posterior accurate; float32 is faster, and its
        Cholesky of ``Phi^T Phi + noise I`` is retried with jitter when it fails.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the validation split and the shuffles (all drawn on the
        host, so the same seed gives the same network on every device).
    verbose : int, default=0
        0: silent; 1: a progress line (training loss, validation NLL, time per epoch) about every 50
        epochs, a line at each learning-rate drop and a last line saying why training
        stopped (a progress bar instead of the lines on a terminal when ``tqdm`` is
        installed); 2 or more: a line at every validation.

    Attributes
    ----------
    network_ : torch.nn.Module
        The trained network (best validation state), on ``device_``; pickled on the CPU.
    input_components_ : int or None
        On wide data (more features than a third of the training rows) the built network
        reads this many whitened principal components of the inputs through a frozen first
        layer, because its first layer cannot be fitted over every feature from so few
        rows; the number is the one of 10, 5 or 20 whose trained network has the lowest
        validation NLL (up to three trainings). None: it reads the inputs.
    n_basis_ : int
    feature_scale_ : float
        Multiplier of the network's outputs used by the fitted model (``1/sqrt(n_basis)``
        times ``sqrt(prior_scale_)``).
    prior_scale_ : float
        Prior scale ``a`` chosen after training (1 for svi).
    variance_correction_ : bool
        Whether the fitted model uses the variance correction.
    noise_variance_ : float
        Noise variance on the normalised target scale (before the calibration); with the
        heteroscedastic model, the median of ``s(x_i)`` over the training rows.
    noise_model_ : {"homoscedastic", "heteroscedastic"}
        The noise model fitted.
    noise_gain_ : tuple of float or None
        ``(mean, standard error)`` of the per-row held-out gain of the heteroscedastic
        model that ``noise_variance="auto"`` measured (normalised log density); None when
        no comparison ran.
    calibration_ : {"student_t", "gaussian"} or None
        The calibration that ran.
    calibration_factor_ : float or ndarray of shape (n_targets,)
        Factor on the predictive variance set by the calibration (1 without it; >= 1 except
        where the Student-t calibration narrowed a heavy-tailed predictive).
    predictive_df_ : float or ndarray of shape (n_targets,)
        Degrees of freedom of the Student-t predictive; ``inf``: Gaussian.
        Both are arrays for a multi-output ``y``: each target is calibrated on its own
        residuals, with its own tails; with exact inference the targets share one noise,
        so a target quieter than the noisiest is narrowed to its residuals' ratio to it,
        and the fit warns when the targets' noise levels are too far apart to share one.
    weight_mean_ : ndarray of shape (n_basis, n_targets)
        Posterior (exact) or variational (svi) mean of the basis weights.
    weight_cov_factor_ : ndarray of shape (n_basis, n_basis)
        Triangular ``F`` with weight covariance ``F F^T`` (``noise Lambda^{-1}`` for exact,
        ``L L^T`` for svi).
    max_prior_var_ : float
        ``M``, the largest prior variance ``|phi(x_i)|^2`` over the training rows.
    log_marginal_likelihood_value_ : float or None
        Eq. (5) at the fitted model, on all rows (exact) or on the training part (svi);
        None after :meth:`partial_fit`.
    elbo_ : float or None
        The evidence lower bound (eq. 8) on the training part (svi; None for exact).
    n_iter_ : int
        Epochs run (iterations for exact).
    n_samples_seen_ : int
        Rows trained on (the ELBO's ``n`` in :meth:`partial_fit`); after :meth:`fit`, the
        distinct rows of positive weight (exact duplicate rows merged, see ``fit``).
    loss_curve_ : list of float
        Mean training loss (negative per-datum objective) of every epoch.
    validation_scores_ : list of float
        Validation NLL (normalised units) at each check; empty without early stopping.
    best_iteration_ : int
        Epoch whose network was kept.
    converged_ : bool
        False when ``max_iter`` was reached before the stopping rule fired.
    device_ : torch.device
    n_features_in_ : int

    See Also
    --------
    MixedActivationGPRegressor : a fixed NNGP kernel with Nystrom inference.
    sklearn.gaussian_process.GaussianProcessRegressor : exact GP regression (O(n^3)).

    Notes
    -----
    Choices where the paper is silent: the loss is divided by the number of data (so that
    the weight decay has a size-independent strength); ``q(w)`` starts at the prior with a
    softplus diagonal; several targets share the network, the noise and ``L``; the
    correction's ``M`` for svi is the maximum over the training rows, both in the
    mini-batch regulariser and at prediction (the paper's text takes the batch maximum).
    ``predict(return_std=True)`` returns the std of y (noise and correction included),
    which is what the paper's NLL scores; scikit-learn's GP returns a latent std unless its
    kernel has a ``WhiteKernel``. The paper's own protocol is a recipe in the User Guide.

    References
    ----------
    Y. Zhu, H. S. Yuchi, Y. Xie. "Scalable Gaussian Processes with Low-Rank Deep Kernel
    Decomposition", 2025 (arXiv:2505.18526), §3.2-3.3.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp import DBKRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(200, 2)); y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=200)
    >>> reg = DBKRegressor(n_basis=16, hidden_layer_sizes=(32,), max_iter=200,
    ...                    random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, bool((std > 0).all())
    ((3,), True)
    """

    _parameter_constraints: dict = {
        "n_basis": [Interval(numbers.Integral, 1, None, closed="left")],
        "hidden_layer_sizes": [tuple, list],
        "activation": [StrOptions(set(ACTIVATIONS))],
        "architecture": [StrOptions({"mlp", "resnet"})],
        "network": [torch.nn.Module, callable, None],
        "inference": [StrOptions({"exact", "svi"})],
        "variance_correction": ["boolean", StrOptions({"auto"})],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "learning_rate_init": [Interval(numbers.Real, 0, None, closed="neither")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "calibration": REGRESSOR_CALIBRATION,
        "noise_variance": [StrOptions({"auto", "homoscedastic", "heteroscedastic"})],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither"),
                                StrOptions({"auto"})],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "normalize_X": ["boolean"],
        "normalize_y": ["boolean"],
        "include_noise": ["boolean"],
        "device": DEVICE_CONSTRAINT,
        "dtype": DTYPE_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, n_basis=128, hidden_layer_sizes=(128, 128), activation="tanh",
                 architecture="mlp", network=None, inference="exact", variance_correction="auto",
                 batch_size=256, max_iter=None, learning_rate_init=1e-2, weight_decay=1e-4,
                 calibration="auto", noise_variance="auto", early_stopping=True,
                 validation_fraction="auto",
                 n_iter_no_change=None, tol=1e-4, normalize_X=True, normalize_y=True,
                 include_noise=True, device="auto", dtype="float64", random_state=None,
                 verbose=0):
        self.n_basis = n_basis
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.architecture = architecture
        self.network = network
        self.inference = inference
        self.variance_correction = variance_correction
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.learning_rate_init = learning_rate_init
        self.weight_decay = weight_decay
        self.calibration = calibration
        self.noise_variance = noise_variance
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.normalize_X = normalize_X
        self.normalize_y = normalize_y
        self.include_noise = include_noise
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ================================================================== set-up
    def _check_params(self):
        """``(max_iter, validation_interval, n_iter_no_change)`` of this fit."""
        sizes = check_hidden_layer_sizes(self.hidden_layer_sizes)
        if self.architecture == "resnet" and len(set(sizes)) > 1:
            raise ValueError("architecture='resnet' needs equal hidden widths, got "
                             f"hidden_layer_sizes={sizes!r}.")
        if self.noise_variance == "heteroscedastic" and self.inference == "svi":
            raise ValueError(f"{type(self).__name__}: noise_variance='heteroscedastic' needs "
                             "inference='exact'; svi fits one noise level. Use "
                             "noise_variance='auto' or 'homoscedastic' with svi.")
        max_iter, interval, patience = SCHEDULE[self.inference]
        return self.max_iter or max_iter, interval, self.n_iter_no_change or patience

    def _correction(self):
        """The variance correction the parameters ask for (fit); a fitted model uses
        ``variance_correction_``."""
        auto = self.variance_correction == "auto"
        return self.inference == "exact" if auto else bool(self.variance_correction)

    def _validation_fraction(self):
        """The held-out share of this fit (see ``validation_fraction``)."""
        frac = self.validation_fraction
        return AUTO_VALIDATION_FRACTION[self.inference] if frac == "auto" else float(frac)

    def _feature_scale(self):
        """The multiplier of the network's outputs at the start of a fit."""
        return 1.0 / math.sqrt(self.n_basis) if FEATURE_SCALE is None else float(FEATURE_SCALE)

    def _train_config(self):
        """The settings that shape training, as a later ``partial_fit`` must find them."""
        return {"inference": self.inference, "learning_rate_init": float(self.learning_rate_init),
                "weight_decay": float(self.weight_decay), "batch_size": int(self.batch_size),
                "variance_correction": self._correction(),
                "calibration": {"auto": "student_t"}.get(self.calibration, self.calibration)}

    def _make_network(self, n_features, seed, device, dtype, projection=None):
        if self.network is None:
            if projection is not None:  # wide data: the MLP reads the projected inputs
                body = build_mlp(projection[0].shape[0], self.hidden_layer_sizes,
                                 self.n_basis, activation=self.activation,
                                 architecture=self.architecture, seed=seed, device=device,
                                 dtype=dtype)
                return wide.projected_network(*projection, body)
            return build_mlp(n_features, self.hidden_layer_sizes, self.n_basis,
                             activation=self.activation, architecture=self.architecture,
                             seed=seed, device=device, dtype=dtype)
        net, out = user_network(self, (n_features, self.n_basis), n_features, device, dtype)
        if out.ndim != 2 or out.shape[1] != self.n_basis:
            raise ValueError(f"{type(self).__name__}: network must map (batch, {n_features}) "
                             f"inputs to (batch, n_basis={self.n_basis}) outputs; it returned "
                             f"{tuple(out.shape)}.")
        return net

    _feature_fn = staticmethod(dbk.scaled_features)

    def _chunk_for(self):
        """Rows per block of every full pass after training: about :data:`BLOCK_ELEMENTS`
        activations of the widest layer, a memory independent of the number of rows."""
        widths = [self.n_basis] + list(self.hidden_layer_sizes)
        return auto_batch_size(max(widths), max_elements=BLOCK_ELEMENTS)

    def _scale_X(self, X):  # the scaling every predict applies (``fit_input_scaling``)
        return (X - self._X_offset) / self._X_scale

    # ================================================================== fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y, sample_weight=None):
        """Train the network and the noise, then form the weight posterior.

        With ``inference="exact"``, once the network is trained its features are fixed, the
        noise and the prior scale are chosen by the held-out evidence, the posterior
        conditions on every row (training and validation), and the predictive is calibrated
        on the leave-one-out residuals (``calibration``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None
            Frequency weights: every objective is that of row ``i`` repeated ``w_i`` times
            (its noise and correction divided by ``w_i`` in the exact evidence and the
            posterior, its term counted ``w_i`` times in the ELBO, the validation NLL and the
            trace regulariser), so an integer weight is the row repeated and a zero weight
            drops it. Exact duplicate ``(x, y)`` rows are merged into one weighted row (and
            the rows sorted) first, so weights and repeated rows train the identical model;
            the held-out split is drawn over the distinct rows, and the calibration counts a
            row's leave-one-out residual ``w_i`` times. Weights averaging under 1/4 count
            the data as few observations (a UserWarning; importance weights: divide by
            the mean of the non-zero ones). None: every row once.

        Returns
        -------
        self : object
        """
        return self._fit_wide(X, y, sample_weight)

    def _fit_wide(self, X, y, sample_weight):
        """``_fit_once`` with the input projection chosen on wide data (``WIDE_COMPONENTS``):
        each candidate's network is trained on the same split, the one of lowest
        validation NLL is kept, and only its warnings reach the user. The first candidate
        draws from ``random_state`` as a single fit does; the others replay its draws (the
        same split and initial weights)."""
        candidates = tuple(WIDE_COMPONENTS)
        rng = check_random_state(self.random_state)
        replay = copy.deepcopy(rng)
        kept = None
        for i, k in enumerate(candidates or (None,)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._fit_once(X, y, sample_weight, k, rng if i == 0 else copy.deepcopy(replay))
            score = min(self.validation_scores_, default=math.inf)
            if kept is None or score < kept[0]:
                kept = (score, dict(self.__dict__), caught)
            if self.input_components_ is None or not self.validation_scores_:
                break  # not wide, or nothing to choose on
        self.__dict__.update(kept[1])
        for w in kept[2]:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return self

    def _fit_once(self, X, y, sample_weight, components, rng):
        name = type(self).__name__
        max_iter, interval, patience = self._check_params()
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True,
                             ensure_min_samples=2, dtype=np.float64)
        X, y, w = network_weights(self, X, y, sample_weight)
        warn_rare_binary_values(self, X, w)
        device, dtype = self._resolve_runtime()
        seed = int(rng.randint(np.iinfo(np.int32).max))
        fit_input_scaling(self, X, self.normalize_X, "minmax_half")
        Y = self._normalise_targets(y, w)
        tr, va, wtr, wva = held_out_split(self, X.shape[0], rng, self._validation_fraction()
                                          if self.early_stopping else None, X=X, weights=w)
        # replicates of a design: each copy of a merged row is a row (the noise is read
        # within an input), otherwise a merged row is one
        replicates = rows_replicate(duplicate_groups(X), X.shape[0], w)
        n_rows = round(float(wtr.sum())) if replicates and wtr is not None else len(tr)
        wtr = None if wtr is None else as_tensor(wtr, device, dtype)
        wva = None if wva is None else as_tensor(wva, device, dtype)
        if self.n_basis >= n_rows:
            warnings.warn(f"{name}: n_basis={self.n_basis} >= the {n_rows} training rows: "
                          "the kernel has at least as many basis functions as data, so the "
                          "features can interpolate the targets and the noise estimate is "
                          "unreliable; use fewer basis functions.", UserWarning, stacklevel=3)
        # the scaled rows, split once (no full-data copy besides X itself)
        Xtr = as_tensor(self._scale_X(X[tr]), device, dtype)
        Ytr = as_tensor(Y[tr], device, dtype)
        Xva = None if va is None else as_tensor(self._scale_X(X[va]), device, dtype)
        Yva = None if va is None else as_tensor(Y[va], device, dtype)
        projection = None
        if (self.network is None and components is not None
                and wide.is_wide(len(tr), X.shape[1], components, WIDE_RATIO)):
            projection = wide.input_projection(self._scale_X(X[tr]), components,
                                               None if w is None else w[tr])
        self.input_components_ = None if projection is None else projection[0].shape[0]
        net = self._make_network(X.shape[1], seed, device, dtype, projection)
        scale, correction, cfg = self._feature_scale(), self._correction(), self._train_config()
        feat = self._feature_fn(net, scale)
        svi = self.inference == "svi"
        state = dbk.DBKState(self.n_basis, Y.shape[1], NOISE_INIT, NOISE_LOWER_BOUND, svi,
                             device, dtype)
        chunk = self._chunk_for()
        if svi:
            data = {"X": Xtr, "Y": Ytr, "n": len(tr)}
            if wtr is not None:  # weights of mean 1; the ELBO's n is their frequency sum
                data["w"], data["n"] = wtr / wtr.mean(), to_float(wtr.sum())
            if correction:
                data["kappa"] = dbk.prior_vars(feat, Xtr, chunk)
            loss = dbk.svi_loss(feat, state, data, correction)

            def post_fn():
                return BLRPosterior(state.m, state.L()), dbk.max_prior_var(feat, Xtr, chunk)
        else:
            weight = EVIDENCE_TRACE_WEIGHT if EXACT_OBJECTIVE == "evidence" else 1.0
            loss = dbk.exact_loss(feat, state, Xtr, Ytr, correction, EXACT_OBJECTIVE, weight,
                                  wtr)

            def post_fn():
                return dbk.exact_posterior(feat, Xtr, Ytr, state.noise(), correction, chunk,
                                           warn=False, context=name, weights=wtr)

        validate = None if va is None else dbk.validation_nll(post_fn, feat, Xva, Yva, state,
                                                              correction, chunk, wva)
        trainer = NetworkTrainer(loss, list(net.parameters()), state.params(), modules=[net],
                                 learning_rate=cfg["learning_rate_init"],
                                 weight_decay=cfg["weight_decay"], device=device)
        res = trainer.fit(len(tr), batch_size=cfg["batch_size"] if svi else None,
                          max_epochs=max_iter, rng=rng, validate=validate,
                          validation_interval=interval, n_iter_no_change=patience,
                          tol=self.tol, verbose=self.verbose, label=name)
        warn_training(self, res, "increase max_iter or learning_rate_init, or lower "
                      "n_iter_no_change", stacklevel=5)
        net.eval()
        self.calibration_, self.calibration_factor_, self.predictive_df_ = None, 1.0, math.inf
        self.noise_model_, self.noise_gain_, head = "homoscedastic", None, None
        self._stream_residuals = []  # a later partial_fit starts a new stream
        row_noise = None  # the head's noise at the conditioned rows
        method = cfg["calibration"]  # "auto" resolved
        with torch.no_grad():
            post, s2 = state.posterior()
            stream = None
            self.prior_scale_ = 1.0
            if svi:
                M = dbk.max_prior_var(feat, Xtr, chunk)
                self.elbo_ = dbk.chunked_elbo(feat, Xtr, Ytr, post, s2, chunk, wtr)
                self.log_marginal_likelihood_value_ = dbk.evidence(
                    feat, Xtr, Ytr, chunk, wtr)(1.0, float(s2))
                stream = {"state": state, "opt": trainer.optimizer.state_dict(), "n": len(tr)}
                if method is not None and va is not None:  # the held-out rows' residuals
                    mean, var = dbk.predictive(feat, Xva, post, s2, M, correction, chunk)
                    # with the trained rows' tails (a strided subset of them)
                    sub = slice(None, None, -(-len(tr) // T_MAX_FIT_ROWS))
                    m_tr, v_tr = dbk.predictive(feat, Xtr[sub], post, s2, M, correction, chunk)
                    tail = trained_tail_df(
                        to_numpy((Ytr[sub] - m_tr) / v_tr.sqrt().unsqueeze(1)),
                        None if wtr is None else to_numpy(wtr)[sub])
                    wv = None if wva is None else to_numpy(wva)
                    share = weighted_median(np.minimum(to_float(s2) / to_numpy(var), 1.0), wv)
                    self._fit_calibration(
                        method, to_numpy((Yva - mean) / var.sqrt().unsqueeze(1)), max_df=tail,
                        near_noiseless=near_noiseless(
                            to_numpy(Yva - mean), to_numpy(Ytr), share, weights=wv,
                            target_weights=None if wtr is None else to_numpy(wtr),
                            tail_check=True),
                        **({} if wv is None else {"weights": wv}))
                    self.calibration_ = method
                elif method is not None:
                    warnings.warn(
                        f"{name}: no calibration ran: with inference='svi' it reads the "
                        "validation rows of early stopping, and early_stopping=False holds "
                        "none, so the predictive is the model's own Gaussian, which can "
                        "under-cover on small data. Keep early_stopping=True, use "
                        "inference='exact' (calibrated on leave-one-out residuals), or set "
                        "calibration=None to accept the model's own.", UserWarning,
                        stacklevel=6)
            else:
                Xall = Xtr if va is None else torch.cat([Xtr, Xva])
                Yall = Ytr if va is None else torch.cat([Ytr, Yva])
                wall = wtr if va is None or w is None else torch.cat([wtr, wva])
                scale, self.prior_scale_, s2, post, M, self.log_marginal_likelihood_value_ = \
                    dbk.condition_exact(net, scale, Xall, Yall, s2, correction,
                                        None if va is None else len(tr), SCALE_SELECTION,
                                        NOISE_LOWER_BOUND, chunk, context=name, weights=wall)
                feat = self._feature_fn(net, scale)
                if self.noise_variance != "homoscedastic":
                    het = self._fit_noise(feat, Xall, Yall, s2, M, correction, chunk, wall,
                                          seed, None if va is None else len(tr))
                    if het is not None:
                        a, head, post, self.log_marginal_likelihood_value_ = het
                        scale, M = scale * math.sqrt(a), M * a
                        self.prior_scale_ *= a
                        feat = self._feature_fn(net, scale)
                        row_noise = head(Xall, dbk.features(feat, Xall, chunk))
                        s2 = row_noise.median()
                        self.noise_model_ = "heteroscedastic"
                self.elbo_ = None
                if method is not None:
                    groups = duplicate_groups(to_numpy(Xall))
                    z, v = dbk.loo_residuals(feat, Xall, Yall, post, s2, M, correction,
                                             chunk, [] if replicates else groups, wall,
                                             row_noise=head, copies=replicates)
                    z, v = to_numpy(z), to_numpy(v)
                    wn = None if wall is None else to_numpy(wall)
                    own = to_float(s2) if head is None else to_numpy(row_noise)
                    share = weighted_median(np.minimum(own / v, 1.0), wn)
                    options = {} if wn is None else {"weights": wn}
                    self._fit_calibration(
                        method, z, max_test_df=DBK_MAX_TEST_DF, relative_targets=True,
                        t_shape=T_SHAPE, near_noiseless=near_noiseless(
                            z * np.sqrt(v)[:, None], to_numpy(Yall), share, weights=wn,
                            tail_check=True), **options)
                    self.calibration_ = method
        self.n_iter_, self.loss_curve_ = res.n_epochs, res.loss_curve
        self.validation_scores_, self.best_iteration_ = res.validation_scores, res.best_epoch
        self.converged_ = res.converged
        self.n_samples_seen_ = len(tr) if svi else X.shape[0]
        self._noise_lower = float(NOISE_LOWER_BOUND)
        self._publish(net, scale, correction, s2, post, M, stream, cfg, chunk, head)
        return self

    def _fit_noise(self, feat, X, Y, s2, M, correction, chunk, weights, seed, n_trained=None):
        """The heteroscedastic model on the trained features, or None where it is not
        chosen: ``(prior scale a, NoiseHead, posterior, log evidence)``. With ``"auto"``,
        it is kept only when its cross-fitted held-out gain pays (``noise_gain_``) and, where
        the rows from ``n_trained`` on are the network's validation rows, its mean gain on
        those rows is positive."""
        Phi = dbk.features(feat, X, chunk).double()
        Xd, Yd = X.double(), Y.double()
        wd = None if weights is None else weights.double()
        kappa = Phi.square().sum(1)
        c = (float(M) - kappa).clamp_min(0.0) if correction else None
        lower = max(float(NOISE_LOWER_BOUND), NOISE_HEAD_FLOOR * float(s2))
        if self.noise_variance == "auto":
            n = X.shape[0]
            if n < NOISE_MIN_ROWS:
                return None
            perm = np.random.RandomState(seed % (2**31 - 1)).permutation(n)
            folds = [torch.as_tensor(f, device=X.device)
                     for f in np.array_split(perm, NOISE_FOLDS)]
            try:
                gain = to_numpy(dbk.noise_gain(Xd, Phi, Yd, c, float(s2), folds, wd,
                                               NOISE_PRIOR_SD, lower))
            except (FloatingPointError, NumericalError):  # a failed head does not pay
                return None
            wn = None if wd is None else to_numpy(wd)
            mean, se, pays = paired_gain(gain, NOISE_Z, NOISE_MIN_GAIN, wn)
            self.noise_gain_ = (mean, se)
            if not (pays and math.isfinite(mean)):
                return None
            if n_trained is not None and n_trained < n:
                # the head learns from residuals of features trained on most of these rows;
                # on rows the network never saw it must not lose
                unseen = gain[n_trained:]
                if np.average(unseen, weights=None if wn is None else wn[n_trained:]) <= 0:
                    return None
        try:
            a, head, log_ev = dbk.fit_noise(Xd, Phi, Yd, c, float(s2), wd,
                                            prior_sd=NOISE_PRIOR_SD, lower=lower)
        except FloatingPointError as exc:
            raise NumericalError(f"{type(self).__name__}: the heteroscedastic noise model "
                                 f"failed ({exc}); use noise_variance='homoscedastic'.") from exc
        post = dbk.noise_posterior(Xd, Phi, Yd, c, a, head, wd, context=type(self).__name__)
        # the head reads the features of the fitted model, sqrt(a) times those it was fitted on
        p = X.shape[1]
        head.center[p:] *= math.sqrt(a)
        head.scale[p:] *= math.sqrt(a)
        dt = X.dtype
        head = head.to(X.device, dt)
        post = BLRPosterior(post.mean.to(dt), post.factor.to(dt))
        return a, head, post, log_ev

    def _publish(self, net, scale, correction, s2, post, M, stream, cfg, chunk, head=None):
        """Set the model's fitted attributes and the device cache, at the end of a (partial)
        fit: nothing fitted is changed in place before this point."""
        net.eval()
        s2 = torch.as_tensor(s2).detach()
        self.network_ = net
        self.n_basis_ = int(post.mean.shape[0])
        self.feature_scale_ = float(scale)
        self.variance_correction_ = bool(correction)
        self.noise_variance_ = to_float(s2)
        self.weight_mean_ = to_numpy(post.mean)
        self.weight_cov_factor_ = to_numpy(post.factor)
        self.max_prior_var_ = to_float(M)
        self._chunk_rows = int(chunk)
        self._train_cfg = dict(cfg)
        self._noise_head = None if head is None else head.numpy()
        self._cache = {"feat": self._feature_fn(net, self.feature_scale_),
                       "post": BLRPosterior(post.mean.detach(), post.factor.detach()),
                       "s2": s2, "M": torch.as_tensor(M).detach(), "stream": stream,
                       "head": head}

    def _build_cache(self):
        dev, dt = self.device_, self._dtype
        net = self.network_.to(device=dev, dtype=dt).eval()
        self.network_ = net
        post = BLRPosterior(as_tensor(self.weight_mean_, dev, dt),
                            as_tensor(self.weight_cov_factor_, dev, dt))
        return {"feat": self._feature_fn(net, self.feature_scale_), "post": post,
                "s2": torch.tensor(self.noise_variance_, dtype=dt, device=dev),
                "M": torch.tensor(self.max_prior_var_, dtype=dt, device=dev),
                "stream": None,
                "head": (None if getattr(self, "_noise_head", None) is None else
                         dbk.NoiseHead(**self._noise_head).to(dev, dt))}

    # ================================================================== streaming
    @_SviOnly
    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y):
        """One pass of mini-batch ELBO steps over ``(X, y)`` (``inference="svi"`` only).

        The first call (on an unfitted estimator) fixes the input scaling and the target
        normalisation and initialises the network; later calls continue the fitted model in
        its fitted configuration, with Adam's state kept within the session (it restarts
        after unpickling). A changed ``learning_rate_init``, ``weight_decay``,
        ``batch_size``, ``variance_correction``, ``calibration`` or ``inference`` is refused
        (call ``fit``). Each later call first scores its new rows with the model as it stands
        (rows it has not trained on, in the stream's order) and then calibrates the
        predictive as ``calibration`` says on the newest such residuals, at least
        ``STREAM_CALIBRATION_ROWS = 100`` of them (none before ``STREAM_MIN_ROWS = 20``): a
        stream's network is still moving, and its own Gaussian under-covers.
        The ELBO's ``n`` is the number of rows seen so far, and ``M`` of the correction the
        largest prior variance of any row seen, measured at the end of the call that saw
        it. An interruption leaves the model as it was. Works with
        ``dask_ml.wrappers.Incremental``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self : object
        """
        with fit_transaction(self):
            return self._partial_fit(X, y)

    def _check_same_config(self):
        """Refuse a training setting changed since the fit, naming it."""
        name, cfg, now = type(self).__name__, self._train_cfg, self._train_config()
        if cfg["inference"] != "svi":
            raise ValueError(f"{name}.partial_fit: the model was fitted with inference="
                             f"{cfg['inference']!r}; partial_fit continues only a model fitted "
                             "with inference='svi'. Call fit.")
        for key in ("learning_rate_init", "weight_decay", "batch_size", "variance_correction",
                    "calibration"):
            if now[key] != cfg.get(key, now[key]):
                raise ValueError(
                    f"{name}.partial_fit: {key} was changed since the model was fitted "
                    f"({cfg[key]!r} -> {now[key]!r}); partial_fit continues the fitted "
                    f"training run. Set {key} back, or call fit to train with the new value.")

    def _partial_fit(self, X, y):
        name = type(self).__name__
        first = not hasattr(self, "network_")
        self._check_params()
        if not first:
            check_is_fitted(self)
            self._check_same_config()
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, reset=first,
                             dtype=np.float64)
        rng = check_random_state(self.random_state)
        if not first:  # a different (reproducible) shuffle at every call
            rng = np.random.RandomState((rng.randint(np.iinfo(np.int32).max) + self.n_iter_)
                                        % np.iinfo(np.int32).max)
        if first:
            device, dtype = self._resolve_runtime()
            seed = int(rng.randint(np.iinfo(np.int32).max))
            fit_input_scaling(self, X, self.normalize_X, "minmax_half")
            Y = self._normalise_targets(y)
            net = self._make_network(X.shape[1], seed, device, dtype)
            self.input_components_ = None
            scale, correction, cfg = self._feature_scale(), self._correction(), self._train_config()
            self._noise_lower = float(NOISE_LOWER_BOUND)
            state = dbk.DBKState(self.n_basis, Y.shape[1], NOISE_INIT, self._noise_lower, True,
                                 device, dtype)
            opt_state, n_prev, M_prev, chunk = None, 0, -math.inf, self._chunk_for()
            self.n_iter_, self.loss_curve_, self.n_samples_seen_ = 0, [], 0
            self.validation_scores_, self.best_iteration_, self.converged_ = [], 0, True
            self.log_marginal_likelihood_value_, self.elbo_, self.prior_scale_ = None, None, 1.0
            self.calibration_, self.calibration_factor_, self.predictive_df_ = None, 1.0, math.inf
            self.noise_model_, self.noise_gain_ = "homoscedastic", None
            self._stream_residuals = []
        else:
            Yc = y.reshape(-1, 1) if y.ndim == 1 else y
            if Yc.shape[1] != self.weight_mean_.shape[1] or (y.ndim == 1) != self._y_1d:
                first_shape = ("(n_samples,)" if self._y_1d
                               else f"(n_samples, {self.weight_mean_.shape[1]})")
                raise ValueError(f"{name}.partial_fit: y has shape {y.shape}, but the model was "
                                 f"started with y of shape {first_shape}; pass y of that shape "
                                 "in every call (1-D and one column are not mixed).")
            device, dtype = self.device_, self._dtype
            stream = self._get_cache()["stream"]
            net = copy.deepcopy(self.network_)  # trained here, published at the end
            if stream is None:  # after fit(svi) is pickled, or a cache built by predict
                state, opt_state = dbk.DBKState.from_posterior(
                    as_tensor(self.weight_mean_, device, dtype),
                    as_tensor(self.weight_cov_factor_, device, dtype),
                    self.noise_variance_, self._noise_lower), None
            else:
                state, opt_state = stream["state"].clone(), copy.deepcopy(stream["opt"])
            Y = (Yc - self._y_train_mean) / self._y_train_std
            n_prev, M_prev = self.n_samples_seen_, self.max_prior_var_
            scale, correction = self.feature_scale_, self.variance_correction_
            cfg, chunk = self._train_cfg, self._chunk_rows
        feat = self._feature_fn(net, scale)
        Xs = as_tensor(self._scale_X(X), device, dtype)
        data = {"X": Xs, "Y": as_tensor(Y, device, dtype), "n": n_prev + X.shape[0]}
        method = cfg.get("calibration")
        residuals = []
        if not first:  # the new rows, scored before the model trains on them
            cache = self._get_cache()
            mean, var = dbk.predictive(cache["feat"], Xs, cache["post"], cache["s2"],
                                       cache["M"], correction, chunk)
            residuals = [to_numpy((data["Y"] - mean) / var.sqrt().unsqueeze(1))]
            residuals = _newest(getattr(self, "_stream_residuals", []) + residuals,
                                STREAM_CALIBRATION_ROWS)
        if correction:
            data["kappa"] = dbk.prior_vars(feat, Xs, chunk)
        trainer = NetworkTrainer(dbk.svi_loss(feat, state, data, correction),
                                 list(net.parameters()), state.params(), modules=[net],
                                 learning_rate=cfg["learning_rate_init"],
                                 weight_decay=cfg["weight_decay"], device=device)
        if opt_state is not None:
            trainer.optimizer.load_state_dict(opt_state)
        loss = to_float(trainer.run_epoch(X.shape[0], cfg["batch_size"], rng))
        if not math.isfinite(loss):
            raise ValueError(f"{name}.partial_fit: the training loss became non-finite on "
                             "these rows; lower learning_rate_init or check the scale of X "
                             "and y.")
        net.eval()
        M = dbk.max_prior_var(feat, Xs, chunk, at_least=M_prev)
        post, s2 = state.posterior()
        z = np.concatenate(residuals) if residuals else np.empty((0, Y.shape[1]))
        if method is not None and len(z) >= STREAM_MIN_ROWS:
            # fresh rows, unlike the leave-one-out residuals of a fit: no DBK_MAX_TEST_DF
            self._fit_calibration(method, z, t_shape=T_SHAPE)
            self.calibration_ = method
        self._stream_residuals = residuals
        self.loss_curve_ = self.loss_curve_ + [loss]
        self.n_iter_ += 1
        self.n_samples_seen_ = data["n"]
        stream = {"state": state, "opt": trainer.optimizer.state_dict(), "n": data["n"]}
        self._publish(net, scale, correction, s2, post, M, stream, cfg, chunk)
        return self

    # ================================================================== predict
    _predict_params = ("include_noise",)

    def _latent_moments(self, Xq, full_cov):
        """Normalised predictive mean (m x C) and variance (m,) or covariance (m x m)."""
        cache = self._get_cache()
        mean, V = dbk.predictive(cache["feat"], Xq, cache["post"], cache["s2"], cache["M"],
                                 self.variance_correction_, self._chunk_rows,
                                 include_noise=self.include_noise, full_cov=full_cov,
                                 row_noise=cache.get("head"))
        return to_numpy(mean), to_numpy(V)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Exact log marginal likelihood (eq. 5) of the normalised targets at the fitted
        network, noise and prior scale (``log_marginal_likelihood_value_``).

        DBK's kernel is the trained network's features, with no hyperparameter vector
        ``theta``: only the fitted value exists, so ``theta`` must be None and
        ``eval_gradient`` False.

        Parameters
        ----------
        theta : None, default=None
        eval_gradient : bool, default=False

        Returns
        -------
        log_likelihood : float
        """
        check_is_fitted(self)
        name = type(self).__name__
        if theta is not None or eval_gradient:
            raise ValueError(f"{name} has no kernel hyperparameters theta (its kernel is the "
                             "trained network's features); call log_marginal_likelihood() "
                             "for the fitted value.")
        if self.log_marginal_likelihood_value_ is None:
            raise ValueError(f"{name} was trained by partial_fit, which keeps no training rows "
                             "and so no marginal likelihood.")
        return self.log_marginal_likelihood_value_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags
