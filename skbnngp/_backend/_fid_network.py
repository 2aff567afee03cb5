"""A FiD-GP network as a whole: its size, its construction from a plan, its saved state, the
annealed ELBO it is trained by, and its predictive draws.

The layers themselves (the inducing-weight prior, posterior and KL) are in :mod:`._inducing`.
A *plan* is a plain dict (widths, per-layer inducing shapes and flows, the layer settings)
that rebuilds the same network, so a fitted model pickles as its plan and NumPy weights.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from ._chunks import iter_slices
from ._device import as_tensor, to_float, to_numpy
from ._inducing import FiDNetwork, InducingLinear
from ._random import make_generator
from ._train import ACTIVATIONS, build_mlp

#: Rows per block at prediction.
PREDICT_ROWS = 4096


# ---------------------------------------------------------------------- size and plan
def layer_parameter_count(d_out, d_in, rows, cols, flow_hidden=16, flow=True, flow_length=1):
    """Trainable parameters of one FiD-GP layer (``d_in`` counts the bias column).

    ``R d_out + C d_in + 2 R C + R + C + 1`` plus ``3 C H + 2 C + 4 H^2 + 5 H`` for a flow
    (``50 C + 1104`` at ``H = 16``). The authors' code has ``R + C`` more (the omitted
    ``z_row_rho``/``z_col_rho`` jitter).
    """
    n = rows * d_out + cols * d_in + 2 * rows * cols + rows + cols + 1
    if flow and cols >= 2:
        H = flow_hidden
        n += flow_length * (3 * cols * H + 2 * cols + 4 * H * H + 5 * H)
    return n


def train_batch_size(batch_size, n):
    """Rows per step: ``batch_size``, or for ``"auto"`` ``min(n, max(100, ceil(n / 8)))``."""
    if batch_size == "auto":
        return min(n, max(100, -(-n // 8)))
    return batch_size


def layer_shapes(widths, chosen, rows, cols, flow_length, budget, flow_on_output,
                 flow_hidden):
    """Inducing shape ``(R, C)`` and flow flag of each linear layer between ``widths``
    (None for the layers outside ``chosen``): ``R, C`` capped by the layer's size and, with
    a ``budget`` (a fraction of the dense layer's weights), shrunk to it by
    :func:`shrink_to_budget` (the output layer keeps its rank)."""
    n_lin = len(widths) - 1
    shapes, flows = [], []
    for i in range(n_lin):
        if i not in chosen:
            shapes.append(None)
            flows.append(None)
            continue
        d_out, d_in = widths[i + 1], widths[i] + 1
        R, C = min(rows, d_out), min(cols, d_in)
        flow = flow_length > 0 and (i < n_lin - 1 or flow_on_output)
        if budget is not None:
            R, C, flow = shrink_to_budget(d_out, d_in, R, C, flow, budget * d_out * d_in,
                                          flow_hidden=flow_hidden, flow_length=flow_length,
                                          min_rank=R if i == n_lin - 1 else 1)
        shapes.append((R, C))
        flows.append(bool(flow))
    return shapes, flows


def shrink_to_budget(d_out, d_in, R, C, flow, limit, *, flow_hidden, flow_length, min_rank=1):
    """``(R, C, flow)`` for a layer of at most ``limit`` parameters: the largest ``R`` (the
    rank of the layer's weights) down to ``min_rank``, keeping ``R < C`` where it was
    (``R <= C`` otherwise), then the flow when it fits at that ``R``, then the largest
    ``C``. When nothing fits, the smallest layer of rank ``min_rank``: ``C`` just above it
    and no flow. Rank goes last because a low-rank logit map cannot separate the classes
    (a 1 x 1 output layer left digits at accuracy 0.19)."""
    strict = R < C

    def fits(r, c, f):
        return layer_parameter_count(d_out, d_in, r, c, flow_hidden, f, flow_length) <= limit

    for r in range(R, min_rank - 1, -1):
        lo = r + 1 if strict else r
        for f in ([True, False] if flow else [False]):
            for c in range(C, lo - 1, -1):
                if fits(r, c, f):
                    return r, c, f
    return min_rank, min(C, min_rank + 1 if strict else min_rank), False


def build_network(plan, seed, device, dtype):
    """The :class:`~._inducing.FiDNetwork` of ``plan`` (initial values seeded by ``seed``,
    drawn on the host in float64)."""
    widths, shapes = plan["widths"], plan["shapes"]
    layers = []
    for i in range(len(widths) - 1):
        if shapes[i] is None:
            layers.append(build_mlp(widths[i], (), widths[i + 1], seed=seed + 17 * i,
                                    device="cpu", dtype=torch.float64)[0])
            continue
        layers.append(InducingLinear(
            widths[i], widths[i + 1], shapes[i][0], shapes[i][1],
            flow_length=plan["flow_length"] if plan["flows"][i] else 0,
            flow_hidden=plan["flow_hidden"], flow_dropout=plan["flow_dropout"],
            flow_spectral_norm=plan["flow_spectral_norm"], prior_sd=plan["prior_sd"],
            init_lambda=plan["init_lambda"], max_lambda=plan["max_lambda"],
            learn_lambda=plan["learn_lambda"], init_sd_u=plan["init_sd_u"],
            max_sd_u=plan["max_sd_u"], z_init=plan["z_init"], seed=seed + 17 * i))
    net = FiDNetwork(layers, ACTIVATIONS[plan["activation"]]())
    return net.to(device=device, dtype=dtype)


def network_state(net):
    """A network's state as NumPy arrays (what pickles: no live device tensor)."""
    return {k: to_numpy(v).copy() for k, v in net.state_dict().items()}


def check_network_state(plan, state):
    """Refuse a saved ``plan`` that asks for more than the saved weights ``state`` hold.

    Every size the plan gives (the widths, each layer's inducing shape ``R x C``, the flows'
    length and width) is read against the shapes of the saved arrays, without building
    anything, so a tampered or corrupted file that plans 6000-wide layers over small weights
    is refused before any tensor is made (the network is built only once its sizes match the
    file's own arrays). Raises a ValueError naming ``model_plan_`` and the first mismatch.
    """
    def refuse(what):
        raise ValueError(f"the saved model_plan_ does not match the saved weights ({what}); "
                         "the file is corrupted or was altered.")

    def count(x):
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1

    widths, shapes, flows = plan.get("widths"), plan.get("shapes"), plan.get("flows")
    if not (isinstance(widths, (list, tuple)) and len(widths) >= 2
            and all(count(w) for w in widths)):
        refuse(f"widths={widths!r} is not a list of positive integers")
    n_lin = len(widths) - 1
    if not (isinstance(shapes, (list, tuple)) and isinstance(flows, (list, tuple))
            and len(shapes) == n_lin and len(flows) == n_lin):
        refuse(f"shapes and flows need {n_lin} entries, one per linear layer")
    saved = {k: tuple(np.shape(v)) for k, v in state.items()}
    H, length = plan.get("flow_hidden"), plan.get("flow_length")
    for i in range(n_lin):
        d_in, d_out = int(widths[i]) + 1, int(widths[i + 1])
        if shapes[i] is None:
            expect = {f"layers.{i}.weight": (d_out, d_in - 1), f"layers.{i}.bias": (d_out,)}
        else:
            if not (isinstance(shapes[i], (list, tuple)) and len(shapes[i]) == 2
                    and all(count(r) for r in shapes[i])
                    and shapes[i][0] <= d_out and shapes[i][1] <= d_in):
                refuse(f"layer {i}'s inducing shape {shapes[i]!r} does not fit its "
                       f"{d_out} x {d_in} weights")
            R, C = (int(r) for r in shapes[i])
            expect = {f"layers.{i}.z_row": (R, d_out), f"layers.{i}.z_col": (C, d_in),
                      f"layers.{i}.v_mean": (R, C)}
            steps = sum(1 for k in saved
                        if k.startswith(f"layers.{i}.flow.steps.") and k.endswith(".order"))
            planned = int(length) if flows[i] and count(length) and C >= 2 else 0
            if steps != planned:
                refuse(f"layer {i}: the plan has {planned} flow steps, the weights {steps}")
            if planned:
                if not count(H):
                    refuse(f"flow_hidden={H!r} is not a positive integer")
                expect[f"layers.{i}.flow.steps.0.hyper.0.bias"] = (int(H),)
        for key, shape in expect.items():
            if saved.get(key) != shape:
                refuse(f"{key}: plan {shape}, weights {saved.get(key)}")


def network_from_state(plan, state, device, dtype):
    """The network of ``plan`` with the weights saved by :func:`network_state`, once
    :func:`check_network_state` has read the plan's sizes against the weights."""
    check_network_state(plan, state)
    net = build_network(plan, 0, "cpu", dtype)
    net.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    return net.to(device=device, dtype=dtype)


# ---------------------------------------------------------------------- training
def kl_factor(epoch, max_iter, ml_frac, anneal_frac, weight):
    """KL weight ``kappa`` at ``epoch`` (0-based): 0 for the first ``ml_frac`` of the epochs,
    then a linear ramp over ``anneal_frac`` of them up to ``weight``."""
    ml = int(round(ml_frac * max_iter))
    ramp = int(round(anneal_frac * max_iter))
    if epoch < ml:
        return 0.0
    if ramp <= 0:
        return float(weight)
    return float(weight) * min(1.0, (epoch - ml) / ramp)


class AnnealedELBO:
    """The training loss of a FiD-GP network: the (weighted, label-smoothed) cross-entropy of
    a batch under one weight draw plus ``kappa KL / n``, ``kappa`` set per epoch by
    :meth:`set_kappa`. ``class_weight`` weighs the classes as ``torch``'s cross-entropy
    does; ``row_weights`` (mean 1, class weights folded in) weigh the rows instead, with
    ``n`` the rows' frequency sum.

    ``graphs``: the step is captured as a CUDA graph, so the KL is always computed and
    ``kappa`` is read from a device tensor (one graph serves every epoch's weight).
    """

    def __init__(self, net, Xt, yt, gen, *, class_weight=None, label_smoothing=0.0,
                 sampling="matheron", graphs=False, row_weights=None, n=None):
        self.net, self.Xt, self.yt, self.gen = net, Xt, yt, gen
        self.n = Xt.shape[0] if n is None else n
        # per-row weights of mean 1 (sample and class weights multiplied): the batch loss is
        # the mean of the weighted cross-entropies, an unbiased estimate of the weighted mean
        self.rw = None if row_weights is None else as_tensor(row_weights, Xt.device, Xt.dtype)
        self.cw = None if class_weight is None else as_tensor(class_weight, Xt.device,
                                                               Xt.dtype)
        self.label_smoothing, self.sampling, self.graphs = label_smoothing, sampling, graphs
        self.kappa = 0.0
        self.kappa_t = torch.zeros((), dtype=Xt.dtype, device=Xt.device) if graphs else None

    def set_kappa(self, kappa):
        self.kappa = float(kappa)
        if self.graphs:
            self.kappa_t.fill_(kappa)

    def __call__(self, rows, epoch):
        net = self.net
        xb, yb = self.Xt[rows], self.yt[rows]
        logits = net.apply(xb, net.sample_weights(self.gen, self.sampling))
        if self.rw is None:
            out = F.cross_entropy(logits, yb, weight=self.cw,
                                  label_smoothing=self.label_smoothing)
        else:
            out = (self.rw[rows] * F.cross_entropy(logits, yb, reduction="none",
                                                   label_smoothing=self.label_smoothing)).mean()
        if self.kappa > 0 or self.graphs:
            out = out + (self.kappa_t if self.graphs else self.kappa) * net.kl() / self.n
        return out


def lambdas(net):
    """The conditional-noise scale ``lambda`` of each FiD-GP layer."""
    return [to_float(layer.lam()) for _, layer in net.inducing_layers()]


def network_kl(net, seed, sampling):
    """The KL of one posterior draw (seeded by ``seed``) of every FiD-GP layer."""
    with torch.no_grad():
        net.sample_weights(make_generator(seed, "cpu"), sampling)
        return to_float(net.kl())


# ---------------------------------------------------------------------- prediction
def draw_weights(net, n_samples, seed, sampling):
    """``n_samples`` draws of every layer's weights (seeded by ``seed``), each a list of
    (out, in + 1) matrices: what :func:`draw_logits` and :func:`mean_probs` apply. The draws
    do not depend on the inputs, so one set serves any number of predictions."""
    gen = make_generator(seed, "cpu")
    with torch.no_grad():
        return [net.sample_weights(gen, sampling) for _ in range(n_samples)]


def draw_logits(net, Xt, draws):
    """Logits of ``Xt`` under each weight draw of ``draws`` (:func:`draw_weights`): a
    float64 (S, n, K) tensor."""
    with torch.no_grad():
        out = [torch.cat([net.apply(Xt[sl], W)
                          for sl in iter_slices(Xt.shape[0], PREDICT_ROWS)], dim=0)
               for W in draws]
    return torch.stack(out).to(torch.float64)


def mean_probs(net, Xt, draws, temperature):
    """``softmax(logits / T)`` averaged over the weight draws ``draws`` (:func:`draw_weights`),
    row block by row block: a float64 (n, K) tensor, or None when a value is not finite.
    Memory is one block's logits, not the (S, n, K) stack."""
    out = []
    with torch.no_grad():
        for sl in iter_slices(Xt.shape[0], PREDICT_ROWS):
            total = None
            for W in draws:
                p = torch.softmax(net.apply(Xt[sl], W).to(torch.float64) / temperature, dim=1)
                total = p if total is None else total + p
            out.append(total / len(draws))
    probs = torch.cat(out, dim=0)
    return probs if bool(torch.isfinite(probs).all()) else None


def tempered_softmax(logits, temperature):
    """``softmax(logits / T)`` over the last axis, or None when a value is not finite."""
    probs = torch.softmax(logits / temperature, dim=2)
    return probs if bool(torch.isfinite(probs).all()) else None


def entropy_split(P):
    """Entropy of the averaged predictive of the draws ``P`` (S, n, K), the mean entropy of
    the draws (aleatoric) and their difference, the mutual information (epistemic, >= 0),
    in nats: a dict of (n,) arrays."""
    tiny = np.finfo(np.float64).tiny
    mean = P.mean(axis=0)
    H = -(mean * np.log(np.maximum(mean, tiny))).sum(axis=1)
    EH = -(P * np.log(np.maximum(P, tiny))).sum(axis=2).mean(axis=0)
    return {"entropy": H, "expected_entropy": EH,
            "mutual_information": np.maximum(H - EH, 0.0)}
