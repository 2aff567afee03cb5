"""Parameters stored as views of one flat buffer, so an optimiser steps one tensor.

Adam's arithmetic is elementwise, so a step over one buffer that holds every parameter gives
the same numbers as a step over the parameters one by one, with one set of kernel launches
instead of one per tensor: for the small networks trained here the per-tensor overhead, not
the arithmetic, is what a step costs on the CPU. For the same reason :class:`AdamStep` calls
torch's functional Adam directly rather than through ``Optimizer.step``.
"""

from __future__ import annotations

import importlib
import inspect

import torch

from ._eager_optim import optimizer_class


class FlatParameters:
    """Make ``params`` views of one buffer (:attr:`buffer`, a leaf tensor) and their
    ``.grad`` views of :attr:`buffer`'s gradient, so that what writes a parameter's gradient
    in place writes the buffer's.

    :meth:`bind` does this (again after :meth:`release`, copying the parameters' current
    values in); :meth:`release` gives each parameter its own memory back and drops the
    gradients, so a fitted module holds nothing of the training.
    """

    def __init__(self, params):
        self.params = list(params)
        self.buffer = torch.nn.Parameter(torch.cat([p.detach().reshape(-1)
                                                    for p in self.params]))
        self.buffer.grad = torch.zeros_like(self.buffer)
        self.bound = False
        self.bind()

    @staticmethod
    def supports(params):
        """Whether ``params`` (a non-empty list of tensors) share a dtype and a device."""
        return bool(params) and len({(p.dtype, p.device) for p in params}) == 1

    def bind(self):
        if self.bound:
            return
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                view = self.buffer.data[offset:offset + n].view_as(p)
                view.copy_(p.detach())
                p.data = view
                p.grad = self.buffer.grad[offset:offset + n].view_as(p)
                offset += n
        self.bound = True

    def release(self):
        if not self.bound:
            return
        for p in self.params:
            p.data = p.data.clone()
            p.grad = None
        self.bound = False


def clip_grad_norm_(flats, params, max_norm):
    """Scale the gradient of ``params`` (bound to ``flats``) to norm at most ``max_norm`` as
    :func:`torch.nn.utils.clip_grad_norm_` does: the norm of the per-parameter norms, in the
    order of ``params``, and the factor ``min(1, max_norm / (norm + 1e-6))`` (on the CPU the
    per-tensor norms are the ones it takes, so the numbers are the same), applied with one
    multiplication per buffer.

    On the CPU the buffers' norm is read first: below the bound by a margin far wider than
    the rounding between the two ways of summing, the factor is exactly 1 and nothing is
    done (most steps of a training; the same numbers, a third of the operations)."""
    if all(f.buffer.grad.device.type == "cpu" for f in flats):
        quick = torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(f.buffer.grad) for f in flats])) if len(flats) > 1 \
            else torch.linalg.vector_norm(flats[0].buffer.grad)
        if float(quick) < (1.0 - 1e-6) * max_norm - 1e-6:
            return
    norms = [torch.linalg.vector_norm(p.grad) for p in params]
    total = torch.linalg.vector_norm(torch.stack(norms))
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for flat in flats:
        flat.buffer.grad.mul_(factor)


def _functional_adam():
    """torch's functional Adam (``torch.optim.adam.adam``, which ``Adam.step`` and
    ``AdamW.step`` call) when it takes the group options used below, else None."""
    try:
        fn = importlib.import_module("torch.optim.adam").adam
        names = set(inspect.signature(fn).parameters)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    need = {"foreach", "capturable", "differentiable", "fused", "has_complex",
            "decoupled_weight_decay", "amsgrad", "beta1", "beta2", "lr", "weight_decay",
            "eps", "maximize"}
    return fn if need <= names else None


class AdamStep:
    """``optimizer.step()`` for an Adam or AdamW over flat buffers (one tensor per group,
    no amsgrad, capturable, differentiable, fused or foreach option): the functional update
    that ``step`` itself calls, on the same state tensors with the group's current options,
    so the same numbers, without ``step``'s per-call bookkeeping (its profiler hook, grad
    mode and group gathering: most of an optimiser step of a small network); torch's
    optimiser hooks therefore do not see these steps. The first call, which creates the
    state, and any other optimiser go through ``step``."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.fn = _functional_adam() if optimizer_class(optimizer) in (
            torch.optim.Adam, torch.optim.AdamW) else None
        plain = all(len(g["params"]) == 1 and not any(
            g.get(k) for k in ("amsgrad", "capturable", "differentiable", "fused", "foreach",
                               "maximize"))
            and "decoupled_weight_decay" in g for g in optimizer.param_groups)
        if not plain:
            self.fn = None

    def __call__(self):
        opt = self.optimizer
        states = [opt.state.get(g["params"][0]) for g in opt.param_groups]
        if self.fn is None or not all(states) or any(
                g["params"][0].grad is None for g in opt.param_groups):
            opt.step()
            return
        with torch.no_grad():
            for g, st in zip(opt.param_groups, states):
                p = g["params"][0]
                beta1, beta2 = g["betas"]
                self.fn([p], [p.grad], [st["exp_avg"]], [st["exp_avg_sq"]], [],
                        [st["step"]], foreach=False, capturable=False, differentiable=False,
                        fused=False, has_complex=False,
                        decoupled_weight_decay=g["decoupled_weight_decay"], amsgrad=False,
                        beta1=beta1, beta2=beta2, lr=g["lr"],
                        weight_decay=g["weight_decay"], eps=g["eps"], maximize=False)
