"""Gaussian-process likelihoods and predictives, exact and Nystrom (DTC), for any kernel.

Both strategies take ``kernel(params, X1, X2=None, diag=False)`` and a map
``unpack(raw) -> params`` (a dict of tensors holding ``"noise_variance"``), and return the
negative log marginal likelihood of the columns of ``Y`` and its gradient in ``raw``. The
gradient uses explicit adjoints back-propagated through kernel row blocks (never autograd's
Cholesky backward on an n x n matrix), so memory stays bounded by the block size.

* :class:`ExactGP`: ``Y[:, c] ~ N(0, K + s I)``, O(n^3).

Both take optional row weights ``w`` (frequency weights): row ``i`` enters the likelihood as
``N(y_i; f_i, s)^{w_i}``, which is the Gaussian likelihood with noise ``s / w_i`` on row ``i``
times ``prod_i (2 pi s)^{(1 - w_i) / 2} w_i^{-1/2}``. For integer weights this is exactly the
likelihood of the rows repeated ``w_i`` times (the repeats' contrasts are exactly zero), so a
weighted fit equals the fit on the repeated rows; ``N_eff = sum w`` then counts the data.
* :class:`NystromGP`: ``Y[:, c] ~ N(0, Q + s I)`` with ``Q = K_nS K_SS^-1 K_Sn`` for anchors
  ``Z``, evaluated through ``W = V V^T`` and ``v = V Y`` (``V = L^-1 K_Sn``, ``L L^T = K_SS``)
  accumulated over row blocks: O(n m^2) time and O(m^2 + block m) memory; no n x n or n x m
  matrix exists. Its predictive is the projected-process (DTC) one, whose latent variance lies
  in ``[0, k(x, x)]`` (GPflow's SGPR recipe).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._chunks import (CPU_BLOCK_ELEMENTS, auto_batch_size, block_elements, check_dense_fits,
                      iter_slices)
from ._linalg import cho_solve, inverse_lower, solve_lower, stable_cholesky

__all__ = ["ExactGP", "NystromGP", "gp_predict", "gaussian_log_marginal", "leave_group_out"]

_LOG2PI = math.log(2.0 * math.pi)
#: Kernel entries per row block on the CPU (on CUDA, :func:`~._chunks.block_elements` scales
#: the block with the free device memory).
BLOCK_ELEMENTS = CPU_BLOCK_ELEMENTS
#: Up to this many kernel entries, a gradient evaluation keeps the kernel's autograd graph
#: (one kernel evaluation instead of two; memory about 30 x 8 bytes per entry).
KEEP_GRAPH_ELEMENTS = 2**20
#: Device types on which an exact GP's gradient and leave-one-out variances go through
#: ``L^-1`` by tiles (:func:`~._linalg.inverse_lower`) rather than ``(L L^T)^-1`` whole: at
#: most two n x n matrices (``L`` and ``L^-1``) and about a third of the multiply-adds of a
#: triangular solve, in matrix products. On the CPU, LAPACK's ``cholesky_inverse`` does as
#: few operations and is kept.
TILED_DEVICES = ("cuda",)
#: Rows (and columns) of a tile of that path, at most: big enough for matrix-product speed on
#: a GPU, small enough that a kernel tile's autograd graph (about 30 temporaries) stays near
#: 1 GB.
ADJOINT_TILE = 2048
#: Temporaries of a kernel tile's autograd graph, in tiles (what :func:`_adjoint_tile` budgets).
GRAPH_TEMPORARIES = 30


def _block(X, block):
    """``block`` or the device's block size for tensors like ``X``."""
    return block if block is not None else block_elements(X.device,
                                                          element_bytes=X.element_size())


def _adjoint_tile(n, block):
    """Rows of a tile of the tiled adjoint for ``n`` training rows.

    As large as the row-block budget allows (``block`` kernel entries with the block's 12
    temporaries, i.e. :func:`~._chunks.block_elements`' share of the free device memory, held
    by a tile's graph of :data:`GRAPH_TEMPORARIES`), at most :data:`ADJOINT_TILE`. Every tile
    pair costs a kernel evaluation and its backward, the same number of small kernel
    launches whatever the tile's size, so small tiles made the gradient launch-bound on a
    GPU: at 2,000 rows, tiles of 256 rows meant 36 pairs and 0.14-0.17 s per gradient on an
    H100, against 0.013-0.019 s with one tile (``benchmarks/results/bench_gpu.md``, fourth
    loan). At least an eighth of the rows (and 256), as before, where the budget is smaller.
    """
    budget = math.isqrt(max(1, int(block) * 12 // GRAPH_TEMPORARIES))
    return min(ADJOINT_TILE, max(256, n // 8, budget))


def _inverse_from_cholesky(L):
    """``(L L^T)^-1``: LAPACK's ``cholesky_inverse`` on the CPU; on CUDA a triangular solve
    and a matrix product, which run at matrix-multiply speed there (``cholesky_inverse`` ran
    at half of it on an H100)."""
    if L.device.type != "cuda":
        return torch.cholesky_inverse(L)
    Li = torch.linalg.solve_triangular(L, torch.eye(L.shape[0], dtype=L.dtype,
                                                    device=L.device), upper=False)
    return Li.T @ Li


def _gram(kernel, params, X1, X2, block_elements):
    out = X1.new_empty((X1.shape[0], X2.shape[0]))
    for sl in iter_slices(X1.shape[0], auto_batch_size(X2.shape[0], None, block_elements)):
        out[sl] = kernel(params, X1[sl], X2)
    return out


def gaussian_log_marginal(q, logdet, N, C, params):
    """``log N(Y; 0, K)`` from ``q = tr(Y^T K^-1 Y)`` and ``logdet = log|K|`` (``N = n C``)."""
    return -0.5 * q - 0.5 * C * logdet - 0.5 * N * _LOG2PI


class ExactGP:
    """Exact GP likelihood of ``Y`` (n x C) given inputs ``X`` (n x d) on one device.

    The model is ``Y[:, c] ~ N(0, K + s I)`` with ``s = params["noise_variance"]`` (times
    ``mean(diag K)`` when ``relative_noise``). ``marginal(q, logdet, N, C, params)`` maps the
    sufficient statistics ``q = tr(Y^T (K + sI)^-1 Y)`` and ``logdet = log|K + sI|`` to the log
    marginal likelihood; the default is the Gaussian one, and a scale mixture over the
    amplitude (Student-t process) plugs its own formula in here.

    ``state(raw)`` returns the factorisation used for prediction: ``{"basis": X, "L":
    chol(K + s I), "LB": None, "dual": (K + s I)^-1 Y, "nll", "q", "logdet", "noise"}``.
    """

    #: Whether the strategy holds n x n matrices (checked against the device's memory).
    dense = True

    def __init__(self, kernel, unpack, X, Y, *, marginal=None, relative_noise=False,
                 block_elements=None, context="exact GP", weights=None):
        if self.dense:
            check_dense_fits(Y.shape[0], X.device, X.element_size(), context=context,
                             alternative="MixedActivationGPRegressor(approx='nystrom') or "
                                         "DBKRegressor (both O(n) memory)")
        self.context = context
        self.kernel, self.unpack, self.X, self.Y = kernel, unpack, X, Y
        self.n, self.C = Y.shape
        self.marginal = gaussian_log_marginal if marginal is None else marginal
        self.relative_noise = relative_noise
        self.block = _block(X, block_elements)
        self._set_weights(weights)
        if self.weights is not None and relative_noise:
            raise NotImplementedError("row weights with a relative noise are not supported.")

    def _set_weights(self, weights):
        """Store the row weights (None: every row once) and ``n_eff``, their sum."""
        self.weights = weights
        self.n_eff = self.n if weights is None else float(weights.sum())

    def _noise_logdet_shift(self, noise):
        """``sum_i (w_i - 1) log s + log w_i``: what turns ``log|K + s W^-1|`` into the log
        determinant of the repeated rows (0 without weights)."""
        if self.weights is None:
            return 0.0
        w = self.weights
        return (self.n_eff - self.n) * torch.log(noise) + torch.log(w).sum()

    def subset(self, idx):
        """The same model on the rows ``idx``."""
        return type(self)(self.kernel, self.unpack, self.X[idx], self.Y[idx],
                          marginal=self.marginal, relative_noise=self.relative_noise,
                          block_elements=self.block, context=self.context,
                          weights=None if self.weights is None else self.weights[idx])

    def _factor(self, K, p, warn=False, context="training kernel"):
        return self._solve_factored(*self._cholesky(K, p, warn, context), p)

    def _cholesky(self, K, p, warn, context):
        """``chol(K + s I)`` (the noise is added to ``K``'s diagonal in place), ``s`` and the
        jitter added."""
        noise = p["noise_variance"].detach()
        if self.relative_noise:
            noise = noise * K.diagonal().mean()
        K.diagonal().add_(noise if self.weights is None else noise / self.weights)
        L, jitter = stable_cholesky(K, context=context, warn=warn)
        return L, noise, jitter

    def _solve_factored(self, L, noise, jitter, p):
        A = cho_solve(L, self.Y)
        q = (self.Y * A).sum()
        logdet = 2.0 * torch.log(L.diagonal()).sum() + self._noise_logdet_shift(noise)
        nll = -self.marginal(q, logdet, self.n_eff * self.C, self.C, p)
        return {"basis": self.X, "L": L, "LB": None, "dual": A, "nll": nll, "q": q,
                "logdet": logdet, "noise": noise, "jitter": jitter}

    def loo(self, state, params=None):
        """Leave-one-out residuals ``r`` (n x C) and variances ``v`` (n,) of ``state``.

        For fixed hyperparameters the predictive of row ``i`` given the other rows has mean
        ``y_i - r_i`` and variance ``v_i`` (unit amplitude, noise included), with
        ``r_i = [K^-1 Y]_i / [K^-1]_ii`` and ``v_i = 1 / [K^-1]_ii`` (``K`` the noisy
        training kernel). ``diag(K^-1)`` is the squared column norms of ``L^-1``, solved in
        column blocks, so the extra memory is one block. ``params`` is unused here.
        """
        L, dual = state["L"], state["dual"]
        n = L.shape[0]
        if L.device.type in TILED_DEVICES:
            with torch.no_grad():
                Li = inverse_lower(L, ADJOINT_TILE)
                d = L.new_empty(n)
                for sl in iter_slices(n, ADJOINT_TILE):  # rows above the tile are zero
                    d[sl] = Li[sl.start:, sl].square().sum(0)
                del Li
                return dual / d[:, None], 1.0 / d
        d = L.new_empty(n)
        with torch.no_grad():
            for sl in iter_slices(n, auto_batch_size(n, None, self.block)):
                eye = L.new_zeros((n, sl.stop - sl.start))
                eye[sl, :] = torch.eye(sl.stop - sl.start, dtype=L.dtype, device=L.device)
                d[sl] = solve_lower(L, eye).square().sum(0)
            return dual / d[:, None], 1.0 / d

    def inverse_block(self, state, params, idx):
        """``([K^-1]_{idx, idx}, [K^-1 Y]_idx)`` for the rows ``idx`` (a tensor of k row
        indices), in O(n^2 k) from the factor (``params`` is unused here)."""
        L = state["L"]
        with torch.no_grad():
            E = L.new_zeros((L.shape[0], idx.numel()))
            E[idx, torch.arange(idx.numel(), device=L.device)] = 1.0
            W = solve_lower(L, E)
            return W.T @ W, state["dual"][idx]

    def state(self, raw, warn=False, context="training kernel"):
        p = self.unpack(raw)
        with torch.no_grad():
            K = _gram(self.kernel, p, self.X, self.X, self.block)
            factored = self._cholesky(K, p, warn, context)
            del K  # freed before the solves: at most two n x n matrices (K and L) at once
            return self._solve_factored(*factored, p)

    def value_and_grad(self, raw):
        """NLL and ``dNLL/draw`` through the explicit adjoint of ``K + s I``.

        With ``g_q = dNLL/dq`` and ``g_l = dNLL/dlogdet`` (autograd through the O(1) marginal
        formula), ``dNLL/dK = g_l K^-1 - g_q A A^T``; for the Gaussian this is
        ``(C K^-1 - A A^T) / 2``. Autograd's Cholesky backward is never used. Small problems
        keep the kernel's graph (one kernel evaluation); larger ones recompute the kernel in row
        blocks over the upper block triangle (the kernel is symmetric), so memory stays bounded.
        """
        rl = raw.detach().clone().requires_grad_(True)
        keep = self.n * self.n <= KEEP_GRAPH_ELEMENTS
        if keep:
            p = self.unpack(rl)
            K = self.kernel(p, self.X)
            with torch.no_grad():
                st = self._factor(K.detach().clone(), p)
        else:
            st = self.state(raw)
        q = st["q"].detach().requires_grad_(True)
        logdet = st["logdet"].detach().requires_grad_(True)
        nll = -self.marginal(q, logdet, self.n_eff * self.C, self.C, self.unpack(rl))
        g_q, g_l = torch.autograd.grad(nll, (q, logdet), retain_graph=True)
        if nll.grad_fn is not None:
            nll.backward()  # the marginal's own parameters (prior shape/scale)
        if self.weights is not None:  # the weights' constant, (sum w - n) log s, in logdet
            (g_l * self._noise_logdet_shift(self.unpack(rl)["noise_variance"])).backward()
        if not keep and st["L"].device.type in TILED_DEVICES:
            return self._value_and_grad_tiled(rl, raw, st, g_q, g_l)
        with torch.no_grad():
            G = _inverse_from_cholesky(st["L"])
            G.mul_(g_l).addmm_(st["dual"], st["dual"].T, alpha=-g_q)
            # d(K + s W^-1)/ds = W^-1: the noise's gradient is tr(G W^-1)
            trG = (G.diagonal().sum() if self.weights is None
                   else (G.diagonal() / self.weights).sum())
            mean_diag = None
            if self.relative_noise:  # s = nu * mean(diag K) also depends on K
                mean_diag = st["noise"] / self.unpack(raw)["noise_variance"]
                G.diagonal().add_(self.unpack(raw)["noise_variance"] * trG / self.n)
        noise_term = self.unpack(rl)["noise_variance"] * trG
        (noise_term * mean_diag if mean_diag is not None else noise_term).backward()
        if keep:
            (K * G).sum().backward()
        else:
            for sl in iter_slices(self.n, auto_batch_size(self.n, None, self.block)):
                p = self.unpack(rl)
                s = (self.kernel(p, self.X[sl]) * G[sl, sl]).sum()
                if sl.stop < self.n:
                    s = s + 2.0 * (self.kernel(p, self.X[sl], self.X[sl.stop:])
                                   * G[sl, sl.stop:]).sum()
                if s.grad_fn is not None:
                    s.backward()
        grad = rl.grad if rl.grad is not None else torch.zeros_like(rl)
        return st["nll"].detach(), grad

    def _value_and_grad_tiled(self, rl, raw, st, g_q, g_l):
        """The rest of :meth:`value_and_grad` through ``Li = L^-1`` by tiles.

        ``K^-1 = Li^T Li``, so the adjoint's tile ``(I, C)`` (``C >= I``, the kernel is
        symmetric) is ``g_l Li[C:, I]^T Li[C:, C] - g_q A_I A_C^T`` (rows of ``Li`` above tile
        ``C`` are zero), made when it is used and dropped after its kernel tile's backward:
        no n x n adjoint is held.
        """
        L, dual, n = st["L"], st["dual"], self.n
        t = _adjoint_tile(n, self.block)
        gl, gq = float(g_l), float(g_q)  # one host read per evaluation, none in the loop
        with torch.no_grad():
            Li = inverse_lower(L, t)
            if self.weights is None:
                trG = g_l * torch.linalg.vector_norm(Li).square() - g_q * dual.square().sum()
            else:  # tr(G W^-1), diag(K^-1) being the squared column norms of Li
                trG = ((g_l * Li.square().sum(0) - g_q * dual.square().sum(1))
                       / self.weights).sum()
            shift = 0.0
            mean_diag = None
            if self.relative_noise:  # s = nu * mean(diag K) also depends on K
                mean_diag = st["noise"] / self.unpack(raw)["noise_variance"]
                shift = self.unpack(raw)["noise_variance"] * trG / n
        noise_term = self.unpack(rl)["noise_variance"] * trG
        (noise_term * mean_diag if mean_diag is not None else noise_term).backward()
        for i in iter_slices(n, t):
            for c in iter_slices(n, t):
                if c.start < i.start:
                    continue
                with torch.no_grad():
                    G = torch.addmm(dual[i] @ dual[c].T, Li[c.start:, i].T, Li[c.start:, c],
                                    beta=-gq, alpha=gl)
                    if c.start == i.start and mean_diag is not None:
                        G.diagonal().add_(shift)
                p = self.unpack(rl)
                if c.start == i.start:
                    s = (self.kernel(p, self.X[i]) * G).sum()
                else:
                    s = 2.0 * (self.kernel(p, self.X[i], self.X[c]) * G).sum()
                if s.grad_fn is not None:
                    s.backward()
        grad = rl.grad if rl.grad is not None else torch.zeros_like(rl)
        return st["nll"].detach(), grad


class NystromGP(ExactGP):
    """Nystrom (subset-of-regressors / DTC) likelihood with anchors ``Z`` (m x d).

    ``jitter`` is added to ``K_SS``'s diagonal relative to its mean diagonal. ``state(raw)``
    returns ``{"basis": Z, "L": chol(K_SS + jitter), "LB": chol(B), "dual": L^-T L_B^-T c,
    "nll": ...}`` with ``B = I + W / s`` and ``c = L_B^-1 v / s``.
    """

    dense = False

    def __init__(self, kernel, unpack, X, Y, Z, *, jitter=1e-6, block_elements=None,
                 weights=None):
        super().__init__(kernel, unpack, X, Y, block_elements=block_elements, weights=weights)
        self.Z, self.jitter = Z, jitter
        # weights: with V~ = V W^(1/2) and Y~ = W^(1/2) Y, Q + s W^-1 = W^-1/2 (V~^T V~ + s I)
        # W^-1/2, and the weights' constant cancels the log|W| this leaves: the likelihood
        # is the unweighted one of (V~, Y~) with n replaced by n_eff
        self.yy = (Y * Y).sum() if weights is None else (weights[:, None] * Y * Y).sum()
        self.rows = auto_batch_size(Z.shape[0], None, self.block)

    def subset(self, idx):
        return type(self)(self.kernel, self.unpack, self.X[idx], self.Y[idx], self.Z,
                          jitter=self.jitter, block_elements=self.block,
                          weights=None if self.weights is None else self.weights[idx])

    def _w(self, sl):
        """The weights of the rows ``sl`` as a row vector (1.0 without weights)."""
        return 1.0 if self.weights is None else self.weights[sl][None, :]

    def anchor_chol(self, p, warn=False, context="anchor kernel"):
        if torch.is_grad_enabled():
            K = self.kernel(p, self.Z, self.Z)
        else:
            K = _gram(self.kernel, p, self.Z, self.Z, self.block)
        K = K + (self.jitter * K.diagonal().mean()) * torch.eye(
            K.shape[0], dtype=K.dtype, device=K.device)
        return stable_cholesky(K, context=context, warn=warn)[0]

    def _inner(self, W, v, s, warn=False, context="Nystrom inner matrix"):
        # log det(Q + sI) = n log s + log det B;  y^T (Q + sI)^-1 y = (y^T y / s - |c|^2)
        B = W / s + torch.eye(W.shape[0], dtype=W.dtype, device=W.device)
        LB = stable_cholesky(B, context=context, warn=warn)[0]
        c = solve_lower(LB, v) / s
        nll = 0.5 * (self.C * (self.n_eff * torch.log(s)
                               + 2.0 * torch.log(LB.diagonal()).sum())
                     + self.yy / s - (c * c).sum())
        return nll + 0.5 * self.n_eff * self.C * _LOG2PI, LB, c

    def _accumulate(self, p, L):
        m = self.Z.shape[0]
        W, v = L.new_zeros((m, m)), L.new_zeros((m, self.C))
        for sl in iter_slices(self.n, self.rows):
            V = solve_lower(L, self.kernel(p, self.Z, self.X[sl]))
            Vw = V * self._w(sl)
            W.addmm_(Vw, V.T)
            v.addmm_(Vw, self.Y[sl])
        return W, v

    def state(self, raw, warn=False, context="training kernel"):
        p = self.unpack(raw)
        with torch.no_grad():
            L = self.anchor_chol(p, warn, f"{context} (anchors)")
            W, v = self._accumulate(p, L)
            nll, LB, c = self._inner(W, v, p["noise_variance"], warn, f"{context} (Nystrom B)")
            dual = torch.linalg.solve_triangular(
                L.T, torch.linalg.solve_triangular(LB.T, c, upper=True), upper=True)
        return {"basis": self.Z, "L": L, "LB": LB, "dual": dual, "nll": nll}

    def loo(self, state, params):
        """Leave-one-out residuals and variances under ``Q + s I`` (see :meth:`ExactGP.loo`).

        With ``V = L^-1 K_SX`` and ``G = L_B^-1 V``, ``(Q + s I)^-1 = (I - G^T G / s) / s``, so
        ``[.]^-1_ii = (1 - |G_i|^2 / s) / s`` and ``(Q + s I)^-1 Y = (Y - G^T c) / s`` with
        ``c = L_B^T L^T dual``: O(n m^2) in row blocks. With weights ``w``, ``G_i`` becomes
        ``sqrt(w_i) G_i`` and both sides are multiplied by ``w_i``: ``r_i = (y_i - G_i^T c)
        / (1 - w_i |G_i|^2 / s)`` and ``v_i = s / (w_i (1 - w_i |G_i|^2 / s))``.
        """
        L, LB, dual = state["L"], state["LB"], state["dual"]
        s = params["noise_variance"].detach()
        with torch.no_grad():
            c = LB.T @ (L.T @ dual)
            # the outputs are allocated once: small tensors kept between the blocks'
            # large temporaries fragment the heap (+400 MB resident at 10^5 rows)
            r, v = torch.empty_like(self.Y), self.Y.new_empty(self.n)
            for sl in iter_slices(self.n, self.rows):
                G = solve_lower(LB, solve_lower(L, self.kernel(params, self.Z, self.X[sl])))
                w = self._w(sl)
                w = w[0] if self.weights is not None else w
                d = (1.0 - w * G.square().sum(0) / s) / s
                r[sl] = (self.Y[sl] - G.T @ c) / s / d[:, None]
                v[sl] = 1.0 / (w * d)
            return r, v

    def inverse_block(self, state, params, idx):
        """``([(Q + s I)^-1]_{idx, idx}, [(Q + s I)^-1 Y]_idx)`` for the rows ``idx``
        (see :meth:`loo`), O(k m^2)."""
        L, LB, dual = state["L"], state["LB"], state["dual"]
        s = params["noise_variance"].detach()
        with torch.no_grad():
            c = LB.T @ (L.T @ dual)
            G = solve_lower(LB, solve_lower(L, self.kernel(params, self.Z, self.X[idx])))
            if self.weights is None:
                B = -(G.T @ G) / s
                B.diagonal().add_(1.0)
                return B / s, (self.Y[idx] - G.T @ c) / s
            h = self.weights[idx].sqrt()  # (see loo) W^1/2 (I - G~^T G~ / s) W^1/2 / s
            Gw = G * h[None, :]
            B = -(Gw.T @ Gw) / s
            B.diagonal().add_(1.0)
            return h[:, None] * B * h[None, :] / s, \
                (h * h)[:, None] * (self.Y[idx] - G.T @ c) / s

    def value_and_grad(self, raw):
        """NLL and its gradient: values by row blocks, then each block's adjoint.

        With ``G = dNLL/dW`` and ``g = dNLL/dv`` from autograd on the m x m problem, block
        ``c`` contributes ``<V_c, (G + G^T) V_c + g Y_c^T>`` through ``V_c = L^-1 K_Sc``; the
        gradient that reaches ``L`` goes once through the anchor Cholesky. Small problems
        keep the blocks' graphs from the value pass; larger ones recompute them (two passes,
        memory O(m^2 + block m)).
        """
        rl = raw.detach().clone().requires_grad_(True)
        keep = self.n * self.Z.shape[0] <= KEEP_GRAPH_ELEMENTS
        with torch.no_grad():
            L = self.anchor_chol(self.unpack(raw))
        Ll = L.detach().requires_grad_(True)
        m = self.Z.shape[0]
        W, v = L.new_zeros((m, m)), L.new_zeros((m, self.C))
        graphs = []

        def block(sl):
            return torch.linalg.solve_triangular(
                Ll, self.kernel(self.unpack(rl), self.Z, self.X[sl]), upper=False)

        for sl in iter_slices(self.n, self.rows):
            with torch.set_grad_enabled(keep):
                V = block(sl)
            graphs.append(V if keep else None)
            with torch.no_grad():
                Vw = V * self._w(sl)
                W.addmm_(Vw, V.T)
                v.addmm_(Vw, self.Y[sl])
        W.requires_grad_(True)
        v.requires_grad_(True)
        nll = self._inner(W, v, self.unpack(rl)["noise_variance"])[0]
        gW, gv, graw = torch.autograd.grad(nll, (W, v, rl))
        Gs = gW + gW.T
        for sl, V in zip(iter_slices(self.n, self.rows), graphs):
            V = block(sl) if V is None else V
            with torch.no_grad():
                dV = torch.addmm(Gs @ V, gv, self.Y[sl].T) * self._w(sl)
            (V * dV).sum().backward()
        # <chol, dchol> summed, not backward(chol, dchol): the same products, and an explicit
        # output gradient makes torch import SymPy on its first use (a large share of a fit)
        (self.anchor_chol(self.unpack(rl)) * Ll.grad).sum().backward()
        return nll.detach(), rl.grad + graw


def leave_group_out(engine, state, params, r, v, groups):
    """Leave-one-out residuals ``r`` (n x C) and variances ``v`` (n,) of ``engine.loo`` with
    each group of rows left out together: the rows of a group (exact duplicates of one
    input) predict each other almost perfectly, so their leave-one-out residuals vanish.

    Left out jointly, the rows ``G`` have residuals ``B^-1 [K^-1 Y]_G`` and predictive
    covariance ``B^-1`` with ``B = [K^-1]_GG``; each row keeps its own variance, the
    diagonal of ``B^-1``. ``groups`` is a list of index arrays (rows outside every group
    keep their leave-one-out values). Returns new ``(r, v)``.
    """
    r, v = r.clone(), v.clone()
    batch = []
    for k, g in enumerate(groups):  # batches of about GROUP_BATCH_ROWS rows: memory n x batch
        batch.append(g)
        if sum(len(b) for b in batch) >= GROUP_BATCH_ROWS or k == len(groups) - 1:
            _leave_groups_out(engine, state, params, r, v, batch)
            batch = []
    return r, v


def leave_one_copy_out(r, v, weights, noise):
    """Leave-one-out residuals and variances of one new observation (noise ``noise``) when a
    row of weight ``w > 1`` (``w`` copies of one ``(x, y)``) loses one copy, not all.

    ``r``, ``v`` are :meth:`ExactGP.loo`'s (the whole row out), so ``a = 1 / v`` and
    ``alpha = r / v`` are the row's entries of ``K^-1`` and ``K^-1 Y``. Keeping ``w - 1``
    copies changes the row's noise from ``s / w`` to ``c = s / (w - 1)``, a rank-one update
    ``delta = s / (w (w - 1))`` of ``K``; with ``f`` the latent value at the row, the
    residual of the copy is ``y - E f = c alpha / (1 + delta a)`` and the latent variance
    ``c (1 - a s / w) / (1 + delta a)``, to which one observation's ``s`` is added. Both
    tend to the whole-row values as ``w -> 1``. Rows with ``w <= 1`` are left out whole.
    ``noise``: one observation's noise, a number or one per row.
    """
    s = torch.as_tensor(noise, dtype=v.dtype, device=v.device)
    w = torch.as_tensor(weights, dtype=v.dtype, device=v.device)
    many = w > 1.0
    wm = torch.where(many, w, torch.full_like(w, 2.0))  # no division by 0 where unused
    a = 1.0 / v
    c = s / (wm - 1.0)
    den = 1.0 + s / (wm * (wm - 1.0)) * a
    r_copy = (c / den)[:, None] * (r / v[:, None])
    v_copy = c * (1.0 - a * s / wm) / den + s
    return (torch.where(many[:, None], r_copy, r),
            torch.where(many, v_copy, v + s * (1.0 - 1.0 / w)))


#: Rows of the inverse kernel's block that :func:`leave_group_out` forms at once.
GROUP_BATCH_ROWS = 1024


def _leave_groups_out(engine, state, params, r, v, groups):
    idx = torch.as_tensor(np.concatenate(groups), device=r.device)
    Kinv, a = engine.inverse_block(state, params, idx)
    start = 0
    with torch.no_grad():
        for g in groups:
            sl = slice(start, start + len(g))
            start += len(g)
            Lg = stable_cholesky(Kinv[sl, sl], context="leave-group-out block")[0]
            Binv = torch.cholesky_inverse(Lg)
            rows = idx[sl]
            r[rows] = Binv @ a[sl]
            v[rows] = Binv.diagonal()


def gp_predict(kernel, params, state, Xq, *, full_cov=False, noise=0.0, batch_size=None,
               block_elements=None):
    """Predictive mean (q x C) and variance (q,) or covariance (q x q) from a ``state``.

    Exact: ``var = k** - |L^-1 k*|^2``. Nystrom (DTC): with
    ``A* = L^-1 K_S*`` and ``B* = L_B^-1 A*``, ``var = k** - |A*|^2 + |B*|^2``. ``noise`` is
    added to the variance (the covariance's diagonal). Rows are processed in blocks.
    """
    basis, L, LB, dual = state["basis"], state["L"], state["LB"], state["dual"]

    def block(Xb, cov):
        with torch.no_grad():
            Ks = kernel(params, Xb, basis)
            A = solve_lower(L, Ks.T)
            B = None if LB is None else solve_lower(LB, A)
            if cov:
                V = kernel(params, Xb) - A.T @ A
                if B is not None:
                    V = V + B.T @ B
                V.diagonal().add_(noise)
            else:
                V = kernel(params, Xb, diag=True) - (A * A).sum(0) + noise
                if B is not None:
                    V = V + (B * B).sum(0)
            return Ks @ dual, V

    if full_cov:
        return block(Xq, True)
    rows = auto_batch_size(basis.shape[0], batch_size, _block(Xq, block_elements))
    parts = [block(Xq[sl], False) for sl in iter_slices(Xq.shape[0], rows)]
    if not parts:
        return Xq.new_zeros((0, dual.shape[1])), Xq.new_zeros(0)
    return torch.cat([m for m, _ in parts]), torch.cat([v for _, v in parts])
