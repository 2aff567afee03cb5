"""Row-wise masked autoregressive flows (MAF) built on ``zuko`` (the optional ``flows`` extra).

FiD-GP pushes the diagonal-Gaussian sample of a whitened inducing matrix ``V0`` (R x C)
through a MAF applied to each row (the R rows are a batch of vectors in R^C). zuko gives the
autoregressive machinery: :class:`zuko.flows.MaskedAutoregressiveTransform` with a residual
:class:`zuko.nn.MaskedMLP` conditioner, its log-determinant and its sequential inverse. What
zuko lacks and is added here:

* the affine step of the authors' code (nflows' MAF), ``y_k = (softplus(a_k) + 1e-3) x_k + b_k``
  (:class:`SoftplusAffineTransform`; zuko's own affine bounds ``log scale`` differently);
* dropout inside the conditioner drawn from a local generator, so that training is
  reproducible and the global torch random state is never touched (:class:`SeededDropout`);
* spectral normalisation of every masked linear (torch's parametrisation, applied to the
  unmasked weight; the mask is multiplied in afterwards, as in the authors' code);
* modules built with the global random state saved and restored, and their initial weights
  drawn from a seed.

zuko's conditioner differs from nflows' ResidualMADE in two details: its residual
block is ``h + L2(drop(relu(L1(h))))`` without nflows' leading ReLU, and its hidden units
are assigned to dependency sets cyclically rather than by nflows' degree formula. Both keep
the transform autoregressive (tested through the Jacobian).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ._random import host_rand

#: Smallest affine scale of a MAF step (nflows' value).
MIN_SCALE = 1e-3


def require_zuko():
    """Import zuko, or raise an ImportError that names the extra to install."""
    try:
        import zuko  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "FiD-GP's normalising flow needs the optional package 'zuko': "
            "pip install 'skbnngp[flows]' (or pip install zuko), or use flow_length=0.") from exc
    return zuko


class SeededDropout(torch.nn.Module):
    """ReLU then dropout whose mask is drawn from ``holder.generator`` (None: no dropout)."""

    def __init__(self, p, holder):
        super().__init__()
        self.p = float(p)
        self._holder = [holder]  # a list: keep the holder out of the module tree

    def forward(self, x):
        x = F.relu(x)
        gen = self._holder[0].generator
        if not self.training or self.p == 0.0 or gen is None:
            return x
        keep = host_rand(x.shape, gen, x.device, x.dtype) >= self.p
        return x * keep / (1.0 - self.p)


class GeneratorHolder:
    """A mutable slot for the generator that the flow's dropout uses during training."""

    def __init__(self):
        self.generator = None


def _softplus_affine_class():
    zuko = require_zuko()

    class SoftplusAffineTransform(zuko.transforms.Transform):
        """``y = (softplus(a) + 1e-3) x + b`` elementwise (nflows' affine MAF step)."""

        domain = torch.distributions.constraints.real
        codomain = torch.distributions.constraints.real
        bijective = True
        sign = +1

        def __init__(self, shift, unconstrained_scale, **kwargs):
            super().__init__(**kwargs)
            self.shift = shift
            self.scale = F.softplus(unconstrained_scale) + MIN_SCALE

        def _call(self, x):
            return x * self.scale + self.shift

        def _inverse(self, y):
            return (y - self.shift) / self.scale

        def log_abs_det_jacobian(self, x, y):
            return self.scale.log().expand(x.shape)

    return SoftplusAffineTransform


class RowMAF(torch.nn.Module):
    """A stack of ``n_transforms`` affine MAF steps acting on the last dimension.

    Steps alternate between the natural and the reversed coordinate order. ``forward(x)`` returns
    ``(y, log|det dy/dx|)`` with the log-det
    summed over the last dimension; ``inverse(y)`` runs the sequential inverse.

    Parameters
    ----------
    features : int
        The row length C (at least 2).
    n_transforms : int
    hidden : int
        Width H of the conditioner (an input masked linear, two residual blocks, an output
        masked linear).
    dropout : float
        Dropout probability inside the conditioner (training only, drawn from ``holder``).
    spectral_norm : bool
        Spectral normalisation on every masked linear.
    seed : int
        Seeds the initial weights and the spectral-norm vectors.
    holder : GeneratorHolder
    """

    def __init__(self, features, n_transforms=1, hidden=16, dropout=0.1, spectral_norm=True,
                 seed=0, holder=None):
        super().__init__()
        zuko = require_zuko()
        from torch.nn.utils.parametrizations import spectral_norm as _sn

        univariate = _softplus_affine_class()
        self.features = int(features)
        holder = holder if holder is not None else GeneratorHolder()
        steps = []
        with torch.random.fork_rng(devices=[]):  # the global state is restored on exit
            torch.manual_seed(int(seed))
            for k in range(int(n_transforms)):
                order = torch.arange(self.features)
                if k % 2 == 1:
                    order = order.flip(0)
                step = zuko.flows.MaskedAutoregressiveTransform(
                    features=self.features, order=order, univariate=univariate,
                    shapes=((), ()), hidden_features=(int(hidden), int(hidden)), residual=True,
                    activation=lambda: SeededDropout(dropout, holder))
                for mod in step.modules():
                    if isinstance(mod, torch.nn.Linear):
                        bound = 1.0 / math.sqrt(max(1, mod.in_features))
                        torch.nn.init.uniform_(mod.weight, -bound, bound)
                        torch.nn.init.uniform_(mod.bias, -bound, bound)
                        if spectral_norm:
                            _sn(mod)
                steps.append(step)
        self.steps = torch.nn.ModuleList(steps)

    def forward(self, x):
        ladj = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
        for step in self.steps:
            x, part = step(None).call_and_ladj(x)
            ladj = ladj + part
        return x, ladj

    def inverse(self, y):
        for step in reversed(self.steps):
            y = step(None).inv(y)
        return y

    def masked_linears(self):
        """The conditioners' masked linear layers (for spectral-norm checks)."""
        return [m for m in self.modules() if isinstance(m, torch.nn.Linear)]
