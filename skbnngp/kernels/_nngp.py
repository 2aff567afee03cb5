"""Fully connected NNGP and NTK kernels in pure torch.

Conventions (neural-tangents ``stax``: ``L x [Dense(W_std, b_std), phi]`` then a readout
``Dense(W_std=1)`` without bias), with ``w = weight_variance``, ``b = bias_variance``::

    K^(0)(x, x') = w x.x' / d + b
    K^(l)(x, x') = w F(K^(l-1)(x, x), K^(l-1)(x', x'), K^(l-1)(x, x')) + b,   l = 1 .. L-1
    Kbar(x, x')  =   F(K^(L-1)(x, x), K^(L-1)(x', x'), K^(L-1)(x, x'))

    Theta^(0) = K^(0)
    Theta^(l) = K^(l) + w Fdot(K^(l-1)) Theta^(l-1),   l = 1 .. L-1
    Thetabar  = Kbar  +   Fdot(K^(L-1)) Theta^(L-1)

``F`` and ``Fdot`` are the Gaussian moments of the activation
(:mod:`skbnngp.kernels._activations`). The readout variance is 1.

Performance. A kernel of ``n1 x n2`` entries is evaluated by one custom autograd function
for the closed-form activations (ReLU, LeakyReLU, erf): every layer runs in place in a few
reused ``n1 x n2`` buffers, and the backward pass uses the analytic derivatives of ``F`` and
``Fdot`` with one extra buffer. Fresh large tensors are the dominant cost on CPU (page
faults), so this matters more than the arithmetic. Other activations (and forward-mode
autograd) use a plain autograd recursion built from :meth:`Activation.moments`.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.autograd.forward_ad as fwAD

from ._activations import get_activation

__all__ = ["nngp_kernel", "ntk_kernel", "layer_variances", "nngp_kernel_block"]


# ---------------------------------------------------------------------------------------------
# Argument handling
# ---------------------------------------------------------------------------------------------


def _check_X(X, name):
    if not isinstance(X, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(X).__name__}.")
    if X.dim() != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {tuple(X.shape)}.")
    if not X.is_floating_point():
        raise ValueError(f"{name} must have a floating dtype, got {X.dtype}.")
    if X.shape[1] == 0:
        raise ValueError(f"{name} must have at least one feature.")
    return X


def _check_depth(depth):
    if not isinstance(depth, numbers.Integral) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}.")
    return int(depth)


def _as_hyper(value, name, like):
    """A Python float or 0-d tensor as a 0-d tensor on ``like``'s device and dtype."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise ValueError(
                f"{name} must be a scalar (0-d tensor), got shape {tuple(value.shape)}."
            )
        return value.to(dtype=like.dtype, device=like.device)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number or a 0-d tensor, got {value!r}.")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}.")
    return torch.tensor(float(value), dtype=like.dtype, device=like.device)


def _has_tangent(*tensors):
    return any(fwAD.unpack_dual(t).tangent is not None for t in tensors)


# ---------------------------------------------------------------------------------------------
# Diagonals
# ---------------------------------------------------------------------------------------------


def layer_variances(X, *, depth=1, weight_variance=2.0, bias_variance=0.0, activation="relu"):
    """Per-layer variances ``K^(l)(x, x)`` and ``Theta^(l)(x, x)`` of every row of ``X``.

    These are the only per-point quantities the recursion needs; precompute them once and
    pass slices to :func:`nngp_kernel_block` to evaluate a kernel in row blocks.

    Parameters
    ----------
    X : torch.Tensor of shape (n, d)
    depth : int, default=1
        Number of hidden layers ``L``.
    weight_variance, bias_variance : float or 0-d torch.Tensor
        ``sigma_w^2`` and ``sigma_b^2`` of the hidden layers.
    activation : str, Activation or callable, default="relu"
        See :func:`~skbnngp.kernels.get_activation`.

    Returns
    -------
    variances : torch.Tensor of shape (2, depth + 1, n)
        ``variances[0, l] = K^(l)(x, x)`` for ``l < depth`` and ``variances[0, depth]`` is the
        NNGP diagonal ``Kbar(x, x)``; ``variances[1]`` holds ``Theta^(l)(x, x)`` and the NTK
        diagonal ``Thetabar(x, x)`` the same way. Same device and dtype as ``X``.

    Notes
    -----
    The exact diagonal recursion = F_diag(k)``)::

        k_0 = w |x|^2 / d + b,   k_l = w F_diag(k_{l-1}) + b,   Kbar = F_diag(k_{L-1})
        t_0 = k_0,   t_l = k_l + w Fdot_diag(k_{l-1}) t_{l-1}
        Thetabar = Kbar + Fdot_diag(k_{L-1}) t_{L-1}
    """
    X = _check_X(X, "X")
    depth = _check_depth(depth)
    act = get_activation(activation)
    w = _as_hyper(weight_variance, "weight_variance", X)
    b = _as_hyper(bias_variance, "bias_variance", X)
    k = w * torch.einsum("ij,ij->i", X, X) / X.shape[1] + b
    t = k
    ks, ts = [k], [t]
    for layer in range(1, depth + 1):
        f, fd = act.F_diag(k), act.Fdot_diag(k)
        if layer < depth:
            k_new = w * f + b
            t = k_new + w * fd * t
        else:
            k_new = f
            t = k_new + fd * t
        k = k_new
        ks.append(k)
        ts.append(t)
    return torch.stack([torch.stack(ks), torch.stack(ts)])


def _split_variances(var, n, name, depth=None):
    if not isinstance(var, torch.Tensor) or var.dim() != 3 or var.shape[0] != 2:
        raise ValueError(f"{name} must be the (2, depth + 1, n) tensor of layer_variances.")
    if var.shape[2] != n:
        raise ValueError(f"{name} has {var.shape[2]} columns but the inputs have {n} rows.")
    if depth is not None and var.shape[1] != depth + 1:
        raise ValueError(f"{name} is for depth {var.shape[1] - 1}, expected depth {depth}.")
    return var[0], var[1]


# ---------------------------------------------------------------------------------------------
# Fused recursion (closed-form activations)
# ---------------------------------------------------------------------------------------------


def _diag_view(K, offset):
    return torch.diagonal(K, offset=offset)


def _fused_forward(X1, X2, v1, v2, t1, w, b, act, ntk, offset, keep):
    """Run the recursion in place. ``keep`` saves each layer's inputs for the backward."""
    depth = v1.shape[0] - 1
    K = torch.mm(X1 * (w / X1.shape[1]), X2.T)
    K.add_(b)
    if offset is not None:
        dk = _diag_view(K, offset)
        dk.copy_(v1[0, : dk.shape[0]])
    T = K.clone() if ntk else None
    S = torch.empty_like(K)
    Fd = torch.empty_like(K) if (ntk or act._fused_theta_scratch) else None
    saved_K, saved_T = [], []
    for layer in range(1, depth + 1):
        out = torch.empty_like(K) if keep else K
        act._fused_forward(
            K, v1[layer - 1].unsqueeze(1), v2[layer - 1].unsqueeze(0), S, Fd, out, ntk
        )
        hidden = layer < depth
        if hidden:
            out.mul_(w).add_(b)
        if ntk:
            t_out = torch.empty_like(T) if keep else T
            torch.mul(Fd, T, out=t_out)
            if hidden:
                t_out.mul_(w)
            t_out.add_(out)
        if offset is not None:
            dk = _diag_view(out, offset)
            dk.copy_(v1[layer, : dk.shape[0]])
            if ntk:
                dt = _diag_view(t_out, offset)
                dt.copy_(t1[layer, : dt.shape[0]])
        if keep:
            saved_K.append(K)
            if ntk:
                saved_T.append(T)
        K = out
        if ntk:
            T = t_out
    return K, T, saved_K, saved_T, S, Fd


class _FusedRecursion(torch.autograd.Function):
    """NNGP (and NTK) recursion with hand-derived, buffer-reusing backward.

    Inputs ``X1, X2, v1, v2, t1, w, b`` are tensors (``t1`` only supplies diagonal values);
    ``act``, ``ntk``, ``offset`` are constants. The diagonal overwrite at ``offset`` is
    value-only: its gradient is taken through the off-diagonal formula, which has the same
    value and the same derivatives at ``x = x'``.
    """

    @staticmethod
    def forward(ctx, X1, X2, v1, v2, t1, w, b, act, ntk, offset):
        K, T, saved_K, saved_T, S, Fd = _fused_forward(
            X1, X2, v1, v2, t1, w, b, act, ntk, offset, keep=True
        )
        ctx.save_for_backward(X1, X2, v1, v2, w, *saved_K, *saved_T)
        ctx.act, ctx.ntk, ctx.depth = act, ntk, v1.shape[0] - 1
        ctx.S, ctx.Fd = S, Fd  # scratch buffers, reused by the backward pass
        ctx.set_materialize_grads(False)
        return (K, T) if ntk else K

    @staticmethod
    def backward(ctx, g_k, g_t=None):
        X1, X2, v1, v2, w, *saved = ctx.saved_tensors
        depth, act = ctx.depth, ctx.act
        S, Fd = ctx.S, ctx.Fd  # scratch: safe to overwrite, also on a repeated backward
        if Fd is None:
            Fd = ctx.Fd = torch.empty_like(S)
        n_none = 3
        if g_k is None and g_t is None:
            return (None,) * (7 + n_none)
        saved_K, saved_T = saved[:depth], saved[depth:]
        # G: cotangent of K^(l) (Theta^(l) = K^(l) + ..., so it includes the Theta cotangent).
        if g_k is not None and g_t is not None:
            G, own_g = g_k + g_t, True
        else:
            G, own_g = (g_k if g_k is not None else g_t), False
        Q, own_q = g_t, False  # cotangent of Theta^(l)
        M = torch.empty_like(S) if Q is not None else None
        g_w = torch.zeros((), dtype=w.dtype, device=w.device)
        g_b = torch.zeros((), dtype=w.dtype, device=w.device)
        g_v1, g_v2 = torch.zeros_like(v1), torch.zeros_like(v2)
        for layer in range(depth, 0, -1):
            K = saved_K[layer - 1]
            T = saved_T[layer - 1] if Q is not None else None
            hidden = layer < depth
            if hidden:
                g_b = g_b + G.sum()
            out = G if own_g else torch.empty_like(G)
            gd1, gd2, dot_g, dot_q = act._fused_backward(
                K, v1[layer - 1].unsqueeze(1), v2[layer - 1].unsqueeze(0), G, S, Fd, out, M, Q, T
            )
            G, own_g = out, True
            if hidden:
                g_w = g_w + dot_g + (dot_q if dot_q is not None else 0.0)
                G.mul_(w)
                gd1, gd2 = gd1 * w, gd2 * w
            g_v1[layer - 1] += gd1
            g_v2[layer - 1] += gd2
            if Q is not None:
                q_out = Q if own_q else torch.empty_like(Q)
                torch.mul(Q, Fd, out=q_out)
                if hidden:
                    q_out.mul_(w)
                Q, own_q = q_out, True
                G.add_(Q)
        # Layer 0: K^(0) = (w / d) X1 X2^T + b.
        d = X1.shape[1]
        GX2 = G @ X2
        g_w = g_w + torch.vdot(GX2.reshape(-1), X1.reshape(-1)) / d
        g_b = g_b + G.sum()
        need = ctx.needs_input_grad
        g_x1 = GX2 * (w / d) if need[0] else None
        g_x2 = (G.T @ X1) * (w / d) if need[1] else None
        return (
            g_x1,
            g_x2,
            g_v1 if need[2] else None,
            g_v2 if need[3] else None,
            None,
            g_w if need[5] else None,
            g_b if need[6] else None,
        ) + (None,) * n_none


# ---------------------------------------------------------------------------------------------
# Generic recursion (any activation; plain autograd, forward mode too)
# ---------------------------------------------------------------------------------------------


def _scatter_diag(K, values, offset):
    if offset is None:
        return K
    m = _diag_view(K, offset).shape[0]
    return torch.diagonal_scatter(K, values[:m], offset)


def _generic_recursion(X1, X2, v1, v2, t1, w, b, act, ntk, offset):
    depth = v1.shape[0] - 1
    K = (X1 * (w / X1.shape[1])) @ X2.T + b
    K = _scatter_diag(K, v1[0], offset)
    T = K
    for layer in range(1, depth + 1):
        f, fd = act.moments(v1[layer - 1].unsqueeze(1), v2[layer - 1].unsqueeze(0), K, fdot=ntk)
        hidden = layer < depth
        K_new = w * f + b if hidden else f
        if ntk:
            T = K_new + (w * fd if hidden else fd) * T
            T = _scatter_diag(T, t1[layer], offset)
        K = _scatter_diag(K_new, v1[layer], offset)
    return (K, T) if ntk else K


# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------


def nngp_kernel_block(
    X1,
    X2,
    var1,
    var2,
    *,
    weight_variance=2.0,
    bias_variance=0.0,
    activation="relu",
    return_ntk=False,
    diag_offset=None,
    _fused=None,
):
    """Kernel of ``X1`` against ``X2`` given their precomputed :func:`layer_variances`.

    Use it to evaluate a large kernel in row blocks: compute ``var = layer_variances(X, ...)``
    once, then ``nngp_kernel_block(X[i:j], X, var[..., i:j], var, diag_offset=i, ...)`` for
    each block. Blocks agree with :func:`nngp_kernel` to rounding, gradients included.

    Parameters
    ----------
    X1 : torch.Tensor of shape (n1, d)
    X2 : torch.Tensor of shape (n2, d)
    var1, var2 : torch.Tensor of shape (2, depth + 1, n1) and (2, depth + 1, n2)
        :func:`layer_variances` of ``X1`` and ``X2`` (same hyperparameters); the depth is read
        from them.
    weight_variance, bias_variance : float or 0-d torch.Tensor
    activation : str, Activation or callable, default="relu"
    return_ntk : bool, default=False
        Also return the NTK.
    diag_offset : int >= 0 or None, default=None
        If given, row ``r`` of ``X1`` is the same point as row ``r + diag_offset`` of ``X2``;
        those entries are set to the exact diagonal values of ``var1``.

    Returns
    -------
    K : torch.Tensor of shape (n1, n2)
        The NNGP kernel ``Kbar``; with ``return_ntk=True`` the pair ``(Kbar, Thetabar)``.
    """
    X1 = _check_X(X1, "X1")
    X2 = _check_X(X2, "X2")
    if X1.shape[1] != X2.shape[1]:
        raise ValueError(
            f"X1 and X2 must have the same number of features, got {X1.shape[1]} and {X2.shape[1]}."
        )
    if X2.dtype != X1.dtype or X2.device != X1.device:
        X2 = X2.to(dtype=X1.dtype, device=X1.device)
    v1, t1 = _split_variances(var1, X1.shape[0], "var1")
    v2, _ = _split_variances(var2, X2.shape[0], "var2", depth=v1.shape[0] - 1)
    if diag_offset is not None and (
        not isinstance(diag_offset, numbers.Integral)
        or isinstance(diag_offset, bool)
        or diag_offset < 0
    ):
        raise ValueError(f"diag_offset must be None or an integer >= 0, got {diag_offset!r}.")
    act = get_activation(activation)
    w = _as_hyper(weight_variance, "weight_variance", X1)
    b = _as_hyper(bias_variance, "bias_variance", X1)
    v1, v2, t1 = (v.to(dtype=X1.dtype, device=X1.device) for v in (v1, v2, t1))
    ntk = bool(return_ntk)
    inputs = (X1, X2, v1, v2, w, b)
    if _fused is None:
        _fused = act._fusable and not _has_tangent(*inputs)
    if not _fused:
        return _generic_recursion(X1, X2, v1, v2, t1, w, b, act, ntk, diag_offset)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return _FusedRecursion.apply(X1, X2, v1, v2, t1.detach(), w, b, act, ntk, diag_offset)
    with torch.no_grad():
        K, T, *_ = _fused_forward(X1, X2, v1, v2, t1, w, b, act, ntk, diag_offset, keep=False)
    return (K, T) if ntk else K


def nngp_kernel(
    X1,
    X2=None,
    *,
    depth=1,
    weight_variance=2.0,
    bias_variance=0.0,
    activation="relu",
    diag=False,
    return_ntk=False,
):
    """NNGP kernel ``Kbar`` of a fully connected network.

    Parameters
    ----------
    X1 : torch.Tensor of shape (n1, d)
    X2 : torch.Tensor of shape (n2, d) or None, default=None
        ``None`` means ``X1``: the symmetric train kernel, whose diagonal is the exact
        diagonal recursion (e.g. ``k / 2`` for ReLU), not the off-diagonal formula.
    depth : int, default=1
        Number of hidden layers ``L >= 1``.
    weight_variance : float or 0-d torch.Tensor, default=2.0
        ``sigma_w^2`` of the hidden layers. A tensor with ``requires_grad`` is differentiated.
    bias_variance : float or 0-d torch.Tensor, default=0.0
        ``sigma_b^2`` of the hidden layers.
    activation : str, Activation or callable, default="relu"
        See :func:`~skbnngp.kernels.get_activation`.
    diag : bool, default=False
        Return only the diagonal ``Kbar(x, x)`` of ``X1`` (``X2`` is ignored).
    return_ntk : bool, default=False
        Also return the NTK ``Thetabar``.

    Returns
    -------
    K : torch.Tensor of shape (n1, n2), or (n1,) if ``diag``
        On ``X1``'s device and dtype. With ``return_ntk=True`` the pair ``(Kbar, Thetabar)``.

    Notes
    -----
    Neural-tangents conventions: input kernel ``w x.x'/d + b``, ``L`` hidden layers
    ``K <- w F(K) + b``, readout ``Kbar = F(K^(L-1))`` with unit variance and no bias; the NTK
    follows ``Theta <- K_new + w Fdot(K) Theta`` (see the module docstring). Values match
    neural-tangents 0.6.5 to 1e-10.

    Examples
    --------
    >>> import torch
    >>> from skbnngp.kernels import nngp_kernel
    >>> X = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], dtype=torch.float64)
    >>> nngp_kernel(X, depth=1, weight_variance=2.0, bias_variance=0.0)
    tensor([[0.3333, 0.2122],
            [0.2122, 1.3333]], dtype=torch.float64)
    """
    X1 = _check_X(X1, "X1")
    depth = _check_depth(depth)
    kw = dict(weight_variance=weight_variance, bias_variance=bias_variance, activation=activation)
    act = get_activation(activation)
    kw["activation"] = act
    var1 = layer_variances(X1, depth=depth, **kw)
    if diag:
        return (var1[0, depth], var1[1, depth]) if return_ntk else var1[0, depth]
    if X2 is None:
        X2, var2, offset = X1, var1, 0
    else:
        X2 = _check_X(X2, "X2")
        if X2.dtype != X1.dtype or X2.device != X1.device:
            X2 = X2.to(dtype=X1.dtype, device=X1.device)
        var2, offset = layer_variances(X2, depth=depth, **kw), None
    return nngp_kernel_block(X1, X2, var1, var2, return_ntk=return_ntk, diag_offset=offset, **kw)


def ntk_kernel(
    X1,
    X2=None,
    *,
    depth=1,
    weight_variance=2.0,
    bias_variance=0.0,
    activation="relu",
    diag=False,
):
    """NTK ``Thetabar`` of a fully connected network in NTK parameterisation.

    Parameters and conventions are those of :func:`nngp_kernel`, which returns this kernel
    together with the NNGP when called with ``return_ntk=True``.

    Returns
    -------
    Theta : torch.Tensor of shape (n1, n2), or (n1,) if ``diag``

    Examples
    --------
    >>> import torch
    >>> from skbnngp.kernels import ntk_kernel
    >>> X = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], dtype=torch.float64)
    >>> ntk_kernel(X, diag=True)
    tensor([0.6667, 2.6667], dtype=torch.float64)
    """
    return nngp_kernel(
        X1,
        X2,
        depth=depth,
        weight_variance=weight_variance,
        bias_variance=bias_variance,
        activation=activation,
        diag=diag,
        return_ntk=True,
    )[1]
