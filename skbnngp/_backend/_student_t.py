"""Numerics of the Student-t process (scale mixtures of NNGPs): the ARD NNGP kernel, the
hyperparameter vector, the relevance hyperprior and the NTK-trained predictive.

The estimators (:mod:`skbnngp._student_t`, :mod:`skbnngp._student_t_classifier`) choose and
orchestrate; the algebra is here. Imports no scikit-learn.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._chunks import DEFAULT_BLOCK_ELEMENTS, auto_batch_size, iter_slices
from ._linalg import cho_solve, stable_cholesky

__all__ = [
    "HYPERPARAMETERS",
    "ard_kernel",
    "from_log",
    "ntk_factor",
    "ntk_predict",
    "paired_gain",
    "relevance_penalty",
    "to_log",
    "unpack",
]

#: Order of the hyperparameter vector (optimised as logarithms; ARD relevances follow).
HYPERPARAMETERS = ("weight_variance", "bias_variance", "alpha", "prior_shape", "prior_scale")


def to_log(values, device, dtype):
    """The optimised coordinates of positive ``values``: their logarithms, as a tensor."""
    return torch.log(torch.tensor(values, device=device, dtype=dtype))


def from_log(raw):
    """The values (a list of floats) of the log coordinates ``raw``."""
    return torch.exp(raw).detach().cpu().numpy().tolist()


def unpack(raw):
    """Log-hyperparameters -> the parameter dict of the backend's :class:`ExactGP`."""
    p = torch.exp(raw)
    return {"weight_variance": p[0], "bias_variance": p[1], "noise_variance": p[2],
            "prior_shape": p[3], "prior_scale": p[4], "relevance": p[5:]}


def ard_kernel(nngp, depth, activation, ard, p, X1, X2=None, diag=False, ntk=False):
    """``kernel(params, X1, X2, diag)`` for :class:`ExactGP`: the NNGP kernel ``nngp`` (a
    function with the signature of :func:`skbnngp.kernels.nngp_kernel`), with the ARD
    first-layer weight variances ``sigma_w^2 r_i`` when ``ard``."""
    if ard:
        scale = torch.sqrt(p["relevance"])
        X1 = X1 * scale
        X2 = None if X2 is None else X2 * scale
    return nngp(X1, X2, depth=depth, weight_variance=p["weight_variance"],
                bias_variance=p["bias_variance"], activation=activation, diag=diag,
                return_ntk=ntk)


def relevance_penalty(tau, n_rel, first=5):
    """``penalty(raw) -> (value, grad)``: the negative log of the hyperprior
    ``log r_i - mean_j log r_j ~ N(0, tau^2)`` on the ``n_rel`` log relevances that follow
    position ``first`` of ``raw`` (the five :data:`HYPERPARAMETERS`; up to a constant), or ``None`` when it has no effect
    (``tau`` None or fewer than two relevances). Only the spread is shrunk: the mean's own
    gradient sums to zero."""
    if n_rel < 2 or tau is None:
        return None

    def penalty(raw):
        dev = raw[first:] - raw[first:].mean()
        grad = torch.zeros_like(raw)
        grad[first:] = dev / tau ** 2
        return 0.5 * torch.sum(dev * dev) / tau ** 2, grad
    return penalty


def paired_gain(gain, z, min_gain, weights=None):
    """``(mean, se, pays)`` of paired per-row gains: ``pays`` when the mean is more than
    ``z`` standard errors above zero and at least ``min_gain`` a row. ``weights`` counts a
    row's gain that many times (as repeated rows would)."""
    if weights is None:
        se = float(np.std(gain, ddof=1) / math.sqrt(gain.size))
        mean = float(np.mean(gain))
    else:
        n = float(np.sum(weights))
        mean = float(np.sum(weights * gain) / n)
        var = float(np.sum(weights * (gain - mean) ** 2) / max(n - 1.0, 1e-300))
        se = math.sqrt(var / n)
    return mean, se, mean > max(z * se, min_gain)


def ntk_factor(kernel, p, X, Y, noise, context):
    """The training pieces of the NTK-trained predictive (Lee et al. 2022, Thm 3.3):
    the NNGP Gram ``K``, the Cholesky factor ``LT`` of ``Theta + noise I`` and
    ``AT = (Theta + noise I)^{-1} Y``."""
    with torch.no_grad():
        K, T = kernel(p, X, ntk=True)
        T = T.clone()
        T.diagonal().add_(noise)
        LT, _ = stable_cholesky(T, context=context)
    return {"K": K, "LT": LT, "AT": cho_solve(LT, Y)}


def ntk_predict(kernel, p, pieces, X, Xq, noise, full_cov, block_elements=None):
    """Mean (m x C) and variance (m,) or covariance (m x m) of the NTK-trained predictive at
    ``Xq`` from :func:`ntk_factor`'s ``pieces`` (unit amplitude; ``noise`` added to the
    variance). With ``B = Theta_lambda^{-1} Theta_tr,*``: mean ``Theta_*,tr AT`` and
    covariance ``K_** + B^T K B - K_*,tr B - B^T K_tr,*``. Rows go in memory-bounded blocks."""

    def block(Xb, cov):
        with torch.no_grad():
            Ks, Ts = kernel(p, Xb, X, ntk=True)
            mean = Ts @ pieces["AT"]
            B = cho_solve(pieces["LT"], Ts.T)
            cross = Ks @ B
            KB = pieces["K"] @ B
            if cov:
                V = kernel(p, Xb) + B.T @ KB - cross - cross.T
                V.diagonal().add_(noise)
            else:
                V = kernel(p, Xb, diag=True) + (B * KB).sum(0) - 2 * cross.diagonal() + noise
            return mean, V

    if full_cov:
        return block(Xq, True)
    rows = auto_batch_size(X.shape[0], None, max(block_elements or 0, DEFAULT_BLOCK_ELEMENTS))
    parts = [block(Xq[sl], False) for sl in iter_slices(Xq.shape[0], rows)]
    if not parts:
        return Xq.new_zeros((0, pieces["AT"].shape[1])), Xq.new_zeros(0)
    return torch.cat([m for m, _ in parts]), torch.cat([v for _, v in parts])
