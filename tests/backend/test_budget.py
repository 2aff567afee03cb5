"""Device-dependent block sizes, memory checks before exact fits, and the CUDA inverse route
(issue 11), tested on the CPU with a fake device budget."""

import numpy as np
import pytest
import torch

from skbnngp import MixedActivationGPRegressor, StudentTProcessRegressor
from skbnngp._backend import (MemoryBudgetError, available_bytes, block_elements,
                              check_dense_fits)
from skbnngp._backend import _chunks
from skbnngp._backend._gp import _inverse_from_cholesky

GiB = 2**30


def test_block_size_follows_the_device_budget():
    assert block_elements("cpu") == 2**19  # unchanged on the CPU
    fake = torch.device("cuda")  # only the type is read; the budget is injected
    big = block_elements(fake, mem_get_info=lambda d: (80 * GiB, 80 * GiB))
    small = block_elements(fake, mem_get_info=lambda d: (1 * GiB, 80 * GiB))
    assert big == 80 * GiB // 16 // (8 * 12) and 2**25 < big < 2**26
    assert small == max(2**19, GiB // 16 // 96)
    assert block_elements(fake, mem_get_info=lambda d: (10**6, 0)) == 2**19  # floor
    assert block_elements(fake, mem_get_info=lambda d: (10**15, 0)) == 2**28  # ceiling
    # float32 blocks hold twice the entries
    f32 = block_elements(fake, element_bytes=4, mem_get_info=lambda d: (GiB, 0))
    assert abs(f32 - 2 * block_elements(fake, mem_get_info=lambda d: (GiB, 0))) <= 1


def test_available_bytes_on_the_cpu_is_positive():
    have = available_bytes("cpu")
    assert have is None or have > 0
    assert available_bytes("cuda", mem_get_info=lambda d: (123, 456)) == 123


def test_dense_check_message():
    check_dense_fits(1000, "cpu", 8, available=3 * 8 * 1000**2)  # exactly fits
    with pytest.raises(MemoryBudgetError, match=r"n = 200000 rows needs about 894.1 GiB"):
        check_dense_fits(200_000, "cpu", 8, context="Est", alternative="DBKRegressor",
                         available=24 * GiB)
    assert issubclass(MemoryBudgetError, ValueError)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("Est, kw", [(StudentTProcessRegressor, {}),
                                     (MixedActivationGPRegressor, dict(approx="exact"))])
def test_exact_fit_fails_before_allocating(monkeypatch, Est, kw):
    """An exact fit that cannot fit says so up front (the issue: 200,000 rows died in
    torch's allocator asking for 320 GB after the subset stage)."""
    monkeypatch.setattr(_chunks, "available_bytes", lambda device, **k: 10**6)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(400, 2)), rng.normal(size=400)
    with pytest.raises(ValueError, match=rf"{Est.__name__}.*n = 400 rows.*DBKRegressor"):
        Est(device="cpu", **kw).fit(X, y)
    # Nystrom holds no n x n matrix: the same budget is fine
    if Est is MixedActivationGPRegressor:
        Est(device="cpu", n_anchors=20, max_iter=3).fit(X, y)


def test_triangular_inverse_route_equals_cholesky_inverse():
    """The CUDA route (triangular solve + product) gives the same inverse as LAPACK's."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(50, 50, generator=g, dtype=torch.float64)
    K = A @ A.T + 50 * torch.eye(50, dtype=torch.float64)
    L = torch.linalg.cholesky(K)
    Li = torch.linalg.solve_triangular(L, torch.eye(50, dtype=torch.float64), upper=False)
    torch.testing.assert_close(Li.T @ Li, _inverse_from_cholesky(L), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(_inverse_from_cholesky(L), torch.linalg.inv(K), rtol=1e-9,
                               atol=1e-12)
