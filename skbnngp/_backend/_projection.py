"""A Bayesian last layer whose prior absorbs the network's projected NTK features.

The numerics of Rich-BLL (Calvo-Ordonez et al., "Richer Bayesian Last Layers with Subsampled
NTK Features", §3). With the head features ``phi_r(x) = (a(x), 1)`` (r columns) and the
per-sample gradients ``phi_m(x)`` of the output with respect to every earlier parameter
(m columns, :mod:`._jacobian`):

* :func:`projection_gram` forms ``A^T A`` for the least-squares map ``A = C G^{-1}``
  (``C = Phi_m^T Phi_r``, ``G = Phi_r^T Phi_r``, eq. 8-9), ridge-regularised;
* :func:`posterior_factor` gives ``T`` with the latent variance ``|T^T phi_r(x)|^2`` of the
  BLL on ``phi_L = L^T phi_r``, ``L L^T = I + A^T A`` (Thm 3.2, eq. 15-16 and 20);
* :func:`fit_last_layer` runs the whole post-hoc stage on a (sub)sample of rows: the
  streamed Gram matrices, the projection, the evidence's scales and the factor, for the
  enriched layer, the plain BLL or the exact NTK-GP in weight space;
* :func:`network_features` and :func:`last_layer_variance` give the predictive moments.

Everything r x r (or p x p for the NTK-GP) is computed in float64.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ._blr import BLREvidence, blr_fit_scales, blr_posterior
from ._chunks import auto_batch_size
from ._device import to_float, to_numpy
from ._jacobian import body_jacobians, head_features
from ._linalg import stable_cholesky
from ._mlp_grad import MLPSquaredError, squared_error_loss

F64 = torch.float64

#: Elements of one block of features or Jacobians (rows per block = this / columns).
BLOCK_ELEMENTS = 2**22


def rows_per_block(width):
    """Rows per block of a pass whose rows have ``width`` columns."""
    return auto_batch_size(max(1, width), max_elements=BLOCK_ELEMENTS)


def count_parameters(module, names):
    """Number of scalar parameters in ``module``'s parameters ``names``."""
    return sum(module.get_parameter(k).numel() for k in names)


def projection_gram(C, G, ridge):
    """``A^T A = G_l^{-1} C^T C G_l^{-1}`` for ``A = C G_l^{-1}`` (eq. 9) with the ridge
    ``G_l = G + ridge * tr(G)/r I`` (relative to the mean eigenvalue of ``G``); symmetric
    r x r."""
    r = G.shape[0]
    tr = float(G.diagonal().sum())
    lam = ridge * (tr / r if tr > 0 else 1.0)
    Gl = G + lam * torch.eye(r, dtype=G.dtype, device=G.device)
    W = torch.linalg.solve(Gl, C.T)  # r x m (or r x q)
    AtA = W @ W.T
    return 0.5 * (AtA + AtA.T)


def posterior_factor(G_S, AtA, noise, n_scale=1.0, prior_variance=1.0, context="Rich-BLL"):
    """``T`` with latent variance ``v(x) = |T^T phi_r(x)|^2`` (Thm 3.2, eq. 15-16 and 20).

    ``L L^T = I + A^T A`` (B^T B, eq. 10-11), ``phi_L = L^T phi_r``, and the posterior of the
    unit-prior BLL on ``sqrt(prior_variance) phi_L`` with the Gram matrix ``G_S`` of the
    (sub)sample scaled by ``n_scale = N / k``: ``T = sqrt(s) L F`` with ``F F^T = (n_scale s
    L^T G_S L / noise + I)^{-1}``. ``AtA = None`` gives the plain BLL (``L = I``).
    """
    r = G_S.shape[0]
    eye = torch.eye(r, dtype=G_S.dtype, device=G_S.device)
    if AtA is None:
        L = eye
    else:
        L, _ = stable_cholesky(eye + AtA, context=f"{context}: I + A^T A")
    GL = (n_scale * prior_variance) * (L.T @ G_S @ L)
    post = blr_posterior(GL, torch.zeros(r, 1, dtype=G_S.dtype, device=G_S.device), noise,
                         context=f"{context}: posterior precision")
    return math.sqrt(prior_variance) * (L @ post.factor)


def subsample_rows(n, subsample, r, rng, context="Rich-BLL", stacklevel=2):
    """Sorted uniform rows without replacement (paper §3.3), or None for all rows.

    ``subsample`` is a fraction of ``n``, a count, or None. A count above ``n`` or below
    ``r + 1`` raises a ValueError; below ``5 r`` a UserWarning, whose ``stacklevel`` counts
    from the caller (1: the caller's line).
    """
    if subsample is None:
        return None
    if isinstance(subsample, numbers.Integral):
        k = int(subsample)
        if k > n:
            raise ValueError(f"{context}: subsample={k} exceeds the {n} training rows.")
    else:
        k = max(1, int(round(float(subsample) * n)))
    if k >= n:
        return None
    if k < r + 1:
        raise ValueError(f"{context}: subsample gives {k} rows, fewer than r + 1 = {r + 1} "
                         "(the last-layer width plus one); the projection and the posterior "
                         "need more. Raise subsample.")
    if k < 5 * r:
        warnings.warn(f"{context}: subsample gives {k} rows, below 5 r = {5 * r}; the "
                      "subsampled variance can be far off (about 10 r rows are "
                      "recommended).", UserWarning, stacklevel=stacklevel + 1)
    return np.sort(rng.choice(n, k, replace=False))


def mean_squared_error(f, Y, weights=None):
    """``mean((f - Y)^2)`` as a float (the ``weights``-weighted mean when given)."""
    err = (f.reshape(-1, 1) - Y).square()
    if weights is None:
        return to_float(err.mean())
    return to_float((weights.reshape(-1, 1) * err).sum() / weights.sum())


def mse_objective(net, X, Y, weights=None):
    """The training loss ``loss(rows, epoch)``: the mean-squared error of ``net`` on ``rows``
    of ``(X, Y)``; with ``weights`` (normalised to mean 1 over the rows), the mean of the
    weighted squared errors, an unbiased estimate of the weighted MSE of every row.

    For a plain ReLU or tanh MLP of :func:`~._train.build_mlp` it is an
    :class:`~._mlp_grad.MLPSquaredError`, whose hand-written gradient the trainer uses (the
    same gradient as autograd's, at a fraction of the cost on the CPU)."""
    w = None if weights is None else (weights / weights.mean()).reshape(-1, 1)
    fast = MLPSquaredError.for_network(net, X, Y, w)
    return fast if fast is not None else squared_error_loss(net, X, Y, w)


def rmse_score(net, X, Y, weights=None):
    """``validate()``: the root-mean-squared error of ``net`` on ``(X, Y)`` as a float (the
    root of the ``weights``-weighted mean when given)."""
    if weights is not None:
        return lambda: math.sqrt(mean_squared_error(net(X), Y, weights))

    def validate():
        return to_float((net(X).reshape(-1, 1) - Y).square().mean().sqrt())
    return validate


@dataclass
class LastLayerPosterior:
    """What :func:`fit_last_layer` fitted (tensors in float64)."""

    factor: torch.Tensor  # T: latent variance |T^T phi(x)|^2
    chol: torch.Tensor | None  # L with L L^T = I + A^T A (None: BLL or NTK-GP)
    prior_variance: float
    noise: float
    log_evidence: float
    projection: torch.Tensor | None = None  # A^T A of "rich" (None: BLL or NTK-GP)


def _gram_stats(net, body_names, X, Phi, Y, with_body, weights=None):
    """``(G, B)`` = ``(J^T W J, J^T W Y)`` for the features ``J = [phi_m, phi_r]`` (or
    ``phi_r`` alone), accumulated over row blocks; ``W`` the row ``weights`` (or I)."""
    if not with_body:
        if weights is not None:
            PW = Phi * weights[:, None]
            return PW.T @ Phi, PW.T @ Y
        return Phi.T @ Phi, Phi.T @ Y
    p = count_parameters(net, body_names) + Phi.shape[1]
    G = torch.zeros(p, p, dtype=F64, device=X.device)
    B = torch.zeros(p, 1, dtype=F64, device=X.device)
    chunk = rows_per_block(p - Phi.shape[1])
    for start, J in body_jacobians(net, body_names, X, chunk):
        Jp = torch.cat([J.to(F64), Phi[start:start + J.shape[0]]], dim=1)
        JW = Jp if weights is None else Jp * weights[start:start + J.shape[0], None]
        G += JW.T @ Jp
        B += JW.T @ Y[start:start + J.shape[0]]
    return G, B


def _cross_moment(net, body_names, X, Phi, sketch):
    """``C = Phi_m^T Phi_r`` (m x r), or its sketch ``P^T C`` (q x r), over row blocks."""
    C = None
    for start, J in body_jacobians(net, body_names, X,
                                   rows_per_block(count_parameters(net, body_names))):
        J = J.to(F64) if sketch is None else sketch(J)
        part = J.T @ Phi[start:start + J.shape[0]]
        C = part if C is None else C + part
    return C


def fit_last_layer(net, body_names, X, Phi, Y, *, kind, rows=None, ridge=1e-4, noise=None,
                   noise_floor=1e-8, prior_variance=None, sketch=None, context="Rich-BLL",
                   weights=None, precision=None, projection=None):
    """The post-hoc stage: the last layer's posterior on the rows ``rows`` (None: all).

    Parameters
    ----------
    net, body_names : the network and the names of its earlier (body) parameters.
    X, Phi, Y : tensors of every row: the scaled inputs, the head features ``phi_r`` and the
        normalised targets (n x 1).
    kind : {"rich", "bll", "ntk"}
        The enriched layer (``L L^T = I + A^T A``, :func:`projection_gram` with ``ridge``),
        the plain BLL, or the exact NTK-GP on all ``m + r`` parameters. "rich" without body
        parameters (m = 0) is the BLL.
    rows : ndarray or None
        The subsample; its Gram matrices are scaled by ``n / k``.
    noise, prior_variance : float or None
        Fixed values, or None for the maximiser of the closed-form evidence (the noise never
        below ``noise_floor``).
    sketch : callable or None
        ``J -> J P`` (a :class:`~._jacobian.GaussianSketch`) for the cross-moment of "rich".
    weights : tensor of shape (n,) or None
        Frequency weights of the rows: every Gram matrix and moment is that of row ``i``
        repeated ``w_i`` times (its noise ``noise / w_i``), ``n`` their sum.
    precision : tensor of shape (n,) or None
        Relative noise precisions of the rows (a heteroscedastic noise: row ``i``'s noise is
        ``noise / precision_i``); they weight the posterior and the evidence, not the
        projection. None: one noise for every row.
    projection : tensor of shape (r, r) or None
        ``A^T A`` of an earlier fit on the same network and rows (returned as
        :attr:`LastLayerPosterior.projection`), which spares the Jacobian pass of "rich".
    """
    n = X.shape[0]
    w = None if weights is None else weights.to(F64)
    prec = None if precision is None else precision.to(F64)
    if rows is not None:
        idx = torch.as_tensor(rows, device=X.device)
        X, Phi, Y = X[idx], Phi[idx], Y[idx]
        prec = None if prec is None else prec[idx]
    Phi, Y = Phi.to(F64), Y.to(F64)
    if w is None:
        n_scale = n / X.shape[0]
    else:
        n = to_float(w.sum())
        w = w if rows is None else w[idx]
        n_scale = n / to_float(w.sum())
    # the posterior's row weights: frequency weights times noise precisions
    wp = w if prec is None else (prec if w is None else w * prec)
    yy = n_scale * to_float(Y.square().sum() if wp is None else (wp[:, None] * Y.square()).sum())
    # log|diag(noise / precision)| = n log noise - sum log precision: a constant in the scales
    log_prec = 0.0 if prec is None else 0.5 * n_scale * to_float(
        (torch.log(prec) if w is None else w * torch.log(prec)).sum())

    def scales(G, B):
        """(prior variance, noise, log evidence) for the features with Gram ``G``."""
        ev = BLREvidence(n_scale * G, n_scale * B, yy, n)
        s, v = blr_fit_scales(ev, 1.0 if prior_variance is None else prior_variance,
                              max(0.1 * yy / n, noise_floor) if noise is None else noise,
                              noise_lower_bound=noise_floor,
                              fix_prior_var=prior_variance is not None,
                              fix_noise=noise is not None, prior_var_starts=(1e-2, 1e2))
        return s, v, ev(s, v) + log_prec

    G_S, B_S = _gram_stats(net, body_names, X, Phi, Y, False, wp)
    L = AtA = None
    if kind == "ntk":
        G, B = _gram_stats(net, body_names, X, Phi, Y, True, wp)
        s, v, ev = scales(G, B)
        T = posterior_factor(G, None, v, n_scale, s, context)
    elif kind == "bll" or count_parameters(net, body_names) == 0:
        s, v, ev = scales(G_S, B_S)
        T = posterior_factor(G_S, None, v, n_scale, s, context)
    else:
        AtA = projection
        if AtA is None:  # the projection weighs the rows by their frequencies only
            G_w = G_S if prec is None else _gram_stats(net, body_names, X, Phi, Y, False,
                                                       w)[0]
            AtA = projection_gram(_cross_moment(net, body_names, X,
                                                Phi if w is None else Phi * w[:, None],
                                                sketch), G_w, ridge)
        eye = torch.eye(G_S.shape[0], dtype=F64, device=G_S.device)
        L, _ = stable_cholesky(eye + AtA, context=f"{context}: I + A^T A")
        s, v, ev = scales(L.T @ G_S @ L, L.T @ B_S)
        T = posterior_factor(G_S, AtA, v, n_scale, s, context)
    return LastLayerPosterior(factor=T, chol=L, prior_variance=float(s), noise=float(v),
                              log_evidence=float(ev), projection=AtA)


def network_features(net, head, body_names, X, with_body=False):
    """Network output (q, 1) and the variance features at ``X``, both float64: ``phi_r``
    (q, r) or, ``with_body``, ``[phi_m, phi_r]`` (q, m + r)."""
    f, Phi = head_features(net, head, X, rows_per_block(head.in_features))
    Phi = Phi.to(F64)
    if with_body:
        parts = [torch.cat([J.to(F64), Phi[s:s + J.shape[0]]], dim=1)
                 for s, J in body_jacobians(net, body_names, X,
                                            rows_per_block(count_parameters(net, body_names)))]
        Phi = torch.cat(parts) if parts else Phi
    return f.to(F64), Phi


def last_layer_variance(Phi, T, noise=0.0, full_cov=False):
    """Latent variance ``|T^T phi|^2`` plus ``noise`` at features ``Phi`` (q,), or the
    covariance ``Phi T T^T Phi^T + noise I`` (q x q)."""
    PT = Phi @ T
    if full_cov:
        V = PT @ PT.T
        V.diagonal().add_(noise)
        return V
    return PT.square().sum(1) + noise


def standardised_residuals(Y, f, var):
    """``(Y - f) / sqrt(var)`` as a float64 NumPy vector."""
    return to_numpy((Y.to(F64).reshape(-1) - f.reshape(-1)) / var.sqrt())
