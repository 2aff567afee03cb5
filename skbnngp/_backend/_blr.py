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


def blr_evidence_spectrum(G, b):
    """Eigenvalues of ``G = Phi^T Phi`` and the squared projections of ``b = Phi^T y`` onto
    its eigenvectors, as float64 NumPy vectors: all that :func:`blr_log_evidence_scaled`
    needs (O(r^3) once; each evidence is then O(r))."""
    import numpy as np

    Gn = np.asarray(G.detach().cpu().to(torch.float64) if torch.is_tensor(G) else G,
                    dtype=np.float64)
    bn = np.asarray(b.detach().cpu().to(torch.float64) if torch.is_tensor(b) else b,
                    dtype=np.float64).reshape(-1)
    lam, U = np.linalg.eigh(0.5 * (Gn + Gn.T))
    return np.maximum(lam, 0.0), (U.T @ bn) ** 2


def blr_log_evidence_scaled(lam, c2, yy, n, prior_variance, noise):
    """``log N(y; 0, prior_variance Phi Phi^T + noise I)`` from the spectrum of
    :func:`blr_evidence_spectrum`, ``yy = |y|^2`` and the number of rows ``n``: with
    ``d_i = s lam_i + noise``, ``-(n/2) log 2 pi - ((n - r)/2) log noise - (1/2) sum log d_i
    - (yy - sum s c_i^2 / d_i) / (2 noise)`` (exact for any n and r, zero eigenvalues
    included)."""
    import numpy as np

    r = lam.size
    d = prior_variance * lam + noise
    quad = (yy - np.sum(prior_variance * c2 / d)) / noise
    return float(-0.5 * n * math.log(2 * math.pi) - 0.5 * (n - r) * math.log(noise)
                 - 0.5 * np.sum(np.log(d)) - 0.5 * quad)


def blr_maximise_evidence(lam, c2, yy, n, *, prior_variance=None, noise=None,
                          bounds=(1e-8, 1e8)):
    """Maximise :func:`blr_log_evidence_scaled` over the prior variance and/or the noise
    (those given as ``None``; a value given is held fixed), in log coordinates inside
    ``bounds``. Returns ``(prior_variance, noise, log_evidence)``."""
    import numpy as np
    from scipy.optimize import minimize

    free = [prior_variance is None, noise is None]
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    scale = max(yy / max(n, 1), 1e-300)

    def unpack(z):
        it = iter(z)
        s = math.exp(next(it)) if free[0] else prior_variance
        v = math.exp(next(it)) if free[1] else noise
        return s, v

    def fun(z):
        return -blr_log_evidence_scaled(lam, c2, yy, n, *unpack(z)) / max(n, 1)

    if not any(free):
        return prior_variance, noise, blr_log_evidence_scaled(lam, c2, yy, n, prior_variance,
                                                              noise)
    starts = []
    for s0 in (1.0, 1e-2, 1e2):
        z = ([math.log(s0)] if free[0] else []) + ([math.log(0.1 * scale)] if free[1] else [])
        starts.append(np.clip(z, lo, hi))
    best = None
    for z0 in starts:
        res = minimize(fun, z0, method="L-BFGS-B", bounds=[(lo, hi)] * len(z0))
        if best is None or res.fun < best.fun:
            best = res
    s, v = unpack(best.x)
    return s, v, -best.fun * max(n, 1)
