"""Parameters stored as views of one flat buffer, so an optimiser steps one tensor.

Adam's arithmetic is elementwise, so a step over one buffer that holds every parameter gives
the same numbers as a step over the parameters one by one, with one set of kernel launches
instead of one per tensor: for the small networks trained here the per-tensor overhead, not
the arithmetic, is what a step costs on the CPU.
"""

from __future__ import annotations

import torch


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
    multiplication per buffer."""
    norms = [torch.linalg.vector_norm(p.grad) for p in params]
    total = torch.linalg.vector_norm(torch.stack(norms))
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for flat in flats:
        flat.buffer.grad.mul_(factor)
