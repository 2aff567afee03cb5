"""The package's one optimisation loop: torch L-BFGS (strong-Wolfe line search) or Adam.

The objective is a function ``fun(x) -> (loss, grad)`` of a 1-D parameter tensor, returning a
0-d loss tensor and its gradient. Returning the gradient explicitly (rather than a graph)
lets an estimator use a fast hand-written adjoint where autograd is slow (the log marginal
likelihood through a Cholesky) and autograd everywhere else.

Box bounds are enforced by a smooth squashing ``x = lo + (hi - lo) * sigmoid(z)``, so no
line search can step into overflow. The loop never warns itself (this module knows nothing
of scikit-learn): it reports ``converged`` and a message, and the estimator raises
``ConvergenceWarning``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ._device import to_float
from ._eager_optim import make_optimizer

_EDGE = 1e-6  # how far inside its bounds a starting point is moved
#: ``verbose=1`` prints the first and every this many evaluations, and why the optimisation
#: stopped (``verbose >= 2``: every evaluation).
REPORT_EVALS = 10


@dataclass
class OptimResult:
    """Outcome of :func:`minimize`."""

    x: torch.Tensor
    fun: float
    n_iter: int
    n_fev: int
    converged: bool
    message: str
    loss_curve: list = field(default_factory=list)


class _Box:
    """Squashing map between unconstrained ``z`` and bounded ``x`` (per coordinate)."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi
        self.width = hi - lo

    def to_z(self, x):
        u = ((x - self.lo) / self.width).clamp(_EDGE, 1 - _EDGE)
        return torch.log(u) - torch.log1p(-u)

    def to_x(self, z):
        return self.lo + self.width * torch.sigmoid(z)

    def dx_dz(self, z):
        s = torch.sigmoid(z)
        return self.width * s * (1 - s)


def minimize(fun, x0, *, bounds=None, method="lbfgs", max_iter=100, tol=1e-6,
             learning_rate=0.05, n_iter_no_change=20, verbose=0, print_fn=print,
             label="optimizer"):
    """Minimise ``fun`` from ``x0``.

    Parameters
    ----------
    fun : callable
        ``fun(x) -> (loss, grad)`` with ``loss`` a 0-d tensor and ``grad`` like ``x``. It may
        return a non-finite loss (e.g. a failed factorisation); that point is then treated as
        very bad and the line search backs off.
    x0 : tensor of shape (p,)
    bounds : tuple of two tensors of shape (p,), optional
        Finite lower/upper bounds of ``x``.
    method : {"lbfgs", "adam"}
    max_iter : int
        L-BFGS iterations or Adam steps.
    tol : float
        L-BFGS: stop when the loss or the step changes by less than ``tol``; Adam: stop when
        the loss improved by less than ``tol * max(1, |loss|)`` for ``n_iter_no_change``
        consecutive steps.
    verbose : int
        0: silent; 1: a progress line at the first and every :data:`REPORT_EVALS`-th function
        evaluation and a last line saying why the optimisation stopped; ``>= 2``: a line at
        every evaluation.

    Returns
    -------
    OptimResult
    """
    x0 = x0.detach()
    box = _Box(*bounds) if bounds is not None else None
    z0 = box.to_z(x0) if box is not None else x0.clone()
    z = z0.clone().requires_grad_(True)
    curve: list = []
    best = {"loss": math.inf, "x": x0.clone()}
    n_fev = 0

    def evaluate(zt):
        nonlocal n_fev
        n_fev += 1
        x = box.to_x(zt) if box is not None else zt
        loss, gx = fun(x.detach())
        lf = to_float(loss)
        finite = math.isfinite(lf) and bool(torch.isfinite(gx).all())
        if finite:
            curve.append(lf)
            if lf < best["loss"]:
                best["loss"], best["x"] = lf, x.detach().clone()
        else:
            # a penalty well above anything seen, with no gradient: the line search retreats
            lf = (abs(best["loss"]) + 1.0) * 1e3 if math.isfinite(best["loss"]) else 1e10
            gx = torch.zeros_like(gx)
        gz = gx * box.dx_dz(zt.detach()) if box is not None else gx
        if verbose and (n_fev == 1 or n_fev % (1 if verbose >= 2 else REPORT_EVALS) == 0):
            print_fn(f"[{label}] eval {n_fev:4d}  loss {lf: .6g}  |grad| {to_float(gz.norm()):.3g}")
        return lf, gz

    if method == "lbfgs":
        opt = make_optimizer(torch.optim.LBFGS, [z], lr=1.0, max_iter=max_iter,
                             max_eval=int(max_iter * 1.5) + 5, tolerance_grad=1e-7,
                             tolerance_change=tol, history_size=20, line_search_fn="strong_wolfe")

        def closure():
            lf, gz = evaluate(z)
            z.grad = gz.to(z.dtype)
            return torch.tensor(lf, dtype=z.dtype, device=z.device)

        opt.step(closure)
        state = opt.state[z]
        n_iter = int(state.get("n_iter", 0))
        max_eval = int(max_iter * 1.5) + 5
        converged = n_iter < max_iter and n_fev < max_eval
        message = (f"converged after {n_fev} evaluations" if converged else
                   f"stopped after {n_iter} iterations ({n_fev} evaluations) without meeting tol")
    elif method == "adam":
        opt = make_optimizer(torch.optim.Adam, [z], lr=learning_rate)
        no_change, prev, n_iter, converged = 0, math.inf, 0, False
        for n_iter in range(1, max_iter + 1):
            lf, gz = evaluate(z)
            opt.zero_grad()
            z.grad = gz.to(z.dtype)
            opt.step()
            if prev - lf < tol * max(1.0, abs(lf)):
                no_change += 1
            else:
                no_change = 0
            prev = min(prev, lf)
            if no_change >= n_iter_no_change:
                converged = True
                break
        message = (f"converged after {n_iter} Adam steps" if converged else
                   f"reached max_iter={max_iter} Adam steps without meeting tol")
    else:
        raise ValueError(f"method must be 'lbfgs' or 'adam', got {method!r}.")
    if not math.isfinite(best["loss"]):
        message, converged = "the objective was never finite", False
    if verbose:
        print_fn(f"[{label}] {message}; best loss {best['loss']: .6g}")
    if not math.isfinite(best["loss"]):
        return OptimResult(x0, math.inf, 0, n_fev, False, message, curve)
    return OptimResult(best["x"], best["loss"], n_iter, n_fev, converged, message, curve)
