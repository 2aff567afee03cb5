"""Richer Bayesian last layers: a BLL whose prior absorbs the network's projected NTK
features (Calvo-Ordonez et al., "Richer Bayesian Last Layers with Subsampled NTK
Features")."""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import torch
from scipy import stats
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state

from ._backend import ACTIVATIONS, NetworkTrainer, as_tensor, build_mlp, to_numpy, weighted_median
from ._backend._jacobian import GaussianSketch, head_features, split_parameters
from ._backend._log_noise import LogNoiseModel, fit_log_noise
from ._backend._projection import (
    count_parameters,
    fit_last_layer,
    last_layer_variance,
    mean_squared_error,
    mse_objective,
    network_features,
    rmse_score,
    rows_per_block,
    standardised_residuals,
    subsample_rows,
)
from ._backend._student_t import paired_gain
from ._base import (
    DEVICE_CONSTRAINT,
    DTYPE_CONSTRAINT,
    TorchEstimatorMixin,
    check_hidden_layer_sizes,
    fit_input_scaling,
    transactional,
    user_network,
    warn_training,
)
from ._calibration import REGRESSOR_CALIBRATION, near_noiseless, trained_tail_df
from ._predictive import RegressorPredictiveMixin
from ._rows import held_out_split, network_weights, warn_rare_binary_values
from .utils._sklearn_compat import Interval, StrOptions, _fit_context, validate_data

# Settings a benchmark may patch (``unittest.mock.patch.object``); each is read at fit only,
# and what predict needs is copied into fitted attributes.

#: Above this many parameters the exact NTK-GP (a p x p posterior) is refused.
NTK_MAX_PARAMS = 5000
#: How ``A^T A`` is formed: "exact" (the m x r cross-moment), "random_projection" (a
#: Gaussian sketch of the body gradients to ``PROJECTION_DIM`` dimensions, unbiased, drawn on
#: the device) or "auto" (exact while m x r stays below ``EXACT_ROUTE_MAX`` entries).
JACOBIAN = "auto"
#: Sketch dimension q of the random projection; None: ``max(256, 4 r)``.
PROJECTION_DIM = None
EXACT_ROUTE_MAX = 2**26
#: With early stopping, a plateau of ``n_iter_no_change`` epochs restores the best network
#: and multiplies the learning rate by ``PLATEAU_FACTOR``, ``PLATEAU_DROPS`` times; the next
#: plateau stops training (0: the first plateau stops it, a constant rate).
PLATEAU_DROPS = 2
PLATEAU_FACTOR = 0.1
#: The plateaus after a drop, as a fraction of ``n_iter_no_change``: at a tenth of the rate
#: the validation score settles sooner, so they need not be as long (whats_new, issue 49).
PLATEAU_PATIENCE = 0.25
#: Gradient-norm clipping of the training (the paper's 1.0; None: none).
GRAD_CLIP = 1.0
#: Epochs between two validation scores.
VALIDATION_INTERVAL = 1
#: The paper's refit: after early stopping, the same initial network is trained on every
#: row for ``best_iteration_`` epochs, its rate lowered after the first stage's plateaus (the
#: noise stays the first stage's; the calibration then has no held-out rows).
REFIT = False
#: How the Student-t calibration chooses the degrees of freedom of the held-out residuals:
#: by likelihood and the 95 % rule. The fit over the levels (``"levels"``) halved the
#: calibration error over levels on small heavy-tailed sets but doubled it on larger
#: light-tailed ones, and on a few dozen rows its degrees of freedom are unstable (a t of
#: df < 3 for Gaussian residuals); benchmarks/results/intervals_levels.md.
T_SHAPE = "likelihood"
#: The shape used instead where the rows the network trained on have heavy tails (the cap
#: of :func:`~._calibration.trained_tail_df` applies): the t fitted over the levels, whose
#: degrees of freedom that cap bounds, matches the peaked bulk that the likelihood and the
#: 95 % rule leave too wide; benchmarks/results/intervals_levels.md.
HEAVY_TAIL_T_SHAPE = "levels"
#: ``noise_variance="auto"`` keeps the heteroscedastic noise when its held-out log predictive
#: density beats the homoscedastic one's by more than ``NOISE_Z`` standard errors of the
#: paired per-row gains and by at least ``NOISE_MIN_GAIN`` nats a row.
NOISE_Z, NOISE_MIN_GAIN = 2.0, 1e-3
#: Fewest held-out rows on which ``"auto"`` compares the two noise models.
NOISE_MIN_ROWS = 10


class RichBLLRegressor(RegressorPredictiveMixin, TorchEstimatorMixin, RegressorMixin, BaseEstimator):
    """Network regression with a Bayesian last layer enriched by projected NTK features.

    A multilayer perceptron is trained by mean-squared error (with early stopping); then,
    after the fact, the gradients of the output with respect to all earlier parameters (the
    network's NTK features) are regressed on the last-layer features ``phi_r(x) = (a(x), 1)``
    and folded into the last layer's prior: the BLL on ``phi_L = L^T phi_r`` with ``L L^T =
    I + A^T A``. The predictive mean is the network's output; the variance is that of the
    enriched last layer, which is never smaller than the plain BLL's (Thm 3.3), at the cost of
    a BLL plus one pass of per-sample Jacobians. A uniform ``subsample`` of the rows makes
    that pass cheaper still.

    Given ``network=`` a trained ``torch.nn.Module`` whose last layer is ``nn.Linear`` and
    ``train_network=False``, it is a post-hoc head: ``fit`` leaves the network as it is and
    only computes the posterior.

    Read more in the :ref:`User Guide <rich_bll>`.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(50, 50)
        Hidden widths of the MLP; the default is the paper's UCI backbone.
    activation : {"relu", "tanh", "gelu", "silu", "sigmoid", "leaky_relu"}, default="relu"
        Hidden activation of the MLP; ReLU is the paper's.
    network : torch.nn.Module, callable or None, default=None
        A user network mapping ``(batch, n_features)`` to ``(batch, 1)`` whose last
        ``nn.Linear`` is the output layer: a module (deep-copied at each fit) or a callable
        ``network(n_features) -> Module`` called inside ``fit``. None builds the MLP above.
    train_network : bool, default=True
        ``False``: use ``network`` as trained (a post-hoc head; needs a module). The noise
        then comes from the rows given to ``fit`` and nothing calibrates, so ``fit`` warns
        (unless ``noise_variance`` is a value): on rows the network was trained on, the
        intervals may be far too narrow.
    uncertainty : {"rich", "bll", "ntk"}, default="rich"
        ``"rich"``: Rich-BLL; ``"bll"``: the plain Bayesian last layer; ``"ntk"``: the exact
        NTK-GP (linearised network, all parameters) in weight space, refused above
        5,000 parameters. The default is the paper's method.
    subsample : float in (0, 1], int or None, default=None
        Rows used for the projection and the posterior (one uniform subset, its Gram matrix
        scaled by N / k; paper §3.3): a fraction, a count, or ``None`` for all rows, which is
        exact. Counts below ``r + 1`` are refused and below ``5 r`` warned about.
    projection_ridge : float, default=1e-4
        Ridge of the projection's Gram matrix, relative to its mean eigenvalue: the main knob
        of the out-of-data variance (0 can explode on the rank-deficient features of ReLU
        networks, large values give the BLL). The default, a small ridge, keeps the richer out-of-data
        variance that the evidence's preferred large ridge would give up (User Guide,
        "Evidence").
    noise_variance : {"auto", "validation", "evidence", "train", "heteroscedastic"} or float, \
default="auto"
        Observation-noise variance (in the units of the normalised target):
        ``"validation"``, the validation MSE of the trained network at the chosen epoch;
        ``"evidence"``, the maximiser of the last layer's evidence on all rows (jointly
        with ``prior_variance="auto"``); ``"train"``, the training MSE; or a value.
        ``"heteroscedastic"``: a noise variance that depends on the input, ``c exp(g(x))``,
        fitted after the network in two stages: ``g`` is a Bayesian linear regression of the
        log squared residuals of the training rows (bias-corrected for ``E[log chi2_1]``) on
        the inputs and the network's last-layer features, and the last layer is refitted
        with the per-row noise, its level ``c`` chosen as ``"auto"`` chooses the
        homoscedastic one; ``predict``'s std, ``predict_dist``, ``sample_y`` and the
        calibration all carry it.
        ``"auto"``: with a validation split, the evidence's noise constrained to be at
        least the validation MSE (so the larger of the two, since each is biased low: the
        evidence's by the rows the features were fitted to, the validation MSE by the
        choice of the epoch and by a split that can miss the outliers), replaced by the
        heteroscedastic noise only when the latter's calibrated log predictive density on
        the validation rows is higher by more than two standard errors of the paired
        per-row gains (``noise_gain_``); without one, ``"train"``. The default tests for
        input-dependent noise because the held-out rows measure it at no extra training,
        and keeps one noise level wherever they do not show a gain.
    prior_variance : "auto" or float, default=1.0
        Prior variance of every parameter. ``"auto"``: the maximiser of the closed-form
        evidence of the (enriched) last layer, ``log N(y; 0, s Phi_L Phi_L^T + noise I)``,
        O(r^3) once. The default is the paper's 1, because the evidence's choice shrinks the
        variance off the data.
    max_iter : int, default=2000
        Training epochs, an upper bound that the early-stopping schedule rarely reaches.
    batch_size : int, default=32
        Rows per training mini-batch (the paper's).
    learning_rate_init : float, default=1e-2
        Adam's initial learning rate; the plateau schedule lowers it twice (User Guide,
        "Training defaults"), so it starts higher than the paper's 1e-3.
    weight_decay : float, default=0.0
        Adam's weight decay; none, as in the paper, since early stopping regularises.
    early_stopping : bool, default=True
        Hold out ``validation_fraction`` of the rows and score the validation RMSE every
        epoch: the first time it has not improved for ``n_iter_no_change`` epochs, the
        best network so far is restored and the learning rate divided by 10; the second
        time, after a quarter as many epochs at that rate, again; the third plateau (as
        short) stops training and the best network is kept. The posterior then conditions
        on all rows, and the held-out rows calibrate the predictive (``calibration``).
        Without them the noise comes from the rows the network trained on and nothing
        calibrates, so ``fit`` warns that the intervals may be far too narrow (unless
        ``noise_variance`` is a value).
    validation_fraction : float, default=0.2
        Fraction of the rows held out by ``early_stopping``.
    n_iter_no_change : int, default=200
        Epochs without a better validation RMSE that make the first plateau, a quarter of
        it the later ones (or, without early stopping, epochs without a training-loss
        improvement of ``tol`` that stop training).
    tol : float, default=1e-4
        Training-loss improvement that counts when ``early_stopping=False``.
    normalize_X : bool, default=True
        Standardise the columns (mean 0, std 1) inside ``fit``; off for a post-hoc head
        whose network was trained on raw inputs.
    normalize_y : bool, default=True
        Also scale the targets to unit variance (they are always centred; the paper only
        centres them), because the prior variance and the noise start at 1.
    include_noise : bool, default=True
        ``predict``'s std/cov, ``predict_dist`` and ``sample_y`` describe y (latent
        variance plus ``noise_variance_``) or, if ``False``, the latent f. The latent
        variance is the last layer's posterior given the trained features; it leaves out
        the features' own error, which the held-out calibration of y cannot separate from
        the noise, so intervals for f are narrower than the mean's error, the more so the
        more rows (the default describes y, whose intervals are calibrated).
    calibration : {"auto", "student_t", "gaussian"} or None, default="auto"
        How the predictive is calibrated on the ``n_v`` validation rows, which the network
        did not train on (the counterpart of the other regressors' leave-one-out
        calibration, which a network's mean does not have in closed form). The mean is never
        changed.

        - ``"gaussian"``: the predictive variance (latent and noise) is multiplied by the
          smallest factor ``calibration_factor_ >= 1`` under which the central 95 % interval
          holds the ``ceil(0.95 (n_v + 1))``-th smallest standardised residual (split
          conformal prediction). It only widens.
        - ``"student_t"``: the predictive becomes a Student-t with the Gaussian's std as its
          scale and ``predictive_df_`` degrees of freedom, those of largest likelihood for
          the standardised validation residuals (the Gaussian when no finite value does
          better), then widened as ``"gaussian"`` does, with the t's own 95 % quantile. When
          a likelihood-ratio test (level 1 %) rejects the Gaussian's scale for those
          residuals, the degrees of freedom and the scale are both fitted, and the factor may
          fall below 1, down to the fitted scale's square. Where the residuals of the rows
          the network trained on fit a t of at most 4 degrees of freedom, the t keeps tails
          at least that heavy, because a few dozen validation rows can miss every outlier of
          a heavy-tailed target, and its degrees of freedom and scale are those whose central
          intervals match the validation rows' at the levels 0.05...0.95 (the likelihood and
          the 95 % factor leave such a peaked bulk too wide).
        - ``"auto"``: ``"student_t"`` when the fit holds rows out (``train_network=True``
          and ``early_stopping=True``), otherwise None.
        - None: the paper's Gaussian predictive.

        ``"gaussian"`` and ``"student_t"`` need the validation split. The default calibrates
        wherever there are held-out rows, because the Gaussian predictive misses 95 %
        coverage on heavy-tailed and heteroscedastic data (User Guide, "The Student-t
        calibration").
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device, default="auto"
        Where the network and the algebra run; ``"auto"`` takes CUDA when available.
    dtype : {"float64", "float32"}, default="float64"
        Of the network; the r x r algebra is always in float64.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the split, the shuffles, the subsample and the sketch.
    verbose : int, default=0
        0: silent; 1: a progress line (training loss, validation RMSE, time per epoch)
        about every 50 epochs, a line at each learning-rate drop and a last line saying why
        training stopped (a progress bar instead of the lines on a terminal when ``tqdm`` is
        installed); 2 or more: a line at every validation.

    Attributes
    ----------
    network_ : torch.nn.Module
        The (trained) network, on ``device_``; pickled on the CPU.
    uncertainty_ : str
        The ``uncertainty`` the posterior was fitted for (what ``predict`` uses).
    noise_variance_ : float
        The noise variance; under the heteroscedastic noise its level ``c``, the noise at
        ``x`` being ``c exp(g(x))`` with ``exp(g)`` of harmonic mean 1 over the training
        rows.
    noise_model_ : {"homoscedastic", "heteroscedastic"}
        The noise model the fit kept.
    noise_gain_ : tuple of float or None
        ``(mean, standard error)`` of the per-row gain in calibrated log predictive density
        of the heteroscedastic noise over the homoscedastic one on the validation rows;
        None where it was not measured (no heteroscedastic fit, or too few held-out rows).
    prior_variance_ : float
        The prior variance used (``prior_variance``, or the evidence's choice).
    projection_ridge_ : float or None
        The projection ridge used (None for "bll" and "ntk").
    calibration_ : {"student_t", "gaussian"} or None
        The calibration the fit applied (``"auto"`` resolved).
    calibration_factor_ : float
        The factor on the predictive variance (1 without calibration; below 1 only where
        the Student-t calibration's scale test narrowed the predictive).
    predictive_df_ : float
        Degrees of freedom of the Student-t predictive (``calibration_="student_t"``);
        ``inf``: Gaussian.
    log_evidence_ : float
        ``log N(y; 0, prior_variance_ Phi Phi^T + noise_variance_ I)`` of the normalised
        targets under the last layer's features ``Phi`` (``Phi_L`` for "rich").
    variance_factor_ : ndarray of shape (r, r) or (p, p)
        ``T`` with latent variance ``|T^T phi(x)|^2``, ``phi`` the head features
        (or all parameter gradients for ``uncertainty="ntk"``).
    projection_chol_ : ndarray of shape (r, r) or None
        ``L`` with ``L L^T = I + A^T A`` (None for "bll" and "ntk").
    subsample_indices_ : ndarray or None
    n_params_body_, n_params_head_ : int
        ``m`` and ``r``.
    n_iter_, loss_curve_, validation_scores_, best_iteration_, converged_
        Training history (``n_iter_ = 0`` with ``train_network=False``).
    device_ : torch.device
    n_features_in_ : int

    See Also
    --------
    DBKRegressor : a GP whose kernel is the network's outputs.

    Notes
    -----
    Decisions where the paper is silent (User Guide): the predictive std is that of y
    (the latent variance plus the noise, as the paper's NLLs imply); the projection is ridge
    regularised; the network is not refitted on train + validation after model selection
    (the paper's refit did not pay in our benchmark); the posterior conditions on every row.

    References
    ----------
    G. Calvo-Ordonez, K. Plenk, R. Bergna, A. Cartea, Y. Gal, J. M. Hernandez-Lobato,
    K. Ciosek. "Richer Bayesian Last Layers with Subsampled NTK Features" (arXiv:2602.01279),
    §3.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp import RichBLLRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(100, 2)); y = np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=100)
    >>> reg = RichBLLRegressor(hidden_layer_sizes=(16,), max_iter=50, random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    >>> mean.shape, bool((std > 0).all())
    ((3,), True)
    """

    _parameter_constraints: dict = {
        "hidden_layer_sizes": [tuple, list],
        "activation": [StrOptions(set(ACTIVATIONS))],
        "network": [torch.nn.Module, callable, None],
        "train_network": ["boolean"],
        "uncertainty": [StrOptions({"rich", "bll", "ntk"})],
        "subsample": [Interval(numbers.Real, 0, 1, closed="right"),
                      Interval(numbers.Integral, 1, None, closed="left"), None],
        "projection_ridge": [Interval(numbers.Real, 0, None, closed="left")],
        "noise_variance": [StrOptions({"auto", "evidence", "validation", "train",
                                       "heteroscedastic"}),
                           Interval(numbers.Real, 0, None, closed="neither")],
        "prior_variance": [StrOptions({"auto"}), Interval(numbers.Real, 0, None,
                                                          closed="neither")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate_init": [Interval(numbers.Real, 0, None, closed="neither")],
        "weight_decay": [Interval(numbers.Real, 0, None, closed="left")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "normalize_X": ["boolean"],
        "normalize_y": ["boolean"],
        "include_noise": ["boolean"],
        "calibration": REGRESSOR_CALIBRATION,
        "device": DEVICE_CONSTRAINT,
        "dtype": DTYPE_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, hidden_layer_sizes=(50, 50), activation="relu", network=None,
                 train_network=True, uncertainty="rich", subsample=None, projection_ridge=1e-4,
                 noise_variance="auto", prior_variance=1.0, max_iter=2000, batch_size=32,
                 learning_rate_init=1e-2, weight_decay=0.0, early_stopping=True,
                 validation_fraction=0.2, n_iter_no_change=200, tol=1e-4, normalize_X=True,
                 normalize_y=True, include_noise=True, calibration="auto", device="auto",
                 dtype="float64", random_state=None, verbose=0):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.network = network
        self.train_network = train_network
        self.uncertainty = uncertainty
        self.subsample = subsample
        self.projection_ridge = projection_ridge
        self.noise_variance = noise_variance
        self.prior_variance = prior_variance
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.weight_decay = weight_decay
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.normalize_X = normalize_X
        self.normalize_y = normalize_y
        self.include_noise = include_noise
        self.calibration = calibration
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ================================================================== set-up
    def _check_params(self):
        check_hidden_layer_sizes(self.hidden_layer_sizes)
        if not self.train_network and not isinstance(self.network, torch.nn.Module):
            raise ValueError("train_network=False needs network= a trained torch.nn.Module "
                             f"(got {type(self.network).__name__}).")
        cal = self.calibration
        if cal not in (None, "auto"):
            if not (self.train_network and self.early_stopping):
                raise ValueError(f"calibration={cal!r} scores the rows held out from "
                                 "training: it needs train_network=True and "
                                 "early_stopping=True.")
            if REFIT:
                raise ValueError(f"calibration={cal!r} cannot be combined with the refit on "
                                 "all rows (skbnngp._rich_bll.REFIT): the refitted network "
                                 "trains on the validation rows, so their residuals are no "
                                 "longer held out.")

    def _normalise_targets(self, y, sample_weight=None):
        Y = super()._normalise_targets(y, sample_weight)
        if not self.normalize_y:  # the paper centres the targets without scaling them
            shift = Y.mean(axis=0) if sample_weight is None else np.average(
                Y, axis=0, weights=sample_weight)
            self._y_train_mean = self._y_train_mean + shift
            Y = Y - shift
        return Y

    def _make_network(self, n_features, seed, device, dtype):
        name = type(self).__name__
        if self.network is None:
            return build_mlp(n_features, self.hidden_layer_sizes, 1, activation=self.activation,
                             seed=seed, device=device, dtype=dtype)
        net, out = user_network(self, (n_features,), n_features, device, dtype)
        try:
            split_parameters(net)
        except ValueError as exc:
            raise ValueError(f"{name}: network: {exc}") from exc
        if out.numel() != 2:
            raise ValueError(f"{name}: network must output one value per row (y has one "
                             f"target); it returned shape {tuple(out.shape)} for 2 rows.")
        return net

    # ================================================================== fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y, sample_weight=None):
        """Train the network (unless ``train_network=False``) and fit the last-layer
        posterior.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Frequency weights: the training loss is the weighted mean squared error
            (weights normalised to mean 1 over the training rows, so a mini-batch estimates
            it without bias), the validation score the weighted RMSE, and the last layer's
            Gram matrices and evidence those of row ``i`` repeated ``w_i`` times (its noise
            ``noise / w_i``); the input and target statistics and the calibration residuals
            are weighted too. A zero weight drops the row; exact duplicate ``(x, y)`` rows
            are merged into one weighted row (and the rows sorted) first, so integer weights
            and repeated rows train the identical model. Weights averaging under 1/4 count
            the data as few observations in the last layer's evidence (a UserWarning;
            importance weights: divide by the mean of the non-zero ones). None: every row once.

        Returns
        -------
        self : object
        """
        self._check_params()
        shape = np.asarray(y).shape if y is not None else ()
        if len(shape) == 2 and shape[1] > 1:
            raise ValueError(f"{type(self).__name__} fits one target, but y has shape "
                             f"{shape}; fit one {type(self).__name__} per column (sklearn's "
                             "MultiOutputRegressor does so; skbnngp.metrics."
                             "predictive_response gives its predictive) or use a "
                             "multi-output regressor such as StudentTProcessRegressor.")
        X, y = validate_data(self, X, y, y_numeric=True, ensure_min_samples=2,
                             dtype=np.float64)
        X, y, w = network_weights(self, X, y, sample_weight)
        warn_rare_binary_values(self, X, w)
        device, dtype = self._resolve_runtime()
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(np.iinfo(np.int32).max))
        Xs = fit_input_scaling(self, X, self.normalize_X, sample_weight=w)
        Y = self._normalise_targets(y, w)
        Xt = as_tensor(Xs, device, dtype)
        Yt = as_tensor(Y, device, dtype)
        wt = None if w is None else as_tensor(w, device, dtype)
        net = self._make_network(X.shape[1], seed, device, dtype)
        val_mse = None
        self.n_iter_, self.loss_curve_, self.validation_scores_ = 0, [], []
        self.best_iteration_, self.converged_ = 0, True
        val_rows, refit, split = None, REFIT, None
        if self.train_network:
            val_mse, lr_drops, val_rows, split = self._train(net, Xt, Yt, rng, wt)
            if refit and self.early_stopping:
                net = self._refit_network(X.shape[1], seed, device, dtype, Xt, Yt, rng,
                                          lr_drops, wt)
        net.eval()
        self.network_ = net
        cal = self.calibration
        if cal == "auto":  # the Student-t calibration wherever the fit holds rows out
            cal = "student_t" if val_rows is not None and not refit else None
        self.calibration_ = cal if val_rows is not None else None
        # rows the network never trained on (none after the refit on every row)
        held = None if refit else val_rows
        self._fit_posterior(net, Xt, Yt, val_mse, rng, wt, held=held, Y=Y,
                            split=None if refit else split)
        if val_rows is None and not isinstance(self.noise_variance, numbers.Real):
            warnings.warn(self._no_held_out_rows_message(), UserWarning, stacklevel=4)
        self.calibration_factor_, self.predictive_df_ = 1.0, math.inf
        if self.calibration_ is not None:
            trained = np.setdiff1d(np.arange(Xt.shape[0]), val_rows)
            self._calibrate_on(Xt[val_rows], Yt[val_rows], self.calibration_, Y,
                               None if w is None else (to_numpy(split[1])[val_rows], w),
                               trained=(Xt[trained], Yt[trained],
                                        None if w is None else to_numpy(split[0])[trained]))
        return self

    def _no_held_out_rows_message(self):
        """Why a fit without held-out rows may give intervals far too narrow: its noise comes
        from rows the network may fit closely, and nothing calibrates."""
        name = type(self).__name__
        if self.train_network:
            return (f"{name}: early_stopping=False holds no rows out, so the noise variance "
                    "comes from the rows the network was trained on (it can fit them "
                    "closely) and no calibration runs: the intervals may be far too narrow. "
                    "Keep early_stopping=True (its held-out rows set the noise and "
                    "calibrate), give noise_variance a value, or wrap the model in "
                    "ConformalRegressor.")
        return (f"{name}: with train_network=False the noise variance comes from the rows "
                "given to fit and no calibration runs; if the network was trained on these "
                "rows it can fit them closely and the intervals may be far too narrow. Give "
                "noise_variance a value (in units of the normalised target), or check the "
                "intervals on rows the network did not train on (User Guide, post-hoc head).")

    def _held_out_fit(self, f, Phi, Yv, T, noise, method, Y, weights=None, max_df=math.inf):
        """The standardised residuals ``z`` and predictive variances ``var`` of held-out rows
        (output ``f``, features ``Phi``, per-row or scalar ``noise``) under the factor ``T``,
        and the calibration fitted to them (sets ``calibration_factor_`` and
        ``predictive_df_``); a finite ``max_df`` (heavy tails in the trained rows) caps its
        degrees of freedom and fits the t over the levels (:data:`HEAVY_TAIL_T_SHAPE`)."""
        var = last_layer_variance(Phi, T, noise)
        z = standardised_residuals(Yv, f, var)
        wv, wy = (None, None) if weights is None else weights
        share = weighted_median(np.minimum(to_numpy(noise / var), 1.0), wv)
        options = {} if wv is None else {"weights": wv}
        self.calibration_factor_, self.predictive_df_ = 1.0, math.inf
        shape = T_SHAPE if math.isinf(max_df) else HEAVY_TAIL_T_SHAPE
        self._fit_calibration(method, z, t_shape=shape, near_noiseless=near_noiseless(
            z * np.sqrt(to_numpy(var)), Y, share, weights=wv, target_weights=wy),
            max_df=max_df, **options)
        return z, to_numpy(var)

    def _calibrate_on(self, Xv, Yv, method, Y, weights=None, trained=None):
        """``calibration_factor_`` (and, for ``"student_t"``, ``predictive_df_``) from the
        standardised residuals of held-out rows (:meth:`_fit_calibration`; ``Y``, the
        normalised training targets, tells a near-noiseless target). ``weights``: the
        frequency weights of the held-out rows and of ``Y``'s rows, or None. ``trained``:
        ``(X, Y, weights)`` of the rows the network trained on; where their residuals have
        heavy tails (:func:`~._calibration.trained_tail_df`), the held-out rows' t keeps
        tails at least as heavy, since a few dozen held-out rows may hold none of a heavy
        tail's outliers."""
        cache = self._cache
        max_df = math.inf
        if trained is not None and len(trained[0]):
            Xr, Yr, wr = trained
            f, Phi = self._features(Xr, cache)
            var = last_layer_variance(Phi, cache["T"], self._noise_at(Xr, Phi, cache))
            max_df = trained_tail_df(to_numpy(standardised_residuals(Yr, f, var)).ravel(), wr)
        f, Phi = self._features(Xv, cache)
        self._held_out_fit(f, Phi, Yv, cache["T"], self._noise_at(Xv, Phi, cache), method, Y,
                           weights, max_df=max_df)

    def _trainer(self, net, loss, **options):
        return NetworkTrainer(loss, list(net.parameters()), modules=[net],
                              learning_rate=self.learning_rate_init,
                              weight_decay=self.weight_decay, grad_clip=GRAD_CLIP,
                              **options)

    def _refit_network(self, n_features, seed, device, dtype, Xt, Yt, rng, lr_drops=(),
                       weights=None):
        """The paper's refit (``REFIT``): the same initial network trained on every row for
        ``best_iteration_`` epochs (no stopping rule), its learning rate lowered after the
        epochs ``lr_drops`` where the first stage's plateaus lowered it."""
        net = self._make_network(n_features, seed, device, dtype)
        trainer = self._trainer(net, mse_objective(net, Xt, Yt, weights),
                                lr_milestones=lr_drops,
                                lr_gamma=PLATEAU_FACTOR, device=Xt.device)
        trainer.fit(Xt.shape[0], batch_size=self.batch_size,
                    max_epochs=max(1, self.best_iteration_), rng=rng, validate=None,
                    n_iter_no_change=None, verbose=self.verbose, label=type(self).__name__)
        return net

    def _train(self, net, Xt, Yt, rng, weights=None):
        """MSE training with the shared loop (weighted by the rows' ``weights`` when given);
        returns the validation MSE (or None), the epochs after which the plateau schedule
        lowered the learning rate, the validation rows (an index array, or None) and, with
        ``weights`` and validation rows, each row's weight in training and held out (two
        tensors over every row: :func:`~._rows.held_out_split` may split a merged row's
        copies), else None."""
        tr, va, wtr, wva = held_out_split(
            self, Xt.shape[0], rng, self.validation_fraction if self.early_stopping else None,
            X=to_numpy(Xt), weights=None if weights is None else to_numpy(weights))
        split = None
        if weights is not None:
            wtr = torch.as_tensor(wtr, dtype=weights.dtype, device=Xt.device)
            if va is not None:
                wva = torch.as_tensor(wva, dtype=weights.dtype, device=Xt.device)
                split = (torch.zeros_like(weights), torch.zeros_like(weights))
                split[0][torch.as_tensor(tr, device=Xt.device)] = wtr
                split[1][torch.as_tensor(va, device=Xt.device)] = wva
        validate = None if va is None else rmse_score(net, Xt[va], Yt[va], wva)
        trainer = self._trainer(net, mse_objective(net, Xt[tr], Yt[tr], wtr),
                                device=Xt.device)
        res = trainer.fit(len(tr), batch_size=self.batch_size, max_epochs=self.max_iter,
                          rng=rng, validate=validate, validation_interval=VALIDATION_INTERVAL,
                          n_iter_no_change=self.n_iter_no_change, tol=self.tol,
                          plateau_drops=PLATEAU_DROPS, plateau_factor=PLATEAU_FACTOR,
                          plateau_patience=max(1, round(PLATEAU_PATIENCE
                                                        * self.n_iter_no_change)),
                          verbose=self.verbose, label=type(self).__name__)
        warn_training(self, res, "increase max_iter or lower n_iter_no_change", stacklevel=6)
        self.n_iter_, self.loss_curve_ = res.n_epochs, res.loss_curve
        self.validation_scores_ = res.validation_scores
        self.best_iteration_, self.converged_ = res.best_epoch, res.converged
        return (None if va is None else res.best_score ** 2), list(res.lr_drops), va, split

    def _fit_posterior(self, net, Xt, Yt, val_mse, rng, weights=None, held=None, Y=None,
                       split=None):
        """Post-hoc stage (paper §3.2): the noise by ``noise_variance``, the subsample, then
        the posterior of :func:`~skbnngp._backend._projection.fit_last_layer`, with the prior
        variance and (``noise_variance="evidence"``) the noise chosen by the closed-form
        evidence of the Bayesian last layer; then, for ``"heteroscedastic"`` and ``"auto"``,
        the heteroscedastic refit (:meth:`_fit_heteroscedastic`). ``held``: the rows the
        network did not train on (or None); ``Y``: the normalised targets as NumPy;
        ``split``: the rows' weights in training and held out (:meth:`_train`), or None."""
        name = type(self).__name__
        head, _, body = split_parameters(net)
        n = Xt.shape[0]
        f, Phi = head_features(net, head, Xt, rows_per_block(head.in_features))
        r, m = Phi.shape[1], count_parameters(net, body)
        self.n_params_body_, self.n_params_head_ = m, r
        mode = self.noise_variance
        if mode == "heteroscedastic":  # its homoscedastic start is the default's
            mode = "auto"
        noise_floor = 1e-8
        if mode == "auto" and val_mse is None:
            mode = "train"
        elif mode == "auto":  # the evidence's noise, but never below the validation MSE
            mode, noise_floor = "evidence", max(float(val_mse), 1e-8)
        if mode == "validation" and val_mse is None:
            raise ValueError(f"{name}: noise_variance='validation' needs a validation split "
                             "(early_stopping=True and train_network=True).")
        noise = None  # None: chosen by the evidence
        if mode == "train":
            noise = max(mean_squared_error(f, Yt, weights), 1e-12)
        elif mode == "validation":
            noise = max(float(val_mse), 1e-12)
        elif not isinstance(mode, str):
            noise = float(mode)
        idx = subsample_rows(n, self.subsample, r, rng, context=name, stacklevel=5)
        self.subsample_indices_ = idx
        if self.uncertainty == "ntk" and m + r > NTK_MAX_PARAMS:
            raise ValueError(f"{name}: uncertainty='ntk' needs a p x p posterior over all "
                             f"p = {m + r} parameters, more than {NTK_MAX_PARAMS}; use "
                             "uncertainty='rich' (its projection of the same features).")
        rich = self.uncertainty == "rich" and m > 0
        sketch = None
        if rich and (JACOBIAN == "random_projection"
                     or (JACOBIAN == "auto" and m * r > EXACT_ROUTE_MAX)):
            sketch = GaussianSketch(m, PROJECTION_DIM or max(256, 4 * r),
                                    int(rng.randint(np.iinfo(np.int32).max)), Xt.device,
                                    torch.float64)

        def posterior(noise, noise_floor, precision=None, projection=None):
            return fit_last_layer(
                net, body, Xt, Phi, Yt, kind=self.uncertainty, rows=idx,
                ridge=float(self.projection_ridge), noise=noise, noise_floor=noise_floor,
                prior_variance=(None if self.prior_variance == "auto"
                                else float(self.prior_variance)),
                sketch=sketch, context=name, weights=weights, precision=precision,
                projection=projection)

        post = posterior(noise, noise_floor)
        self.noise_model_, self.noise_gain_, self._log_noise_state = "homoscedastic", None, None
        self._cache = {"T": post.factor, "head": head, "body": body, "log_noise": None}
        if self.noise_variance == "heteroscedastic" or (
                self.noise_variance == "auto" and held is not None
                and len(held) >= NOISE_MIN_ROWS):
            post = self._fit_heteroscedastic(post, posterior, Xt, Yt, f, Phi, held, weights, Y,
                                             split)
        self.uncertainty_ = self.uncertainty
        self.noise_variance_ = post.noise
        self.prior_variance_ = post.prior_variance
        self.projection_ridge_ = float(self.projection_ridge) if rich else None
        self.projection_chol_ = None if post.chol is None else to_numpy(post.chol)
        self.log_evidence_ = post.log_evidence
        self.variance_factor_ = to_numpy(post.factor)
        self._cache["T"] = post.factor

    def _fit_heteroscedastic(self, post, posterior, Xt, Yt, f, Phi, held, weights, Y,
                             split=None):
        """The heteroscedastic refit and, with held-out rows, its test against ``post``.

        The squared residuals of the rows the network trained on give the log-noise
        regression (:func:`~skbnngp._backend._log_noise.fit_log_noise`) on the noise design
        (:meth:`_noise_design`), scaled to harmonic mean 1 over the rows; the last layer is
        refitted with those relative precisions and its level chosen by the evidence (never
        below the held-out rows' mean of ``e^2 / exp(g)``). With at least
        ``NOISE_MIN_ROWS`` held-out rows, both fits are calibrated on them and compared by
        their per-row log predictive densities (``noise_gain_``); ``"auto"`` keeps the
        heteroscedastic fit only when :func:`paired_gain` says it pays. Returns the posterior
        kept (and sets ``noise_model_``, ``noise_gain_`` and the fitted log-noise model)."""
        n = Xt.shape[0]
        dev = Xt.device
        f, Phi = f.to(torch.float64), Phi.to(torch.float64)
        w = None if weights is None else weights.to(torch.float64)
        fitted = np.ones(n, dtype=bool)
        if held is not None:
            fitted[held] = False
        fw = hw = w  # the rows' weights in training and held out
        if split is not None and w is not None:
            fw, hw = (part.to(torch.float64) for part in split)
            fitted = to_numpy(fw) > 0
        rows = torch.as_tensor(np.flatnonzero(fitted), device=dev)
        F = self._noise_design(Xt, Phi)
        e2 = (Yt.reshape(-1).to(torch.float64) - f.reshape(-1).to(torch.float64)).square()
        model = fit_log_noise(F[rows], e2[rows], None if w is None else fw[rows])
        g = model(F)
        ww = torch.ones_like(g) if w is None else w
        model = model.shift(math.log(float((ww * torch.exp(-g)).sum() / ww.sum())))
        prec = torch.exp(-model(F))
        floor = 1e-8
        if held is not None:
            hv = torch.as_tensor(held, device=dev)
            wh = ww if hw is None else hw
            floor = max(float((wh[hv] * e2[hv] * prec[hv]).sum() / wh[hv].sum()), floor)
        hetero = posterior(None, floor, precision=prec, projection=post.projection)
        keep = self.noise_variance == "heteroscedastic"
        if held is not None and len(held) >= NOISE_MIN_ROWS:
            hv = torch.as_tensor(held, device=dev)
            wv = None if w is None else (to_numpy(hw[hv]), to_numpy(w))
            method = self.calibration_
            Phi_v = Phi[hv]  # the features the posterior's factor reads: all parameters' (ntk)
            if self.uncertainty == "ntk":
                Phi_v = network_features(self.network_, self._cache["head"],
                                         self._cache["body"], Xt[hv],
                                         with_body=True)[1].to(torch.float64)
            lpd = []
            for p, noise in ((post, post.noise), (hetero, hetero.noise / prec[hv])):
                z, var = self._held_out_fit(f[hv], Phi_v, Yt[hv], p.factor, noise, method,
                                            Y, wv)
                c, df = float(self.calibration_factor_), float(self.predictive_df_)
                dist = stats.norm() if math.isinf(df) else stats.t(df)
                lpd.append(dist.logpdf(z / math.sqrt(c)) - 0.5 * np.log(c * var))
            mean, se, pays = paired_gain(lpd[1] - lpd[0], NOISE_Z, NOISE_MIN_GAIN,
                                         weights=None if wv is None else wv[0])
            self.noise_gain_ = (mean, se)
            keep = keep or bool(pays)
        if not keep:
            return post
        self.noise_model_ = "heteroscedastic"
        self._log_noise_state = {k: (to_numpy(v) if torch.is_tensor(v) else float(v))
                           for k, v in vars(model).items()}
        self._cache["log_noise"] = model
        return hetero

    def _noise_design(self, Xq, Phi):
        """Design of the log-noise regression at scaled inputs ``Xq``: the inputs beside the
        network's last-layer features (the last ``n_params_head_`` columns of ``Phi``)."""
        return torch.cat([Xq.to(torch.float64),
                          Phi[:, Phi.shape[1] - self.n_params_head_:].to(torch.float64)], dim=1)

    def _noise_at(self, Xq, Phi, cache):
        """The noise variance at scaled inputs ``Xq`` (features ``Phi``): a scalar, or a
        tensor (q,) under the heteroscedastic noise."""
        model = cache.get("log_noise")
        if model is None:
            return self.noise_variance_
        return self.noise_variance_ * torch.exp(model(self._noise_design(Xq, Phi)))

    def _build_cache(self):
        dev = self.device_
        self.network_ = self.network_.to(device=dev, dtype=self._dtype).eval()
        head, _, body = split_parameters(self.network_)
        model = None
        if self._log_noise_state is not None:
            model = LogNoiseModel(**{k: as_tensor(v, dev, torch.float64)
                                     if isinstance(v, np.ndarray) else v
                                     for k, v in self._log_noise_state.items()})
        return {"T": as_tensor(self.variance_factor_, dev, torch.float64), "head": head,
                "body": body, "log_noise": model}

    # ================================================================== predict
    _predict_params = ("include_noise",)

    def _features(self, Xq, cache):
        """Network output (q, 1) and the variance features (q, r or p) at scaled inputs."""
        return network_features(self.network_, cache["head"], cache["body"], Xq,
                                with_body=self.uncertainty_ == "ntk")

    def _latent_moments(self, Xq, full_cov):
        """Network output (q x 1) and the latent-plus-noise variance (q,) or covariance."""
        cache = self._get_cache()
        f, Phi = self._features(Xq, cache)
        noise = self._noise_at(Xq, Phi, cache) if self.include_noise else 0.0
        return to_numpy(f), to_numpy(last_layer_variance(Phi, cache["T"], noise, full_cov))
