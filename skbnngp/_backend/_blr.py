"""Bayesian linear regression on features: the O(n r^2) algebra of low-rank GPs.

With features ``Phi`` (n x r), the prior ``w ~ N(0, I_r)`` and Gaussian noise ``noise``, the
model ``y = Phi w + eps`` is the GP with kernel ``Phi Phi^T``. Everything goes through the
r x r matrix ``Lambda = Phi^T W Phi + noise I`` (``W`` optional positive row weights):

* the log evidence (Woodbury + determinant lemma; no n x n matrix),
* the weight posterior ``w | y ~ N(Lambda^{-1} Phi^T W y, noise Lambda^{-1})``,
* the predictive mean ``phi*^T mu`` and latent variance ``|F^T phi*|^2`` with ``S = F F^T``.

DBK (deep basis kernel) and the Bayesian-last-layer heads use these functions; both choose
their prior variance and noise by one evidence, :class:`BLREvidence` with :func:`blr_fit_scales`.
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


class BLREvidence:
    """The log evidence of a Bayesian linear model as a function of its two scales.

    With features ``Phi`` fixed, the model ``y = Phi w + eps``, ``w ~ N(0, prior_var I)``,
    ``eps ~ N(0, noise I)`` has the log evidence

        -(C n/2) log 2 pi - (C (n - r)/2) log noise - (C/2) sum_j log(prior_var l_j + noise)
        - (|Y|^2 - prior_var sum_jc b_jc^2 / (prior_var l_j + noise)) / (2 noise)

    where ``l`` are the eigenvalues of ``G = Phi^T Phi`` and ``b = U^T Phi^T Y`` (``U`` its
    eigenvectors). One eigendecomposition (O(r^3)) from the statistics, which are sums over
    rows (O(n r^2) in chunks), then O(r C) per evaluation: choosing the two scales costs
    nothing next to computing the features.

    Parameters
    ----------
    G : tensor of shape (r, r)
        ``Phi^T Phi``.
    B : tensor of shape (r, C)
        ``Phi^T Y``.
    yy : float
        ``|Y|_F^2``.
    n : int or float
        Number of rows; with frequency weights ``w`` (``G = Phi^T W Phi``, ``B = Phi^T W Y``,
        ``yy = sum_i w_i |y_i|^2``) their sum, which makes this the evidence of the rows
        repeated ``w_i`` times (:func:`weighted_log_evidence_diag`).
    """

    def __init__(self, G, B, yy, n):
        import numpy as np

        eps = torch.finfo(G.dtype).eps if torch.is_floating_point(G) else np.finfo(float).eps
        G = np.asarray(G.detach().cpu(), dtype=np.float64)
        lam, U = np.linalg.eigh(0.5 * (G + G.T))
        b2 = (U.T @ np.asarray(B.detach().cpu(), dtype=np.float64)) ** 2
        # Directions whose eigenvalue is rounding error are the null space of Phi, where
        # Phi^T Y has no component in exact arithmetic. Left in, the rounding in b there,
        # divided by a tiny prior_var * lam + noise, can exceed |Y|^2 and send the evidence
        # to +inf as the noise goes to 0 (seen on Rich-BLL's 1-D gap set).
        null = lam <= G.shape[0] * eps * max(float(lam[-1]) if lam.size else 0.0, 0.0)
        self.lam = np.where(null, 0.0, lam)
        self.b2 = np.where(null[:, None], 0.0, b2)
        # n: the number of rows, or their summed frequency weights (a float)
        n = int(n) if float(n).is_integer() else float(n)
        self.yy, self.n, self.r, self.C = float(yy), n, G.shape[0], self.b2.shape[1]

    def __call__(self, prior_var, noise, grad=False):
        """Log evidence (float) at ``prior_var`` and ``noise``; with ``grad``, also its
        gradient with respect to ``(log prior_var, log noise)``."""
        import numpy as np

        n, r, C = self.n, self.r, self.C
        a, s = prior_var, noise
        d = a * self.lam + s
        bd = self.b2.sum(1) / d
        quad = self.yy - a * float(bd.sum())
        val = float(-0.5 * C * n * math.log(2 * math.pi) - 0.5 * C * (n - r) * math.log(s)
                    - 0.5 * C * np.log(d).sum() - quad / (2 * s))
        if not grad:
            return val
        bdd = bd / d
        da = -0.5 * C * float((self.lam / d).sum()) + (float(bd.sum())
                                                       - a * float((bdd * self.lam).sum())) / (2 * s)
        ds = (-0.5 * C * (n - r) / s - 0.5 * C * float((1.0 / d).sum()) + quad / (2 * s * s)
              - a * float(bdd.sum()) / (2 * s))
        return val, np.array([a * da, s * ds])


def blr_fit_scales(evidence, prior_var=1.0, noise=1.0, *, noise_lower_bound=1e-6,
                   condition=None, fix_prior_var=False, fix_noise=False, prior_var_starts=()):
    """``(prior_var, noise)`` maximising ``evidence`` (a :class:`BLREvidence`), or the
    conditional evidence ``evidence - condition`` (the log predictive density of the rows in
    ``evidence`` but not in ``condition`` given those in ``condition``, when ``condition`` holds
    the statistics of a subset of the rows).

    L-BFGS-B in log coordinates from the given starting point, with the prior variance in
    ``[e^-20, e^20]`` and the noise in ``[noise_lower_bound, e^20]``. ``fix_prior_var`` and
    ``fix_noise`` hold that scale at its given value. ``prior_var_starts`` adds starting
    values of the prior variance (the evidence can have more than one local maximum in it);
    the best end point wins. Returns the starting point if the optimiser does not improve on
    it.
    """
    import numpy as np
    from scipy.optimize import minimize as sp_minimize

    if fix_prior_var and fix_noise:
        return prior_var, noise
    free = np.array([not fix_prior_var, not fix_noise])
    fixed = np.array([math.log(prior_var), math.log(noise)])

    def objective(z):
        full = fixed.copy()
        full[free] = z
        a, s = math.exp(min(full[0], 700.0)), math.exp(min(full[1], 700.0))
        val, g = evidence(a, s, grad=True)
        if condition is not None:
            cv, cg = condition(a, s, grad=True)
            val, g = val - cv, g - cg
        if not math.isfinite(val):
            return np.inf, np.zeros_like(z)
        return -val, -g[free]

    bounds = [b for b, f in zip([(-20.0, 20.0), (math.log(noise_lower_bound), 20.0)], free)
              if f]
    lo, hi = [b[0] for b in bounds], [b[1] for b in bounds]
    z0 = np.clip(fixed[free], lo, hi)
    best_z, best_f = z0, objective(z0)[0]
    for a0 in (prior_var, *prior_var_starts):
        start = fixed.copy()
        start[0] = math.log(a0)
        start = np.clip(start[free], lo, hi)
        res = sp_minimize(objective, start, jac=True, method="L-BFGS-B", bounds=bounds,
                          options={"ftol": 1e-15, "gtol": 1e-10, "maxiter": 500})
        if np.isfinite(res.fun) and res.fun <= best_f:
            best_z, best_f = res.x, res.fun
        if fix_prior_var:
            break  # the other starts differ only in the fixed prior variance
    full = fixed.copy()
    full[free] = best_z
    return (prior_var if fix_prior_var else math.exp(full[0]),
            noise if fix_noise else math.exp(full[1]))


def blr_log_evidence_diag(Phi, Y, noise):
    """``log N(Y; 0, Phi Phi^T + diag(noise))`` summed over the columns of ``Y``, for a
    noise variance per row (``noise`` of shape (n,), > 0): rows scaled by ``noise^{-1/2}``
    reduce it to :func:`blr_log_evidence` with unit noise. O(n r^2), differentiable."""
    w = torch.rsqrt(noise).unsqueeze(-1)
    return (blr_log_evidence(Phi * w, Y * w, torch.ones((), dtype=Phi.dtype, device=Phi.device))
            - 0.5 * Y.shape[1] * torch.log(noise).sum())


def weighted_log_evidence_diag(Phi, Y, noise, weights):
    """The log evidence of the rows repeated ``weights`` times (frequency weights, any
    positive reals): ``log N(Y; 0, Phi Phi^T + diag(noise / w))`` plus, per row and target,
    ``-((w_i - 1) log(2 pi noise_i) + log w_i) / 2``, the density of the ``w_i - 1``
    repeats once their mean is fixed (identical targets, so no residual term). ``noise``:
    a per-row (n,) or scalar variance of one observation. O(n r^2), differentiable."""
    noise = torch.as_tensor(noise, dtype=Phi.dtype, device=Phi.device).expand(Phi.shape[0])
    const = ((weights - 1) * torch.log(2 * math.pi * noise) + torch.log(weights)).sum()
    return blr_log_evidence_diag(Phi, Y, noise / weights) - 0.5 * Y.shape[1] * const


class DiagNoiseEvidence:
    """``log N(Y; 0, prior_var (Phi Phi^T + diag(c)) + noise I)`` as a function of
    ``(prior_var, noise)``, with its gradient in log coordinates (autograd): the evidence of
    a low-rank kernel plus a fixed diagonal ``c`` (DBK's variance correction), callable like
    :class:`BLREvidence` (for :func:`blr_fit_scales`). O(n r^2) per evaluation.
    ``weights``: frequency weights of the rows (:func:`weighted_log_evidence_diag`).
    """

    def __init__(self, Phi, Y, c=None, weights=None):
        self.Phi, self.Y, self.weights = Phi, Y, weights
        self.c = torch.zeros(Phi.shape[0], dtype=Phi.dtype, device=Phi.device) if c is None \
            else c

    def __call__(self, prior_var, noise, grad=False):
        import numpy as np

        z = torch.tensor([math.log(prior_var), math.log(noise)], dtype=self.Phi.dtype,
                         device=self.Phi.device, requires_grad=grad)
        with torch.set_grad_enabled(grad):
            a, s = torch.exp(z[0]), torch.exp(z[1])
            if self.weights is None:
                val = blr_log_evidence_diag(torch.sqrt(a) * self.Phi, self.Y, s + a * self.c)
            else:
                val = weighted_log_evidence_diag(torch.sqrt(a) * self.Phi, self.Y,
                                                 s + a * self.c, self.weights)
            if not grad:
                return float(val)
            (g,) = torch.autograd.grad(val, z)
        return float(val.detach()), np.asarray(g.detach().cpu(), dtype=np.float64)
