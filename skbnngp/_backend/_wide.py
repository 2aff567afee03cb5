"""A fixed input projection for wide data (many correlated features against few rows).

A network's first layer over ``p`` strongly correlated inputs has ``p`` times its width in
weights to fit from few rows. :func:`input_projection` replaces those inputs by their
leading principal components, whitened and scaled to ``[-0.5, 0.5]`` on the training rows
(the range the networks' own input scaling gives), as one affine map ``x W^T + b``;
:func:`projected_network` puts it in front of a network as a frozen ``nn.Linear``, so the
fitted module carries it and prediction needs nothing else.
"""

from __future__ import annotations

import numpy as np
import torch


def is_wide(n_rows, n_features, components, ratio):
    """Whether ``n_features`` is more than ``components`` and more than ``ratio`` times the
    ``n_rows`` a network is trained on."""
    return n_features > components and n_features > ratio * n_rows


def input_projection(X, components, sample_weight=None):
    """``(W, b)`` (``components x p`` and ``components``): the whitened leading principal
    components of the columns of ``X`` standardised (weighted by ``sample_weight``), each
    mapped to ``[-0.5, 0.5]`` over the rows of ``X``."""
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(X.shape[0]) if sample_weight is None else np.asarray(sample_weight, float)
    w = w / w.sum()
    mean = w @ X
    sd = np.sqrt(w @ (X - mean) ** 2)
    sd = np.where(sd > 0, sd, 1.0)
    Z = (X - mean) / sd * np.sqrt(w)[:, None]
    _, s, Vt = np.linalg.svd(Z, full_matrices=False)
    k = int(min(components, np.sum(s > s[0] * 1e-10)))
    W = Vt[:k] / s[:k, None] / sd[None, :]  # whitened: unit variance over the rows
    P = (X - mean) @ W.T
    lo, hi = P.min(axis=0), P.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    W = W / span[:, None]
    b = -(mean @ W.T) - (lo + hi) / (2 * span)
    return W, b


def projected_network(W, b, body):
    """``nn.Sequential(frozen Linear(W, b), *body)``: ``body`` (an ``nn.Sequential`` over
    ``W.shape[0]`` inputs) behind the fixed projection, whose weights never train."""
    ref = next(body.parameters())
    proj = torch.nn.Linear(W.shape[1], W.shape[0], device=ref.device, dtype=ref.dtype)
    with torch.no_grad():
        proj.weight.copy_(torch.as_tensor(W, dtype=ref.dtype))
        proj.bias.copy_(torch.as_tensor(b, dtype=ref.dtype))
    proj.requires_grad_(False)
    return torch.nn.Sequential(proj, *body)
