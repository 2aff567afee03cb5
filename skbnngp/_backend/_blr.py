"""Bayesian linear regression on features: the O(n r^2) algebra of low-rank GPs.

With features ``Phi`` (n x r), the prior ``w ~ N(0, I_r)`` and Gaussian noise ``noise``, the
model ``y = Phi w + eps`` is the GP with kernel ``Phi Phi^T``. Everything goes through the
r x r matrix ``Lambda = Phi^T W Phi + noise I`` (``W`` optional positive row weights):

* the log evidence (Woodbury + determinant lemma; no n x n matrix),
* the weight posterior ``w | y ~ N(Lambda^{-1} Phi^T W y, noise Lambda^{-1})``,
* the predictive mean ``phi*^T mu`` and latent variance ``|F^T phi*|^2`` with ``S = F F^T``.

DBK (deep basis kernel) and the Bayesian-last-layer heads use these functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._linalg import stable_cholesky


def _cholesky_nan(A):
    """Cholesky factor whose entries are NaN when ``A`` is not positive definite.

    Unlike :func:`~._linalg.stable_cholesky` it never reads back to the host, so it can sit
    inside a training step; a failure surfaces as a NaN loss, which the trainer catches.
    """
    L, info = torch.linalg.cholesky_ex(A)
    return L + torch.where(info > 0, float("nan"), 0.0).to(L.dtype)


def blr_log_evidence(Phi, Y, noise):
    """``log N(Y; 0, Phi Phi^T + noise I)`` summed over the columns of ``Y``.

    Eq. (5) of Zhu et al. (DBK): ``-(n/2) log 2 pi - ((n - r)/2) log noise - (1/2) log|Lambda|
    - |y|^2 / (2 noise) + |L^{-1} Phi^T y|^2 / (2 noise)`` with ``Lambda = Phi^T Phi + noise I``
    and ``L`` its Cholesky factor. O(n r^2) time, O(n r) memory, valid for any n and r,
    differentiable, and free of host synchronisation (a failed factorisation gives NaN).

    Parameters
    ----------
    Phi : tensor of shape (n, r)
    Y : tensor of shape (n, C)
    noise : 0-d tensor or float, > 0
    """
    n, r = Phi.shape
    C = Y.shape[1]
    noise = torch.as_tensor(noise, dtype=Phi.dtype, device=Phi.device)
    Lam = Phi.T @ Phi + noise * torch.eye(r, dtype=Phi.dtype, device=Phi.device)
    L = _cholesky_nan(Lam)
    u = torch.linalg.solve_triangular(L, Phi.T @ Y, upper=False)
    logdet = 2.0 * torch.log(L.diagonal()).sum()
    return (-0.5 * C * n * math.log(2 * math.pi) - 0.5 * C * (n - r) * torch.log(noise)
            - 0.5 * C * logdet - ((Y * Y).sum() - (u * u).sum()) / (2 * noise))


@dataclass
class BLRPosterior:
    """Gaussian weight posterior ``N(mean, factor factor^T)`` of a Bayesian linear model.

    ``mean`` has shape (r, C) (one column per target, shared covariance); ``factor`` is
    r x r. :meth:`predict` gives the predictive mean and the latent variance at new features.
    """

    mean: torch.Tensor
    factor: torch.Tensor

    def predict(self, Phi):
        """Mean ``Phi mu`` (m x C) and latent variance ``rowsum((Phi F)^2)`` (m,)."""
        return Phi @ self.mean, (Phi @ self.factor).square().sum(1)

    def covariance(self, Phi):
        """Latent covariance ``Phi S Phi^T`` (m x m)."""
        PF = Phi @ self.factor
        return PF @ PF.T


def blr_stats(Phi, Y, row_weights=None):
    """Sufficient statistics ``(Phi^T W Phi, Phi^T W Y)``; add them over row chunks."""
    PW = Phi if row_weights is None else Phi * row_weights.unsqueeze(-1)
    return PW.T @ Phi, PW.T @ Y


def blr_posterior(G, B, noise, *, context="feature Gram matrix", warn=True):
    """Weight posterior from the statistics ``G = Phi^T W Phi`` and ``B = Phi^T W Y``.

    ``mean = Lambda^{-1} B`` and ``S = noise Lambda^{-1} = F F^T`` with ``Lambda = G + noise I``
    and ``F = sqrt(noise) L^{-T}`` (upper triangular). The factorisation uses the jitter
    ladder of :func:`~._linalg.stable_cholesky` and warns when it adds jitter.
    """
    r = G.shape[0]
    noise = torch.as_tensor(noise, dtype=G.dtype, device=G.device)
    eye = torch.eye(r, dtype=G.dtype, device=G.device)
    L, _ = stable_cholesky(0.5 * (G + G.T) + noise * eye, context=context, warn=warn)
    mean = torch.cholesky_solve(B, L)
    Linv = torch.linalg.solve_triangular(L, eye, upper=False)
    return BLRPosterior(mean=mean, factor=torch.sqrt(noise) * Linv.T)
