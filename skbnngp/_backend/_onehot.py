"""Class probabilities of a Gaussian-process regression on one-hot targets whose outputs
share one scale ``s``, and the closed-form leave-one-out choice of its noise.

Used by :class:`~skbnngp.StudentTProcessClassifier`. Imports no scikit-learn.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numpy.polynomial.hermite_e import hermegauss

from ._chunks import iter_slices
from ._device import as_tensor, to_numpy
from ._gp import leave_one_copy_out

__all__ = ["argmax_proba", "label_variance", "loo_noise_search"]

#: Label-noise weights (of the uniform distribution) the leave-one-out search tries.
LABEL_NOISE_GRID = (0.0, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.2)


def argmax_proba(mu, V, nodes, n_quadrature, device, dtype, extra=None):
    """``P(argmax_j y_j = c)`` for ``y ~ N(mu, s V I + diag(extra))`` mixed over the scale
    nodes ``nodes``.

    ``mu`` is (m, C), ``V`` (m,) unit-amplitude variances and ``extra`` None or (m, C)
    variances added per output, not scaled by ``s`` (arrays, or tensors already on
    ``device``); Gauss-Hermite in ``z`` with ``n_quadrature`` nodes. With equal variances
    ``P_c = E_z prod_{j != c} Phi((mu_c - mu_j) / sigma + z)``; with ``extra``, conditioning
    on ``y_c = mu_c + sigma_c z``, ``P_c = E_z prod_{j != c} Phi((mu_c + sigma_c z - mu_j) /
    sigma_j)``. Returns an (m, C) tensor (not floored).
    """
    z, wz = hermegauss(n_quadrature)
    wz = wz / wz.sum()
    nodes = np.asarray(nodes, dtype=np.float64)
    mu_t, z_t, wz_t = (as_tensor(a, device, dtype) for a in (mu, z, wz))
    f64 = torch.float64  # the scales in float64 whatever the working dtype, then cast
    V64 = as_tensor(V, device, f64).clamp_min(1e-300)
    C = mu.shape[1]
    if extra is None:  # m x K
        sig = (V64.sqrt()[:, None] * as_tensor(np.sqrt(nodes), device, f64)[None, :]).to(dtype)
    else:  # m x C x K
        var = V64[:, None] * as_tensor(nodes, device, f64)[None, :]
        sig = (var[:, None, :] + as_tensor(extra, device, f64)[:, :, None]).sqrt().to(dtype)
    out = []
    eye = torch.eye(C, dtype=torch.bool, device=device)[None, :, :, None, None]
    for sl in iter_slices(mu.shape[0], max(1, 2**22 // (C * C * z.size * nodes.size))):
        diff = (mu_t[sl, :, None] - mu_t[sl, None, :])  # b x C x C: mu_c - mu_j
        if extra is None:
            arg = diff[..., None, None] / sig[sl, None, None, :, None] + z_t  # b C C K H
        else:
            s_c = sig[sl, :, None, :, None]  # b x C x 1 x K x 1
            s_j = sig[sl, None, :, :, None]  # b x 1 x C x K x 1
            arg = (diff[..., None, None] + s_c * z_t) / s_j
        logp = torch.special.log_ndtr(arg).masked_fill(eye, 0.0).sum(dim=2)  # b x C x K x H
        out.append((logp.exp() * wz_t).sum(-1).mean(-1))  # b x C
    return torch.cat(out) if out else torch.zeros((0, C), device=device, dtype=dtype)


def label_variance(mu, low):
    """The variance ``p (1 - p)`` of a one-hot target whose mean is ``p = mu - low``
    (``low`` is the targets' lower value), with ``p`` clipped to [0, 1]."""
    p = (mu - low).clamp(0.0, 1.0) if torch.is_tensor(mu) else np.clip(mu - low, 0.0, 1.0)
    return p * (1.0 - p)


def loo_noise_search(K, Y, yi, posterior, grid, start, *, low, weights, fixed_weight=None,
                     n_nodes=8, coarse=4, groups=(), row_weights=None, copies=False):
    """The noise ratio on ``grid`` of smallest leave-one-out class log loss.

    With ``K_a = K + a I = U diag(e + a) U^T``, the predictive of the one-hot row ``i`` given
    the others is ``N(y_i - [K_a^-1 Y]_i / [K_a^-1]_ii, s / [K_a^-1]_ii)`` for every output,
    mixed over the posterior of ``s`` at ``a`` (``posterior(q, logdet)`` returns its
    :class:`~skbnngp._scale_mixture.Mixing`): one eigendecomposition serves the whole grid.
    Each point also takes its best label-noise weight from :data:`LABEL_NOISE_GRID`.

    The grid is searched coarse to fine: every ``coarse``-th point (and ``grid[start]``,
    the evidence's value), then every point between the best coarse point's neighbours,
    which finds the grid's minimum whenever the loss is unimodal in ``a``. Points are scored
    with the label-variance weight ``fixed_weight`` (``None``: 0); with ``None`` the weight
    is then chosen from ``weights`` at the chosen ``a`` (ties keep the smaller weight;
    ``weights`` starts at 0 so the loss never rises). ``n_nodes`` Gauss-Hermite and scale
    nodes score each point; ``low`` is the targets' lower value. The rows of each of
    ``groups`` (index arrays of rows that repeat one input) are left out together: with
    ``B = [K_a^-1]_GG`` their predictive is ``N(y_G - B^-1 [K_a^-1 Y]_G, s B^-1)`` (a twin
    left in would predict its row and drive the noise to its bound).

    ``row_weights`` (a tensor, None: ones) are frequency weights: row ``i`` has noise
    ``a / w_i`` (the weighted likelihood), is left out with all its repeats, predicts one
    observation (noise ``a``) and counts ``w_i`` times in the mean loss; with
    ``K~ = W^1/2 K W^1/2 = U diag(e) U^T``, ``(K + a W^-1)^-1 = W^1/2 (K~ + a I)^-1 W^1/2``
    keeps one eigendecomposition for the whole grid.

    Returns ``(index into grid, mean loss, label noise, per-row losses (NumPy), weight)``,
    or ``None`` when no point scores finitely.
    """
    device, dtype = K.device, K.dtype
    n, C = Y.shape
    w0 = 0.0 if fixed_weight is None else fixed_weight
    scored = {}  # (grid index, w) -> (mean loss, label noise, per-row losses on device)
    with torch.no_grad():
        eps_t = as_tensor(np.asarray(LABEL_NOISE_GRID), device, dtype)
        yi_t = torch.as_tensor(yi, device=device).long()
        rows = torch.arange(n, device=device)
        group_rows = [torch.as_tensor(g, device=device) for g in groups]
        h = None if row_weights is None else row_weights.sqrt()
        e, U = torch.linalg.eigh(K if h is None else h[:, None] * K * h[None, :])
        e = e.clamp_min(0.0)
        UtY, U2 = U.T @ (Y if h is None else h[:, None] * Y), U * U
        extra_logdet = 0.0 if h is None else float(row_weights.sum()) - n

        def score(i, w=w0):
            a = grid[i]
            d = 1.0 / (e + a)
            diag_inv = U2 @ d
            dual = U @ (UtY * d[:, None])
            if h is not None:
                diag_inv, dual = diag_inv * row_weights, dual * h[:, None]
            q = (Y * dual).sum()
            logdet = torch.log(e + a).sum() + extra_logdet * math.log(a)
            mu = Y - dual / diag_inv[:, None]
            var = 1.0 / diag_inv
            for g in group_rows:
                B = (U[g] * d) @ U[g].T
                Binv = torch.linalg.inv(B if h is None else h[g, None] * B * h[None, g])
                mu[g] = Y[g] - Binv @ dual[g]
                var[g] = Binv.diagonal()
            if h is not None and copies:  # replicates: a merged row loses one copy
                r, var = leave_one_copy_out(Y - mu, var, row_weights, a)
                mu = Y - r
            elif h is not None:  # one observation's noise a, not the weighted row's a / w
                var = var + a * (1.0 - 1.0 / row_weights)
            mix = posterior(q, logdet)
            P = argmax_proba(mu, var, mix.quantile_nodes(n_nodes), n_nodes,
                             device, dtype,
                             extra=w * label_variance(mu, low) if w > 0 else None)
            P = P / P.sum(dim=1, keepdim=True).clamp_min(1e-300)
            pt = P[rows, yi_t][:, None] * (1 - eps_t) + eps_t / C
            row_losses = -torch.log(pt.clamp_min(1e-9))
            losses = to_numpy(row_losses.mean(dim=0) if h is None else (
                row_weights[:, None] * row_losses).sum(dim=0) / row_weights.sum())
            j = int(np.argmin(losses))
            loss = float(losses[j]) if np.isfinite(losses[j]) else math.inf
            scored[i, w] = (loss, float(LABEL_NOISE_GRID[j]), row_losses[:, j])

        size = len(grid)
        first = sorted(set(range(0, size, coarse)) | {size - 1} | {start})
        for i in first:
            score(i)
        k = min(range(len(first)), key=lambda c: scored[first[c], w0][0])
        for i in range(first[max(k - 1, 0)], first[min(k + 1, len(first) - 1)] + 1):
            if (i, w0) not in scored:
                score(i)
        best = min(sorted(scored), key=lambda key: scored[key][0])
        if fixed_weight is None and math.isfinite(scored[best][0]):
            for w in weights[1:]:
                score(best[0], w)
            best = min(((best[0], w) for w in weights), key=lambda key: scored[key][0])
    if not math.isfinite(scored[best][0]):
        return None
    return (best[0], scored[best][0], scored[best][1], to_numpy(scored[best][2]),
            float(best[1]))
