"""The package's one network-training loop (DBK, Rich-BLL and FiD-GP use it).

Two pieces:

* :func:`build_mlp` makes a multilayer perceptron (plain or with residual blocks) whose
  initial weights are drawn on the host from a seed, so the same seed gives the same network
  on every device, and no global torch random state is touched.
* :class:`NetworkTrainer` runs mini-batch (or full-batch) gradient steps on a loss
  ``loss_fn(rows, epoch) -> 0-d tensor``. It shuffles with a seeded host permutation, uses
  Adam/AdamW with weight decay on the chosen parameters only, optional gradient clipping and
  a step learning-rate schedule, validates every ``validation_interval`` epochs with early
  stopping that restores the best state, and stops with :class:`TrainingDivergedError` (and
  the last finite state restored) when the loss becomes NaN or inf.

A loss that writes its own gradient (:class:`~._mlp_grad.MLPSquaredError`, a plain MLP's
squared error) is stepped without autograd, over one flat buffer per parameter group
(:class:`~._flat.FlatParameters`): the same numbers, a fraction of a small network's step
time on the CPU.

The losses stay on the device: they are brought to the host only every few steps (at least
``sync_steps`` gradient steps apart, and at each validation), never once per step. The
trainer knows nothing of scikit-learn; it returns a :class:`TrainResult` and the estimator
raises ``ConvergenceWarning`` itself.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ..exceptions import NumericalError
from ._device import to_numpy
from ._eager_optim import make_optimizer
from ._flat import AdamStep, FlatParameters, clip_grad_norm_

#: ``verbose=1`` prints a progress line about every this many epochs (rounded up to the
#: epochs between validations), each learning-rate drop and why training stopped: a summary
#: a few dozen lines long rather than one line per epoch; ``verbose >= 2`` prints every
#: validation.
REPORT_EPOCHS = 50

#: Activations accepted by name.
ACTIVATIONS = {
    "tanh": torch.nn.Tanh,
    "relu": torch.nn.ReLU,
    "gelu": torch.nn.GELU,
    "silu": torch.nn.SiLU,
    "sigmoid": torch.nn.Sigmoid,
    "leaky_relu": torch.nn.LeakyReLU,
}


class TrainingDivergedError(NumericalError):
    """The training loss became NaN or inf; the trainer restored the last finite state."""


# ============================================================================ networks
class _Residual(torch.nn.Module):
    """``h -> h + act(W h + b)`` (one residual block of constant width)."""

    def __init__(self, width, activation, device):
        super().__init__()
        self.linear = torch.nn.Linear(width, width, device=device)
        self.act = ACTIVATIONS[activation]()

    def forward(self, h):
        return h + self.act(self.linear(h))


def _init_linear_(module: torch.nn.Module, seed: int, dtype, device):
    """Give every ``nn.Linear`` PyTorch's default initialisation, drawn on the host.

    PyTorch's default (Kaiming-uniform with ``a = sqrt(5)``) is ``U(-1/sqrt(fan_in),
    1/sqrt(fan_in))`` for both the weight and the bias; it is reproduced here with a local
    CPU generator, so the values do not depend on the device or on global random state.
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, torch.nn.Linear):
                bound = 1.0 / math.sqrt(max(1, layer.in_features))
                for p in (layer.weight, layer.bias):
                    if p is None:
                        continue
                    vals = (torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1) \
                        * bound
                    p.copy_(vals.to(device=device, dtype=dtype))


def _materialise(module, device, dtype):
    """Give the parameters of ``module`` (built on the meta device) uninitialised memory of
    ``dtype`` on ``device``, as ``module.to_empty(device=device).to(dtype)`` does; returns
    ``module``. ``to_empty`` copies a meta tensor's layout through torch's Python reference
    implementations, whose first use imports SymPy (a large share of a small fit's time)."""
    for m in module.modules():
        for name, p in list(m.named_parameters(recurse=False)):
            setattr(m, name, torch.nn.Parameter(torch.empty(p.shape, device=device,
                                                            dtype=dtype),
                                                requires_grad=p.requires_grad))
    return module


def build_mlp(n_in: int, hidden_layer_sizes, n_out: int, *, activation="tanh",
              architecture="mlp", seed=0, device="cpu", dtype=torch.float64,
              output_bias=True) -> torch.nn.Sequential:
    """A multilayer perceptron ``n_in -> hidden... -> n_out`` with a linear output layer.

    Parameters
    ----------
    n_in, n_out : int
    hidden_layer_sizes : sequence of int
        Widths of the hidden layers (may be empty: a linear model).
    activation : str
        One of :data:`ACTIVATIONS`.
    architecture : {"mlp", "resnet"}
        ``"resnet"``: an input layer ``act(W x + b)`` followed by ``len(hidden) - 1``
        residual blocks ``h + act(W h + b)``; every hidden width must be equal.
    seed : int
        Seeds the initial weights (drawn on the host).
    output_bias : bool
        Whether the output layer has a bias.

    Returns
    -------
    torch.nn.Sequential
        Its last module is the output ``nn.Linear``.
    """
    hidden = [int(h) for h in hidden_layer_sizes]
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}.")
    if architecture not in ("mlp", "resnet"):
        raise ValueError(f"architecture must be 'mlp' or 'resnet', got {architecture!r}.")
    # built on the meta device (no random draws), then materialised and initialised here
    layers, width = [], n_in
    if architecture == "resnet" and hidden:
        if len(set(hidden)) != 1:
            raise ValueError("architecture='resnet' needs hidden layers of equal width, got "
                             f"hidden_layer_sizes={tuple(hidden)}.")
        layers += [torch.nn.Linear(n_in, hidden[0], device="meta"), ACTIVATIONS[activation]()]
        layers += [_Residual(hidden[0], activation, "meta") for _ in hidden[1:]]
        width = hidden[0]
    else:
        for h in hidden:
            layers += [torch.nn.Linear(width, h, device="meta"), ACTIVATIONS[activation]()]
            width = h
    layers.append(torch.nn.Linear(width, n_out, bias=output_bias, device="meta"))
    net = _materialise(torch.nn.Sequential(*layers), device, dtype)
    if torch.device(device).type != "meta":  # a plan's shapes only: nothing to draw
        _init_linear_(net, seed, dtype, device)
    # what rebuilds it (estimators persist this plan and the weights, not the module)
    net.mlp_plan = dict(n_in=int(n_in), hidden_layer_sizes=tuple(hidden), n_out=int(n_out),
                        activation=activation, architecture=architecture,
                        output_bias=bool(output_bias))
    return net


def mlp_to_state(net):
    """A :func:`build_mlp` network as plain values: ``{"mlp_plan": ..., "weights": {name:
    ndarray}}`` (None for any other module)."""
    plan = getattr(net, "mlp_plan", None)
    if plan is None:
        return None
    return {"mlp_plan": dict(plan, hidden_layer_sizes=list(plan["hidden_layer_sizes"])),
            "weights": {k: to_numpy(v).copy() for k, v in net.state_dict().items()}}


def mlp_from_state(state, device="cpu"):
    """Rebuild a network saved by :func:`mlp_to_state` (weights bit for bit).

    The plan is first built without memory (on the ``meta`` device) and its parameter shapes
    checked against the saved weights, so a file whose plan asks for more than its weights
    hold (a tampered or corrupted one) is refused before anything is allocated."""
    plan = dict(state["mlp_plan"])
    weights = state["weights"]
    dtype = torch.as_tensor(next(iter(weights.values()))).dtype
    args = (plan.pop("n_in"), plan.pop("hidden_layer_sizes"), plan.pop("n_out"))
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in build_mlp(*args, device="meta", dtype=dtype,
                                                            **plan).state_dict().items()}
    saved = {k: tuple(np.shape(v)) for k, v in weights.items()}
    if shapes != saved:
        bad = sorted(k for k in set(shapes) | set(saved) if shapes.get(k) != saved.get(k))
        raise ValueError(f"the saved network's plan does not match its weights ({bad[0]}: "
                         f"plan {shapes.get(bad[0])}, weights {saved.get(bad[0])}); the file "
                         "is corrupted or was altered.")
    net = build_mlp(*args, device="cpu", dtype=dtype, **plan)
    net.load_state_dict({k: torch.as_tensor(v) for k, v in weights.items()})
    return net.to(device)


def last_linear(module: torch.nn.Module):
    """The last ``nn.Linear`` registered in ``module`` (None when there is none)."""
    found = None
    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear):
            found = layer
    return found


# ============================================================================ training
@dataclass
class TrainResult:
    """Outcome of :meth:`NetworkTrainer.fit`.

    ``loss_curve`` holds the mean training loss of every epoch; ``validation_scores`` the
    validation score (lower is better) at each check, taken after epoch
    ``validation_epochs[i]``; ``best_epoch`` is the epoch whose state was kept (the last one
    without validation); ``lr_drops`` the epochs after which a plateau lowered the learning
    rate (``fit(plateau_drops=...)``).
    """

    n_epochs: int = 0
    n_steps: int = 0
    converged: bool = False
    stopped_early: bool = False
    message: str = ""
    best_epoch: int = 0
    best_score: float = math.inf
    loss_curve: list = field(default_factory=list)
    validation_scores: list = field(default_factory=list)
    validation_epochs: list = field(default_factory=list)
    lr_drops: list = field(default_factory=list)
    seconds: float = 0.0


class NetworkTrainer:
    """Gradient training of torch parameters on a per-batch loss.

    Parameters
    ----------
    loss_fn : callable
        ``loss_fn(rows, epoch) -> 0-d tensor``: the loss of the training rows ``rows`` (a
        long tensor of indices on ``device``) at ``epoch`` (0-based; for schedules such as KL
        annealing). It is minimised.
    decay_params : list of tensors
        Parameters that get ``weight_decay`` (the network weights).
    other_params : list of tensors
        Parameters without weight decay (noise, variational parameters ...).
    modules : list of torch.nn.Module
        Switched to ``train()`` for steps and ``eval()`` for validation; their buffers are
        part of the saved state.
    optimizer : {"adam", "adamw"}
    learning_rate, weight_decay : float
    grad_clip : float or None
        Clip the gradient norm of all parameters to this value.
    lr_milestones : sequence of int
        Epochs after which the learning rate is multiplied by ``lr_gamma``.
    extra_groups : sequence of (list of tensors, float)
        Further parameters (no weight decay) with their own base learning rate (FiD-GP's
        ``LAMBDA_LR``); the schedule scales them too.
    device : torch.device
    epoch_fn : callable or None
        ``epoch_fn(epoch)``, called before each epoch's steps (a loss captured as a CUDA
        graph reads its per-epoch values, such as a KL weight, from tensors that this sets).
    cuda_graph : NoiseTape or None
        On CUDA: run the steps as CUDA graphs, one per batch size, each captured after
        ``GRAPH_WARMUP`` eager steps of that size, with the step's host-drawn noise from
        this tape (the loss must draw all of its noise through it and must not depend on
        ``epoch`` except through ``epoch_fn``). A step of a network with thousands of small
        kernels is then one launch instead of thousands. If a capture fails, the steps stay
        eager (:attr:`graph_error` says why). Ignored on other devices.
    """

    #: Eager steps of a batch size before its step is captured (the optimiser's state and
    #: the libraries' handles are created by then, as CUDA graphs require).
    GRAPH_WARMUP = 3

    def __init__(self, loss_fn, decay_params, other_params=(), *, modules=(),
                 optimizer="adam", learning_rate=1e-3, weight_decay=0.0, grad_clip=None,
                 lr_milestones=(), lr_gamma=0.1, extra_groups=(), device="cpu",
                 epoch_fn=None, cuda_graph=None):
        self.device = torch.device(device)
        self.tape = cuda_graph if self.device.type == "cuda" else None
        self.epoch_fn = epoch_fn
        self.graph_error = None
        self.n_graph_steps = 0  # steps replayed from a graph
        self._graphs = {}  # batch size -> warm-up steps so far, or (graph, rows, loss, slot)
        self.loss_fn = loss_fn
        self.modules = list(modules)
        extra_groups = [(list(ps), float(lr)) for ps, lr in extra_groups]
        self.params = [p for p in list(decay_params) + list(other_params)
                       + [q for ps, _ in extra_groups for q in ps] if p.requires_grad]
        groups = [{"params": [p for p in decay_params if p.requires_grad],
                   "weight_decay": float(weight_decay), "lr": float(learning_rate)},
                  {"params": [p for p in other_params if p.requires_grad], "weight_decay": 0.0,
                   "lr": float(learning_rate)}]
        groups += [{"params": [p for p in ps if p.requires_grad], "weight_decay": 0.0,
                    "lr": lr} for ps, lr in extra_groups]
        groups = [g for g in groups if g["params"]]
        for g in groups:
            g["base_lr"] = g["lr"]
        if not groups:
            raise ValueError("NetworkTrainer: there are no trainable parameters.")
        # the multi-tensor Adam on every device: the same arithmetic as the per-tensor loop
        # (identical predictions), one kernel per group instead of one per parameter, which
        # is most of an optimiser step for the many small tensors of these networks
        kw = {"foreach": True}
        # a loss that writes the gradients of every trained parameter itself (a plain MLP's
        # squared error, ._mlp_grad) steps one flat buffer per group (._flat): the same
        # elementwise Adam, without the per-tensor overhead that is most of a small
        # network's step on the CPU (not with captured CUDA graphs)
        self._flats = []
        writes = getattr(loss_fn, "value_and_grad", None) is not None and (
            {id(p) for p in loss_fn.parameters()} == {id(p) for p in self.params})
        if writes and self.tape is None and all(
                FlatParameters.supports(g["params"]) for g in groups):
            self._flats = [FlatParameters(g["params"]) for g in groups]
            for g, f in zip(groups, self._flats):
                g["params"] = [f.buffer]
            kw = {"foreach": False}
        if self.tape is not None:
            # a captured step reads its learning rates from tensors that the schedule fills
            dtype = groups[0]["params"][0].dtype
            for g in groups:
                g["lr"] = torch.tensor(g["lr"], dtype=dtype, device=self.device)
            kw = {"capturable": True, "foreach": True}
        if optimizer == "adam":
            self.optimizer = make_optimizer(torch.optim.Adam, groups, lr=learning_rate, **kw)
        elif optimizer == "adamw":
            self.optimizer = make_optimizer(torch.optim.AdamW, groups, lr=learning_rate, **kw)
        else:
            raise ValueError(f"optimizer must be 'adam' or 'adamw', got {optimizer!r}.")
        # the flat buffers' update without the per-call overhead of ``step`` (same numbers)
        self._step = AdamStep(self.optimizer) if self._flats else self.optimizer.step
        self.base_lr = float(learning_rate)
        self.grad_clip = grad_clip
        self.lr_milestones = sorted(int(m) for m in lr_milestones)
        self.lr_gamma = float(lr_gamma)
        self.epoch = 0  # epochs run so far (persists across calls, e.g. partial_fit)
        self.n_steps = 0
        self.lr_scale = 1.0  # lowered by ``fit(plateau_drops=...)``

    # ------------------------------------------------------------------ state
    def _tensors(self):
        out = list(self.params)
        for m in self.modules:
            out += [b for b in m.buffers()]
        return out

    def snapshot(self):
        """A device copy of every parameter and buffer (cheap: no host transfer)."""
        return [t.detach().clone() for t in self._tensors()]

    def restore(self, snap):
        with torch.no_grad():
            for t, s in zip(self._tensors(), snap):
                t.copy_(s)

    def _set_mode(self, training):
        for m in self.modules:
            m.train(training)

    def _set_lr(self):
        drops = sum(1 for m in self.lr_milestones if self.epoch >= m)
        for g in self.optimizer.param_groups:
            lr = g["base_lr"] * self.lr_gamma ** drops * self.lr_scale
            if isinstance(g["lr"], torch.Tensor):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr

    # ------------------------------------------------------------------ steps
    def run_epoch(self, n_rows, batch_size, rng):
        """One pass of gradient steps over ``range(n_rows)`` in shuffled batches.

        The permutation is drawn on the host from ``rng`` (a NumPy ``RandomState``) and sent
        to the device once. Returns the epoch's mean loss as a 0-d device tensor (not
        synchronised).
        """
        self._set_mode(True)
        self._set_lr()
        if self.epoch_fn is not None:
            self.epoch_fn(self.epoch)
        bs = n_rows if batch_size is None else max(1, min(int(batch_size), n_rows))
        if bs >= n_rows:
            order = torch.arange(n_rows, device=self.device)
        else:
            order = torch.as_tensor(rng.permutation(n_rows), device=self.device)
        total = None
        for start in range(0, n_rows, bs):
            rows = order[start:start + bs]
            loss = self._graph_step(rows) if self.tape is not None else None
            if loss is None:
                loss = self._eager_step(rows)
            self.n_steps += 1
            part = loss.detach() * rows.shape[0]
            total = part if total is None else total + part
        self.epoch += 1
        return total / n_rows

    def _eager_step(self, rows):
        if self._flats:  # the gradients written into views of the buffers' gradients
            for f in self._flats:
                f.bind()
            loss = self.loss_fn.value_and_grad(rows, self.epoch)
        else:
            loss = self.loss_fn(rows, self.epoch)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
        if self.grad_clip is not None and self._flats:
            clip_grad_norm_(self._flats, self.params, self.grad_clip)
        elif self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self._step()
        return loss

    def _graph_step(self, rows):
        """One step replayed from the graph of its batch size (captured on first need);
        ``None`` when this step is to run eagerly (a warm-up step, or graphs failed)."""
        m = int(rows.shape[0])
        entry = self._graphs.get(m, 0)
        if isinstance(entry, int):
            if entry < self.GRAPH_WARMUP:  # eager, on a side stream (CUDA graphs' rule)
                if entry == self.GRAPH_WARMUP - 1:
                    self.tape.start_record()
                side = torch.cuda.Stream(device=self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side), _quiet_stream_mismatch():
                    loss = self._eager_step(rows)
                    self._step_counts_in_param_dtype()
                torch.cuda.current_stream(self.device).wait_stream(side)
                self.tape.mode = "eager"
                self._graphs[m] = entry + 1
                return loss
            try:
                entry = self._capture(rows)
            except Exception as exc:  # noqa: BLE001 - any failure: stay eager
                self.graph_error = f"{type(exc).__name__}: {exc}"
                self.tape.mode, self.tape = "eager", None
                self._graphs = {}
                return None
            self._graphs[m] = entry
        graph, static_rows, static_loss, slot = entry
        static_rows.copy_(rows)
        self.tape.refill(slot)
        graph.replay()
        self.n_graph_steps += 1
        return static_loss.detach().clone()

    def _step_counts_in_param_dtype(self):
        """A capturable Adam counts its steps in a float32 tensor, so its bias corrections
        (``1 - beta2 ** t``: 1.3e-5 relative error at the first step) would differ from the
        eager optimiser's double-precision ones; float64 parameters count in float64."""
        for p, st in self.optimizer.state.items():
            step = st.get("step")
            if isinstance(step, torch.Tensor) and step.dtype != p.dtype \
                    and p.dtype == torch.float64:
                st["step"] = step.to(p.dtype)

    def _capture(self, rows):
        static_rows = rows.clone()
        self.tape.start_capture(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), _quiet_stream_mismatch():
            # the gradients are already None, so its zero_grad launches nothing
            static_loss = self._eager_step(static_rows)
        slot = self.tape.end_capture()
        return graph, static_rows, static_loss, slot

    def fit(self, n_rows, *, batch_size=None, max_epochs=100, rng=None, validate=None,
            validation_interval=10, n_iter_no_change=10, tol=1e-4, sync_steps=10,
            min_epochs=0, plateau_drops=0, plateau_factor=0.1, plateau_patience=None,
            verbose=0, label="network", print_fn=None):
        """Train for at most ``max_epochs`` epochs over ``n_rows`` training rows.

        Parameters
        ----------
        n_rows : int
        batch_size : int or None
            ``None``: full batch (one step per epoch).
        max_epochs : int
        rng : numpy.random.RandomState
            Shuffles the rows.
        validate : callable or None
            ``validate() -> float`` (lower is better), called in eval mode every
            ``validation_interval`` epochs. The best state is restored at the end, and
            training stops when the score has not improved for ``n_iter_no_change`` epochs
            (``None``: never; all ``max_epochs`` run).
            Without it, training stops when the mean training loss has not improved by
            ``tol * max(1, |loss|)`` for ``n_iter_no_change`` epochs.
        sync_steps : int
            Minimum number of gradient steps between two reads of the losses on the host.
        plateau_drops : int
            With ``validate``: the first ``plateau_drops`` times the score has not improved
            for ``n_iter_no_change`` epochs, the best state so far is restored and every
            learning rate is multiplied by ``plateau_factor`` instead of stopping (a
            reduce-on-plateau schedule); the next plateau stops.
        plateau_factor : float
        plateau_patience : int or None
            Epochs without improvement that make a plateau once the rate has been lowered
            (a lower rate settles sooner); ``None``: ``n_iter_no_change``, as before the
            first drop.
        min_epochs : int
            The training-loss stopping rule only counts epochs after this many (a loss whose
            terms change with the epoch, such as an annealed KL, is compared only once the
            schedule is over).
        verbose : int
            ``1``: a progress line about every :data:`REPORT_EPOCHS` epochs (a progress bar
            instead when ``tqdm`` is installed and stderr is a terminal), a line at each
            learning-rate drop and a last line saying why training stopped; ``>= 2``: a
            progress line at each validation (or every ``validation_interval`` epochs).

        Returns
        -------
        TrainResult

        Raises
        ------
        TrainingDivergedError
            When a loss is NaN or inf; the parameters are then restored to the last state
            whose losses were all finite.
        """
        try:
            rng = rng if rng is not None else np.random.RandomState(0)
            print_fn = print_fn or (lambda msg: print(msg, flush=True))
            res = TrainResult()
            bs = n_rows if batch_size is None else max(1, min(int(batch_size), n_rows))
            steps_per_epoch = math.ceil(n_rows / bs)
            sync_every = max(1, math.ceil(sync_steps / steps_per_epoch))
            interval = max(1, int(validation_interval))
            # ``None``: no stopping rule, every one of ``max_epochs`` epochs runs (a schedule)
            patience = math.inf if n_iter_no_change is None else max(1, int(n_iter_no_change))
            after_drop = patience if plateau_patience is None else max(1, int(plateau_patience))
            bar = _progress_bar(max_epochs, label) if verbose else None
            # the epochs that print a progress line: ones that validate (or sync the losses)
            every = interval if validate is not None else math.lcm(interval, sync_every)
            if verbose < 2:
                every *= math.ceil(REPORT_EPOCHS / every)
            t0 = time.perf_counter()
            last_good = self.snapshot()
            best_state = None
            best_loss, since_best, pending, start_epoch = math.inf, 0, [], self.epoch
            drops_left, last_drop = (int(plateau_drops) if validate is not None else 0), 0
            wait = patience  # the stopping rule's current patience (shorter after a drop)
            for k in range(1, max_epochs + 1):
                pending.append(self.run_epoch(n_rows, bs, rng))
                check_val = validate is not None and (k % interval == 0 or k == max_epochs)
                if not (check_val or k % sync_every == 0 or k == max_epochs):
                    continue
                losses = to_numpy(torch.stack(pending)).tolist()  # the only host read
                pending = []
                if not all(math.isfinite(v) for v in losses):
                    bad = k - len(losses) + next(i for i, v in enumerate(losses)
                                                 if not math.isfinite(v)) + 1
                    self.restore(last_good)
                    self._set_mode(False)
                    raise TrainingDivergedError(
                        f"{label}: the training loss became non-finite at epoch "
                        f"{start_epoch + bad}; the parameters were restored to their last finite "
                        "state. Lower learning_rate, scale the inputs and targets, or raise the "
                        "noise lower bound.")
                res.loss_curve.extend(losses)
                last_good = self.snapshot()
                stop = False
                if check_val:
                    self._set_mode(False)
                    with torch.no_grad():
                        score = float(validate())
                    if not math.isfinite(score):
                        score = math.inf
                    res.validation_scores.append(score)
                    res.validation_epochs.append(k)
                    if score < res.best_score:
                        res.best_score, res.best_epoch = score, k
                        best_state = last_good
                    wait = patience if not res.lr_drops else after_drop
                    stop = k - max(res.best_epoch, last_drop) >= wait
                    if stop and drops_left > 0:
                        # a plateau: go back to the best state and go on with a lower rate
                        drops_left, last_drop, stop = drops_left - 1, k, False
                        self.lr_scale *= float(plateau_factor)
                        res.lr_drops.append(k)
                        if best_state is not None:
                            self.restore(best_state)
                            last_good = best_state
                        if verbose and bar is None:
                            print_fn(f"[{label}] epoch {k:5d}  no improvement for {wait} "
                                     f"epochs: learning rate x{plateau_factor:g}, back to "
                                     f"epoch {res.best_epoch} (val {res.best_score: .5g})")
                elif validate is None:
                    first = k - len(losses) + 1
                    for j, v in enumerate(losses):
                        if first + j <= min_epochs:
                            best_loss, since_best = math.inf, 0
                            continue
                        if v < best_loss - tol * max(1.0, abs(best_loss) if math.isfinite(best_loss)
                                                     else 1.0):
                            best_loss, since_best = v, 0
                        else:
                            since_best += 1
                    stop = since_best >= patience
                if verbose:
                    msg = (f"[{label}] epoch {k:5d}  loss {losses[-1]: .5g}"
                           + (f"  val {res.validation_scores[-1]: .5g}" if check_val else "")
                           + f"  {(time.perf_counter() - t0) / k * 1e3:.1f} ms/epoch")
                    if bar is not None:
                        bar.update(k - bar.n)
                        bar.set_postfix_str(msg.split("] ", 1)[1])
                    elif k % every == 0:
                        print_fn(msg)
                if stop:
                    res.stopped_early = True
                    break
            if bar is not None:
                bar.close()
            res.n_epochs = k
            res.n_steps = self.n_steps
            res.converged = res.stopped_early
            if validate is not None and best_state is not None:
                self.restore(best_state)
            else:
                res.best_epoch = k
            self._set_mode(False)
            res.message = (f"stopped after {k} epochs: no improvement for {wait} epochs"
                           if res.stopped_early else f"reached max_iter={max_epochs} epochs")
            res.seconds = time.perf_counter() - t0
            if verbose:
                kept = (f"; kept epoch {res.best_epoch} (val {res.best_score: .5g})"
                        if validate is not None and best_state is not None else "")
                why = (f"ran its {k} epochs (a fixed schedule: no stopping rule)"
                       if math.isinf(patience) else res.message)
                print_fn(f"[{label}] {why}{kept}; {res.seconds:.1f} s")
            return res
        finally:
            for f in self._flats:  # the modules get their own memory back
                f.release()


@contextlib.contextmanager
def _quiet_stream_mismatch():
    """Silence autograd's note that a leaf's gradient accumulator was made on another stream.

    The warm-up steps run on side streams and the capture on its own stream, as CUDA graphs
    require, while the last step's autograd graph is still referenced; autograd then warns
    (seen on an H100). The gradients are right (the graphed fits match the eager
    ones) and the capture succeeds, so the note is noise to the user.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore",
                                message="The AccumulateGrad node's stream does not match")
        yield


def _progress_bar(total, label):
    """A tqdm bar on an interactive stderr, else None (progress lines are printed)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=label, unit="epoch", leave=False)
