"""A log-noise regression: the input-dependent noise of a post-hoc Bayesian last layer.

The two-stage scheme of the most-likely heteroscedastic GP (Kersting et al. 2007) on a
trained network: the squared residuals ``e_i^2`` of its mean, read as ``s(x_i) chi2_1``
draws, give ``log e_i^2 - E[log chi2_1] = log s(x_i) + eps_i`` with ``Var eps = pi^2 / 2``
known; a Bayesian linear regression of those targets on a design ``F`` (standardised
columns, prior variance by its evidence, the noise held at ``pi^2 / 2``) gives the log-noise
``g(x)``. The last layer is then refitted with the per-row noise ``c exp(g(x_i))``, a
weighted Bayesian linear regression with precisions ``1 / exp(g(x_i))`` and the level ``c``
chosen by its evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._blr import BLREvidence, blr_fit_scales

F64 = torch.float64

#: ``E[log chi2_1] = digamma(1/2) + log 2``: the bias of a log squared Gaussian residual.
LOG_CHI2_MEAN = -1.2703628454614782
#: ``Var[log chi2_1] = trigamma(1/2)``, the known noise of the log-noise regression.
LOG_CHI2_VAR = math.pi ** 2 / 2
#: Squared residuals are floored at this fraction of their (weighted) mean before the log,
#: so a residual that is zero by rounding does not pull the regression to ``-inf``.
RESIDUAL_FLOOR = 1e-4


@dataclass
class LogNoiseModel:
    """``g(x) = ((F(x) - offset) / scale) @ coef + intercept``, clipped to ``[low, high]``
    (the range it takes on the rows it was fitted to, so it does not extrapolate a trend);
    tensors in float64."""

    offset: torch.Tensor
    scale: torch.Tensor
    coef: torch.Tensor
    intercept: float
    low: float
    high: float

    def __call__(self, F):
        g = ((F.to(F64) - self.offset) / self.scale) @ self.coef + self.intercept
        return g.clamp(self.low, self.high)

    def shift(self, delta):
        """The same model plus ``delta`` (a level change)."""
        return LogNoiseModel(self.offset, self.scale, self.coef, self.intercept + delta,
                             self.low + delta, self.high + delta)


def fit_log_noise(F, sq_residuals, weights=None):
    """The log-noise regression of ``log sq_residuals - E[log chi2_1]`` on the design ``F``.

    Parameters
    ----------
    F : tensor of shape (n, d)
        Design (any columns; standardised here, constant columns dropped by a unit scale).
    sq_residuals : tensor of shape (n,)
        Squared residuals of the mean.
    weights : tensor of shape (n,) or None
        Frequency weights of the rows.

    Returns
    -------
    LogNoiseModel
    """
    F = F.to(F64)
    r2 = sq_residuals.to(F64).reshape(-1)
    w = torch.ones_like(r2) if weights is None else weights.to(F64).reshape(-1)
    n = float(w.sum())
    floor = RESIDUAL_FLOOR * max(float((w * r2).sum()) / n, 1e-300)
    t = torch.log(r2.clamp_min(floor)) - LOG_CHI2_MEAN
    offset = (w[:, None] * F).sum(0) / n
    sd = torch.sqrt((w[:, None] * (F - offset).square()).sum(0) / n)
    scale = torch.where(sd > 1e-12 * sd.max().clamp_min(1e-300), sd, torch.ones_like(sd))
    Fs = (F - offset) / scale
    tm = float((w * t).sum()) / n
    tc = (t - tm)[:, None]
    G, B = (Fs * w[:, None]).T @ Fs, (Fs * w[:, None]).T @ tc
    ev = BLREvidence(G, B, float((w[:, None] * tc.square()).sum()), n)
    a, _ = blr_fit_scales(ev, 1.0, LOG_CHI2_VAR, fix_noise=True, prior_var_starts=(1e-3, 1e2))
    eye = torch.eye(G.shape[0], dtype=F64, device=G.device)
    coef = torch.linalg.solve(G + (LOG_CHI2_VAR / a) * eye, B).reshape(-1)
    g = Fs @ coef + tm
    return LogNoiseModel(offset=offset, scale=scale, coef=coef, intercept=tm,
                         low=float(g.min()), high=float(g.max()))
