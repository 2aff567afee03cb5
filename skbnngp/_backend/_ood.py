"""FiD-GP's out-of-distribution score: the relative residual of a layer's input off a
subspace of lower rank than the layer's input width.

Set-up (:func:`fixed_draw`, :func:`subspace_bases`): one posterior weight draw of the whole
network is fixed; at each *key* layer the subspace is either the top principal directions of
the training inputs of that layer (``"principal"``, holding a given fraction of their
energy), or the row space of the layer's mean inducing weight ``U T_col^T`` (``"inducing"``,
rank R); ``"combined"`` keeps both. Score (:func:`residual_score`): ``||a - a B B^T|| /
||a||`` for the layer input ``a`` (with its bias column) and each orthonormal basis ``B``,
averaged over the bases: in [0, 1] and scale-free.
"""

from __future__ import annotations

import itertools

import torch

from ._chunks import iter_slices
from ._inducing import InducingLinear, linear_apply

#: Relative singular value below which a direction of ``U T_col^T`` is not in its row space.
ROW_SPACE_TOL = 1e-6


def fixed_draw(net, keys, gen, sampling):
    """One weight draw of every layer (``d_out x d_in``, bias last) and, of the key layers,
    the inducing matrix ``U`` and ``T_col^T``: ``(weights, {i: U}, {i: T_col^T})``."""
    weights, us, colmaps = [], {}, {}
    with torch.no_grad():
        for i, layer in enumerate(net.layers):
            if isinstance(layer, InducingLinear):
                factors = layer.prior_factors()
                U = factors[0] @ layer.sample_v(gen) @ factors[1].T
                W = layer.weight_from_u(U, layer.conditional_noise(gen, sampling, factors),
                                        factors)
                weights.append(W)
                if i in keys:
                    us[i], colmaps[i] = U, factors[3]
            else:
                weights.append(torch.cat([layer.weight, layer.bias[:, None]], dim=1))
    return weights, us, colmaps


def layer_inputs(weights, keys, activation, Xt, block_rows):
    """The input (with the bias column) of each key layer under ``weights``, in blocks of
    ``block_rows`` rows; ``activation`` follows every layer but the last."""
    out = [[] for _ in keys]
    with torch.no_grad():
        for sl in iter_slices(Xt.shape[0], block_rows):
            x = Xt[sl]
            for i, W in enumerate(weights):
                if i in keys:
                    one = torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)
                    out[keys.index(i)].append(torch.cat([x, one], dim=1))
                if i == keys[-1]:
                    break
                x = linear_apply(x, W)
                if i < len(weights) - 1:
                    x = activation(x)
    return [torch.cat(parts, dim=0) for parts in out]


def subspace_bases(inputs, us, colmaps, keys, method, energy):
    """Orthonormal bases (``width x rank``, in the inputs' dtype) of the subspaces of
    ``method``: for ``"combined"`` the principal bases of every key layer, then the inducing
    ones. ``inputs`` are the key layers' training inputs (:func:`layer_inputs`); the
    principal subspace keeps ``energy`` of their squared norm. Each rank is below the
    layer's input width, so a residual always exists."""
    methods = ("principal", "inducing") if method == "combined" else (method,)
    bases = []
    with torch.no_grad():
        for m, (k, i) in itertools.product(methods, enumerate(keys)):
            if m == "inducing":  # row space of the mean weight U T_col^T
                M = (us[i] @ colmaps[i]).to(torch.float64)
                _, sv, Vh = torch.linalg.svd(M, full_matrices=False)
                r = int((sv > ROW_SPACE_TOL * sv[0]).sum())
            else:  # the top principal directions of the layer's training inputs
                _, sv, Vh = torch.linalg.svd(inputs[k].to(torch.float64), full_matrices=False)
                share = torch.cumsum(sv * sv, 0) / (sv * sv).sum()
                r = int((share < energy).sum()) + 1
            r = max(1, min(r, Vh.shape[1] - 1))
            bases.append(Vh[:r].T.to(inputs[0].dtype).contiguous())
    return bases


def residual_score(inputs, bases):
    """Mean over ``bases`` of ``||a - a B B^T|| / ||a||`` (float64, one value per row);
    with more bases than inputs (``"combined"``) the inputs are cycled."""
    feats = inputs * (len(bases) // len(inputs))
    total = torch.zeros(inputs[0].shape[0], dtype=torch.float64, device=inputs[0].device)
    with torch.no_grad():
        for a, B in zip(feats, bases):
            r = (a - (a @ B) @ B.T).to(torch.float64)
            total += torch.linalg.vector_norm(r, dim=1) / \
                torch.linalg.vector_norm(a.to(torch.float64), dim=1).clamp_min(1e-300)
    return total / len(feats)
