"""Stable dense and low-rank linear algebra: Cholesky with a jitter ladder, solves, logdets."""

from __future__ import annotations

import math
import warnings

import torch

from ..exceptions import NumericalError, NumericalWarning

#: Relative jitters tried in turn, as a multiple of the mean diagonal of the matrix.
JITTER_LADDER = (0.0, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


def stable_cholesky(A: torch.Tensor, *, context: str = "kernel matrix", warn: bool = True,
                    max_relative_jitter: float = 1e-2):
    """Lower Cholesky factor of a symmetric matrix, adding diagonal jitter when needed.

    The jitter tried is ``r * mean(diag(A))`` for ``r`` in :data:`JITTER_LADDER` (up to
    ``max_relative_jitter``), so the fix is scale free.

    Parameters
    ----------
    A : tensor of shape (n, n)
        Symmetric, meant to be positive definite.
    context : str
        Named in the warning and the error (e.g. ``"StudentTProcessRegressor: training
        kernel"``).
    warn : bool
        Emit a :class:`~skbnngp.exceptions.NumericalWarning` stating the jitter added.

    Returns
    -------
    L : tensor of shape (n, n)
    jitter : float
        Absolute jitter that was added (0.0 when none was needed).

    Raises
    ------
    NumericalError
        If ``A`` holds NaN/inf, or is not positive definite even with the largest jitter.
    """
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{context}: expected a square matrix, got shape {tuple(A.shape)}.")
    n = A.shape[0]
    if n == 0:
        return A.clone(), 0.0
    if not bool(torch.isfinite(A.detach()).all()):
        raise NumericalError(
            f"{context} contains NaN or inf values; check the inputs and hyperparameters."
        )
    scale = float(A.detach().diagonal().abs().mean())  # A may carry a graph (Nystrom adjoint)
    if not scale > 0:
        scale = 1.0
    eye = None
    for rel in JITTER_LADDER:
        if rel > max_relative_jitter:
            break
        if rel == 0.0:
            L, info = torch.linalg.cholesky_ex(A)
        else:
            if eye is None:
                eye = torch.eye(n, dtype=A.dtype, device=A.device)
            L, info = torch.linalg.cholesky_ex(A + (rel * scale) * eye)
        if int(info) == 0:
            jitter = rel * scale
            if rel > 0 and warn:
                single = (" or single precision (fit with dtype='float64')"
                          if A.dtype == torch.float32 else "")
                warnings.warn(
                    f"{context} was not numerically positive definite; added jitter "
                    f"{jitter:.3g} ({rel:.0e} x mean diagonal) to its diagonal. Duplicated rows "
                    f"or a tiny noise level{single} cause this; increase the noise/alpha "
                    "parameter to avoid it.",
                    NumericalWarning,
                    stacklevel=3,
                )
            return L, jitter
    raise NumericalError(
        f"{context} is not positive definite even after adding jitter "
        f"{max_relative_jitter:.0e} x mean diagonal ({max_relative_jitter * scale:.3g}). "
        "Increase the noise/alpha parameter, remove duplicated rows, or rescale the inputs."
    )


def cho_solve(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Solve ``(L L^T) X = B`` given the lower Cholesky factor ``L``.

    Two triangular solves, which read ``L`` in place (as ``L^T`` for the second);
    ``torch.cholesky_solve`` copies the whole factor first, a third n x n matrix at the peak
    of an exact GP fit.
    """
    vec = B.ndim == 1
    Z = torch.linalg.solve_triangular(L, B.unsqueeze(-1) if vec else B, upper=False)
    X = torch.linalg.solve_triangular(L.mT, Z, upper=True)
    return X.squeeze(-1) if vec else X


def solve_lower(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """Solve ``L X = B`` for lower-triangular ``L``."""
    if B.ndim == 1:
        return torch.linalg.solve_triangular(L, B.unsqueeze(-1), upper=False).squeeze(-1)
    return torch.linalg.solve_triangular(L, B, upper=False)


def cho_logdet(L: torch.Tensor) -> torch.Tensor:
    """``log det(L L^T) = 2 sum(log diag L)``."""
    return 2.0 * torch.log(L.diagonal()).sum()


def cho_inverse(L: torch.Tensor) -> torch.Tensor:
    """``(L L^T)^{-1}`` from the Cholesky factor (used for the marginal-likelihood adjoint)."""
    return torch.cholesky_inverse(L)


def inverse_lower(L: torch.Tensor, tile: int) -> torch.Tensor:
    """``L^-1`` of a lower-triangular ``L`` (n x n), by square tiles of ``tile`` rows.

    The diagonal tiles are inverted by triangular solves; every tile below them by matrix
    products, row tile by row tile, from ``L X = I``:
    ``X[I, J] = -X[I, I] (L[I, J:I] X[J:I, J])``. That is about n^3 / 3 multiply-adds in
    matrix products, where a triangular solve against the identity does n^3 (it cannot skip
    the zeros), and the memory is the result plus two tiles.
    """
    n = L.shape[0]
    t = max(1, int(tile))
    X = torch.zeros_like(L)
    starts = range(0, n, t)
    for i0 in starts:
        i1 = min(i0 + t, n)
        eye = torch.eye(i1 - i0, dtype=L.dtype, device=L.device)
        X[i0:i1, i0:i1] = torch.linalg.solve_triangular(L[i0:i1, i0:i1], eye, upper=False)
        for j0 in range(0, i0, t):
            j1 = min(j0 + t, n)
            X[i0:i1, j0:j1] = -(X[i0:i1, i0:i1] @ (L[i0:i1, j0:i0] @ X[j0:i0, j0:j1]))
    return X


class LowRankPlusDiag:
    """The matrix ``D + U U^T`` with diagonal ``D`` (n) and ``U`` (n x m), m << n.

    Solves and the log-determinant use the Woodbury identity and the matrix-determinant
    lemma through one m x m Cholesky factor: ``O(n m^2)`` time, ``O(n m)`` memory, and no
    n x n matrix is ever formed.

    Parameters
    ----------
    U : tensor of shape (n, m)
    diag : tensor of shape (n,) or scalar tensor/float
        Strictly positive.
    context : str
        Named in jitter warnings and errors.
    """

    def __init__(self, U: torch.Tensor, diag, *, context: str = "low-rank matrix"):
        self.U = U
        n = U.shape[0]
        d = torch.as_tensor(diag, dtype=U.dtype, device=U.device)
        if d.ndim == 0:
            d = d.expand(n)
        if not bool((d > 0).all()):
            raise NumericalError(f"{context}: the diagonal part must be strictly positive.")
        self.d = d
        Ud = U / d.unsqueeze(-1)  # D^{-1} U
        self._Ud = Ud
        inner = U.T @ Ud  # U^T D^{-1} U
        inner.diagonal().add_(1.0)  # I + U^T D^{-1} U
        self.Lc, self.jitter = stable_cholesky(inner, context=context)

    def solve(self, B: torch.Tensor) -> torch.Tensor:
        """``(D + U U^T)^{-1} B``."""
        vec = B.ndim == 1
        if vec:
            B = B.unsqueeze(-1)
        DB = B / self.d.unsqueeze(-1)
        inner = cho_solve(self.Lc, self.U.T @ DB)
        out = DB - self._Ud @ inner
        return out.squeeze(-1) if vec else out

    def logdet(self) -> torch.Tensor:
        """``log det(D + U U^T) = log det(D) + log det(I + U^T D^{-1} U)``."""
        return torch.log(self.d).sum() + cho_logdet(self.Lc)

    def quad(self, B: torch.Tensor) -> torch.Tensor:
        """``tr(B^T (D + U U^T)^{-1} B)``."""
        return (B * self.solve(B)).sum()


def woodbury_solve(U: torch.Tensor, diag, B: torch.Tensor) -> torch.Tensor:
    """``(diag(diag) + U U^T)^{-1} B`` without forming the n x n matrix."""
    return LowRankPlusDiag(U, diag).solve(B)


def log2pi() -> float:
    return math.log(2.0 * math.pi)
