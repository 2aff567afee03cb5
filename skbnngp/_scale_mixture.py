"""Scale priors on the readout variance ``s`` and the mixing distributions they induce.

Conditioned on ``s`` the model is the GP ``y | s ~ N(0, s (K + lambda I))``.
Every quantity needed from the training data is the pair ``(q, logdet)`` with
``q = tr(Y^T K_lambda^{-1} Y)`` and ``logdet = log|K_lambda|``, so each prior only has to
provide

* ``log_marginal(q, logdet, N, C, shape, scale)``: ``log int N(Y; 0, s K_lambda) H(ds)`` as a
  differentiable torch scalar (``N = n * C``);
* ``posterior(...)``: the mixing distribution of ``s`` given the data (``Mixing``);
* ``prior(...)``: the mixing distribution before seeing data (used by the
  gradient-descent-trained predictive modes of the paper's Theorem 3.3).

Private module of ``_student_t``; ``RegressorPredictiveMixin`` (``_predictive``) reuses
``Mixing`` for the Student-t calibration of Rich-BLL and the mixed-activation GP.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

from ._backend import to_float, to_numpy
from .distributions import ScaleMixtureNormal

_LOG2PI = math.log(2 * math.pi)


def gaussian_loglik(q, logdet, N, C, s):
    """``log N(Y; 0, s K_lambda)`` from ``(q, logdet)``; ``s`` may be a vector."""
    return -0.5 * N * (_LOG2PI + torch.log(s)) - 0.5 * C * logdet - 0.5 * q / s


class Mixing:
    """A distribution over the amplitude ``s``: inverse gamma, a point mass, or discrete.

    ``kind`` is ``"invgamma"`` (``shape``, ``scale``), ``"delta"`` (``value``) or
    ``"discrete"`` (``scales``, ``weights``).
    """

    def __init__(self, kind, **params):
        self.kind = kind
        self.params = params

    def mean(self):
        if self.kind == "invgamma":
            a, b = self.params["shape"], self.params["scale"]
            return b / (a - 1.0) if a > 1.0 else math.inf
        if self.kind == "delta":
            return self.params["value"]
        return float(np.dot(self.params["weights"], self.params["scales"]))

    def t_reference(self):
        """``(s0, df)``: the amplitude against which a Student-t calibration reads the
        residuals, and the largest degrees of freedom it may choose. An inverse gamma
        is a t of squared scale ``b / a`` and ``2 a`` degrees of freedom (the calibrated
        t keeps at least its tails); a point mass is the Gaussian at its value; a discrete
        mixing is read at its mean amplitude, with no cap."""
        if self.kind == "invgamma":
            a, b = self.params["shape"], self.params["scale"]
            return b / a, 2.0 * a
        return self.mean(), math.inf

    def predictive(self, loc, var=None, *, std=None):
        """Frozen distribution of ``loc + sqrt(s * var) * z`` with ``s`` from this mixing.

        ``var`` is the unit-amplitude predictive variance (same shape as ``loc``); or give
        its square root ``std`` (no overflow for scales near the float limit).
        """
        base = np.sqrt(np.maximum(var, 0.0)) if std is None else np.asarray(std)
        if self.kind == "invgamma":
            a, b = self.params["shape"], self.params["scale"]
            return stats.t(df=2.0 * a, loc=loc, scale=np.sqrt(b / a) * base)
        if self.kind == "delta":
            return stats.norm(loc=loc, scale=math.sqrt(self.params["value"]) * base)
        return ScaleMixtureNormal(loc, base, self.params["scales"], self.params["weights"])

    def sample(self, n, rng):
        """``n`` draws of ``s`` (NumPy ``RandomState``)."""
        if self.kind == "invgamma":
            a, b = self.params["shape"], self.params["scale"]
            return b / rng.gamma(a, 1.0, size=n)
        if self.kind == "delta":
            return np.full(n, self.params["value"])
        return rng.choice(self.params["scales"], size=n, p=self.params["weights"])

    def quantile_nodes(self, k):
        """``k`` equally weighted nodes (mid-quantiles) summarising the distribution."""
        probs = (np.arange(k) + 0.5) / k
        if self.kind == "invgamma":
            return stats.invgamma.ppf(probs, self.params["shape"], scale=self.params["scale"])
        if self.kind == "delta":
            return np.array([self.params["value"]])
        order = np.argsort(self.params["scales"])
        cdf = np.cumsum(self.params["weights"][order])
        idx = np.minimum(np.searchsorted(cdf, probs), order.size - 1)
        return self.params["scales"][order][idx]


class InvGammaPrior:
    """``s ~ InvGamma(shape=a, scale=b)``: the Student-t process in closed form."""

    name = "invgamma"
    uses = ("prior_shape", "prior_scale")
    effective_sample_size = None

    def log_marginal(self, q, logdet, N, C, a, b):
        # log MVT_n(y; 2a, 0, (b/a) K_lambda), written with log1p for accuracy
        return (torch.lgamma(a + 0.5 * N) - torch.lgamma(a) - 0.5 * N * (_LOG2PI + torch.log(b))
                - 0.5 * C * logdet - (a + 0.5 * N) * torch.log1p(0.5 * q / b))

    def posterior(self, q, logdet, N, C, a, b):
        return Mixing("invgamma", shape=to_float(a) + 0.5 * N,
                      scale=to_float(b) + 0.5 * to_float(q))

    def prior(self, a, b):
        return Mixing("invgamma", shape=a, scale=b)


class DeltaPrior:
    """``s = prior_scale`` with probability one: the plain NNGP (Gaussian process)."""

    name = "gaussian"
    uses = ("prior_scale",)
    effective_sample_size = None

    def log_marginal(self, q, logdet, N, C, a, b):
        return gaussian_loglik(q, logdet, N, C, b)

    def posterior(self, q, logdet, N, C, a, b):
        return Mixing("delta", value=to_float(b))

    def prior(self, a, b):
        return Mixing("delta", value=b)


class SampledPrior:
    """Any other positive prior: self-normalised importance sampling or 1-D quadrature.

    Parameters
    ----------
    inference : {"snis", "quadrature"}
        ``"snis"`` (the paper's algorithm): ``n_samples`` draws from the prior, fixed
        at fit time, weighted by the likelihood. ``"quadrature"``: trapezoidal rule in
        ``log s`` on a grid centred on the likelihood's mode.
    dist : frozen scipy.stats distribution
        The prior of ``s``, supported on (0, inf); its parameters are not optimised.
    """

    uses = ()
    name = kind = "scipy"

    def __init__(self, inference, *, dist, n_samples=1000, n_nodes=801, rng=None, device=None,
                 dtype=None):
        self.inference, self.dist = inference, dist
        self.n_nodes = n_nodes
        self.device, self.dtype = device, dtype
        self.effective_sample_size = None
        # prior draws: kept for SNIS and for the prior-mixed (trained-network) predictive
        draws = np.asarray(dist.rvs(size=n_samples, random_state=rng), dtype=float)
        if np.any(~np.isfinite(draws)) or np.any(draws <= 0):
            raise ValueError("prior: the scipy distribution must be supported on (0, inf).")
        self.unit_draws = torch.as_tensor(draws, device=device, dtype=dtype)

    # -- persistence: plain values only (skops), tensors rebuilt on load -----------------
    def __getstate__(self):
        state = self.__dict__.copy()
        state["unit_draws"] = to_numpy(self.unit_draws).copy()
        state["device"] = None if self.device is None else str(self.device)
        state["dtype"] = None if self.dtype is None else str(self.dtype).replace("torch.", "")
        return state

    def __setstate__(self, state):
        dev = state.get("device")
        if dev is not None:
            dev = torch.device(dev)
            if dev.type == "cuda" and not torch.cuda.is_available():
                dev = torch.device("cpu")  # the estimator warns about the device change
        dtype = state.get("dtype")
        dtype = None if dtype is None else getattr(torch, dtype)
        state = dict(state, device=dev, dtype=dtype)
        state["unit_draws"] = torch.as_tensor(state["unit_draws"], device=dev, dtype=dtype)
        self.__dict__.update(state)

    def to_device(self, device):
        """Move the prior draws to ``device`` (after loading a model onto another device)."""
        self.unit_draws = torch.as_tensor(self.unit_draws, device=device)
        self.device = device

    # -- prior draws and densities -----------------------------------------------------
    def _draws(self, b):
        return self.unit_draws

    def _log_density(self, s, b):
        # a scipy density: value on the host; its slope in log s gives the gradient
        s_np = to_numpy(s)
        val = self.dist.logpdf(s_np)
        h = 1e-5
        slope = (self.dist.logpdf(s_np * math.exp(h)) - self.dist.logpdf(s_np * math.exp(-h)))
        slope = slope / (2 * h)
        val_t = torch.as_tensor(np.where(np.isfinite(val), val, -np.inf), device=s.device,
                                dtype=s.dtype)
        slope_t = torch.as_tensor(np.nan_to_num(slope), device=s.device, dtype=s.dtype)
        logs = torch.log(s)
        return val_t + slope_t * (logs - logs.detach())

    def _grid(self, q, N, b):
        """Nodes ``s = s_hat * exp(u)`` and trapezoid log-weights, ``s_hat = q / N``."""
        s_hat = (q + 1e-12) / N
        width = 12.0
        u = torch.linspace(-width, width, 401, device=q.device, dtype=q.dtype)
        with torch.no_grad():  # locate the bulk of the integrand on a coarse grid
            s = s_hat.detach() * torch.exp(u)
            f = gaussian_loglik(q.detach(), 0.0, N, 1, s) + self._log_density(s, b) + u
            keep = u[f > f.max() - 45.0]
            lo, hi = to_float(keep.min()) - 0.1, to_float(keep.max()) + 0.1
        u = torch.linspace(lo, hi, self.n_nodes, device=q.device, dtype=q.dtype)
        du = (hi - lo) / (self.n_nodes - 1)
        return s_hat * torch.exp(u), u, du

    def _log_terms(self, q, logdet, N, C, b):
        """Per-component log-weights whose logsumexp is the log marginal likelihood."""
        if self.inference == "snis":
            s = self._draws(b)
            return s, gaussian_loglik(q, logdet, N, C, s) - math.log(s.shape[0])
        s, _u, du = self._grid(q, N, b)
        # int f(s) ds = int f(s_hat e^u) s du  (trapezoid; the end weights are negligible)
        return s, (gaussian_loglik(q, logdet, N, C, s) + self._log_density(s, b)
                   + torch.log(s) + math.log(du))

    def log_marginal(self, q, logdet, N, C, a, b):
        _, terms = self._log_terms(q, logdet, N, C, b)
        return torch.logsumexp(terms, dim=0)

    def posterior(self, q, logdet, N, C, a, b):
        with torch.no_grad():
            s, terms = self._log_terms(q, logdet, N, C, b)
            w = torch.softmax(terms, dim=0)
        s, w = to_numpy(s), to_numpy(w)
        self.effective_sample_size = float(1.0 / np.sum(w**2))
        keep = w > 1e-12 * w.max()
        w = w[keep] / w[keep].sum()
        return Mixing("discrete", scales=s[keep], weights=w)

    def prior(self, a, b):
        s = to_numpy(self._draws(b))
        return Mixing("discrete", scales=s, weights=np.full(s.size, 1.0 / s.size))
