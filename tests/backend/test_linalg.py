"""Backend linear algebra: jitter ladder, solves, Woodbury (STYLE §3 'Kernel and backend tests')."""

import numpy as np
import pytest
import torch

from skbnngp._backend import (LowRankPlusDiag, cho_inverse, cho_logdet, cho_solve, solve_lower,
                              stable_cholesky, woodbury_solve)
from skbnngp.exceptions import NumericalError, NumericalWarning


def _spd(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    return A @ A.T + n * torch.eye(n, dtype=torch.float64)


def test_cholesky_no_jitter_for_spd():
    A = _spd(20)
    L, jitter = stable_cholesky(A)
    assert jitter == 0.0
    torch.testing.assert_close(L @ L.T, A)


def test_jitter_escalates_and_warns_with_amount():
    x = torch.linspace(0, 1, 30, dtype=torch.float64)
    A = torch.outer(x, x) + torch.outer(x**2, x**2)  # rank 2, singular
    with pytest.warns(NumericalWarning, match=r"added jitter \S+ \(1e-\d+ x mean diagonal\)"):
        L, jitter = stable_cholesky(A, context="test matrix")
    assert jitter > 0
    mean_diag = float(A.diagonal().mean())
    torch.testing.assert_close(L @ L.T, A + jitter * torch.eye(30, dtype=torch.float64))
    assert jitter <= 1e-2 * mean_diag


def test_cholesky_fails_clearly_on_indefinite_and_nan():
    A = -torch.eye(3, dtype=torch.float64)
    with pytest.raises(NumericalError, match="not positive definite"):
        stable_cholesky(A, context="bad matrix")
    B = torch.eye(3, dtype=torch.float64)
    B[0, 1] = float("nan")
    with pytest.raises(NumericalError, match="NaN"):
        stable_cholesky(B)


def test_solves_and_logdet_match_dense():
    A = _spd(15, seed=1)
    B = torch.randn(15, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    L, _ = stable_cholesky(A)
    torch.testing.assert_close(cho_solve(L, B), torch.linalg.solve(A, B))
    torch.testing.assert_close(cho_solve(L, B[:, 0]), torch.linalg.solve(A, B[:, 0]))
    torch.testing.assert_close(solve_lower(L, B), torch.linalg.solve(L, B))
    torch.testing.assert_close(cho_logdet(L), torch.logdet(A))
    torch.testing.assert_close(cho_inverse(L), torch.linalg.inv(A))


@pytest.mark.parametrize("diag_kind", ["scalar", "vector"])
def test_woodbury_equals_dense(diag_kind):
    g = torch.Generator().manual_seed(3)
    n, m = 40, 6
    U = torch.randn(n, m, generator=g, dtype=torch.float64)
    d = (torch.tensor(0.3, dtype=torch.float64) if diag_kind == "scalar"
         else torch.rand(n, generator=g, dtype=torch.float64) + 0.1)
    dense = U @ U.T + torch.diag(d.expand(n) if d.ndim == 0 else d)
    B = torch.randn(n, 2, generator=g, dtype=torch.float64)
    op = LowRankPlusDiag(U, d)
    torch.testing.assert_close(op.solve(B), torch.linalg.solve(dense, B))
    torch.testing.assert_close(op.logdet(), torch.logdet(dense))
    torch.testing.assert_close(op.quad(B), (B * torch.linalg.solve(dense, B)).sum())
    torch.testing.assert_close(woodbury_solve(U, d, B[:, 0]), torch.linalg.solve(dense, B[:, 0]))


def test_woodbury_with_duplicated_columns_is_stable():
    # duplicated anchors give a rank-deficient U; I + U^T D^-1 U stays well conditioned
    g = torch.Generator().manual_seed(4)
    u = torch.randn(50, 1, generator=g, dtype=torch.float64)
    U = torch.cat([u, u, u], dim=1)
    op = LowRankPlusDiag(U, 1e-3)
    dense = U @ U.T + 1e-3 * torch.eye(50, dtype=torch.float64)
    b = torch.randn(50, generator=g, dtype=torch.float64)
    np.testing.assert_allclose(op.solve(b).numpy(), np.linalg.solve(dense.numpy(), b.numpy()),
                               rtol=1e-6)


@pytest.mark.parametrize("n,tile", [(1, 4), (23, 5), (23, 23), (23, 64), (60, 16)])
def test_inverse_lower_by_tiles(n, tile):
    """``inverse_lower`` is the inverse of a lower-triangular factor for any tile size
    (ragged last tiles, one tile, tiles larger than the matrix), and stays lower-triangular."""
    from skbnngp._backend._linalg import inverse_lower

    L = torch.linalg.cholesky(torch.as_tensor(_spd(n, seed=n)))
    X = inverse_lower(L, tile)
    np.testing.assert_allclose((X @ L).numpy(), np.eye(n), atol=1e-12)
    assert torch.equal(X, X.tril())
    np.testing.assert_allclose((X.T @ X).numpy(), torch.cholesky_inverse(L).numpy(),
                               rtol=1e-10, atol=1e-12)
