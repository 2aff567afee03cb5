"""Mixed-activation NNGP regression with MAP hyperparameters and exact or Nystrom inference
(de Araujo & Goncalves)."""

from __future__ import annotations

import numbers
import warnings
from functools import partial

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.utils import check_array, check_random_state

from ._backend import ExactGP, NystromGP, as_tensor, gp_predict, to_float, to_numpy
from ._base import (
    BOUNDS_CONSTRAINT,
    DEVICE_CONSTRAINT,
    DTYPE_CONSTRAINT,
    TorchEstimatorMixin,
    check_bounds,
    fit_hyperparameters,
    fit_input_scaling,
    plain,
    transactional,
)
from ._calibration import REGRESSOR_CALIBRATION
from ._predictive import RegressorPredictiveMixin
from ._rows import check_weights, collapse_rows, warn_light_weights, warn_repeated_noise
from .kernels import PAPER_ACTIVATIONS, Activation
from .kernels._mixture_map import VARIANCES, MixtureLayout, logit, mixture_kernel
from .utils._sklearn_compat import (
    Interval,
    StrOptions,
    _fit_context,
    check_is_fitted,
    validate_data,
)

#: The rank ``n_anchors="auto"`` caps at.
AUTO_ANCHORS = 512
#: Rule (25): ``noise_variance="auto"`` starts the noise at this fraction of the mean prior
#: variance ``mean_i k(x_i, x_i)`` on the scaled training inputs.
NOISE_INIT_RATIO = 0.04
#: Hyperpriors of the MAP objective (20): None (type-II maximum likelihood) or a dict in the
#: form of :data:`skbnngp.kernels._mixture_map.DEFAULT_PRIORS` (read at fit only).
PRIORS = None
#: Optimiser box of each hyperparameter but the noise (``noise_variance_bounds``): a pair, or
#: ``"fixed"`` to hold it at its initial value. The weights' pair boxes each mixture logit to
#: ``(logit(low), logit(high))`` (odds against the last component).
HYPERPARAMETER_BOUNDS = {"sigma_b2": (1e-4, 1e4), "sigma_v2": (1e-4, 1e4),
                         "sigma_u2": (1e-4, 1e4), "sigma_a2": (1e-4, 1e4),
                         "leaky_slope": (1e-4, 0.9999), "weights": (1e-4, 0.9999)}
#: Nystrom jitter added to the anchor kernel's diagonal, relative to its mean diagonal
#: (copied into the fitted state).
JITTER = 1e-6
#: L-BFGS/Adam iterations on all rows after the ``subset_size`` stage (each O(n m^2)).
REFINE_ITER = 0
#: The input scaling of ``normalize_X=True`` (the paper's: columns to [-0.5, 0.5]);
#: ``"standard"`` (mean 0, std 1) is the alternative.
INPUT_SCALING = "minmax_center"


class MixedActivationGPRegressor(RegressorPredictiveMixin, TorchEstimatorMixin, RegressorMixin,
                                 BaseEstimator):
    """Gaussian process with a mixed-activation NNGP kernel, MAP hyperparameters and Nystrom
    (or exact) inference.

    The kernel ``sigma_b2 + sigma_v2 sum_m w_m k_m(x, x')`` is the covariance of an infinitely
    wide one-hidden-layer network whose additive blocks use the activations ``activations``
    (default: the paper's tanh + LeakyReLU kernel (15)). Its seven hyperparameters are fitted
    by type-II maximum likelihood (the paper's MAP objective (20) with flat hyperpriors), and
    ``approx="nystrom"`` replaces the n x n covariance by a rank ``n_anchors`` Nystrom
    approximation, so that 10^5 rows cost O(n m^2) time and O(n) memory.

    Read more in the :ref:`User Guide <mixed_activation>`.

    Parameters
    ----------
    n_anchors : "auto" or int, default="auto"
        Nystrom rank ``m``. ``"auto"``: every distinct training row when there are at most
        512 of them (the Nystrom model is then the exact GP up to jitter), else 512 anchors,
        which is within 1 % of the NLPD of 1024 anchors at a quarter of the time. An integer
        larger than the number of distinct training rows is clipped to it with a warning.
    anchors : {"kmeans++", "kmeans", "first", "random"} or array-like of shape \
(m, n_features), default="kmeans++"
        ``"kmeans++"``: k-means++ seeding with one trial per centre (the paper's description;
        anchors are data rows); ``"kmeans"``: centroids of 20 Lloyd iterations from that
        seeding; ``"first"``: the first rows; ``"random"``: uniform without replacement; or
        anchor inputs in the original feature space (``n_anchors`` is then ignored). Chosen
        among distinct rows after input scaling, and fixed during training. The default is
        the paper's.
    approx : {"nystrom", "exact"}, default="nystrom"
        ``"exact"`` factorises the n x n matrix (O(n^3); small n only). Nystrom by default
        because it scales, and equals the exact GP up to jitter below 512 distinct rows.
    activations : tuple of {"tanh", "sigmoid", "relu", "leaky_relu"} or Activation, \
default=("tanh", "leaky_relu")
        Mixture components (see :func:`~skbnngp.kernels.mixed_activation_kernel`); the
        default is the paper's reduced kernel (15).
    sigma_b2, sigma_v2, sigma_u2, sigma_a2 : float, default=1.0
        Initial output-bias, output-weight, input-weight and hidden-bias variances (the
        paper's initial values). When optimised they must lie in [1e-4, 1e4].
    leaky_slope : float in (0, 1), default=0.5
        Initial LeakyReLU slope ``alpha`` (the paper's).
    weights : array-like of shape (n_activations,) or None, default=None
        Initial mixture weights (positive, summing to one); ``None``: equal (the paper's).
    noise_variance : "auto" or float, default="auto"
        Initial noise variance (on the normalised y scale); ``"auto"`` is the paper's rule
        (25), ``0.04 * mean(diag K)`` on the scaled training inputs.
    noise_variance_bounds : pair of floats or "fixed", default=(1e-6, 1e2)
        Optimiser range of the noise variance; ``"fixed"`` keeps its initial value. The
        default spans every noise level of standardised targets.
    optimizer : {"lbfgs", "adam"} or None, default="lbfgs"
        Optimiser of the hyperparameters; ``None`` keeps the initial values. L-BFGS by
        default because it converges where the paper's 50 Adam steps do not.
    max_iter : int, default=100
        Iterations of the optimiser (on the subset when there are more than
        ``subset_size`` rows); 100 lets L-BFGS converge on the benchmark sets.
    tol : float, default=1e-6
        Tolerance on the per-datum objective; small enough not to stop L-BFGS early.
    learning_rate_init : float, default=0.05
        Adam step size (``optimizer="adam"`` only); 0.05 moves the raw (log/logit)
        hyperparameters by about 1 in 20 steps.
    subset_size : int or None, default=2000
        When there are more rows, hyperparameters are optimised on a random subset of this
        many rows (same anchors; the predictive conditions on every row); ``None``: all
        rows. 2000 keeps the fit's cost bounded, and refining on all rows gains little.
    normalize_X : bool, default=True
        Map each training column to [-0.5, 0.5] (min-max, centred: the paper's protocol).
        On by default because the kernel is not shift or scale invariant.
    normalize_y : bool, default=True
        Standardise the targets (the fitted variances, noise included, live on that scale);
        on by default so that the initial values suit any target scale.
    include_noise : bool, default=True
        Add ``noise_variance_`` to the predictive variance, so that ``predict``'s std/cov,
        ``predict_dist`` and ``sample_y`` describe the noisy target y (eq (24)); ``False``
        gives the latent f.
    calibration : {"auto", "student_t", "gaussian"} or None, default="auto"
        Calibration of the predictive on the closed-form leave-one-out residuals of the
        training rows (under ``approx="nystrom"`` those of ``Q + noise I``, O(n m^2)).
        ``"student_t"`` (what ``"auto"`` runs): the residuals set a Student-t predictive,
        its degrees of freedom ``predictive_df_`` by maximum likelihood (``inf``, the
        Gaussian, when the tails ask for nothing heavier), the GP's own scale unless a
        likelihood-ratio test at 1 % rejects it for the residuals' own, then the
        split-conformal factor at the t's quantile (below 1 only after that test);
        ``predict_dist`` is then a ``scipy.stats.t``, the std that t's (``inf`` for
        ``predictive_df_ <= 2``) and ``sample_y`` draws a multivariate t. ``"gaussian"``:
        the variance is multiplied by the smallest factor ``calibration_factor_ >= 1``
        under which the central 95 % Gaussian interval holds 95 % of the residuals (their
        split-conformal quantile); the mean and ``log_marginal_likelihood`` are unchanged.
        ``None``: the fitted GP's predictive (the paper's). ``"auto"`` is the Student-t
        because it had the lowest test NLPD on the benchmark sets, at 95 % coverage.
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device, default="auto"
        Where the kernel algebra runs; ``"auto"`` takes CUDA when available.
    dtype : {"float64", "float32"}, default="float64"
        Working precision; float64 because the kernel matrices are ill-conditioned.
    random_state : int, RandomState instance or None, default=None
        Seeds anchors and subsets.
    verbose : int, default=0
        0: silent; 1: a progress line about every tenth evaluation of the optimiser and a
        last line saying why it stopped; 2 or more: a line at every evaluation.

    Attributes
    ----------
    sigma_b2_, sigma_v2_, sigma_u2_, sigma_a2_, noise_variance_ : float
        Fitted hyperparameters (``noise_variance_`` on the normalised y scale).
    leaky_slope_ : float or None
        None without a ``"leaky_relu"`` component.
    weights_ : ndarray of shape (n_activations,)
        Mixture weights (sum to one).
    theta_ : ndarray
        The raw vector ``[log sigma_b2, log sigma_v2, log sigma_u2, log sigma_a2,
        log noise_variance, logit leaky_slope (if any), mixture logits]``.
    anchors_ : ndarray of shape (n_anchors, n_features) or None
        Anchor inputs in the original feature space (None for ``approx="exact"``).
    anchor_indices_ : ndarray of shape (n_anchors,) or None
        Training rows used as anchors (None for centroids, user anchors or exact).
    n_anchors_ : int
    L_, LB_, dual_coef_ : ndarray
        Cholesky factors of ``K_SS + jitter`` and ``B = I + V V^T / noise`` (Nystrom), or of
        ``K + noise I`` and None (exact); mean = ``K(X*, anchors or X_train_) @ dual_coef_``.
        ``L_`` is read-only. In the exact mode it is read from ``device_`` when first asked
        for and is not pickled: a loaded model factorises again (so a saved exact model
        grows with n, not n**2).
    X_train_ : ndarray of shape (n_samples, n_features)
        Training inputs; with ``sample_weight`` or exact duplicate rows, the distinct rows of
        positive weight (in lexicographic order), each standing for its summed weight.
    y_train_ : ndarray of shape (n_samples, n_targets)
        Training targets after normalisation.
    log_marginal_likelihood_value_ : float
        At ``theta_`` (under the Nystrom approximation when ``approx="nystrom"``).
    calibration_ : {"student_t", "gaussian"} or None
        The calibration that ran.
    calibration_factor_ : float or ndarray of shape (n_targets,)
        Factor on the predictive variance set by the calibration (>= 1 except where the
        Student-t calibration's scale test narrowed the predictive).
    predictive_df_ : float or ndarray of shape (n_targets,)
        Degrees of freedom of the Student-t predictive; ``inf``: Gaussian.
        Both are arrays for a multi-output ``y``: each target is calibrated on its own
        residuals, with its own tails.
    map_objective_value_ : float
        ``-log_marginal_likelihood_value_`` plus the prior terms of (20) (none by default).
    n_iter_ : int
    converged_ : bool
    loss_curve_ : list of float
        Per-datum MAP objective at each optimiser evaluation.
    device_ : torch.device
    n_features_in_ : int

    See Also
    --------
    skbnngp.kernels.MixedActivationKernel : the kernel for scikit-learn's GP estimators.
    sklearn.gaussian_process.GaussianProcessRegressor : exact GP regression.

    Notes
    -----
    Departures from the paper: the Nystrom model is
    ``Q + noise I`` (the paper's eq (22) is singular, A1), with the projected-process (DTC)
    predictive, whose variances lie in ``[0, k(x, x)]`` (A2); variances are optimised as
    logarithms (the paper: softplus); the default optimiser converges where the paper's 50
    Adam steps do not (A6); no hyperpriors (the paper gives no values, A4); predictions
    include the noise and are calibrated. The user guide gives the paper's protocol as a
    recipe.

    References
    ----------
    G. A. de Araujo, F. B. Goncalves. "From Shallow Bayesian Neural Networks to Gaussian
    Processes: General Convergence, Identifiability and Scalable Inference".

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp import MixedActivationGPRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(100, 3)); y = np.sin(4 * X[:, 0]) + 0.1 * rng.normal(size=100)
    >>> reg = MixedActivationGPRegressor(n_anchors=20, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:2], return_std=True)
    >>> float(reg.weights_.sum())
    1.0
    >>> reg.predict_dist(X[:2]).dist.name in ("norm", "t")  # t: the Student-t calibration
    True
    """

    _parameter_constraints: dict = {
        "n_anchors": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left")],
        "anchors": [StrOptions({"kmeans++", "kmeans", "first", "random"}), "array-like"],
        "approx": [StrOptions({"nystrom", "exact"})],
        "activations": [tuple, list],
        **{h: [Interval(numbers.Real, 0, None, closed="neither")] for h in VARIANCES[:4]},
        "leaky_slope": [Interval(numbers.Real, 0, 1, closed="neither")],
        "weights": ["array-like", None],
        "noise_variance": [StrOptions({"auto"}), Interval(numbers.Real, 0, None,
                                                          closed="neither")],
        "noise_variance_bounds": BOUNDS_CONSTRAINT,
        "optimizer": [StrOptions({"lbfgs", "adam"}), None],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "learning_rate_init": [Interval(numbers.Real, 0, None, closed="neither")],
        "subset_size": [Interval(numbers.Integral, 2, None, closed="left"), None],
        "normalize_X": ["boolean"],
        "normalize_y": ["boolean"],
        "include_noise": ["boolean"],
        "calibration": REGRESSOR_CALIBRATION,
        "device": DEVICE_CONSTRAINT,
        "dtype": DTYPE_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, n_anchors="auto", anchors="kmeans++", approx="nystrom",
                 activations=("tanh", "leaky_relu"), sigma_b2=1.0, sigma_v2=1.0, sigma_u2=1.0,
                 sigma_a2=1.0, leaky_slope=0.5, weights=None, noise_variance="auto",
                 noise_variance_bounds=(1e-6, 1e2), optimizer="lbfgs", max_iter=100, tol=1e-6,
                 learning_rate_init=0.05, subset_size=2000, normalize_X=True, normalize_y=True,
                 include_noise=True, calibration="auto", device="auto", dtype="float64",
                 random_state=None, verbose=0):
        self.n_anchors = n_anchors
        self.anchors = anchors
        self.approx = approx
        self.activations = activations
        self.sigma_b2 = sigma_b2
        self.sigma_v2 = sigma_v2
        self.sigma_u2 = sigma_u2
        self.sigma_a2 = sigma_a2
        self.leaky_slope = leaky_slope
        self.weights = weights
        self.noise_variance = noise_variance
        self.noise_variance_bounds = noise_variance_bounds
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate_init = learning_rate_init
        self.subset_size = subset_size
        self.normalize_X = normalize_X
        self.normalize_y = normalize_y
        self.include_noise = include_noise
        self.calibration = calibration
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ set-up
    def _check_params(self):
        """The activations, the initial weights and the optimiser's bounds (ValueError
        naming the argument otherwise)."""
        acts = tuple(self.activations)
        if not acts:
            raise ValueError("activations must name at least one activation.")
        for a in acts:
            if not (isinstance(a, Activation) or (isinstance(a, str) and a in PAPER_ACTIVATIONS)):
                raise ValueError(f"activations: {a!r} is not one of {PAPER_ACTIVATIONS} or an "
                                 "Activation instance.")
        if len(set(map(repr, acts))) != len(acts):
            raise ValueError(f"activations must not repeat an activation, got {acts!r}.")
        if "relu" in acts and "leaky_relu" in acts:
            warnings.warn(f"{type(self).__name__}: 'relu' is nested in 'leaky_relu' (shared "
                          "slope), so the weights are not identifiable; only "
                          "the kernel is. Drop one of them for interpretable weights.",
                          UserWarning, stacklevel=3)
        M = len(acts)
        if self.weights is None:
            w = np.full(M, 1.0 / M)
        else:
            w = np.asarray(self.weights, dtype=float).ravel()
            if w.shape != (M,) or not np.all(np.isfinite(w)) or np.any(w <= 0) \
                    or abs(w.sum() - 1.0) > 1e-6:
                raise ValueError(f"weights must hold {M} positive values summing to one (one "
                                 f"per activation), got {plain(self.weights)!r}.")
            w = w / w.sum()
        optimise = self.optimizer is not None
        bounds = dict(HYPERPARAMETER_BOUNDS)
        bounds["noise_variance"] = check_bounds("noise_variance", self.noise_variance_bounds,
                                                None, enforce=False)
        for h in VARIANCES[:4]:
            b, value = bounds[h], getattr(self, h)
            if optimise and b != "fixed" and not b[0] <= value <= b[1]:
                raise ValueError(f"{h}={plain(value)!r} lies outside the optimiser's range "
                                 f"{b!r}; pass optimizer=None to keep it fixed.")
        for h, init in (("leaky_slope", self.leaky_slope), ("weights", w[0])):
            b = bounds[h]
            logits = [logit(init)] if h == "leaky_slope" else np.log(w[:-1] / w[-1])
            if b != "fixed" and optimise and M > 1 and not all(
                    logit(b[0]) <= t <= logit(b[1]) for t in logits):
                raise ValueError(f"The initial {h} lie(s) outside the optimiser's range "
                                 f"{b!r}; pass optimizer=None to keep it fixed.")
        return acts, w, bounds

    def _scale_X(self, X):
        return (X - self._X_offset) / self._X_scale

    def _select_anchors(self, Xs, rng):
        """Anchor inputs (scaled space) and their row indices."""
        name = type(self).__name__
        if not isinstance(self.anchors, str):
            Z = check_array(self.anchors, dtype=np.float64, input_name="anchors")
            if Z.shape[1] != Xs.shape[1]:
                raise ValueError(f"anchors has {Z.shape[1]} features, but X has "
                                 f"{Xs.shape[1]}.")
            Z = self._scale_X(Z)
            uniq = np.sort(np.unique(Z, axis=0, return_index=True)[1])
            if uniq.size < Z.shape[0]:
                warnings.warn(f"{name}: dropped {Z.shape[0] - uniq.size} duplicate anchors.",
                              UserWarning, stacklevel=3)
            return Z[uniq], None
        cand = np.sort(np.unique(Xs, axis=0, return_index=True)[1])
        m = self.n_anchors
        if m == "auto":
            m = min(AUTO_ANCHORS, cand.size)
        elif m > cand.size:
            warnings.warn(f"{name}: n_anchors={m} exceeds the {cand.size} distinct training "
                          f"rows; using all of them (the Nystrom model is then the exact GP "
                          "up to jitter; approx='exact' does that directly).", UserWarning,
                          stacklevel=3)
            m = cand.size
        seed = rng.randint(np.iinfo(np.int32).max)
        if self.anchors == "first":
            idx = cand[:m]
        elif self.anchors == "random":
            idx = np.sort(rng.choice(cand, m, replace=False))
        else:
            _, loc = kmeans_plusplus(Xs[cand], m, random_state=seed, n_local_trials=1)
            idx = cand[np.sort(loc)]
            if self.anchors == "kmeans":
                km = KMeans(m, init=Xs[idx], n_init=1, max_iter=20).fit(Xs[cand])
                Z = km.cluster_centers_
                return Z[np.sort(np.unique(Z, axis=0, return_index=True)[1])], None
        return Xs[idx], idx

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y, sample_weight=None):
        """Fit the hyperparameters (MAP) and the GP posterior to ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None
            Frequency weights: row ``i`` has noise variance ``noise_variance / w_i`` (its
            likelihood raised to the power ``w_i``), so an integer weight is the row repeated
            that many times and a zero weight drops it. Exact duplicate rows are merged into
            one weighted row (the same model); the calibration counts a row's leave-one-out
            residual ``w_i`` times. Identical repeats are evidence of no noise:
            weights summing above the number of rows can send the noise to its lower bound
            (a UserWarning then; importance weights: divide by the mean of the non-zero
            ones), and weights averaging under 1/4 count the data as few observations (a
            UserWarning too). None: every row once.

        Returns
        -------
        self : object
        """
        acts, w0, bounds = self._check_params()
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True,
                             ensure_min_samples=2, dtype=np.float64)
        X, y, w = collapse_rows(X, y, check_weights(X, sample_weight))
        warn_light_weights(self, w)
        self._train_weight = w
        device, dtype = self._resolve_runtime()
        rng = check_random_state(self.random_state)

        Xs = fit_input_scaling(self, X, self.normalize_X, INPUT_SCALING,
                               sample_weight=None if INPUT_SCALING != "standard" else w)
        self.X_train_ = X
        self.y_train_ = self._normalise_targets(y, w)

        exact = self.approx == "exact"
        Z, idx = (None, None) if exact else self._select_anchors(Xs, rng)
        self.anchors_ = None if exact else (X[idx] if idx is not None
                                            else Z * self._X_scale + self._X_offset)
        self.anchor_indices_ = idx
        self.n_anchors_ = X.shape[0] if exact else Z.shape[0]

        layout = self._layout = MixtureLayout(acts)
        self._jitter = float(JITTER)  # fitted: log_marginal_likelihood(theta) reuses it
        Xt = as_tensor(Xs, device, dtype)
        engine = self._make_engine(Xt, as_tensor(self.y_train_, device, dtype),
                                   None if exact else as_tensor(Z, device, dtype))

        init = {h: float(getattr(self, h)) for h in VARIANCES[:4]}
        init["leaky_slope"] = float(self.leaky_slope)
        if self.noise_variance == "auto":  # rule (25) on the scaled training inputs
            init["noise_variance"] = NOISE_INIT_RATIO * layout.mean_prior_variance(
                engine.kernel, init, w0, Xt, row_weights=engine.weights)
        else:
            init["noise_variance"] = float(self.noise_variance)
        nb = bounds["noise_variance"]
        if nb != "fixed" and not nb[0] <= init["noise_variance"] <= nb[1]:
            raise ValueError(f"The initial noise_variance {init['noise_variance']:.3g} lies "
                             f"outside noise_variance_bounds={nb!r}.")
        raw = layout.to_tensor(init, w0, device, dtype)

        priors = dict(PRIORS or {})
        self.n_iter_, self.converged_, self.loss_curve_ = 0, True, []
        if self.optimizer is not None:
            free, box = layout.box(bounds, raw)
            raw = fit_hyperparameters(
                self, engine, raw, free, box, rng, method=self.optimizer,
                max_iter=self.max_iter, tol=self.tol, learning_rate=self.learning_rate_init,
                subset_size=self.subset_size, refine_iter=REFINE_ITER,
                penalty=layout.penalty(priors))
        st = engine.state(raw, warn=True, context=f"{type(self).__name__}: training kernel")
        self._set_fitted(raw, st, priors)
        self.calibration_ = "student_t" if self.calibration == "auto" else self.calibration
        self._calibrate_from_loo(self.calibration_, engine, st, layout.unpack(raw))
        if self.optimizer is not None:
            warn_repeated_noise(self, w, self.noise_variance_, nb, "noise_variance")
        return self

    def _make_engine(self, Xt, Yt, Zt):
        kernel, unpack = partial(mixture_kernel, self._layout.acts), self._layout.unpack
        w = self.__dict__.get("_train_weight")
        w = None if w is None else as_tensor(w, Xt.device, Xt.dtype)
        if Zt is None:
            return ExactGP(kernel, unpack, Xt, Yt,
                           context=f"{type(self).__name__}(approx='exact')", weights=w)
        return NystromGP(kernel, unpack, Xt, Yt, Zt, jitter=self._jitter, weights=w)

    def _set_fitted(self, raw, st, priors):
        layout = self._layout
        values = to_numpy(raw)
        p = layout.unpack(raw)
        for h in VARIANCES:
            setattr(self, f"{h}_", float(np.exp(values[VARIANCES.index(h)])))
        self.leaky_slope_ = to_float(p["leaky_slope"]) if layout.has_leaky else None
        self.weights_ = to_numpy(p["weights"])
        self.theta_ = values
        self.LB_ = None if st["LB"] is None else to_numpy(st["LB"])
        self.dual_coef_ = to_numpy(st["dual"])
        self.log_marginal_likelihood_value_ = -to_float(st["nll"])
        self.map_objective_value_ = to_float(st["nll"] + layout.prior(raw, priors))
        if st["LB"] is None:
            # exact: the n x n factor stays on device_ (no host copy in fit, none pickled);
            # a loaded model factorises again at theta_ (_build_cache)
            self._L_small = None
            self._cache = {"basis": st["basis"], "L": st["L"], "LB": None, "dual": st["dual"],
                           "p": p}
        else:
            # Nystrom: the m x m anchor factor is saved, and the predictive reads the cache
            # rebuilt from the NumPy state, as a loaded model does
            self._L_small = to_numpy(st["L"])
            self._cache = self._build_cache()

    def _build_cache(self):
        # after unpickling: tensors on device_ from the NumPy fitted state; the exact mode
        # refactorises K + noise I at theta_ (O(n^3), as in fit's last step)
        dev, dt = self.device_, self._dtype
        raw = as_tensor(self.theta_, dev, dt)
        if self.anchors_ is None:
            engine = self._make_engine(as_tensor(self._scale_X(self.X_train_), dev, dt),
                                       as_tensor(self.y_train_, dev, dt), None)
            st = engine.state(raw, warn=True,
                              context=f"{type(self).__name__}: training kernel (on load)")
            return {"basis": st["basis"], "L": st["L"], "LB": None,
                    "dual": as_tensor(self.dual_coef_, dev, dt), "p": self._layout.unpack(raw)}
        return {"basis": as_tensor(self._scale_X(self.anchors_), dev, dt),
                "L": as_tensor(self._L_small, dev, dt),
                "LB": as_tensor(self.LB_, dev, dt),
                "dual": as_tensor(self.dual_coef_, dev, dt), "p": self._layout.unpack(raw)}

    @property
    def L_(self):
        """Cholesky factor (NumPy, read-only): of ``K_SS + jitter`` under Nystrom, saved with
        the model; of ``K + noise I`` in the exact mode, read from ``device_`` on demand and
        not pickled."""
        check_is_fitted(self)
        small = self.__dict__.get("_L_small")
        if small is not None:
            small.setflags(write=False)
            return small
        cache = self._get_cache()
        return self._host_copy(cache, "L_host", cache["L"])

    # ------------------------------------------------------------------ predict
    _predict_params = ("include_noise",)

    def _latent_moments(self, Xq, full_cov):
        """Normalised predictive mean (q x C) and variance (q,) or covariance (q x q)."""
        cache = self._get_cache()
        p = cache["p"]
        mean, V = gp_predict(partial(mixture_kernel, self._layout.acts), p, cache, Xq,
                             full_cov=full_cov,
                             noise=p["noise_variance"] if self.include_noise else 0.0)
        return to_numpy(mean), to_numpy(V)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Log marginal likelihood of the normalised training targets (no prior terms).

        Under ``approx="nystrom"`` it is that of ``Q + noise I`` with the fitted anchors.

        Parameters
        ----------
        theta : array-like of shape (n_hyperparameters,), default=None
            Raw hyperparameters in the layout of ``theta_``; ``None`` returns the fitted
            value.
        eval_gradient : bool, default=False
            Also return the gradient with respect to ``theta``.

        Returns
        -------
        log_likelihood : float
        log_likelihood_gradient : ndarray of shape (n_hyperparameters,), optional
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("eval_gradient=True requires theta.")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        if theta.shape != self.theta_.shape or not np.all(np.isfinite(theta)):
            raise ValueError(f"theta must hold {self.theta_.size} finite values in the layout "
                             f"of theta_ ({', '.join(self._layout.names)}).")
        self._get_cache()
        dev, dt = self.device_, self._dtype
        Xt = as_tensor(self._scale_X(self.X_train_), dev, dt)
        Yt = as_tensor(self.y_train_, dev, dt)
        Zt = None if self.anchors_ is None else as_tensor(self._scale_X(self.anchors_), dev, dt)
        engine = self._make_engine(Xt, Yt, Zt)
        raw = as_tensor(theta, dev, dt)
        if eval_gradient:
            nll, g = engine.value_and_grad(raw)
            return -to_float(nll), -to_numpy(g)
        return -to_float(engine.state(raw)["nll"])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

