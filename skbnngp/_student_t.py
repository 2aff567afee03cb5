"""Student-t processes from scale mixtures of NNGPs (Lee et al., ICLR 2022): the regressor."""

from __future__ import annotations

import math
import numbers
import warnings
from functools import partial

import numpy as np
from scipy import stats
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils import check_random_state

from ._backend import as_tensor, gp_predict, to_float, to_numpy
from ._backend._gp import ExactGP
from ._backend._student_t import (
    HYPERPARAMETERS,
    ard_kernel,
    from_log,
    ntk_factor,
    ntk_predict,
    paired_gain,
    relevance_penalty,
    to_log,
    unpack,
)
from ._base import (
    DEVICE_CONSTRAINT,
    DTYPE_CONSTRAINT,
    TorchEstimatorMixin,
    check_bounds,
    fit_hyperparameters,
    fit_input_scaling,
    transactional,
)
from ._calibration import REGRESSOR_CALIBRATION
from ._predictive import RegressorPredictiveMixin, loo_new_rows
from ._rows import (
    check_weights,
    collapse_rows,
    warn_light_weights,
    warn_repeated_noise,
)
from ._scale_mixture import DeltaPrior, InvGammaPrior, SampledPrior
from .kernels import get_activation, nngp_kernel
from .utils._sklearn_compat import (
    HasMethods,
    Interval,
    StrOptions,
    _fit_context,
    check_is_fitted,
    validate_data,
)

#: Box of each hyperparameter during marginal-likelihood maximisation, or ``"fixed"`` (not
#: optimised). The prior's shape is fixed: the evidence pushes it to the Gaussian limit.
HYPERPARAMETER_BOUNDS = {"weight_variance": (1e-2, 1e2), "bias_variance": (1e-5, 1e1),
                         "alpha": (1e-6, 1e1), "prior_shape": "fixed",
                         "prior_scale": (1e-3, 1e4), "relevance": (1e-3, 1e3)}

#: Standard deviation ``tau`` of the Gaussian hyperprior on the spread of the log ARD
#: relevances, ``log r_i - mean_j log r_j ~ N(0, tau^2)`` (None: maximum evidence).
RELEVANCE_PRIOR = 1.5

#: ``"absolute"``: ``alpha`` is added to the kernel diagonal; ``"relative"``: ``alpha`` times
#: the mean of the diagonal (neural-tangents' ``diag_reg``).
ALPHA_MODE = "absolute"

#: ``"posterior"`` (Bayesian), or the prior-mixed limits of gradient-descent training of the
#: readout only (``"readout_trained"``, Thm 3.2) or of every layer (``"ntk_trained"``, Thm 3.3).
PREDICTIVE = "posterior"

#: Prior draws of importance sampling (``inference="snis"``), fixed at fit.
N_PRIOR_SAMPLES = 1000

#: Above this many rows the hyperparameters are first optimised on a random subset of this
#: size, then refined on all rows for ``REFINE_ITER`` L-BFGS iterations (None: all rows).
SUBSET_SIZE, REFINE_ITER = 500, 10

#: ``ard="auto"`` takes the ARD kernel only when its mean paired leave-one-out gain is more
#: than ``ARD_Z`` standard errors above zero and at least ``ARD_MIN_GAIN`` nats a row.
ARD_Z, ARD_MIN_GAIN = 2.0, 1e-3

#: A calibrated ARD fit warns when it learns at least this many relevances per training
#: row: its leave-one-out residuals, under relevances fitted on those same rows, are then
#: narrower than fresh rows' and the intervals under-cover (doc/whats_new.rst).
ARD_WIDE_RATIO = 0.25


def _prior_marginal(prior, q, logdet, N, C, p):
    """The scale prior's log marginal likelihood (plugged into :class:`ExactGP`)."""
    return prior.log_marginal(q, logdet, N, C, p["prior_shape"], p["prior_scale"])


def _check_prior(prior):
    if isinstance(prior, str):
        return prior
    if hasattr(prior, "rvs") and hasattr(prior, "logpdf"):
        return "scipy"
    raise ValueError("prior must be 'invgamma', 'gaussian' or a frozen scipy.stats "
                     f"distribution on (0, inf); got {prior!r}.")


class StudentTProcessRegressor(RegressorPredictiveMixin, TorchEstimatorMixin, RegressorMixin,
                               BaseEstimator):
    """Student-t process regression with an NNGP kernel (scale mixture of NNGPs).

    An infinitely wide fully connected network whose readout variance ``s`` has a prior
    ``H``: conditioned on ``s`` the outputs are the NNGP ``GP(0, s K)``; with
    ``H = InvGamma(prior_shape, prior_scale)`` they form a Student-t process and inference
    is in closed form. Any other positive prior (a frozen scipy distribution, e.g. the
    paper's Burr XII ``scipy.stats.burr12(c, d)``) uses self-normalised importance sampling
    or 1-D quadrature over ``s``.

    Read more in the :ref:`User Guide <student_t>`.

    Parameters
    ----------
    depth : int, default=3
        Number of hidden layers ``L`` of the network defining the NNGP kernel; 3 is the
        paper's regression depth.
    activation : {"relu", "erf", "leaky_relu", "tanh", "sigmoid"} or callable, default="relu"
        Hidden-layer nonlinearity; a callable (torch -> torch) uses Gauss-Hermite quadrature.
        ReLU has a closed-form kernel and is the paper's choice.
    weight_variance : float, default=2.0
        Hidden-layer weight variance ``sigma_w^2`` (initial value when optimised); 2 is the
        He initialisation that keeps a ReLU network's signal variance.
    bias_variance : float, default=0.1
        Hidden-layer bias variance ``sigma_b^2`` (initial value when optimised).
    alpha : float, default=1e-2
        Noise-to-signal ratio ``lambda`` added to the kernel diagonal inside the scaled
        covariance, ``y | s ~ N(0, s (K + lambda I))`` (initial value when optimised); a
        small ratio starts the fit near interpolation without an ill-conditioned kernel.
    prior : {"invgamma", "gaussian"} or scipy.stats frozen distribution, default="invgamma"
        Prior of the readout variance ``s``. ``"invgamma"`` is the paper's closed-form
        Student-t process; ``"gaussian"`` fixes ``s = prior_scale`` (the plain NNGP
        regressor); a frozen distribution on (0, inf) (e.g. ``scipy.stats.burr12(2, 1)``) is
        integrated by ``inference``, with its own parameters held fixed.
    prior_shape : float, default=2.0
        Inverse-gamma shape ``a`` (the prior's degrees of freedom are ``2a``); kept fixed
        during the fit, since the evidence pushes it to the Gaussian limit and loses the
        heavy tails. 2, the paper code's default, is the heaviest integer shape whose prior
        has a finite mean.
    prior_scale : float, default=2.0
        Inverse-gamma scale ``b`` (initial value; learned with the kernel), or the
        amplitude for ``"gaussian"``.
    inference : {"auto", "exact", "snis", "quadrature"}, default="auto"
        ``"exact"`` for the closed-form priors; ``"snis"`` (importance sampling with 1000
        prior draws as proposal, the paper's algorithm) or ``"quadrature"`` (an 801-node
        grid in ``log s``, deterministic) for the others. ``"auto"``: exact when
        available, else SNIS, as in the paper.
    ard : bool or "auto", default=True
        Automatic relevance determination: the first hidden layer gets one weight variance
        per input feature, ``sigma_w^2 r_i``, so the input kernel becomes
        ``sigma_w^2 sum_i r_i x_i x'_i / d + sigma_b^2``; the relevances are learned with
        the other hyperparameters under a Gaussian hyperprior on their spread (standard
        deviation 1.5 in ``log r``), which shrinks them towards the shared kernel when rows
        are few. Not in the paper (``ard=False`` is its model). ``"auto"`` fits both
        kernels and keeps ARD only when its per-row leave-one-out log densities beat the
        shared kernel's by more than two standard errors of the paired differences (and
        0.001 nats a row); it costs a second fit. ``True`` is the default because it ties
        the shared kernel on average and wins where features differ in relevance. With
        many features on few rows (``d >= n / 4``) the calibrated intervals under-cover,
        and the fit warns (see ``ConformalRegressor`` for a guarantee).
    include_noise : bool, default=True
        Add ``s * lambda`` to the predictive variance, so that ``predict_dist``, ``predict``'s
        std and ``sample_y`` describe the noisy target ``y``; ``False`` gives the latent
        ``f`` (what the paper evaluates). The default keeps the package's contract that
        ``predict_dist`` is the distribution of ``y``.
    calibration : {"auto", "student_t", "gaussian"} or None, default="auto"
        Post-hoc calibration of the predictive against the closed-form leave-one-out
        residuals of the training rows (one O(n^3) pass over the training factor). The
        mean and ``log_marginal_likelihood`` are unchanged. ``"student_t"`` (what
        ``"auto"`` runs): the residuals, read against the posterior's t, set the
        predictive's degrees of freedom ``predictive_df_`` by maximum likelihood (never
        above the posterior's ``df_``), the posterior's scale kept unless a likelihood-ratio
        test at 1 % rejects it, then a split-conformal factor at that t's 95 % quantile.
        ``"gaussian"``: the variance is multiplied by the smallest factor >= 1 under which
        the central 95 % interval holds 95 % of the residuals. ``None``: the paper's
        predictive. ``"auto"`` is the Student-t calibration because with ``2a + n``
        degrees of freedom the evidence's t is nearly Gaussian beyond a few dozen rows,
        while the residuals show the tails of the data.
    normalize_X : bool, default=True
        Standardise each feature with the training mean and standard deviation; on by
        default because the NNGP kernel has no lengthscale (every experiment of the paper
        standardises).
    normalize_y : bool, default=True
        Standardise each target (predictions are mapped back), so that the default
        ``prior_scale`` and noise bounds fit any target scale.
    optimizer : {"lbfgs", "adam"} or None, default="lbfgs"
        Maximise the log marginal likelihood (with the relevance hyperprior) over the
        hyperparameters; ``None`` keeps the given values. L-BFGS converges in far fewer
        evaluations than the paper's Adam steps.
    n_restarts_optimizer : int, default=0
        Extra starts drawn log-uniformly inside the bounds; the best result is kept. None by
        default, since each restart costs a full optimisation.
    max_iter : int, default=100
        Iterations (L-BFGS) or steps (Adam) of each optimisation; enough for L-BFGS to
        converge on the embedded data sets.
    tol : float, default=1e-6
        Tolerance on the change of the per-datum negative log marginal likelihood.
    learning_rate_init : float, default=0.05
        Adam's step size in the log hyperparameters (not used by L-BFGS).
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device, default="auto"
        Where the kernel algebra runs; ``"auto"`` takes a GPU when there is one.
    dtype : {"float64", "float32"}, default="float64"
        Working precision; float64 because the n x n Cholesky factor of a near-interpolating
        kernel needs it.
    random_state : int, RandomState instance or None, default=None
        Seeds restarts, the optimisation subset and prior draws.
    verbose : int, default=0
        0: silent; 1: a progress line about every tenth evaluation of the optimiser and a
        last line saying why it stopped; 2 or more: a line at every evaluation.

    Attributes
    ----------
    X_train_ : ndarray of shape (n_samples, n_features)
        Training inputs; with ``sample_weight`` or exact duplicate rows, the distinct rows of
        positive weight (in lexicographic order), each standing for its summed weight.
    y_train_ : ndarray of shape (n_samples, n_targets)
        Training targets after normalisation (the rows of ``X_train_``).
    relevance_ : ndarray of shape (n_features,)
        Fitted ARD relevances (ones without ARD).
    ard_ : bool
        Whether the fitted kernel has per-feature relevances.
    ard_loo_gain_ : tuple of (float, float) or None
        With ``ard="auto"``: the mean per-row leave-one-out log-density gain of ARD over the
        shared kernel and its standard error (``None`` when no comparison was made).
    depth_, activation_ : int, str or callable
        The kernel the model was fitted with: ``predict`` and an unpickled model read these,
        so a ``set_params`` after ``fit`` changes nothing until the next ``fit``.
    hyperparameters_ : dict
        Fitted values of ``weight_variance``, ``bias_variance``, ``alpha``, ``prior_shape``,
        ``prior_scale``.
    L_ : ndarray of shape (n_samples, n_samples)
        Lower Cholesky factor of ``K + lambda I`` (plus any jitter added), read from
        ``device_`` when first asked for, read-only, and not pickled.
    dual_coef_ : ndarray of shape (n_samples, n_targets)
        ``(K + lambda I)^{-1} y``.
    q_ : float
        ``tr(Y^T (K + lambda I)^{-1} Y)``.
    df_ : float
        Degrees of freedom of the fitted process's own Student-t (its posterior over the
        amplitude, before any calibration; ``inf`` when Gaussian, ``nan`` for a mixture).
    posterior_shape_, posterior_scale_ : float
        Inverse-gamma posterior of ``s`` (``nan`` for other priors).
    calibration_ : {"student_t", "gaussian"} or None
        The calibration that ran.
    calibration_factor_ : float or ndarray of shape (n_targets,)
        Factor on the predictive variance set by the calibration (1 without it).
    predictive_df_ : float or ndarray of shape (n_targets,)
        Degrees of freedom of the predictive that :meth:`predict_dist` returns: the
        calibrated t's (at most ``df_``), or ``df_`` without a Student-t calibration
        (``inf``: Gaussian). At 2 or fewer the predictive has no variance.
        Both are arrays for a multi-output ``y``: each target is calibrated on its own
        residuals, with its own tails.
    log_marginal_likelihood_value_ : float
    effective_sample_size_ : float or None
        Effective sample size of the importance weights (``None`` otherwise).
    n_iter_ : int
    converged_ : bool
    loss_curve_ : list of float
        Per-datum negative log marginal likelihood at each optimiser evaluation.
    device_ : torch.device
    n_features_in_ : int

    See Also
    --------
    StudentTProcessClassifier : Classification by Student-t process regression.
    sklearn.gaussian_process.GaussianProcessRegressor : Gaussian process regression.

    Notes
    -----
    With ``q = y^T (K + lambda I)^{-1} y`` the posterior of ``s`` is
    ``InvGamma(a + n/2, b + q/2)`` and the predictive is Student-t with ``2a + n`` degrees of
    freedom, the NNGP posterior mean, and scale^2 ``(2b + q)/(2a + n) * v`` where ``v`` is the
    unit-amplitude NNGP posterior variance. The mean does not depend on the prior.
    Multi-output targets share one ``s``.

    Departures from the paper: hyperparameters are fitted by L-BFGS, first on a random
    subset of 500 rows then refined on all rows, rather than 30000 Adam steps;
    ``sigma_v^2`` is fixed to 1 (only ``b sigma_v^2`` is identifiable); ARD and the
    calibration are additions.

    References
    ----------
    H. Lee, E. Yun, H. Yang, J. Lee. "Scale Mixtures of Neural Network Gaussian Processes".
    ICLR 2022.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp import StudentTProcessRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(40, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = StudentTProcessRegressor(random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:2], return_std=True)
    >>> reg.predict_dist(X[:2]).dist.name
    't'
    """

    _parameter_constraints: dict = {
        "depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "activation": [StrOptions({"relu", "erf", "leaky_relu", "tanh", "sigmoid"}), callable],
        "weight_variance": [Interval(numbers.Real, 0, None, closed="neither")],
        "bias_variance": [Interval(numbers.Real, 0, None, closed="neither")],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "prior": [StrOptions({"invgamma", "gaussian"}), HasMethods(["rvs", "logpdf"])],
        "prior_shape": [Interval(numbers.Real, 0, None, closed="neither")],
        "prior_scale": [Interval(numbers.Real, 0, None, closed="neither")],
        "inference": [StrOptions({"auto", "exact", "snis", "quadrature"})],
        "ard": ["boolean", StrOptions({"auto"})],
        "include_noise": ["boolean"],
        "calibration": REGRESSOR_CALIBRATION,
        "normalize_X": ["boolean"],
        "normalize_y": ["boolean"],
        "optimizer": [StrOptions({"lbfgs", "adam"}), None],
        "n_restarts_optimizer": [Interval(numbers.Integral, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "learning_rate_init": [Interval(numbers.Real, 0, None, closed="neither")],
        "device": DEVICE_CONSTRAINT,
        "dtype": DTYPE_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, depth=3, activation="relu", weight_variance=2.0, bias_variance=0.1,
                 alpha=1e-2, prior="invgamma", prior_shape=2.0, prior_scale=2.0,
                 inference="auto", ard=True, include_noise=True, calibration="auto",
                 normalize_X=True, normalize_y=True, optimizer="lbfgs", n_restarts_optimizer=0,
                 max_iter=100, tol=1e-6, learning_rate_init=0.05, device="auto",
                 dtype="float64", random_state=None, verbose=0):
        self.depth = depth
        self.activation = activation
        self.weight_variance = weight_variance
        self.bias_variance = bias_variance
        self.alpha = alpha
        self.prior = prior
        self.prior_shape = prior_shape
        self.prior_scale = prior_scale
        self.inference = inference
        self.ard = ard
        self.include_noise = include_noise
        self.calibration = calibration
        self.normalize_X = normalize_X
        self.normalize_y = normalize_y
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate_init = learning_rate_init
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ set-up
    def _fit_settings(self):
        """The private fit-time settings: the module constants as they are at this fit,
        updated by ``_settings_override`` (how :class:`StudentTProcessClassifier` sets its
        one-hot regressor's noise bounds and turns the relevance hyperprior off)."""
        settings = {"bounds": HYPERPARAMETER_BOUNDS, "relevance_prior": RELEVANCE_PRIOR}
        settings.update(self.__dict__.get("_settings_override", {}))
        return settings

    def _check_params(self, settings):
        kind = _check_prior(self.prior)
        inference = self.inference
        if inference == "auto":
            inference = "exact" if kind in ("invgamma", "gaussian") else "snis"
        if inference == "exact" and kind not in ("invgamma", "gaussian"):
            raise ValueError(
                f"inference='exact' needs prior='invgamma' or 'gaussian', got prior={kind!r}; "
                "use inference='snis' or 'quadrature'.")
        if kind == "gaussian" and inference != "exact":
            raise ValueError("prior='gaussian' is a point mass: use inference='exact'.")
        get_activation(self.activation)
        box = settings["bounds"]
        bounds = [check_bounds(name, box[name], getattr(self, name),
                               enforce=self.optimizer is not None) for name in HYPERPARAMETERS]
        bounds.append(check_bounds("relevance", box["relevance"], 1.0, enforce=False))
        return kind, inference, bounds

    def _make_prior(self, kind, inference, rng, device, dtype):
        if inference == "exact":
            return InvGammaPrior() if kind == "invgamma" else DeltaPrior()
        dist = (stats.invgamma(self.prior_shape, scale=self.prior_scale)
                if kind == "invgamma" else self.prior)
        return SampledPrior(inference, dist=dist, n_samples=N_PRIOR_SAMPLES, rng=rng,
                            device=device, dtype=dtype)

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y, sample_weight=None):
        """Fit the Student-t process (and its hyperparameters) to ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None
            Frequency weights: row ``i`` enters the likelihood as ``N(y_i; f_i, s
            lambda)^{w_i}`` (noise ``s lambda / w_i``), so an integer weight is the row
            repeated that many times and a zero weight drops it. Exact duplicate rows are
            merged into one weighted row (the same model), and the calibration counts a
            row's leave-one-out residual ``w_i`` times. Identical repeats are evidence of
            no noise: weights summing above the number of rows can send the noise to its
            lower bound (a UserWarning then; importance weights: divide by the mean of the
            non-zero ones), and weights averaging under 1/4 count the data as few
            observations (a UserWarning too). None: every row once.

        Returns
        -------
        self : object
        """
        settings = self._fit_settings()
        kind, inference, bounds = self._check_params(settings)
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True,
                             ensure_min_samples=2, dtype=np.float64)
        X, y, w = collapse_rows(X, y, check_weights(X, sample_weight))
        warn_light_weights(self, w)
        if self.ard == "auto" and X.shape[1] > 1:
            self._fit_auto_ard(X, y, w)
        else:
            self.ard_loo_gain_ = None
            self._fit_kernel(X, y, kind, inference, bounds, settings,
                             not isinstance(self.ard, str) and bool(self.ard), w)
        if self.optimizer is not None:
            warn_repeated_noise(self, w, self.hyperparameters_["alpha"],
                                bounds[HYPERPARAMETERS.index("alpha")], "alpha")
            if self.ard != "auto":  # the kept inner fit has warned
                self._warn_wide_ard(X.shape)
        return self

    def _warn_wide_ard(self, shape):
        """Warn that a calibrated ARD fit of many features on few rows under-covers (not for
        the classifier's one-hot regressor, whose probabilities are calibrated otherwise)."""
        n, d = shape
        if (self.ard_ and self.calibration_ is not None and d >= ARD_WIDE_RATIO * n
                and "_settings_override" not in self.__dict__):
            warnings.warn(
                f"{type(self).__name__}: ARD learned {d} feature relevances on {n} distinct "
                "rows; the leave-one-out residuals that calibrate the predictive come from "
                "relevances fitted on those same rows, so its intervals may be too narrow. "
                "For intervals with a coverage guarantee, wrap the model in "
                "ConformalRegressor(method='cv+').", UserWarning, stacklevel=5)

    def _fit_auto_ard(self, X, y, w=None):
        """``ard="auto"``: fit the shared and the ARD kernel (each a full fit, as
        ``ard=False`` and ``ard=True`` would be), keep ARD only when its per-row
        leave-one-out log predictive densities beat the shared kernel's by more than
        ``ARD_Z`` standard errors of the paired differences (and ``ARD_MIN_GAIN`` nats a
        row), and adopt the kept fit's state and warnings."""
        fits = []
        for ard in (False, True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                reg = clone(self).set_params(ard=ard)
                if "_settings_override" in self.__dict__:
                    reg._settings_override = self._settings_override
                reg.fit(X, y, sample_weight=w)
            fits.append((reg, caught, reg._loo_log_density()))
            if not ard:
                # drop the shared fit's n x n factor before the ARD fit, so that only one is
                # held at a time; if the shared kernel is kept, _get_cache refactorises it
                # from its fitted attributes, as for a loaded model
                for key in ("_engine", "_theta", "_cache"):
                    reg.__dict__.pop(key, None)
        mean, se, pays = paired_gain(fits[1][2] - fits[0][2], ARD_Z, ARD_MIN_GAIN, weights=w)
        reg, caught, _ = fits[pays]
        for c in caught:  # only the kept model's warnings reach the user
            warnings.warn(c.message, c.category, stacklevel=3)
        params = self.get_params(deep=False)
        for key, value in vars(reg).items():
            if key not in params:
                setattr(self, key, value)
        self.ard_loo_gain_ = (mean, se)
        return self

    def _loo_log_density(self):
        """Per-row leave-one-out log density of the training targets under the fitted
        predictive (calibrated where the calibration is on; normalised targets, summed over
        them), hyperparameters held at their fitted values."""
        cache = self._get_cache()
        r, v, _ = loo_new_rows(self._engine, cache["factor"], cache["p"],
                               to_float(cache["factor"]["noise"]), leave_groups=False)
        std = np.sqrt(v[:, None] * self.calibration_factor_)
        return self._predictive_dist(np.zeros_like(r), np.broadcast_to(
            std, r.shape)).logpdf(r).sum(axis=1)

    def _fit_kernel(self, X, y, kind, inference, bounds, settings, ard, w=None):
        """The fit with the ARD choice made (``ard``) on the rows of weights ``w`` (None:
        once each)."""
        self._train_weight = w
        self.y_train_ = self._normalise_targets(y, w)
        device, dtype = self._resolve_runtime()
        rng = check_random_state(self.random_state)
        rng.randint(np.iinfo(np.int32).max)  # a draw kept so that later seeds are unchanged

        self.X_train_ = X
        # the fitted configuration: everything predict and an unpickled model's cache read
        self.depth_, self.activation_, self.ard_ = self.depth, self.activation, ard
        self._alpha_mode, self._predictive = ALPHA_MODE, PREDICTIVE
        Xt = as_tensor(fit_input_scaling(self, X, self.normalize_X, sample_weight=w), device,
                       dtype)
        Yt = as_tensor(self.y_train_, device, dtype)
        self._prior_obj = self._make_prior(kind, inference, rng, device, dtype)
        engine = self._make_gp(Xt, Yt)
        n_rel = X.shape[1] if self.ard_ else 0
        theta = to_log([float(getattr(self, h)) for h in HYPERPARAMETERS] + [1.0] * n_rel,
                       device, dtype)
        free = [b != "fixed" and h in self._prior_obj.uses + HYPERPARAMETERS[:3]
                for h, b in zip(HYPERPARAMETERS, bounds)] + [bounds[5] != "fixed"] * n_rel
        bounds = bounds[:5] + [bounds[5]] * n_rel
        free_idx = [i for i, f in enumerate(free) if f]
        self.n_iter_, self.converged_, self.loss_curve_ = 0, True, []
        if self.optimizer is not None and free_idx:
            box = tuple(to_log([bounds[i][j] for i in free_idx], device, dtype) for j in (0, 1))
            theta = fit_hyperparameters(
                self, engine, theta, free_idx, box, rng, method=self.optimizer,
                max_iter=self.max_iter, tol=self.tol, learning_rate=self.learning_rate_init,
                subset_size=SUBSET_SIZE, refine_iter=REFINE_ITER,
                restarts=self.n_restarts_optimizer,
                penalty=relevance_penalty(settings["relevance_prior"], n_rel))
        fitted = from_log(theta)
        self.hyperparameters_ = {
            h: (fitted[i] if self.optimizer is not None and free[i] else float(getattr(self, h)))
            for i, h in enumerate(HYPERPARAMETERS)}
        self.relevance_ = np.asarray(fitted[5:]) if self.ard_ else np.ones(X.shape[1])
        self._publish(engine, theta)
        return self

    def _publish(self, engine, theta):
        """Factorise at ``theta`` and set the fitted attributes that follow from it."""
        self._engine, self._theta = engine, theta
        cache = self._factorise()
        f = cache["factor"]
        self.dual_coef_ = to_numpy(f["dual"])
        self.q_ = to_float(f["q"])
        p = cache["p"]
        self.log_marginal_likelihood_value_ = -to_float(f["nll"])
        N = engine.n_eff * engine.C
        self._posterior = self._prior_obj.posterior(f["q"], f["logdet"], N, engine.C,
                                                    p["prior_shape"], p["prior_scale"])
        self.effective_sample_size_ = self._prior_obj.effective_sample_size
        post = self._posterior
        self.posterior_shape_ = post.params["shape"] if post.kind == "invgamma" else math.nan
        self.posterior_scale_ = post.params["scale"] if post.kind == "invgamma" else math.nan
        self.predictive_df_ = math.inf  # the evidence's predictive until the calibration
        mix = self._model_mixing()
        self.df_ = (2 * mix.params["shape"] if mix.kind == "invgamma"
                    else (math.inf if mix.kind == "delta" else math.nan))
        self._cache = cache
        method = "student_t" if self.calibration == "auto" else self.calibration
        self.calibration_ = None if self._predictive == "ntk_trained" else method
        self._calibrate_from_loo(self.calibration_, engine, f, cache["p"])
        if math.isfinite(self.df_):  # the process's own t is the predictive where the
            df = self.predictive_df_   # calibration kept the model's shape
            self.predictive_df_ = (np.where(np.isinf(df), float(self.df_), df) if np.ndim(df)
                                   else float(self.df_) if math.isinf(df) else df)

    @property
    def L_(self):
        """Lower Cholesky factor of ``K + lambda I`` (NumPy), read from ``device_`` on demand."""
        check_is_fitted(self)
        cache = self._get_cache()
        return self._host_copy(cache, "L_host", cache["factor"]["L"])

    def _set_alpha(self, alpha):
        """Refactorise with the noise ratio ``alpha``, the other hyperparameters kept."""
        self._get_cache()
        theta = self._theta.clone()
        theta[2] = math.log(alpha)
        self.hyperparameters_ = {**self.hyperparameters_, "alpha": float(alpha)}
        self._publish(self._engine, theta)

    def _make_gp(self, Xt, Yt):
        kernel = partial(ard_kernel, nngp_kernel, self.depth_, get_activation(self.activation_),
                         self.ard_)
        w = self.__dict__.get("_train_weight")
        return ExactGP(kernel, unpack, Xt, Yt,
                       marginal=partial(_prior_marginal, self._prior_obj),
                       relative_noise=self._alpha_mode == "relative",
                       context=type(self).__name__,
                       weights=None if w is None else as_tensor(w, Xt.device, Xt.dtype))

    def _factorise(self):
        """Final factorisation on the training set (and the NTK pieces for Thm 3.3)."""
        eng, theta = self._engine, self._theta
        f = eng.state(theta, warn=True, context=f"{type(self).__name__}: training kernel")
        cache = {"factor": f, "p": unpack(theta)}
        if self._predictive == "ntk_trained":
            noise = f["noise"] if eng.weights is None else f["noise"] / eng.weights
            cache["ntk"] = ntk_factor(eng.kernel, cache["p"], eng.X, eng.Y, noise,
                                      context=f"{type(self).__name__}: training NTK")
        return cache

    def _build_cache(self):
        # after unpickling: rebuild the engine and the factorisation on device_ from the
        # fitted configuration (depth_, activation_, ard_, _alpha_mode, _predictive)
        device, dtype = self.device_, self._dtype
        Xt = as_tensor((self.X_train_ - self._X_offset) / self._X_scale, device, dtype)
        Yt = as_tensor(self.y_train_, device, dtype)
        self._engine = self._make_gp(Xt, Yt)
        self._theta = to_log([self.hyperparameters_[h] for h in HYPERPARAMETERS]
                             + (list(self.relevance_) if self.ard_ else []), device, dtype)
        return self._factorise()

    def __getstate__(self):
        state = super().__getstate__()
        for key in ("_engine", "_theta"):
            state.pop(key, None)
        return state  # a SampledPrior saves its draws as NumPy itself

    def __setstate__(self, state):
        super().__setstate__(state)
        obj = self.__dict__.get("_prior_obj")
        if isinstance(obj, SampledPrior):
            obj.to_device(self.device_)

    # ------------------------------------------------------------------ predict
    def _model_mixing(self):
        if self._predictive == "posterior":
            return self._posterior
        hp = self.hyperparameters_
        return self._prior_obj.prior(hp["prior_shape"], hp["prior_scale"])

    _predict_params = ("include_noise",)

    def _latent_moments(self, Xq, full_cov):
        """Unit-amplitude predictive mean (m x C) and variance (m,) or covariance (m x m)."""
        cache = self._get_cache()
        eng, f, p = self._engine, cache["factor"], cache["p"]
        lam = f["noise"] if self.include_noise else 0.0
        if self._predictive == "ntk_trained":  # Thm 3.3: mean and Theta' from the NTK
            mean, V = ntk_predict(eng.kernel, p, cache["ntk"], eng.X, Xq, lam, full_cov,
                                  block_elements=eng.block)
        else:
            mean, V = gp_predict(eng.kernel, p, f, Xq, full_cov=full_cov, noise=lam)
        return to_numpy(mean), to_numpy(V)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Log marginal likelihood of the (normalised) training targets.

        Parameters
        ----------
        theta : array-like of shape (5,) or (5 + n_features,), default=None
            Logarithms of ``weight_variance, bias_variance, alpha, prior_shape,
            prior_scale`` (then the relevances when ``ard_``); ``None`` returns the fitted
            value.
        eval_gradient : bool, default=False
            Also return the gradient with respect to ``theta``.

        Returns
        -------
        log_likelihood : float
        log_likelihood_gradient : ndarray of shape (len(theta),), optional
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("eval_gradient=True requires theta.")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        size = len(HYPERPARAMETERS) + (self.n_features_in_ if self.ard_ else 0)
        if theta.shape != (size,) or not np.all(np.isfinite(theta)):
            raise ValueError(f"theta must be {size} finite log-values "
                             f"({', '.join(HYPERPARAMETERS)}{', relevances' if self.ard_ else ''}).")
        self._get_cache()
        th = as_tensor(theta, self.device_, self._dtype)
        nll, grad = self._engine.value_and_grad(th)
        if eval_gradient:
            return -to_float(nll), -to_numpy(grad)
        return -to_float(nll)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags
