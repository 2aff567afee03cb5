"""Inducing-weight Bayesian linear layers (FiD-GP) and the network made of them.

One :class:`InducingLinear` holds the variational posterior over a small whitened inducing
matrix ``V`` (R x C) and draws the full weight matrix ``W`` (d_out x d_in, bias as the last
column) from the GP prior-conditional ``p(W | U)``:

* prior (§1.2): ``K_r = Z_r Z_r^T + D_r^2``, ``K_c = Z_c Z_c^T + D_c^2``; ``T_row = Z_r^T
  K_r^{-1}``, ``T_col^T = K_c^{-1} Z_c`` by Cholesky solves (jitter ``1e-5 mean diag K``);
* whitening (§1.3): ``U = L_r V L_c^T`` with ``V ~ N(0, I)`` a priori;
* posterior (§1.4): ``V0 ~ N(m, diag s^2)`` pushed row-wise through a MAF (``flow_length``
  steps, see :mod:`._flows`; 0 = no flow);
* conditional draw (§1.5): ``W = sigma_p (T_row U T_col^T + lambda eps_W)`` with ``eps_W``
  from Matheron's rule (the Cholesky-free joint prior sample), iid N(0, 1) ("reparam"), or 0
  ("mean");
* KL (§1.6): the one-sample flow KL (the analytic Gaussian KL without a flow) plus
  ``(D/2)(lambda^2 - 1 - 2 log lambda)``.

All random draws come from a CPU ``torch.Generator`` and are sent to the device, so a seed
gives the same draws everywhere; nothing here touches the global random state.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ._flows import GeneratorHolder, RowMAF
from ._random import host_randn

#: Relative jitter of the prior covariances' Cholesky factors (the authors' value).
PRIOR_JITTER = 1e-5
LOG_2PI = math.log(2.0 * math.pi)


def inv_softplus(x: float) -> float:
    """``softplus^{-1}(x)`` for ``x > 0``."""
    return x + math.log(-math.expm1(-x))


def jittered_cholesky(K):
    """``chol(K + eps mean(diag K) I)`` with ``eps = 1e-5`` computed from a detached ``K``.

    A failed factorisation gives NaN (no host synchronisation inside a training step): the
    loss turns NaN and the training loop stops with ``TrainingDivergedError``.
    """
    eps = PRIOR_JITTER * K.detach().diagonal().mean()
    eye = torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
    L, info = torch.linalg.cholesky_ex(K + eps * eye)
    return L + torch.where(info > 0, torch.nan, 0.0).to(L.dtype)


def kl_conditional(lam, n_weights):
    """KL between ``N(M, lam^2 S)`` and ``N(M, S)`` in ``n_weights`` dimensions."""
    return 0.5 * n_weights * (lam * lam - 1.0 - 2.0 * torch.log(lam))


class InducingLinear(torch.nn.Module):
    """A linear layer whose weights are drawn through an inducing matrix (one FiD-GP layer).

    Parameters
    ----------
    in_features, out_features : int
        ``d_in`` counts the bias column: it is ``in_features + 1``.
    rows, cols : int
        Inducing size R x C (the caller clips them to ``d_out`` and ``d_in``).
    flow_length, flow_hidden, flow_dropout, flow_spectral_norm :
        The MAF over the rows of V (``flow_length=0``: none).
    prior_sd : float
        ``sigma_p = prior_sd / sqrt(d_in)`` when ``sqrt_width_scaling``.
    init_lambda, max_lambda, learn_lambda :
        The conditional-noise scale ``lambda = clamp(softplus(rho), 0, max_lambda)``.
    init_sd_u, max_sd_u :
        The base std ``s = clamp(softplus(rho_s), 0, max_sd_u)``.
    z_init : {"gaussian", "orthogonal"}
    seed : int
        Seeds every initial value (drawn on the host).
    holder : GeneratorHolder
        Supplies the generator of the flow's dropout.
    """

    def __init__(self, in_features, out_features, rows, cols, *, flow_length=1, flow_hidden=16,
                 flow_dropout=0.1, flow_spectral_norm=True, prior_sd=1.0,
                 sqrt_width_scaling=True, init_lambda=1e-3, max_lambda=0.03, learn_lambda=True,
                 init_sd_u=1e-3, max_sd_u=0.1, z_init="gaussian", seed=0, holder=None):
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.d_in, self.d_out = self.in_features + 1, self.out_features
        self.rows, self.cols = int(rows), int(cols)
        self.max_lambda, self.max_sd_u = float(max_lambda), float(max_sd_u)
        self.sigma_p = float(prior_sd) / (math.sqrt(self.d_in) if sqrt_width_scaling else 1.0)
        R, C = self.rows, self.cols
        gen = torch.Generator().manual_seed(int(seed))
        f64 = torch.float64

        def gauss(*shape):
            return torch.randn(*shape, generator=gen, dtype=f64)

        if z_init == "orthogonal":
            zr = torch.linalg.qr(gauss(max(R, self.d_out), max(R, self.d_out)))[0]
            zc = torch.linalg.qr(gauss(max(C, self.d_in), max(C, self.d_in)))[0]
            zr, zc = zr[:R, :self.d_out], zc[:C, :self.d_in]
        else:
            zr, zc = gauss(R, self.d_out) / math.sqrt(R), gauss(C, self.d_in) / math.sqrt(C)
        self.z_row = torch.nn.Parameter(zr)
        self.z_col = torch.nn.Parameter(zc)
        self.rho_d_row = torch.nn.Parameter(torch.full((R,), inv_softplus(1e-3), dtype=f64))
        self.rho_d_col = torch.nn.Parameter(torch.full((C,), inv_softplus(1e-3), dtype=f64))
        self.v_mean = torch.nn.Parameter(gauss(R, C))
        self.rho_sd = torch.nn.Parameter(torch.full((R, C), inv_softplus(init_sd_u), dtype=f64))
        self.rho_lambda = torch.nn.Parameter(torch.tensor(inv_softplus(init_lambda), dtype=f64),
                                             requires_grad=bool(learn_lambda))
        self.flow = None
        if flow_length > 0 and C >= 2:
            self.flow = RowMAF(C, flow_length, flow_hidden, flow_dropout, flow_spectral_norm,
                               seed=int(seed) + 1, holder=holder).to(f64)
        self._kl_cache = None

    # ------------------------------------------------------------------ parameters
    def sd_u(self):
        return torch.clamp(F.softplus(self.rho_sd), max=self.max_sd_u)

    def lam(self):
        return torch.clamp(F.softplus(self.rho_lambda), max=self.max_lambda)

    def prior_factors(self):
        """``(L_r, L_c, T_row, T_col^T, D_r, D_c)`` of the prior (§1.2)."""
        d_r, d_c = F.softplus(self.rho_d_row), F.softplus(self.rho_d_col)
        K_r = self.z_row @ self.z_row.T + torch.diag(d_r * d_r)
        K_c = self.z_col @ self.z_col.T + torch.diag(d_c * d_c)
        L_r, L_c = jittered_cholesky(K_r), jittered_cholesky(K_c)
        T_row = torch.cholesky_solve(self.z_row, L_r).T      # d_out x R
        T_colT = torch.cholesky_solve(self.z_col, L_c)       # C x d_in
        return L_r, L_c, T_row, T_colT, d_r, d_c

    # ------------------------------------------------------------------ sampling
    def sample_v(self, gen):
        """A posterior draw of V (R x C), remembering what the KL needs."""
        m, s = self.v_mean, self.sd_u()
        eps = host_randn(m.shape, gen, m.device, m.dtype)
        v0 = m + s * eps
        if self.flow is None:
            self._kl_cache = None
            return v0
        v, ladj = self.flow(v0)
        self._kl_cache = (eps, s, v, ladj.sum())
        return v

    def mean_v(self):
        """V at the base mean pushed through the flow (no noise, flow in its current mode)."""
        return self.v_mean if self.flow is None else self.flow(self.v_mean)[0]

    def joint_prior_sample(self, gen, d_r, d_c, batch=()):
        """A joint prior draw ``(W', U')`` (shapes ``batch + (d_out, d_in)`` and ``batch +
        (R, C)``) by a Cholesky-free construction: ``Cov(U') = K_r (x) K_c``
        and ``Cov(W', U') = Z_r^T (x) Z_c^T``, for any R and C."""
        z_row, z_col = self.z_row, self.z_col
        R, C = self.rows, self.cols

        def gauss(*sh):
            return host_randn(tuple(batch) + sh, gen, z_row.device, z_row.dtype)

        w = gauss(self.d_out, self.d_in)
        u = (z_row @ w @ z_col.T
             + (z_row @ gauss(self.d_out, C)) * d_c
             + d_r[:, None] * (gauss(R, self.d_in) @ z_col.T)
             + d_r[:, None] * gauss(R, C) * d_c)
        return w, u

    def conditional_noise(self, gen, sampling, factors, batch=()):
        """``eps_W`` (``batch + (d_out, d_in)``) for ``sampling`` in {"matheron", "reparam",
        "mean"}: Matheron's ``W' - T_row U' T_col^T``, iid N(0, 1), or 0."""
        z_row = self.z_row
        shape = tuple(batch) + (self.d_out, self.d_in)
        if sampling == "mean":
            return torch.zeros(shape, dtype=z_row.dtype, device=z_row.device)
        if sampling == "reparam":
            return host_randn(shape, gen, z_row.device, z_row.dtype)
        _, _, T_row, T_colT, d_r, d_c = factors
        w, u = self.joint_prior_sample(gen, d_r, d_c, batch)
        return w - (T_row @ u) @ T_colT

    def weight_from_u(self, U, eps, factors):
        _, _, T_row, T_colT, _, _ = factors
        return self.sigma_p * ((T_row @ U) @ T_colT + self.lam() * eps)

    def sample_weight(self, gen, sampling="matheron"):
        """One posterior draw of the full weight matrix (d_out x d_in, bias last)."""
        factors = self.prior_factors()
        L_r, L_c = factors[0], factors[1]
        U = L_r @ self.sample_v(gen) @ L_c.T
        return self.weight_from_u(U, self.conditional_noise(gen, sampling, factors), factors)

    def sample_u(self, gen):
        """A detached posterior draw of the unwhitened inducing matrix U (R x C)."""
        L_r, L_c = self.prior_factors()[:2]
        return (L_r @ self.sample_v(gen) @ L_c.T).detach()

    # ------------------------------------------------------------------ KL
    def kl(self):
        """KL of the last :meth:`sample_v` draw (§1.6): flow term plus conditional term."""
        s = self.sd_u()
        if self.flow is None:  # analytic KL(N(m, s^2) || N(0, 1))
            m = self.v_mean
            kl_v = (-torch.log(s) + 0.5 * (s * s + m * m) - 0.5).sum()
        else:
            eps, s_used, v, ladj = self._kl_cache
            log_q0 = (-0.5 * eps * eps - torch.log(s_used) - 0.5 * LOG_2PI).sum()
            log_p = (-0.5 * v * v - 0.5 * LOG_2PI).sum()
            kl_v = log_q0 - ladj - log_p
        return kl_v + kl_conditional(self.lam(), self.d_out * self.d_in)

    def n_parameters(self):
        return sum(p.numel() for p in self.parameters())


def linear_apply(x, W):
    """``x W[:, :-1]^T + W[:, -1]`` (the bias is the last column)."""
    return torch.addmm(W[:, -1], x, W[:, :-1].T)


class FiDNetwork(torch.nn.Module):
    """An MLP whose chosen linear layers are :class:`InducingLinear` (the rest plain).

    ``layers[i]`` maps width ``i`` to width ``i + 1``; the activation follows every layer but
    the last. :meth:`sample_weights` draws one weight matrix per layer (a plain layer gives its
    own), and :meth:`apply` runs a batch through given weights, so that the same draw can be
    applied to any number of row chunks.
    """

    def __init__(self, layers, activation):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.activation = activation
        self.holder = GeneratorHolder()
        for layer in self.layers:
            flow = getattr(layer, "flow", None)
            if flow is not None:
                for mod in flow.modules():
                    if hasattr(mod, "_holder"):
                        mod._holder[0] = self.holder

    def inducing_layers(self):
        return [(i, layer) for i, layer in enumerate(self.layers)
                if isinstance(layer, InducingLinear)]

    def sample_weights(self, gen, sampling="matheron"):
        out = []
        for layer in self.layers:
            if isinstance(layer, InducingLinear):
                out.append(layer.sample_weight(gen, sampling))
            else:
                out.append(torch.cat([layer.weight, layer.bias[:, None]], dim=1))
        return out

    def apply(self, x, weights, keep=None):
        """Logits of ``x`` under ``weights``; ``keep`` (set of layer indices) also returns
        those layers' outputs (pre-activation), in order."""
        kept = []
        n = len(self.layers)
        for i, W in enumerate(weights):
            x = linear_apply(x, W)
            if keep is not None and i in keep:
                kept.append(x)
            if i < n - 1:
                x = self.activation(x)
        return (x, kept) if keep is not None else x

    def kl(self):
        total = None
        for _, layer in self.inducing_layers():
            k = layer.kl()
            total = k if total is None else total + k
        return total
