"""Last-layer features and per-sample parameter Jacobians of a network, streamed in chunks.

For a network whose last ``nn.Linear`` (the *head*) produces a scalar output ``f(x)``:

* :func:`head_features` runs the network once and returns ``f(x)`` and the head's gradient
  features ``phi_r(x) = (a(x), 1)`` (the head's input, plus 1 for its bias), read by a
  forward hook;
* :func:`body_jacobians` yields, chunk by chunk, the per-sample gradients of ``f`` with
  respect to every other trainable parameter (``phi_m(x)``), written by hand for a plain
  MLP (:func:`~._mlp_grad.per_sample_body_gradients`) and computed with ``torch.func``
  (``vmap`` over ``grad`` of a ``functional_call``) for any other network, so memory never
  grows as n x (number of parameters);
* :class:`GaussianSketch` multiplies such gradients by a seeded Gaussian matrix
  ``P`` (m x q, entries N(0, 1/q)) that is regenerated block by block and never stored.

Rich-BLL (and a BLL head for any trained network) uses these functions.
"""

from __future__ import annotations

import torch
from torch.func import functional_call, grad, vmap

from ._mlp_grad import per_sample_body_gradients
from ._train import last_linear


def split_parameters(module: torch.nn.Module):
    """``(head, head_names, body_names)``: the last ``nn.Linear`` and the names of the
    trainable parameters in it and in the rest of the network."""
    head = last_linear(module)
    if head is None:
        raise ValueError("the network has no torch.nn.Linear layer; its last layer must be an "
                         "nn.Linear (the Bayesian last layer).")
    head_ids = {id(p) for p in head.parameters()}
    head_names, body_names = [], []
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        (head_names if id(p) in head_ids else body_names).append(name)
    return head, head_names, body_names


def head_features(module, head, X, chunk):
    """Network output ``f`` (n,) and head features ``phi_r`` (n, r) at ``X``, in chunks.

    ``phi_r`` is the input of ``head`` with a column of ones appended when the head has a
    bias: the gradient of ``f`` with respect to the head's weight and bias.
    """
    outs, feats, store = [], [], {}
    handle = head.register_forward_hook(lambda mod, inp, out: store.__setitem__("a", inp[0]))
    try:
        with torch.no_grad():
            for start in range(0, X.shape[0], chunk):
                out = module(X[start:start + chunk])
                a = store["a"]
                if head.bias is not None:
                    a = torch.cat([a, torch.ones_like(a[:, :1])], dim=1)
                outs.append(out.reshape(out.shape[0], -1))
                feats.append(a.reshape(a.shape[0], -1))
    finally:
        handle.remove()
    return torch.cat(outs), torch.cat(feats)


def body_jacobians(module, body_names, X, chunk):
    """Yield ``(start, J)`` with ``J`` (rows, m): per-sample gradients of the scalar output
    with respect to the parameters ``body_names`` (flattened in that order)."""
    by_hand = per_sample_body_gradients(module, body_names)
    if by_hand is not None:  # a plain MLP: the same gradients without torch.func
        for start in range(0, X.shape[0], chunk):
            yield start, by_hand(X[start:start + chunk])
        return
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    body = {k: params[k].detach() for k in body_names}
    rest = {k: v.detach() for k, v in params.items() if k not in body}

    def f(p, x):
        return functional_call(module, ({**rest, **p}, buffers), (x.unsqueeze(0),)).reshape(())

    per_sample = vmap(grad(f), in_dims=(None, 0))
    for start in range(0, X.shape[0], chunk):
        g = per_sample(body, X[start:start + chunk])
        yield start, torch.cat([g[k].reshape(g[k].shape[0], -1) for k in body_names], dim=1)


class GaussianSketch:
    """``J -> J P`` for a Gaussian ``P`` (m x q, entries N(0, 1/q)), regenerated in row
    blocks from ``seed`` so that it is never stored (TRAK-style random projection).

    ``E[P P^T] = I_m``, so ``(P^T C)^T (P^T C)`` is an unbiased estimate of ``C^T C``.
    """

    def __init__(self, m, q, seed, device, dtype, block=4096):
        self.m, self.q, self.seed = int(m), int(q), int(seed)
        self.device, self.dtype, self.block = device, dtype, int(block)

    def __call__(self, J):
        out = torch.zeros(J.shape[0], self.q, dtype=self.dtype, device=self.device)
        gen = torch.Generator(device=self.device)
        for b, start in enumerate(range(0, self.m, self.block)):
            stop = min(start + self.block, self.m)
            gen.manual_seed(self.seed * 1_000_003 + b)
            P = torch.randn(stop - start, self.q, generator=gen, dtype=self.dtype,
                            device=self.device) / self.q ** 0.5
            out += J[:, start:stop].to(self.dtype) @ P
        return out
