"""The hyperparameters of the mixed-activation GP as one raw vector, its MAP hyperpriors and
the kernel function the backend's GP strategies call.

The raw vector is ``theta = [log sigma_b2, log sigma_v2, log sigma_u2, log sigma_a2,
log noise_variance, logit(leaky_slope)?, M - 1 mixture logits]``: the variances are optimised
as logarithms, the LeakyReLU slope (present only with a ``"leaky_relu"`` component) through a
sigmoid and the weights as ``softmax([logits, 0])`` (``M = 2``: ``w = sigmoid(logit)``), so
that the slope and the weights stay strictly inside (0, 1) and the simplex.

The hyperpriors of the paper's MAP objective (its eq. 20) are inverse-gamma ``(a, b)`` on the
five variances, beta ``(a, b)`` on the slope and Dirichlet ``a`` on the weights, evaluated in
the original coordinates (no Jacobian terms).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._backend import as_tensor, iter_slices, to_float
from ._mixture import mixed_activation_kernel

#: Positive hyperparameters, optimised as logarithms (first entries of ``theta``).
VARIANCES = ("sigma_b2", "sigma_v2", "sigma_u2", "sigma_a2", "noise_variance")

#: Hyperpriors (ours; the paper gives none): InvGamma(a, b) for the variances, Beta(a, b) for
#: the slope, Dirichlet(a, ..., a) for the weights.
DEFAULT_PRIORS = {"sigma_b2": (2.0, 1.0), "sigma_v2": (2.0, 1.0), "sigma_u2": (2.0, 1.0),
                  "sigma_a2": (2.0, 1.0), "noise_variance": (2.0, 0.1),
                  "leaky_slope": (2.0, 2.0), "weights": 2.0}


def logit(p):
    """``log(p / (1 - p))`` of a float in (0, 1)."""
    return math.log(p) - math.log1p(-p)


def mixture_kernel(acts, p, X1, X2=None, diag=False):
    """``kernel(params, X1, X2, diag)`` of the backend's GP strategies (bind ``acts`` with
    :func:`functools.partial`): the mixture kernel at the unpacked parameters ``p``."""
    return mixed_activation_kernel(
        X1, X2, sigma_b2=p["sigma_b2"], sigma_v2=p["sigma_v2"], sigma_u2=p["sigma_u2"],
        sigma_a2=p["sigma_a2"], leaky_slope=p["leaky_slope"], weights=p["weights"],
        activations=acts, diag=diag)


class MixtureLayout:
    """The raw vector ``theta`` of the mixed-activation GP with activations ``activations``."""

    def __init__(self, activations):
        self.acts = tuple(activations)
        self.has_leaky = "leaky_relu" in self.acts
        self.names = list(VARIANCES) + (["leaky_slope"] if self.has_leaky else []) + [
            f"weight_logit_{m}" for m in range(len(self.acts) - 1)]
        self.start = len(VARIANCES) + self.has_leaky  # first mixture logit

    def unpack(self, raw):
        """Dict of the kernel's and the noise's parameters (tensors) at ``raw``."""
        p = {h: torch.exp(raw[i]) for i, h in enumerate(VARIANCES)}
        p["leaky_slope"] = torch.sigmoid(raw[5]) if self.has_leaky else 0.5
        p["weights"] = torch.softmax(torch.cat([raw[self.start:], raw.new_zeros(1)]), 0)
        return p

    def pack(self, values, weights):
        """The raw vector (list of floats) of the variances and slope in ``values`` and the
        mixture ``weights``."""
        raw = [math.log(values[h]) for h in VARIANCES]
        if self.has_leaky:
            raw.append(logit(values["leaky_slope"]))
        raw += [math.log(w / weights[-1]) for w in weights[:-1]]
        return raw

    def to_tensor(self, values, weights, device, dtype):
        return as_tensor(np.array(self.pack(values, weights)), device, dtype)

    def mean_prior_variance(self, kernel, values, weights, X, block=2**16, row_weights=None):
        """``mean_i k(x_i, x_i)`` of the kernel at ``values`` and ``weights`` (noise aside)
        over the rows of the tensor ``X``, in row blocks: the scale of rule (25).
        ``row_weights`` (a tensor) makes it the weighted mean over the rows."""
        p = self.unpack(self.to_tensor(dict(values, noise_variance=1.0), weights, X.device,
                                       X.dtype))
        diag = torch.cat([kernel(p, X[sl], diag=True) for sl in iter_slices(X.shape[0], block)])
        if row_weights is not None:
            return to_float((diag * row_weights).sum() / row_weights.sum())
        return to_float(diag.mean())

    def box(self, bounds, like):
        """Indices of the free entries of ``theta`` and their box ``(low, high)`` (tensors
        like ``like``) in the optimised coordinates, from ``bounds``: a dict of
        ``(low, high)`` or ``"fixed"`` for each variance, ``"leaky_slope"`` and
        ``"weights"`` (the weights' pair boxes each mixture logit to ``(logit(low),
        logit(high))``)."""
        lo, hi, free = [], [], []
        for i, name in enumerate(self.names):
            key = name if name in VARIANCES or name == "leaky_slope" else "weights"
            b = bounds[key]
            if b == "fixed":
                continue
            free.append(i)
            tr = math.log if key in VARIANCES else logit
            lo.append(tr(b[0]))
            hi.append(tr(b[1]))
        t = lambda v: torch.tensor(v, dtype=like.dtype, device=like.device)  # noqa: E731
        return free, (t(lo), t(hi))

    def prior(self, raw, priors):
        """Prior terms of the MAP objective (20), in the original coordinates (no Jacobian).

        ``priors`` maps hyperparameter names to ``(a, b)`` (``"weights"``: a concentration,
        scalar or one per activation); an absent or None entry is a flat prior.
        """
        out = raw.new_zeros(())
        for i, h in enumerate(VARIANCES):
            if priors.get(h) is not None:
                a, b = priors[h]
                out = out + (a + 1.0) * raw[i] + b * torch.exp(-raw[i])
        if self.has_leaky and priors.get("leaky_slope") is not None:
            a, b = priors["leaky_slope"]
            r = raw[5]
            out = out - (a - 1.0) * torch.nn.functional.logsigmoid(r) \
                - (b - 1.0) * torch.nn.functional.logsigmoid(-r)
        if len(self.acts) > 1 and priors.get("weights") is not None:
            conc = torch.as_tensor(np.broadcast_to(priors["weights"], len(self.acts)).copy(),
                                   dtype=raw.dtype, device=raw.device)
            logw = torch.log_softmax(torch.cat([raw[self.start:], raw.new_zeros(1)]), 0)
            out = out - ((conc - 1.0) * logw).sum()
        return out

    def penalty(self, priors):
        """``penalty(theta) -> (value, gradient)`` of :meth:`prior` for the optimiser."""
        def penalty(th):
            rl = th.detach().requires_grad_(True)
            pr = self.prior(rl, priors)
            grad = torch.autograd.grad(pr, rl)[0] if pr.requires_grad else torch.zeros_like(th)
            return pr.detach(), grad
        return penalty
