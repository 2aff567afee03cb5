"""Activation objects: Gaussian moments ``E[phi(u) phi(v)]`` of a centred bivariate normal.

Every kernel of the package is built from two functions of a 2x2 covariance block
``[[k11, k12], [k12, k22]]``:

    F(k11, k22, k12)    = E[phi(u) phi(v)]
    Fdot(k11, k22, k12) = E[phi'(u) phi'(v)]        (only the NTK needs it)

with ``(u, v) ~ N(0, [[k11, k12], [k12, k22]])``. The arguments are broadcastable tensors, so
the same objects serve the deep NNGP recursion of :mod:`skbnngp.kernels._nngp` (``k11`` a
column, ``k22`` a row, ``k12`` a matrix) and single-hidden-layer kernels of the form
``E[phi(w.x + b) phi(w.x' + b)]``, whose caller only has to supply the three
covariances.

Closed forms (:class:`ReLU`, :class:`LeakyReLU`, :class:`Erf`) run through one custom autograd
function with analytic first derivatives (backward and forward mode) that stay finite at
``x = x'`` and ``x = 0``. Any other activation (:class:`Tanh`, :class:`Sigmoid`, or a user
callable wrapped in :class:`QuadratureActivation`) is integrated by 2-D Gauss-Hermite
quadrature and differentiated by plain torch autograd.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD

__all__ = [
    "Activation",
    "ReLU",
    "LeakyReLU",
    "Erf",
    "QuadratureActivation",
    "Tanh",
    "Sigmoid",
    "get_activation",
]

_PI = math.pi
_TWO_PI = 2.0 * math.pi
_FOUR_PI = 4.0 * math.pi


def _eps(t):
    return torch.finfo(t.dtype).eps


def _safe_inv(x):
    """``1/x`` where ``x > 0``, else 0 (for the vanishing-variance limits)."""
    pos = x > 0
    return torch.where(pos, 1.0 / torch.where(pos, x, torch.ones_like(x)), torch.zeros_like(x))


def _dot(a, b):
    """``sum(a * b)`` without a temporary when both are contiguous."""
    if a.is_contiguous() and b.is_contiguous():
        return torch.vdot(a.reshape(-1), b.reshape(-1))
    return (a * b).sum()


def _reduce(grad, shape):
    """Sum a broadcast gradient back to an input's shape."""
    if grad is None:
        return None
    if grad.shape != shape:
        grad = grad.sum_to_size(shape)
    return grad


# ---------------------------------------------------------------------------------------------
# Closed-form moments: values and first partial derivatives
# ---------------------------------------------------------------------------------------------


def _relu_s(k11, k22, k12):
    """``s = sqrt(max(k11 k22 - k12^2, 0))``, with exact duplicates mapped to ``s = 0``.

    The product is shrunk by ``4 eps`` before the subtraction, so rounding in ``k12`` at
    ``x = x'`` can never leave a spurious positive determinant (the value changes by
    ``O(eps * k)``, below float resolution of ``F``).
    """
    det = torch.addcmul(k11 * k22 * (1.0 - 4.0 * _eps(k12)), k12, k12, value=-1.0)
    return det.clamp_min(0.0).sqrt()


def _relu_values(k11, k22, k12):
    # Arc-cosine kernel of order 1 (Cho & Saul 2009), atan2 form:
    #   theta = atan2(s, k12),  F = (s + (pi - theta) k12) / (2 pi),  Fdot = (pi - theta)/(2 pi)
    s = _relu_s(k11, k22, k12)
    fdot = 0.5 - torch.atan2(s, k12) / _TWO_PI
    f = s / _TWO_PI + fdot * k12
    return f, fdot


def _relu_partials(k11, k22, k12):
    """``(Fdot, dF/dk11, dF/dk22, dFdot/dk12, dFdot/dk11, dFdot/dk22)`` for ReLU.

    ``dF/dk11 = s / (4 pi k11)`` (Price's theorem); ``dFdot/dk12 = 1 / (2 pi s)`` and
    ``dFdot/dk11 = -k12 / (4 pi k11 s)``. Where ``s = 0`` (``x = x'`` up to scale) or a
    variance is 0 the singular partials are set to 0: along any path on which the points stay
    duplicates their contributions cancel exactly, so this is the limit of the total derivative.
    """
    s = _relu_s(k11, k22, k12)
    fdot = 0.5 - torch.atan2(s, k12) / _TWO_PI
    i11 = _safe_inv(k11)
    i22 = _safe_inv(k22)
    a11 = s * i11 / _FOUR_PI
    a22 = s * i22 / _FOUR_PI
    inv_s = _safe_inv(s)
    b12 = inv_s / _TWO_PI
    b11 = -k12 * inv_s * i11 / _FOUR_PI
    b22 = -k12 * inv_s * i22 / _FOUR_PI
    return fdot, a11, a22, b12, b11, b22


def _erf_r2(k11, k22, k12):
    # (1 + 2 k11)(1 + 2 k22) - 4 k12^2 = 1 + 2 k11 + 2 k22 + 4 (k11 k22 - k12^2) >= 1,
    # written in the second form so that large variances do not cancel.
    det = torch.addcmul(k11 * k22, k12, k12, value=-1.0).clamp_min(0.0)
    return 1.0 + 2.0 * k11 + 2.0 * k22 + 4.0 * det


def _erf_values(k11, k22, k12):
    # Williams (1997): F = (2/pi) atan2(2 k12, r), Fdot = (4/pi) / r,
    # r = sqrt((1 + 2 k11)(1 + 2 k22) - 4 k12^2)
    r = _erf_r2(k11, k22, k12).sqrt()
    f = torch.atan2(2.0 * k12, r) * (2.0 / _PI)
    fdot = (4.0 / _PI) / r
    return f, fdot


def _erf_partials(k11, k22, k12):
    r2 = _erf_r2(k11, k22, k12)
    fdot = (4.0 / _PI) / r2.sqrt()
    a11 = -fdot * k12 / (1.0 + 2.0 * k11)
    a22 = -fdot * k12 / (1.0 + 2.0 * k22)
    c = fdot / r2
    b12 = 4.0 * c * k12
    b11 = -c * (1.0 + 2.0 * k22)
    b22 = -c * (1.0 + 2.0 * k11)
    return fdot, a11, a22, b12, b11, b22


_VALUES = {"relu": _relu_values, "erf": _erf_values}
_PARTIALS = {"relu": _relu_partials, "erf": _erf_partials}


class _ClosedFormMoments(torch.autograd.Function):
    """``(F, Fdot)`` of a closed-form activation with analytic (safe) first derivatives."""

    @staticmethod
    def forward(k11, k22, k12, kind):
        f, fdot = _VALUES[kind](k11, k22, k12)
        # NumPy's rule (torch's imports SymPy on its first call: a large share of a small fit)
        shape = np.broadcast_shapes(k11.shape, k22.shape, k12.shape)
        return f.expand(shape).contiguous(), fdot.expand(shape).contiguous()

    @staticmethod
    def setup_context(ctx, inputs, output):
        k11, k22, k12, kind = inputs
        ctx.kind = kind
        ctx.save_for_backward(k11, k22, k12)
        ctx.save_for_forward(k11, k22, k12)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, g_f, g_fdot):
        k11, k22, k12 = ctx.saved_tensors
        if g_f is None and g_fdot is None:
            return None, None, None, None
        fdot, a11, a22, b12, b11, b22 = _PARTIALS[ctx.kind](k11, k22, k12)
        g11 = g22 = g12 = 0.0
        if g_f is not None:
            g12 = g_f * fdot
            g11 = g_f * a11
            g22 = g_f * a22
        if g_fdot is not None:
            g12 = g12 + g_fdot * b12
            g11 = g11 + g_fdot * b11
            g22 = g22 + g_fdot * b22
        need = ctx.needs_input_grad
        return (
            _reduce(g11, k11.shape) if need[0] else None,
            _reduce(g22, k22.shape) if need[1] else None,
            _reduce(g12, k12.shape) if need[2] else None,
            None,
        )

    @staticmethod
    def jvp(ctx, t11, t22, t12, _t_kind):
        k11, k22, k12 = ctx.saved_tensors
        fdot, a11, a22, b12, b11, b22 = _PARTIALS[ctx.kind](k11, k22, k12)
        # NumPy's rule (torch's imports SymPy on its first call: a large share of a small fit)
        shape = np.broadcast_shapes(k11.shape, k22.shape, k12.shape)
        d_f = torch.zeros(shape, dtype=k12.dtype, device=k12.device)
        d_fdot = torch.zeros(shape, dtype=k12.dtype, device=k12.device)
        for t, a, b in ((t12, fdot, b12), (t11, a11, b11), (t22, a22, b22)):
            if t is not None:
                d_f = d_f + a * t
                d_fdot = d_fdot + b * t
        return d_f, d_fdot


# ---------------------------------------------------------------------------------------------
# Activation objects
# ---------------------------------------------------------------------------------------------


class Activation:
    """Base class: the Gaussian moments of an activation function ``phi``.

    Subclasses implement :meth:`moments` and the diagonal forms; :meth:`F` and :meth:`Fdot`
    are views of :meth:`moments`.

    Notes
    -----
    For ``(u, v) ~ N(0, [[k11, k12], [k12, k22]])``::

        F(k11, k22, k12)    = E[phi(u) phi(v)]
        Fdot(k11, k22, k12) = E[phi'(u) phi'(v)]
        F_diag(k)           = E[phi(u)^2],       u ~ N(0, k)
        Fdot_diag(k)        = E[phi'(u)^2]

    The three covariances are broadcastable tensors; results have their broadcast shape,
    dtype and device, and are differentiable in every ``k``.
    """

    #: Name accepted by :func:`get_activation`.
    name = None

    def moments(self, k11, k22, k12, fdot=True):
        """Return ``(F, Fdot)`` (``Fdot`` is ``None`` when ``fdot=False``).

        Parameters
        ----------
        k11, k22, k12 : torch.Tensor
            Broadcastable variances and covariance of the centred pair ``(u, v)``.
        fdot : bool, default=True
            Whether ``Fdot`` is needed.

        Returns
        -------
        F : torch.Tensor
        Fdot : torch.Tensor or None
        """
        raise NotImplementedError

    def F(self, k11, k22, k12):
        """``E[phi(u) phi(v)]`` for the centred bivariate normal ``(u, v)``."""
        return self.moments(k11, k22, k12, fdot=False)[0]

    def Fdot(self, k11, k22, k12):
        """``E[phi'(u) phi'(v)]`` for the centred bivariate normal ``(u, v)``."""
        return self.moments(k11, k22, k12, fdot=True)[1]

    def F_diag(self, k):
        """``E[phi(u)^2]`` for ``u ~ N(0, k)``."""
        raise NotImplementedError

    def Fdot_diag(self, k):
        """``E[phi'(u)^2]`` for ``u ~ N(0, k)``."""
        raise NotImplementedError

    # -- fused buffer kernels (closed forms only; see skbnngp.kernels._nngp) -------------------
    #: Whether :meth:`_fused_forward` / :meth:`_fused_backward` are available.
    _fusable = False
    #: Whether :meth:`_fused_forward` needs the ``Fd`` buffer even when ``Fdot`` is not wanted.
    _fused_theta_scratch = True

    # -- plumbing -----------------------------------------------------------------------------
    def _params(self):
        return {}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        if type(self) is not type(other):
            return NotImplemented
        a, b = self._params(), other._params()
        if a.keys() != b.keys():
            return False
        for key in a:
            x, y = a[key], b[key]
            if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
                if x is not y:
                    return False
            elif x != y:
                return False
        return True

    def __hash__(self):
        items = tuple(
            (k, id(v) if isinstance(v, torch.Tensor) else v) for k, v in self._params().items()
        )
        try:
            return hash((type(self).__name__, items))
        except TypeError:
            return hash((type(self).__name__, tuple(id(v) for _, v in items)))


class LeakyReLU(Activation):
    """Leaky rectifier ``phi(u) = max(u, 0) + negative_slope * min(u, 0)`` in closed form.

    Parameters
    ----------
    negative_slope : float or 0-d torch.Tensor, default=0.01
        Slope ``a`` for negative inputs. A tensor with ``requires_grad`` is differentiated
        through (it then uses the plain autograd path rather than the fused recursion).

    See Also
    --------
    ReLU : the case ``negative_slope = 0``.

    Notes
    -----
    Writing ``phi(u) = a u + (1 - a) max(u, 0)`` and using ``E[u max(v, 0)] = k12 / 2``::

        F    = a k12 + (1 - a)^2 F_relu(k11, k22, k12)
        Fdot = a     + (1 - a)^2 Fdot_relu(k11, k22, k12)
        F_diag(k) = (1 + a^2) k / 2,   Fdot_diag(k) = (1 + a^2) / 2

    with the arc-cosine forms of :class:`ReLU`. This is neural-tangents' ``ABRelu(a, 1)`` and
    the mixed-activation paper's ``B_alpha``.

    Examples
    --------
    >>> import torch
    >>> from skbnngp.kernels import LeakyReLU
    >>> k = torch.tensor([2.0], dtype=torch.float64)
    >>> LeakyReLU(0.5).F(k, k, k)
    tensor([1.2500], dtype=torch.float64)
    """

    name = "leaky_relu"

    def __init__(self, negative_slope=0.01):
        self.negative_slope = negative_slope

    def _params(self):
        return {"negative_slope": self.negative_slope}

    @property
    def _coefficients(self):
        a = self.negative_slope
        return a, (1.0 - a) ** 2

    @property
    def _fusable(self):
        return isinstance(self.negative_slope, numbers.Real)

    def moments(self, k11, k22, k12, fdot=True):
        f, fd = _ClosedFormMoments.apply(k11, k22, k12, "relu")
        lin, arc = self._coefficients
        if isinstance(lin, numbers.Real) and lin == 0.0:
            return f, (fd if fdot else None)
        f = lin * k12 + arc * f
        return f, (lin + arc * fd if fdot else None)

    def F_diag(self, k):
        lin, arc = self._coefficients
        return (lin + 0.5 * arc) * k

    def Fdot_diag(self, k):
        lin, arc = self._coefficients
        return (lin + 0.5 * arc) * torch.ones_like(k)

    # ------------------------------------------------------------------------------------------
    # Fused in-place kernels used by the NNGP recursion. ``d1`` is a column, ``d2`` a row,
    # ``K``/``S``/``Fd``/``out`` are (n1, n2) buffers; ``out`` may alias ``K``.
    # ------------------------------------------------------------------------------------------
    def _fill_s(self, K, d1, d2, S):
        # s = sqrt(max((1 - 4 eps) d1 d2 - K^2, 0)), see _relu_s
        torch.mul(d1 * (1.0 - 4.0 * _eps(K)), d2, out=S)
        S.addcmul_(K, K, value=-1.0).clamp_min_(0.0).sqrt_()

    def _fused_forward(self, K, d1, d2, S, Fd, out, fdot):
        """``F`` into ``out`` (may alias ``K``); ``Fdot`` into ``Fd`` if ``fdot``; ``S`` scratch."""
        lin, arc = self._coefficients
        c = lin + 0.5 * arc
        self._fill_s(K, d1, d2, S)
        torch.atan2(S, K, out=Fd)  # theta
        # F = a K + arc F_relu = arc s / (2 pi) + (a + arc / 2) K - arc theta K / (2 pi)
        S.mul_(arc / _TWO_PI).add_(K, alpha=c)
        torch.addcmul(S, Fd, K, value=-arc / _TWO_PI, out=out)
        if fdot:
            Fd.mul_(-arc / _TWO_PI).add_(c)  # Fdot = a + arc (pi - theta) / (2 pi)

    def _fused_backward(self, K, d1, d2, G, S, Fd, out, M=None, Q=None, T=None):
        """Cotangents of ``F`` (weight ``G``) and of ``Fdot`` (weight ``Q * T``, NTK only).

        Writes ``G * dF/dK + (Q * T) * dFdot/dK`` into ``out`` (which may alias ``G``) and
        ``Fdot`` into ``Fd``; returns ``(gd1, gd2, <G, F>, <Q * T, Fdot>)`` where ``gd1``,
        ``gd2`` are the cotangents of the variance vectors. ``S`` and ``M`` are scratch.
        """
        lin, arc = self._coefficients
        i1, i2 = _safe_inv(d1.reshape(-1)), _safe_inv(d2.reshape(-1))
        self._fill_s(K, d1, d2, S)
        # dF/dd1 = arc s / (4 pi d1): reduce G * s (Fd is free scratch until the atan2).
        torch.mul(G, S, out=Fd)
        r, c = Fd.sum(1), Fd.sum(0)
        g_s = r.sum()
        gd1 = (arc / _FOUR_PI) * r * i1
        gd2 = (arc / _FOUR_PI) * c * i2
        torch.atan2(S, K, out=Fd)
        Fd.mul_(-1.0 / _TWO_PI).add_(0.5)
        if lin != 0.0 or arc != 1.0:
            Fd.mul_(arc).add_(lin)  # Fdot
        dot_q = None
        if Q is not None:
            torch.mul(Q, T, out=M)
            dot_q = _dot(M, Fd)
            # dFdot/dK = arc / (2 pi s),  dFdot/dd1 = -arc K / (4 pi d1 s);  0 where s = 0.
            S.reciprocal_()
            torch.nan_to_num_(S, posinf=0.0)
            M.mul_(S)
            torch.mul(M, K, out=S)
            gd1 = gd1 - (arc / _FOUR_PI) * S.sum(1) * i1
            gd2 = gd2 - (arc / _FOUR_PI) * S.sum(0) * i2
        torch.mul(G, Fd, out=out)  # dF/dK = Fdot
        # <G, F> = <G Fdot, K> + arc <G, s> / (2 pi)   since F = Fdot K + arc s / (2 pi)
        dot_g = _dot(out, K) + (arc / _TWO_PI) * g_s
        if Q is not None:
            out.add_(M, alpha=arc / _TWO_PI)
        return gd1, gd2, dot_g, dot_q


class ReLU(LeakyReLU):
    """Rectifier ``phi(u) = max(u, 0)``: the arc-cosine kernel of order 1.

    Notes
    -----
    In the atan2 form (Cho & Saul 2009; neural-tangents ``ABRelu(0, 1)``)::

        s     = sqrt(max(k11 k22 - k12^2, 0)),   theta = atan2(s, k12) in [0, pi]
        F     = (s + (pi - theta) k12) / (2 pi)
        Fdot  = (pi - theta) / (2 pi)
        F_diag(k) = k / 2,   Fdot_diag(k) = 1 / 2

    Derivatives are analytic: ``dF/dk12 = Fdot``, ``dF/dk11 = s / (4 pi k11)``. They are finite
    at ``x = x'`` (``s = 0``) and ``x = 0`` (``k11 = 0``). At ``k11 = k22 = k12 = 0`` the value
    is ``F = 0`` and ``Fdot = 1/2`` (neural-tangents uses ``1/4``; the NTK multiplies it by a
    zero there, so kernels agree).

    Examples
    --------
    >>> import torch
    >>> from skbnngp.kernels import ReLU
    >>> k = torch.tensor([2.0], dtype=torch.float64)
    >>> ReLU().F(k, k, torch.zeros(1, dtype=torch.float64))  # orthogonal: k / (2 pi)
    tensor([0.3183], dtype=torch.float64)
    """

    name = "relu"

    def __init__(self):
        self.negative_slope = 0.0

    def _params(self):
        return {}


class Erf(Activation):
    """Error function ``phi(u) = erf(u)``: Williams' (1997) arcsine kernel.

    Notes
    -----
    Williams (1997) (neural-tangents ``Erf(a=1, b=1, c=0)``), with
    ``r = sqrt((1 + 2 k11)(1 + 2 k22) - 4 k12^2) >= 1``::

        F    = (2 / pi) arcsin(2 k12 / sqrt((1 + 2 k11)(1 + 2 k22))) = (2 / pi) atan2(2 k12, r)
        Fdot = (4 / pi) / r
        F_diag(k) = (2 / pi) arcsin(2 k / (1 + 2 k)),   Fdot_diag(k) = (4 / pi) / sqrt(1 + 4 k)

    ``r`` is computed as ``sqrt(1 + 2 k11 + 2 k22 + 4 (k11 k22 - k12^2))``, which has no
    singularity anywhere. ``erf(c u)`` has the moments of this class at ``c^2 k``.

    Examples
    --------
    >>> import torch
    >>> from skbnngp.kernels import Erf
    >>> k = torch.tensor([1.0], dtype=torch.float64)
    >>> Erf().F(k, k, -k)  # odd activation
    tensor([-0.4646], dtype=torch.float64)
    """

    name = "erf"
    _fusable = True
    _fused_theta_scratch = False

    def moments(self, k11, k22, k12, fdot=True):
        f, fd = _ClosedFormMoments.apply(k11, k22, k12, "erf")
        return f, (fd if fdot else None)

    def F_diag(self, k):
        return torch.atan2(2.0 * k, torch.sqrt(1.0 + 4.0 * k)) * (2.0 / _PI)

    def Fdot_diag(self, k):
        return (4.0 / _PI) / torch.sqrt(1.0 + 4.0 * k)

    # Fused in-place kernels (see LeakyReLU).
    def _fill_r(self, K, d1, d2, S):
        # r / 2 = sqrt(1/4 + d1 / 2 + d2 / 2 + max(d1 d2 - K^2, 0))
        torch.mul(d1, d2, out=S)
        S.addcmul_(K, K, value=-1.0).clamp_min_(0.0)
        S.add_(0.5 * d1 + 0.25).add_(0.5 * d2).sqrt_()

    def _fused_forward(self, K, d1, d2, S, Fd, out, fdot):
        """``F`` into ``out`` (may alias ``K``); ``Fdot`` into ``Fd`` if ``fdot``; ``S`` scratch."""
        self._fill_r(K, d1, d2, S)
        if fdot:
            torch.reciprocal(S, out=Fd).mul_(2.0 / _PI)  # (4 / pi) / r
        torch.atan2(K, S, out=out)  # atan2(2K, r) = atan2(K, r / 2)
        out.mul_(2.0 / _PI)

    def _fused_backward(self, K, d1, d2, G, S, Fd, out, M=None, Q=None, T=None):
        """See :meth:`LeakyReLU._fused_backward`."""
        d1v, d2v = d1.reshape(-1), d2.reshape(-1)
        self._fill_r(K, d1, d2, S)  # h = r / 2
        torch.atan2(K, S, out=Fd)
        dot_g = (2.0 / _PI) * _dot(G, Fd)
        torch.reciprocal(S, out=Fd).mul_(2.0 / _PI)  # Fdot
        gd1 = gd2 = 0.0
        dot_q = None
        if Q is not None:
            torch.mul(Q, T, out=M)
            dot_q = _dot(M, Fd)
            # dFdot/dK = 4 K Fdot / r^2,  dFdot/dd1 = -(1 + 2 d2) Fdot / r^2;  M <- M Fdot / h^2
            S.square_()
            M.mul_(Fd).div_(S)
            gd1 = -(M @ (0.5 * d2v + 0.25))
            gd2 = -(M.T @ (0.5 * d1v + 0.25))
        torch.mul(G, Fd, out=out)
        # dF/dd1 = -Fdot K / (1 + 2 d1)
        torch.mul(out, K, out=S)
        gd1 = gd1 - S.sum(1) / (2.0 * d1v + 1.0)
        gd2 = gd2 - S.sum(0) / (2.0 * d2v + 1.0)
        if Q is not None:
            out.addcmul_(M, K)
        return gd1, gd2, dot_g, dot_q


# ---------------------------------------------------------------------------------------------
# Gauss-Hermite quadrature
# ---------------------------------------------------------------------------------------------

_GH_CACHE = {}


def gauss_hermite(n_nodes, dtype=torch.float64, device=None):
    """Nodes and weights of ``n_nodes``-point Gauss-Hermite quadrature for ``N(0, 1)``.

    ``sum(w * f(z))`` approximates ``E[f(Z)]``, ``Z ~ N(0, 1)``; exact for polynomials of
    degree ``< 2 n_nodes``. Computed by Golub-Welsch (eigen-decomposition of the Jacobi matrix
    of the probabilists' Hermite polynomials) in float64 and cached.

    Parameters
    ----------
    n_nodes : int
    dtype : torch.dtype, default=torch.float64
    device : torch.device or None

    Returns
    -------
    nodes, weights : torch.Tensor of shape (n_nodes,)
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    key = (int(n_nodes), dtype, str(device))
    if key not in _GH_CACHE:
        off = torch.arange(1, n_nodes, dtype=torch.float64).sqrt()
        jacobi = torch.diag(off, 1) + torch.diag(off, -1)
        nodes, vecs = torch.linalg.eigh(jacobi)
        weights = vecs[0] ** 2
        weights = weights / weights.sum()
        _GH_CACHE[key] = tuple(t.to(device=device, dtype=dtype) for t in (nodes, weights))
    return _GH_CACHE[key]


def _derivative(fn, x):
    """Elementwise derivative of ``fn`` at ``x`` by autograd, differentiable in ``x``.

    Reverse mode (``create_graph``) when ``x`` is tracked; when ``x`` carries a forward-mode
    tangent the second derivative is computed on the primal and attached as the tangent.
    """
    primal, tangent = fwAD.unpack_dual(x)
    with torch.enable_grad():
        if tangent is not None:
            xx = primal.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(fn(xx).sum(), xx, create_graph=True)
            (h,) = torch.autograd.grad(g.sum(), xx, allow_unused=True)
            h = torch.zeros_like(xx) if h is None else h
            return fwAD.make_dual(g.detach(), h * tangent)
        track = x.requires_grad
        xx = x if track else x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(xx).sum(), xx, create_graph=track)
    return g


#: Largest number of activation evaluations held at once by the quadrature.
_QUAD_BLOCK = 2**22


def _cholesky_rule(fn, k11, k22, k12, z, w, shape):
    """``sum_ij w_i w_j fn(L11 z_i) fn(L21 z_i + L22 z_j)`` (see QuadratureActivation)."""
    delta = 4.0 * _eps(k12) * (1.0 + k11 + k22)
    l11 = torch.sqrt(k11 + delta)
    l21 = k12 / l11
    l22 = torch.sqrt(torch.maximum(k22 - l21 * l21 + delta, 0.5 * delta))
    l11, l21, l22 = (t.expand(shape).unsqueeze(-1) for t in (l11, l21, l22))
    fu = fn(l11 * z)  # (..., Q)
    n_nodes = z.shape[0]
    entries = max(1, fu.numel())
    step = max(1, min(n_nodes, _QUAD_BLOCK // (entries * n_nodes)))
    total = 0.0
    for start in range(0, n_nodes, step):  # blocks of first-coordinate nodes bound the memory
        zi = z[start : start + step]
        v = (l21 * zi).unsqueeze(-1) + (l22 * z).unsqueeze(-2)  # (..., step, Q)
        inner = fn(v) @ w  # (..., step)
        total = total + (fu[..., start : start + step] * inner) @ w[start : start + step]
    return total


#: Most Gauss-Hermite nodes per dimension (the cost grows with its square; 200 nodes reach
#: round-off for smooth activations and ~1e-7 for ReLU-like kinks).
MAX_QUADRATURE = 200


class QuadratureActivation(Activation):
    """Any elementwise activation, integrated by 2-D Gauss-Hermite quadrature.

    Parameters
    ----------
    function : callable
        Elementwise ``torch.Tensor -> torch.Tensor``. It must be picklable if the activation is
        pickled (a module-level function, not a lambda).
    derivative : callable or None, default=None
        Elementwise ``phi'``. ``None`` differentiates ``function`` with torch autograd.
    n_quadrature : int, default=40
        Nodes per dimension; the cost is ``O(n_quadrature^2)`` evaluations per kernel entry.

    Notes
    -----
    With the Cholesky factor of the 2x2 block, ``L11 = sqrt(k11)``, ``L21 = k12 / L11``,
    ``L22 = sqrt(k22 - L21^2)``, and standard-normal nodes ``z_i`` with weights ``w_i``::

        F = sum_ij w_i w_j phi(L11 z_i) phi(L21 z_i + L22 z_j)

    averaged with the same rule for the swapped pair ``(v, u)`` so that the kernel is exactly
    symmetric; ``Fdot`` is the same with ``phi'``. To keep values and autograd gradients finite at
    ``x = x'`` (``L22 = 0``) and ``x = 0`` (``L11 = 0``), ``delta = 4 eps (1 + k11 + k22)`` is
    added under both square roots, a relative change of order ``eps``.
    Smooth activations converge fast (40 nodes reach ~1e-12 for tanh); kinked ones slowly
    (ReLU needs about 60 nodes for 1e-6).
    """

    name = "quadrature"

    def __init__(self, function, derivative=None, n_quadrature=40):
        self.function = function
        self.derivative = derivative
        self.n_quadrature = n_quadrature
        self._check()  # also what a loaded file asks for: bounded before any kernel runs

    def _params(self):
        return {
            "function": self.function,
            "derivative": self.derivative,
            "n_quadrature": self.n_quadrature,
        }

    def _check(self):
        n = self.n_quadrature
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) \
                or not 2 <= n <= MAX_QUADRATURE:
            raise ValueError(f"n_quadrature must be an integer in [2, {MAX_QUADRATURE}], got "
                             f"{n!r}.")

    def phi(self, x):
        """The activation."""
        return self.function(x)

    def dphi(self, x):
        """Its derivative."""
        if self.derivative is not None:
            return self.derivative(x)
        return _derivative(self.phi, x)

    def _expect2(self, fn, k11, k22, k12):
        self._check()
        z, w = gauss_hermite(self.n_quadrature, k12.dtype, k12.device)
        # NumPy's rule (torch's imports SymPy on its first call: a large share of a small fit)
        shape = np.broadcast_shapes(k11.shape, k22.shape, k12.shape)
        # The Cholesky rule is not symmetric in (k11, k22); averaging both orders makes the
        # kernel exactly symmetric (and aligns the kink of either coordinate once).
        return 0.5 * (_cholesky_rule(fn, k11, k22, k12, z, w, shape)
                      + _cholesky_rule(fn, k22, k11, k12, z, w, shape))

    def _expect1(self, fn, k):
        self._check()
        z, w = gauss_hermite(self.n_quadrature, k.dtype, k.device)
        root = torch.sqrt(k + 4.0 * _eps(k) * (1.0 + 2.0 * k)).unsqueeze(-1)
        return fn(root * z) ** 2 @ w

    def moments(self, k11, k22, k12, fdot=True):
        f = self._expect2(self.phi, k11, k22, k12)
        fd = self._expect2(self.dphi, k11, k22, k12) if fdot else None
        return f, fd

    def F_diag(self, k):
        return self._expect1(self.phi, k)

    def Fdot_diag(self, k):
        return self._expect1(self.dphi, k)


def _tanh_derivative(x):
    t = torch.tanh(x)
    return 1.0 - t * t


def _sigmoid_derivative(x):
    s = torch.sigmoid(x)
    return s * (1.0 - s)


class Tanh(QuadratureActivation):
    """Hyperbolic tangent, by 2-D Gauss-Hermite quadrature.

    Parameters
    ----------
    n_quadrature : int, default=40
        Nodes per dimension.

    Notes
    -----
    No closed form exists. The mixed-activation paper approximates ``tanh(u)`` by ``erf(sqrt(pi) u
    / 2)``, whose
    moments are those of :class:`Erf` at ``(pi / 4) k``; that surrogate differs from this
    exact quadrature by up to about 0.03.
    """

    name = "tanh"

    def __init__(self, n_quadrature=40):
        super().__init__(torch.tanh, _tanh_derivative, n_quadrature)

    def _params(self):
        return {"n_quadrature": self.n_quadrature}

    def __reduce__(self):
        # Rebuilt from the class alone, so that pickle and skops store no function.
        return (Tanh, (self.n_quadrature,))


class Sigmoid(QuadratureActivation):
    """Logistic sigmoid ``1 / (1 + exp(-u))``, by 2-D Gauss-Hermite quadrature.

    Parameters
    ----------
    n_quadrature : int, default=40
        Nodes per dimension.
    """

    name = "sigmoid"

    def __init__(self, n_quadrature=40):
        super().__init__(torch.sigmoid, _sigmoid_derivative, n_quadrature)

    def _params(self):
        return {"n_quadrature": self.n_quadrature}

    def __reduce__(self):
        # Rebuilt from the class alone, so that pickle and skops store no function.
        return (Sigmoid, (self.n_quadrature,))


_BY_NAME = {
    "relu": ReLU,
    "erf": Erf,
    "leaky_relu": LeakyReLU,
    "tanh": Tanh,
    "sigmoid": Sigmoid,
}


def get_activation(activation):
    """Resolve an ``activation`` argument into an :class:`Activation`.

    Parameters
    ----------
    activation : {"relu", "erf", "leaky_relu", "tanh", "sigmoid"}, Activation or callable
        A name (``"leaky_relu"`` uses ``negative_slope=0.01``), an :class:`Activation`
        instance (returned as is), or an elementwise callable ``torch.Tensor -> torch.Tensor``
        (wrapped in :class:`QuadratureActivation`).

    Returns
    -------
    Activation

    Raises
    ------
    ValueError
        If ``activation`` is none of the above.

    Examples
    --------
    >>> from skbnngp.kernels import get_activation
    >>> get_activation("leaky_relu")
    LeakyReLU(negative_slope=0.01)
    """
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str):
        if activation in _BY_NAME:
            return _BY_NAME[activation]()
        raise ValueError(
            f"activation={activation!r} is not supported; use one of "
            f"{sorted(_BY_NAME)}, an Activation instance or a callable."
        )
    if callable(activation) and not isinstance(activation, type):
        return QuadratureActivation(activation)
    raise ValueError(
        f"activation must be one of {sorted(_BY_NAME)}, an Activation instance or a callable "
        f"torch.Tensor -> torch.Tensor, got {activation!r}."
    )
