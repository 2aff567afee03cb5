"""Flow-induced diagonal GP classifier (Lin et al., "FiD-GP")."""

from __future__ import annotations

import copy
import numbers
import warnings

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets

from ._backend import ACTIVATIONS, NetworkTrainer, as_tensor, iter_slices, make_generator, to_numpy
from ._backend._calibration import fit_temperature
from ._backend._fid_network import (
    PREDICT_ROWS,
    AnnealedELBO,
    build_network,
    check_network_state,
    draw_logits,
    draw_weights,
    entropy_split,
    kl_factor,
    lambdas,
    layer_shapes,
    mean_probs,
    network_from_state,
    network_kl,
    network_state,
    tempered_softmax,
    train_batch_size,
)
from ._backend._ood import fixed_draw, layer_inputs, residual_score, subspace_bases
from ._backend._random import NoiseTape
from ._base import (
    DEVICE_CONSTRAINT,
    DTYPE_CONSTRAINT,
    TorchEstimatorMixin,
    check_class_labels,
    check_hidden_layer_sizes,
    check_n_samples,
    check_predict_params,
    class_weight_vector,
    fit_input_scaling,
    plain,
    threaded,
    transactional,
    warn_training,
)
from ._calibration import CLASSIFIER_CALIBRATION
from ._predictive import ClassifierPredictiveMixin
from ._rows import draw_copies, duplicate_groups, network_weights, rows_replicate
from .utils._sklearn_compat import (
    Interval,
    StrOptions,
    _fit_context,
    check_is_fitted,
    validate_data,
)

# Private settings (ablations and measured alternatives; doc/whats_new): read at ``fit`` and
# copied into the fitted state; benchmarks patch them (``unittest.mock.patch.object``).
#: Conditional weight noise: Matheron's rule (exact), ``"reparam"`` (iid) or ``"mean"`` (none).
SAMPLING = "matheron"
#: The flow's conditioner (width, dropout, spectral norm); a flow on the output layer too.
FLOW_HIDDEN, FLOW_DROPOUT, FLOW_SPECTRAL_NORM, FLOW_ON_OUTPUT_LAYER = 16, 0.1, True, True
#: Initialisation of the inducing inputs ``Z_r``, ``Z_c``: ``"gaussian"`` or ``"orthogonal"``.
Z_INIT = "gaussian"
#: Start and cap of ``lambda`` (its own learning rate; None: ``learning_rate_init``), and of
#: the base posterior std over the inducing matrix.
INIT_LAMBDA, MAX_LAMBDA, LAMBDA_LR, INIT_SD_U, MAX_SD_U = 1e-3, 0.03, None, 1e-3, 0.1
#: The KL is off for the first ``KL_ML_FRAC`` of the epochs, then ramps to ``kl_weight`` over
#: ``KL_ANNEAL_FRAC``; the learning rate is multiplied by ``LR_GAMMA`` at each milestone.
KL_ML_FRAC, KL_ANNEAL_FRAC, LR_MILESTONES_FRAC, LR_GAMMA = 0.5, 0.25, (0.5,), 0.1
LABEL_SMOOTHING = 0.0
#: :meth:`FiDGPClassifier.ood_score`'s subspace (``"combined"``, ``"principal"``,
#: ``"inducing"``), the principal subspace's share of energy, the rows it is fitted on.
OOD_METHOD, OOD_ENERGY, OOD_MAX_FIT_ROWS = "principal", 0.99, 5000
#: ``refit="warm"``: the fine-tuning on every row lasts this fraction of ``max_iter`` epochs.
WARM_REFIT_FRAC = 0.1
#: Most probabilities :meth:`FiDGPClassifier.sample_proba` returns at once (2 GiB).
MAX_SAMPLE_ELEMENTS = 2**28
#: The predictive's weight draws (``n_predict_samples`` of them) are made once at ``fit`` and
#: kept when they hold at most this many numbers (32 MiB in float64); a prediction then costs
#: its forward passes only (drawing through the flows costs far more than a small batch's).
KEEP_DRAW_ELEMENTS = 2**22


def _warm_epochs(max_iter):
    return max(1, round(WARM_REFIT_FRAC * max_iter))


class FiDGPClassifier(ClassifierPredictiveMixin, TorchEstimatorMixin, ClassifierMixin,
                      BaseEstimator):
    """Classifier whose network weights come from small inducing matrices with a flow posterior.

    Each chosen linear layer of a multilayer perceptron draws its weights from a Gaussian-process
    prior over weights conditioned on a small inducing matrix ``U`` (R x C, whitened); the
    posterior over ``U`` is a diagonal Gaussian pushed row-wise through a masked autoregressive
    flow with spectrally normalised conditioners, and the weights given ``U`` add the prior's
    conditional noise, drawn with Matheron's rule and scaled by a learned ``lambda``. Training
    maximises the evidence lower bound (cross-entropy on one weight draw plus an annealed KL).
    Predicted probabilities average the softmax over ``n_predict_samples`` weight draws;
    :meth:`ood_score` gives a one-forward-pass out-of-distribution score (the relative
    residual of a layer's input off a low-rank subspace).

    Read more in the :ref:`User Guide <fidgp>`.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(64, 64)
        Widths of the hidden layers; the paper's MLP.
    activation : {"relu", "tanh", "gelu", "silu", "sigmoid", "leaky_relu"}, default="relu"
        Activation after every hidden layer; the paper's.
    fid_layers : "all", "last" or list of int, default="all"
        Which linear layers are FiD-GP layers (indices over the linear layers; -1 is the output
        layer). The others are plain layers trained by maximum likelihood. Every layer by
        default, as in the paper.
    inducing_rows : int, default=16
    inducing_cols : int, default=32
        Inducing size R x C, clipped per layer to ``R <= d_out`` and ``C <= d_in`` (``d_in``
        counts the bias); the clipped sizes are in ``inducing_shapes_``. ``R < C`` (the
        default) makes ``U`` rank-deficient, which the paper's Lemma 1 needs.
    layer_budget : float or None, default=None
        Compression: each FiD-GP layer gets at most ``layer_budget`` times the parameters of
        the dense layer it replaces (flow included), keeping the largest rank ``R``, then
        its flow, then the largest ``C`` (``inducing_shapes_``, ``model_plan_["flows"]``).
        The output layer keeps rank ``min(inducing_rows, n_classes)``, so it can exceed its
        budget. None (no limit) by default: compression costs accuracy (User Guide).
    flow_length : int, default=1
        Number of MAF steps (0: the plain diagonal Gaussian; needs no ``zuko``); one step,
        the paper's.
    prior_sd : float, default=1.0
        Prior std of the weights, divided by ``sqrt(d_in)``: unit-variance pre-activations.
    kl_weight : float, default=0.1
        Final weight of the KL term; below the paper's 1, which made the predictive
        under-confident (User Guide).
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes in the cross-entropy: a dict ``{class: weight}`` (missing
        classes weigh 1; a key that is not a class of ``y``, or a negative weight, is an
        error) or ``"balanced"``; None weighs every row equally.
    max_iter : int, default=400
        Epochs (the KL annealing and the learning-rate drop are fractions of it); 400
        measured better in accuracy and NLL on digits than 200 (User Guide).
    batch_size : int or "auto", default="auto"
        Rows per gradient step (clipped to the number of rows). ``"auto"``:
        ``min(n, max(100, ceil(n / 8)))`` (at most 8 steps per epoch), since a step's cost is
        mostly fixed (the flows and Matheron draws of every layer), not per row.
    learning_rate_init : float, default=3e-3
        Adam's learning rate (on every parameter), divided by 10 after half the epochs. The
        paper's 1e-3 left the ten-class digits 1.4 points below an MLP (User Guide).
    n_iter_no_change : int or None, default=None
        An integer adds a stopping rule: once the KL schedule is over, training stops when
        the epoch loss has not improved by ``tol`` for this many epochs (a
        ``ConvergenceWarning`` when it did not fire before ``max_iter``). None by default:
        all ``max_iter`` epochs, the paper's fixed budget, over which the schedules are laid.
    tol : float, default=1e-4
        Improvement of the epoch loss that resets the stopping rule (sklearn's MLP default).
    n_predict_samples : int, default=8
        Weight draws averaged by :meth:`predict_proba`; enough for the NLL, cheap to predict.
    ood_layers : list of int or None, default=None
        Key layers of :meth:`ood_score` (indices over the linear layers): the score reads
        each one's input. None: every linear layer, so the inputs and each hidden layer's
        features all count; the last hidden layer's features separate unseen classes that
        the inputs and the first hidden layer mix.
    calibration : {"auto", "temperature"} or None, default="auto"
        ``"temperature"``: a stratified ``validation_fraction`` of the rows is held out, and
        one ``T`` (``temperature_``, with a Gaussian prior on ``log T`` of std 0.5 below 0
        and 1 above, whose weight shrinks as held-out rows grow) is fitted by
        their NLL; the probabilities then average ``softmax(logits / T)`` over the draws
        (each draw's class does not depend on ``T``); ``refit`` says what happens to the
        held-out rows. ``"auto"``: ``"temperature"`` when every class has at least
        ``1 / validation_fraction`` rows, else None with a warning (``calibration_`` says
        which ran).
        None: ``T = 1``, every row trained on, as in the paper. ``"auto"`` by default: the
        annealed ELBO leaves the network too soft on small sets (User Guide).
    validation_fraction : float in (0, 1), default=0.1
        Rows held out to fit ``T`` (with calibration only; at least one per class); a tenth
        leaves the network most of the rows.
    refit : bool or "warm", default="warm"
        With calibration, what trains on the held-out rows once ``T`` is fitted.
        ``"warm"``: the held-out stage's network trains on every row for a tenth of
        ``max_iter`` more epochs at the schedule's final learning rate and KL weight (input
        scaling and ``T`` stay). True: a second network trains on every row from the start
        (it is ``calibration=None``'s) and keeps ``T``, for twice the fit time. False: the
        held-out rows are never trained on. ``"warm"`` by default: every row is learned for
        about 10% more fit time.
    normalize_X : bool, default=True
        Standardise the features with the training mean and std (the network's initial
        scale assumes unit-scale inputs).
    device : str or torch.device, default="auto"
        ``"auto"``: CUDA when present, else the CPU. On CUDA each training step is captured
        once and replayed as a CUDA graph (the step's thousands of small kernels in one
        launch).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the network; float32 trains faster and the noise of the weight draws
        dwarfs its rounding.
    random_state : int, RandomState instance or None, default=None
        Seeds the initial values, the training draws, the prediction draws and the OoD set-up.
        Every draw comes from a host generator, so CPU and CUDA fits see the same noise.
    verbose : int, default=0
        0: silent; 1: a progress line (training loss, time per epoch) about every 50
        epochs and a last line saying why training stopped (a progress bar instead of the
        lines on a terminal when ``tqdm`` is installed); 2 or more: a line every few epochs.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
    model_ : torch.nn.Module
        The trained network (pickled as NumPy arrays and rebuilt on load).
    model_plan_ : dict
        What rebuilds the network: widths, inducing shapes, flows and layer settings.
    inducing_shapes_ : list of (int, int) or None
        (R, C) of each linear layer (None for a plain layer).
    loss_curve_, kl_weights_ : list of float
        Mean training loss and KL weight of each epoch run.
    kl_ : float
        KL divergence of the trained posterior (one draw) divided by the number of rows.
    lambdas_ : list of float
        The learned ``lambda`` of each FiD-GP layer.
    n_iter_ : int
        Epochs run (with ``refit="warm"``: the held-out stage's, then the fine-tuning's;
        ``loss_curve_`` and ``kl_weights_`` run on in the same way).
    converged_ : bool
        True when the planned training ran: all ``max_iter`` epochs (``n_iter_no_change=None``)
        or the stopping rule fired before ``max_iter``.
    inducing_matrices_ : list of ndarray or None
        The fixed posterior draw of ``U`` of each OoD key layer (None for a dense layer).
    ood_layers_ : list of int
    ood_method_ : str
        The OoD subspace fitted (:meth:`ood_score` reads this).
    ood_ranks_ : list of int
        Rank of each key layer's subspace (below the layer's input width).
    n_parameters_ : int
        Trainable parameters of the network.
    calibration_ : {"temperature"} or None
        The calibration that ran (``calibration="auto"`` resolved by the class counts).
    temperature_ : float
        The softmax temperature of the predictive (1.0 without calibration).
    validation_nll_ : float or None
        Validation NLL at ``temperature_`` (None without ``calibration``).

    Notes
    -----
    Decisions against the paper and the authors' code: the flow is on every FiD-GP layer;
    the KL is annealed by fractions of ``max_iter`` (the CIFAR script never switches it on);
    the OoD score is the input residual off a low-rank subspace under one fixed weight draw
    stored after ``fit``, read at every linear layer (not only the FiD-GP hidden layers),
    not the paper's projected feature-gradients; no global random state is touched. Not
    implemented: batch normalisation and spectral normalisation of the network layers (both
    optional extensions).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skbnngp import FiDGPClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = FiDGPClassifier(hidden_layer_sizes=(16,), max_iter=30, batch_size=32,
    ...                       learning_rate_init=1e-2, random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 3)
    """

    _parameter_constraints: dict = {
        "hidden_layer_sizes": [tuple, list],
        "activation": [StrOptions(set(ACTIVATIONS))],
        "fid_layers": [StrOptions({"all", "last"}), list, tuple],
        "inducing_rows": [Interval(numbers.Integral, 1, None, closed="left")],
        "inducing_cols": [Interval(numbers.Integral, 1, None, closed="left")],
        "layer_budget": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "flow_length": [Interval(numbers.Integral, 0, None, closed="left")],
        "prior_sd": [Interval(numbers.Real, 0, None, closed="neither")],
        "kl_weight": [Interval(numbers.Real, 0, None, closed="left")],
        "class_weight": [StrOptions({"balanced"}), dict, None],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left"),
                       StrOptions({"auto"})],
        "learning_rate_init": [Interval(numbers.Real, 0, None, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "n_predict_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "ood_layers": [list, tuple, None],
        "calibration": CLASSIFIER_CALIBRATION,
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "refit": ["boolean", StrOptions({"warm"})],
        "normalize_X": ["boolean"],
        "device": DEVICE_CONSTRAINT,
        "dtype": DTYPE_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(self, *, hidden_layer_sizes=(64, 64), activation="relu", fid_layers="all",
                 inducing_rows=16, inducing_cols=32, layer_budget=None, flow_length=1,
                 prior_sd=1.0, kl_weight=0.1, class_weight=None, max_iter=400,
                 batch_size="auto", learning_rate_init=3e-3, n_iter_no_change=None, tol=1e-4,
                 n_predict_samples=8, ood_layers=None, calibration="auto",
                 validation_fraction=0.1, refit="warm", normalize_X=True, device="auto",
                 dtype="float32", random_state=None, verbose=0):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.fid_layers = fid_layers
        self.inducing_rows = inducing_rows
        self.inducing_cols = inducing_cols
        self.layer_budget = layer_budget
        self.flow_length = flow_length
        self.prior_sd = prior_sd
        self.kl_weight = kl_weight
        self.class_weight = class_weight
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.n_predict_samples = n_predict_samples
        self.ood_layers = ood_layers
        self.calibration = calibration
        self.validation_fraction = validation_fraction
        self.refit = refit
        self.normalize_X = normalize_X
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    #: On CUDA, train with each step captured and replayed as a CUDA graph (see
    #: ``NetworkTrainer(cuda_graph=...)``); ``False`` runs the steps eagerly.
    _cuda_graphs = True

    def _fit_cost_units(self, n):
        """Optimiser steps of a fit on ``n`` rows (what ``skbnngp compare``'s time planner
        scales a pilot fit by; a step costs about the same whatever its rows)."""
        def per_epoch(m):  # steps of an epoch on m rows
            return -(-m // train_batch_size(self.batch_size, m))

        if self.calibration is None:  # "auto" is planned as temperature (the usual case)
            return per_epoch(n) * self.max_iter
        held_out = per_epoch(n - round(self.validation_fraction * n)) * self.max_iter
        if self.refit == "warm":
            return held_out + per_epoch(n) * _warm_epochs(self.max_iter)
        return held_out + per_epoch(n) * self.max_iter if self.refit else held_out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags

    # ================================================================== set-up
    def _layer_plan(self, n_features, n_classes):
        """The network's configuration as a plain dict (also what rebuilds it on load)."""
        hidden = check_hidden_layer_sizes(self.hidden_layer_sizes)
        widths = [n_features, *hidden, n_classes]
        n_lin = len(widths) - 1
        if isinstance(self.fid_layers, str):
            chosen = set(range(n_lin)) if self.fid_layers == "all" else {n_lin - 1}
        else:
            chosen = set()
            for i in self.fid_layers:
                if not isinstance(i, numbers.Integral) or not -n_lin <= i < n_lin:
                    raise ValueError(f"fid_layers entries must be layer indices in [-{n_lin}, "
                                     f"{n_lin}) for {n_lin} linear layers, got {plain(i)!r}.")
                chosen.add(int(i) % n_lin)
            if not chosen:
                raise ValueError("fid_layers selects no layer; at least one FiD-GP layer is "
                                 "needed.")
        if self.flow_length > 0:
            from ._backend._flows import require_zuko
            require_zuko()
        shapes, flows = layer_shapes(widths, chosen, self.inducing_rows, self.inducing_cols,
                                     self.flow_length, self.layer_budget,
                                     FLOW_ON_OUTPUT_LAYER, FLOW_HIDDEN)
        return {"widths": widths, "shapes": shapes, "flows": flows,
                "activation": self.activation, "flow_length": int(self.flow_length),
                "prior_sd": float(self.prior_sd), "flow_hidden": FLOW_HIDDEN,
                "flow_dropout": FLOW_DROPOUT, "flow_spectral_norm": FLOW_SPECTRAL_NORM,
                "init_lambda": INIT_LAMBDA, "max_lambda": MAX_LAMBDA, "learn_lambda": True,
                "init_sd_u": INIT_SD_U, "max_sd_u": MAX_SD_U, "z_init": Z_INIT,
                "sampling": SAMPLING}

    # ================================================================== fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y, sample_weight=None):
        """Train the network by the annealed ELBO and set up the OoD score.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels (numbers or strings); at least two classes.
        sample_weight : array-like of shape (n_samples,), default=None
            Frequency weights: each row's cross-entropy counts ``w_i`` times (times its
            ``class_weight``; the product normalised to mean 1 over the training rows, so a
            mini-batch estimates the weighted mean), the ELBO's ``n`` in ``KL / n`` is the
            weights' sum, ``"balanced"`` class weights use the weighted class counts, and
            the temperature is fitted on the weighted held-out NLL. A zero weight drops the
            row (a class left with none is not among ``classes_``); exact duplicate
            ``(x, y)`` rows are merged into one weighted row (and the rows sorted) first,
            so integer weights and repeated rows train the identical model. Weights
            averaging under 1/4 make the KL outweigh the data (a UserWarning; importance
            weights: divide by the mean of the non-zero ones). None: every row once.

        Returns
        -------
        self : object
        """
        check_hidden_layer_sizes(self.hidden_layer_sizes)
        X, y = validate_data(self, X, y, ensure_min_samples=2, dtype=np.float64)
        check_class_labels(y)
        check_classification_targets(y)
        classes, y_idx = np.unique(y, return_inverse=True)
        X, y_idx, w = network_weights(self, X, y_idx.ravel(), sample_weight)
        if w is not None:  # a class whose rows all have weight 0 is not a class of the fit
            present = np.unique(y_idx)
            classes, y_idx = classes[present], np.searchsorted(present, y_idx)
        if len(classes) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in "
                             f"y; got only one class: {plain(classes[0])!r}.")
        plan = self._layer_plan(X.shape[1], len(classes))  # bad ood_layers fail before training
        self._ood_key_layers(len(plan["shapes"]),
                             [i for i, shape in enumerate(plan["shapes"]) if shape is not None],
                             OOD_METHOD)
        self.classes_ = classes
        device, dtype = self._resolve_runtime()
        rng = check_random_state(self.random_state)
        seeds = rng.randint(np.iinfo(np.int32).max, size=4)
        temperature, val_nll = 1.0, None
        self._graph_report = []
        self._predict_draws = None  # a refit's temperature stage must not read the last fit's
        calibration = self._calibration_for(y_idx, len(classes))
        if calibration == "temperature":
            train, val, w_train, w_val = self._validation_split(y_idx, len(classes),
                                                                int(seeds[3]), X, w)
            # with refit=True, the held-out stage draws from a copy of the generator, so the
            # final network below is the very one calibration=None trains
            retrain = bool(self.refit) and self.refit != "warm"
            net, Xt = self._fit_network(X[train], y_idx[train], len(classes),
                                        copy.deepcopy(rng) if retrain else rng, seeds,
                                        device, dtype,
                                        stage=" (temperature stage)" if retrain else "",
                                        weights=w_train)
            logits = self._draw_logits(
                as_tensor((X[val] - self._X_offset) / self._X_scale, device, dtype),
                self.n_predict_samples, self._predict_seed)
            temperature, val_nll = fit_temperature(
                to_numpy(logits), y_idx[val], **({} if w_val is None else {"weights": w_val}))
        if calibration == "temperature" and self.refit == "warm":
            net, Xt = self._finetune_network(net, X, y_idx, rng, seeds, w)
        elif calibration is None or self.refit:
            net, Xt = self._fit_network(X, y_idx, len(classes), rng, seeds, device, dtype,
                                        weights=w)
        self.calibration_ = calibration
        self.temperature_, self.validation_nll_ = temperature, val_nll
        self._fit_ood(net, Xt, rng, int(seeds[3]))
        self._predict_draws = self._keep_draws()
        return self

    def _keep_draws(self):
        """The predictive's weight draws (``n_predict_samples`` of ``_predict_seed``) to keep,
        or None when they would hold more than :data:`KEEP_DRAW_ELEMENTS` numbers (or
        ``n_predict_samples``, set after fit, is not a count: predictions refuse it)."""
        S = self.n_predict_samples
        if not isinstance(S, numbers.Integral) or isinstance(S, bool) or S < 1:
            return None
        draws = draw_weights(self.model_, self.n_predict_samples, self._predict_seed,
                             self.model_plan_["sampling"])
        size = sum(W.numel() for draw in draws for W in draw)
        return draws if size <= KEEP_DRAW_ELEMENTS else None

    def _draws(self, n_samples, seed):
        """``n_samples`` weight draws of the fitted network seeded by ``seed``: those kept at
        fit when they are the ones asked for."""
        kept = self.__dict__.get("_predict_draws")
        if kept is not None and seed == self._predict_seed and len(kept) == n_samples:
            return kept
        return draw_weights(self.model_, n_samples, seed, self.model_plan_["sampling"])

    def _fit_network(self, X, y_idx, n_classes, rng, seeds, device, dtype, stage="",
                     weights=None):
        """Train a network on ``(X, y_idx)`` (rows of frequency ``weights``) and set the
        fitted attributes that describe it; returns the network and the scaled training
        inputs (for the OoD set-up). ``stage`` labels the progress and warnings of a
        network that is not the final one."""
        Xt = as_tensor(fit_input_scaling(self, X, self.normalize_X, sample_weight=weights),
                       device, dtype)
        plan = self._layer_plan(X.shape[1], n_classes)
        net = build_network(plan, int(seeds[0]), device, dtype)
        self._train(net, Xt, y_idx, rng, int(seeds[1]), plan["sampling"], stage,
                    weights=weights)
        self.model_plan_ = plan
        self.inducing_shapes_ = list(plan["shapes"])
        self.n_parameters_ = int(sum(p.numel() for p in net.parameters()))
        self._predict_seed = int(seeds[2])
        self._record_network(net, X.shape[0] if weights is None else float(weights.sum()))
        return net, Xt

    def _record_network(self, net, n_rows):
        """Set the fitted attributes read from a trained network: the model, its noise
        levels and the KL per row of the fixed weight draw (seeded by ``_predict_seed``)."""
        self.model_ = net.eval()
        self.lambdas_ = lambdas(net)
        self.kl_ = network_kl(net, self._predict_seed, self.model_plan_["sampling"]) / n_rows

    def _calibration_for(self, y_idx, n_classes):
        """The calibration this fit runs: ``"auto"`` is ``"temperature"`` when every class
        has at least ``1 / validation_fraction`` rows (the held-out split then takes at most
        about that fraction of each class), else None, with a warning: the probabilities
        are then the network's own."""
        if self.calibration != "auto":
            return self.calibration
        counts = np.bincount(y_idx, minlength=n_classes)
        smallest = int(counts.min())
        if smallest * self.validation_fraction >= 1:
            return "temperature"
        label = plain(self.classes_[int(np.argmin(counts))])
        warnings.warn(
            f"{type(self).__name__}: calibration='auto' fitted no temperature: class "
            f"{label!r} has {smallest} row(s), fewer than 1 / validation_fraction = "
            f"{1 / self.validation_fraction:.3g}, so the probabilities are the network's own "
            "and can be over- or under-confident. calibration='temperature' holds out at "
            "least one row of every class (it needs 2 of each); calibration=None silences "
            "this.", UserWarning, stacklevel=5)
        return None

    def _finetune_network(self, net, X, y_idx, rng, seeds, weights=None):
        """``refit="warm"``: continue training ``net`` (trained on the rows the calibration
        split left) on every row for :data:`WARM_REFIT_FRAC` of ``max_iter`` epochs, at the
        schedule's final learning rate and KL weight; the input scaling stays. Returns the
        network and the scaled inputs of every row."""
        device, dtype = next(net.parameters()).device, next(net.parameters()).dtype
        Xt = as_tensor((X - self._X_offset) / self._X_scale, device, dtype)
        self._train(net, Xt, y_idx, rng, int(seeds[1]) + 1, self.model_plan_["sampling"],
                    stage=" (warm refit)", finetune_epochs=_warm_epochs(self.max_iter),
                    weights=weights)
        self._record_network(net, X.shape[0] if weights is None else float(weights.sum()))
        return net, Xt

    def _validation_split(self, y_idx, n_classes, seed, X=None, weights=None):
        """``(train, validation, train_weights, validation_weights)``: row indices,
        stratified, at least one validation row per class and one training row per class
        left, and the rows' frequency weights on each side (None without ``weights``).

        The rows are the fit's after :func:`~._rows.network_weights`, which merges exact
        repeats of ``(x, label)`` into one row of summed weight. Such a row stays whole on
        one side (a twin in training would make its held-out copy look easy and sharpen
        the temperature: rows given twice), unless its input also carries another label:
        it is then a design point observed many times (a cell of categorical inputs), and
        its copies are split like separate rows (held out whole, the training never saw
        that label there and the temperature flattened every probability; measured in
        doc/whats_new.rst); so are the copies of every merged row where the rows are
        replicates of a design (:func:`~._rows.rows_replicate`: a cell of a single label
        too). Without ``weights`` the split is the plain stratified one.
        """
        counts = np.bincount(y_idx, minlength=n_classes)
        if counts.min() < 2:
            raise ValueError("calibration='temperature' holds out a validation split and "
                             "needs at least 2 rows of every class; the smallest class has "
                             f"{int(counts.min())}. Set calibration=None.")
        rng = np.random.default_rng(seed)
        copies = np.zeros(len(y_idx), dtype=np.int64)  # copies split one by one (0: whole)
        if weights is not None and X is not None:
            whole = np.round(weights)
            _, inputs, shared = np.unique(np.asarray(X), axis=0, return_inverse=True,
                                          return_counts=True)
            replicated = shared[inputs.ravel()] >= 2  # the input carries another label
            if rows_replicate(duplicate_groups(X), len(weights), weights):
                replicated[:] = True  # a design's replicates: a cell of one label too
            split = replicated & (whole == weights) & (whole >= 2)
            copies[split] = whole[split].astype(np.int64)
        held = np.zeros(len(y_idx))
        for c in range(n_classes):
            rows = rng.permutation(np.flatnonzero(y_idx == c))
            units = np.maximum(copies[rows], 1)  # a row's copies, or 1 for a whole row
            total = int(units.sum())
            k = min(total - 1, max(1, round(self.validation_fraction * total)))
            take = (draw_copies(rng, units, k) if total > rows.size  # copies to split
                    else (np.arange(rows.size) < k).astype(np.int64))
            held[rows] += np.where(copies[rows] > 0, take, take * (
                1.0 if weights is None else weights[rows]))
        val = np.flatnonzero(held > 0)
        if weights is None:
            return np.flatnonzero(held == 0), val, None, None
        rest = weights - held
        train = np.flatnonzero(rest > 0)
        return train, val, rest[train], held[val]

    def _train(self, net, Xt, y_idx, rng, seed, sampling, stage="", finetune_epochs=None,
               weights=None):
        """Run the annealed ELBO on ``net`` (a fit's first stage, or ``finetune_epochs`` more
        epochs at the schedule's end) and record the epochs; ``weights``: the rows'
        frequency weights (None: every row once)."""
        name = type(self).__name__ + stage
        n, E = Xt.shape[0], self.max_iter
        ft = finetune_epochs is not None
        gen = make_generator(seed, "cpu")  # host draws: the same on every device
        graphs = Xt.device.type == "cuda" and self._cuda_graphs
        if graphs:  # the step's draws come from a tape that a replayed graph reads
            gen = NoiseTape(gen)
        net.holder.generator = gen
        cw = None
        if self.class_weight is not None:
            cw = compute_class_weight(self.class_weight, classes=np.arange(len(self.classes_)),
                                      y=y_idx, sample_weight=weights) \
                if self.class_weight == "balanced" else \
                class_weight_vector(self.class_weight, self.classes_)
        rw, n_eff = None, None
        if weights is not None:  # class and sample weights multiplied, mean 1 over the rows
            rw = weights if cw is None else weights * cw[y_idx]
            rw, cw, n_eff = rw / rw.mean(), None, float(weights.sum())
        yt = torch.as_tensor(y_idx, device=Xt.device, dtype=torch.long)
        loss = AnnealedELBO(net, Xt, yt, gen, class_weight=cw, label_smoothing=LABEL_SMOOTHING,
                            sampling=sampling, graphs=graphs, row_weights=rw, n=n_eff)
        kappas = []

        def start_epoch(epoch):
            kappas.append(float(self.kl_weight) if ft else
                          kl_factor(epoch, E, KL_ML_FRAC, KL_ANNEAL_FRAC, self.kl_weight))
            loss.set_kappa(kappas[-1])

        params, extra = list(net.parameters()), []
        if LAMBDA_LR is not None:  # lambda at its own learning rate
            lams = [layer.rho_lambda for _, layer in net.inducing_layers()]
            params = [p for p in params if all(p is not q for q in lams)]
            extra = [(lams, LAMBDA_LR)]
        milestones = sorted({int(round(f * E)) for f in LR_MILESTONES_FRAC})
        lr0 = self.learning_rate_init
        if ft:  # the schedule's final learning rate throughout
            final = LR_GAMMA ** sum(1 for m in milestones if m < E)
            lr0, extra, milestones = lr0 * final, [(ps, lr * final) for ps, lr in extra], []
        trainer = NetworkTrainer(loss, [], params, modules=[net], learning_rate=lr0,
                                 lr_milestones=milestones, lr_gamma=LR_GAMMA,
                                 extra_groups=extra, device=Xt.device, epoch_fn=start_epoch,
                                 cuda_graph=gen if graphs else None)
        schedule_end = 0 if ft else round(KL_ML_FRAC * E) + round(KL_ANNEAL_FRAC * E)
        try:
            res = trainer.fit(n, batch_size=train_batch_size(self.batch_size, n),
                              max_epochs=finetune_epochs if ft else E, rng=rng,
                              n_iter_no_change=None if ft else self.n_iter_no_change,
                              tol=self.tol, min_epochs=schedule_end, verbose=self.verbose,
                              label=name)
        finally:
            net.holder.generator = None
            # how the steps ran on CUDA (diagnostics: replayed steps, why graphs failed)
            self._graph_report.append((name, trainer.n_steps, trainer.n_graph_steps,
                                       trainer.graph_error))
            for p in net.parameters():  # no gradient left behind in the fitted model
                p.grad = None
        if ft:  # a fixed number of epochs after the first stage: its record continues
            self.n_iter_ += res.n_epochs
            self.loss_curve_ = list(self.loss_curve_) + list(res.loss_curve)
            self.kl_weights_ = list(self.kl_weights_) + kappas[:res.n_epochs]
            return
        scheduled = self.n_iter_no_change is None  # the full budget is the plan, not a cap
        if not scheduled:
            warn_training(self, res, "increase max_iter (the KL schedule scales with it)"
                          + (f" [{stage.strip(' ()')}]" if stage else ""), stacklevel=6)
        self.n_iter_, self.loss_curve_ = res.n_epochs, res.loss_curve
        self.kl_weights_ = kappas[:res.n_epochs]
        self.converged_ = res.converged or scheduled

    # ================================================================== OoD set-up
    def _ood_key_layers(self, n_lin, inducing, method):
        """The key layers among ``n_lin`` linear layers (``inducing``: the FiD-GP ones):
        ``ood_layers``, or by default every linear layer for the principal subspaces (any
        layer's input has them) and every hidden FiD-GP layer for the inducing ones (only a
        FiD-GP layer has a ``U``)."""
        allowed = list(range(n_lin)) if method == "principal" else list(inducing)
        if self.ood_layers is None:
            hidden = [i for i in allowed if i < n_lin - 1]
            return allowed if method == "principal" else (hidden or [allowed[-1]])
        for i in self.ood_layers:
            if not (isinstance(i, numbers.Integral) and -n_lin <= i < n_lin
                    and int(i) % n_lin in allowed):
                raise ValueError(f"ood_layers entries must index layers {allowed} "
                                 f"(of {n_lin} linear layers), got {plain(i)!r}.")
        return sorted({int(i) % n_lin for i in self.ood_layers})

    def _fit_ood(self, net, Xt, rng, seed, method=None):
        """Fix one weight draw and the key layers' ``U``; then the subspaces of ``method``
        (default :data:`OOD_METHOD`) on at most :data:`OOD_MAX_FIT_ROWS` training rows."""
        method = OOD_METHOD if method is None else method
        keys = self._ood_key_layers(len(net.layers), [i for i, _ in net.inducing_layers()],
                                    method)
        weights, us, colmaps = fixed_draw(net, keys, make_generator(seed, "cpu"),
                                          self.model_plan_["sampling"])
        self.ood_layers_, self.ood_method_ = keys, method
        self.inducing_matrices_ = [to_numpy(us[i]) if i in us else None for i in keys]
        n = Xt.shape[0]
        rows = np.sort(rng.choice(n, min(n, OOD_MAX_FIT_ROWS), replace=False))
        inputs = self._layer_inputs(Xt[torch.as_tensor(rows, device=Xt.device)], weights)
        bases = subspace_bases(inputs, us, colmaps, keys, method, OOD_ENERGY)
        self._ood = {"weights": weights, "bases": bases}
        self.ood_ranks_ = [int(B.shape[1]) for B in bases]

    def _layer_inputs(self, Xt, weights=None):
        """The input (with the bias column) of each key layer under the fixed draw."""
        weights = self._ood["weights"] if weights is None else weights
        act = ACTIVATIONS[self.model_plan_["activation"]]()  # the fitted one
        return layer_inputs(weights, self.ood_layers_, act, Xt, PREDICT_ROWS)

    # ================================================================== prediction
    def _input(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return as_tensor((X - self._X_offset) / self._X_scale, self.device_, self._dtype)

    def _draw_logits(self, Xt, n_samples, seed):
        """Logits under ``n_samples`` weight draws of scaled inputs ``Xt``: (S, n, K)."""
        return draw_logits(self.model_, Xt, self._draws(n_samples, seed))

    def _draw_probs(self, X, n_samples, seed):
        """Softmax probabilities (at ``temperature_``) under ``n_samples`` weight draws:
        (S, n, K) tensor, refused above :data:`MAX_SAMPLE_ELEMENTS` values."""
        Xt = self._input(X)
        size = int(n_samples) * Xt.shape[0] * len(self.classes_)
        if size > MAX_SAMPLE_ELEMENTS:
            raise ValueError(f"n_samples={plain(n_samples)} draws of {Xt.shape[0]} rows x "
                             f"{len(self.classes_)} classes make {size:.3g} probabilities, "
                             f"more than {MAX_SAMPLE_ELEMENTS:.3g}; ask for fewer at a time.")
        probs = tempered_softmax(self._draw_logits(Xt, int(n_samples), seed), self.temperature_)
        if probs is None:
            raise ValueError(f"{type(self).__name__}: the predicted probabilities at X are not "
                             "finite (X may lie far outside the training range); rescale X.")
        return probs

    @threaded
    def sample_proba(self, X, n_samples=None, random_state=None):
        """Class probabilities under separate weight draws.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int or None, default=None
            Number of draws (None: ``n_predict_samples``).
        random_state : int, RandomState instance or None, default=None
            Seeds the draws; None uses the fitted seed (the draws of :meth:`predict_proba`).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_samples_X, n_classes)
        """
        if n_samples is None:
            check_predict_params(self, "n_predict_samples")
        S = self.n_predict_samples if n_samples is None else n_samples
        check_n_samples(S)
        check_is_fitted(self)
        seed = self._predict_seed if random_state is None else int(
            check_random_state(random_state).randint(np.iinfo(np.int32).max))
        return to_numpy(self._draw_probs(X, S, seed))

    @threaded
    def predict_proba(self, X):
        """Class probabilities: the softmax averaged over ``n_predict_samples`` weight draws.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``; rows sum to one.
        """
        check_is_fitted(self)
        check_predict_params(self, "n_predict_samples")
        probs = mean_probs(self.model_, self._input(X),
                           self._draws(self.n_predict_samples, self._predict_seed),
                           self.temperature_)
        if probs is None:
            raise ValueError(f"{type(self).__name__}: the predicted probabilities at X are not "
                             "finite (X may lie far outside the training range); rescale X.")
        p = to_numpy(probs)
        return p / p.sum(axis=1, keepdims=True)

    @threaded
    def predict_uncertainty(self, X):
        """Predictive entropy and its split into expected entropy and mutual information.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        uncertainty : dict of ndarray of shape (n_samples,)
            ``"entropy"`` of the averaged predictive, ``"expected_entropy"`` (the mean
            entropy of the draws: aleatoric) and ``"mutual_information"`` (their difference:
            epistemic, >= 0), in nats.
        """
        check_is_fitted(self)
        check_predict_params(self, "n_predict_samples")
        return entropy_split(
            to_numpy(self._draw_probs(X, self.n_predict_samples, self._predict_seed)))

    @threaded
    def ood_score(self, X):
        """Out-of-distribution score (higher = less like the training data).

        One forward pass under a fixed weight draw: the input ``a`` (with its bias column)
        of each key layer (``ood_layers_``: by default the inputs and every hidden layer's
        features) leaves a residual off the top principal directions of the training rows'
        inputs of that layer, which hold 99% of their energy; the score is
        ``||a - a B B^T|| / ||a||`` (``B`` orthonormal) averaged over the layers, in [0, 1].
        No label is needed; the model is not changed.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        score : ndarray of shape (n_samples,)
            In [0, 1]; scale-free: a point far along the data's subspace is not flagged.
        """
        Xt = self._input(X)  # row blocks: memory of one block's layer inputs, not all rows'
        score = np.concatenate([to_numpy(residual_score(self._layer_inputs(Xt[sl]),
                                                        self._ood["bases"]))
                                for sl in iter_slices(Xt.shape[0], PREDICT_ROWS)])
        if not np.all(np.isfinite(score)):
            raise ValueError(f"{type(self).__name__}: the OoD score at X is not finite (X may "
                             "lie far outside the training range); rescale X.")
        return score

    # ================================================================== persistence
    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_predict_draws", None)  # drawn again on loading
        if "model_" in state:
            state["model_"] = network_state(state["model_"])
            state["_ood"] = {k: [to_numpy(t).copy() for t in v]
                             for k, v in state["_ood"].items()}
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if isinstance(self.__dict__.get("model_"), dict):
            try:  # the plan's sizes against the saved weights, before anything is built
                check_network_state(self.model_plan_, self.model_)
            except ValueError as exc:
                raise ValueError(f"{type(self).__name__}: {exc}") from None
            device, dtype = self.device_, self._dtype  # fitted, not the parameter
            self.model_ = network_from_state(self.model_plan_, self.model_, device,
                                             dtype).eval()
            self._ood = {k: [torch.as_tensor(a, device=device, dtype=dtype) for a in v]
                         for k, v in self._ood.items()}
            self._predict_draws = self._keep_draws()
