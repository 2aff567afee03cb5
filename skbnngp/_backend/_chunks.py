"""Row-chunked evaluation so that predicting on millions of rows has bounded memory, and the
one place that decides block sizes and memory budgets per device."""

from __future__ import annotations

import os

import torch

#: Default number of float elements one (rows x n_train) block may hold: 2**24 elements is
#: 128 MiB in float64.
DEFAULT_BLOCK_ELEMENTS = 2**24


#: Kernel entries per row block on the CPU: cache friendly (a closed-form kernel keeps about a
#: dozen temporaries of this size).
CPU_BLOCK_ELEMENTS = 2**19
#: On CUDA a row block (with its temporaries) may take this fraction of the free memory.
CUDA_BLOCK_FRACTION = 1 / 16
#: Upper bound of a CUDA block, whatever the free memory.
MAX_BLOCK_ELEMENTS = 2**28


def block_elements(device, *, element_bytes=8, temporaries=12, mem_get_info=None) -> int:
    """Kernel entries per row block on ``device``.

    On the CPU a cache-friendly constant (:data:`CPU_BLOCK_ELEMENTS`); on CUDA,
    :data:`CUDA_BLOCK_FRACTION` of the free device memory divided by ``temporaries`` blocks
    of ``element_bytes`` each (an 80 GB GPU gets about 2^25 entries, so n = 20,000 rows take a
    handful of blocks per pass instead of hundreds). ``mem_get_info`` replaces
    ``torch.cuda.mem_get_info`` (tests use a fake budget).
    """
    device = torch.device(device)
    if device.type != "cuda":
        return CPU_BLOCK_ELEMENTS
    free, _ = (mem_get_info or torch.cuda.mem_get_info)(device)
    n = int(free * CUDA_BLOCK_FRACTION / (element_bytes * temporaries))
    return max(CPU_BLOCK_ELEMENTS, min(n, MAX_BLOCK_ELEMENTS))


def available_bytes(device, *, mem_get_info=None):
    """Memory that a new allocation on ``device`` can use, in bytes (None if unknown).

    CUDA: the free device memory; CPU: ``MemAvailable`` of ``/proc/meminfo`` (Linux), else
    the free physical pages.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return int((mem_get_info or torch.cuda.mem_get_info)(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


class MemoryBudgetError(ValueError):
    """An exact (n x n) computation would not fit in the memory of its device."""


def check_dense_fits(n, device, element_bytes, *, matrices=3, context="exact GP",
                     alternative="a low-rank method", available=None):
    """Fail before allocating when ``matrices`` n x n arrays cannot fit on ``device``.

    An exact GP fit holds two n x n arrays at once: the kernel matrix and its Cholesky
    factor, then the factor and the gradient's adjoint (on the CPU) or the factor's inverse
    (on CUDA, where the adjoint is made by tiles). Measured peaks: 2.3 n^2 on the CPU over a
    factorisation, 2.4 n^2 over a whole Student-t fit on an H200 at n = 50,000 (3.0 n^2 before
    the factor's copy was removed). The default of three leaves room for the row blocks.
    ``available`` overrides :func:`available_bytes` (tests).

    Raises
    ------
    MemoryBudgetError
        With the estimate, the memory available and what to use instead.
    """
    need = matrices * int(n) * int(n) * int(element_bytes)
    have = available_bytes(device) if available is None else available
    if have is not None and need > have:
        raise MemoryBudgetError(
            f"{context}: an exact fit of n = {n} rows needs about {need / 2**30:.1f} GiB for "
            f"{matrices} n x n matrices, but {torch.device(device)} has "
            f"{have / 2**30:.1f} GiB available. Use {alternative}, or fit on a subsample.")


def auto_batch_size(n_cols: int, batch_size=None, max_elements=DEFAULT_BLOCK_ELEMENTS) -> int:
    """Rows per block: ``batch_size`` if given, else as many as fit ``max_elements``."""
    if batch_size is not None:
        return max(1, int(batch_size))
    return max(1, int(max_elements // max(1, n_cols)))


def iter_slices(n: int, batch_size: int):
    """Yield ``slice`` objects covering ``range(n)`` in steps of ``batch_size``."""
    batch_size = max(1, int(batch_size))
    for start in range(0, n, batch_size):
        yield slice(start, min(start + batch_size, n))


def chunked_apply(fn, X: torch.Tensor, batch_size: int):
    """Apply ``fn`` to row blocks of ``X`` and concatenate the outputs along dim 0.

    ``fn`` returns a tensor or a tuple of tensors; outputs stay on the device (no host copies
    inside the loop).
    """
    n = X.shape[0]
    outs = None
    for sl in iter_slices(n, batch_size):
        res = fn(X[sl])
        single = isinstance(res, torch.Tensor)
        res = (res,) if single else tuple(res)
        if outs is None:
            outs = [[] for _ in res]
        for store, r in zip(outs, res):
            store.append(r)
    if outs is None:  # n == 0
        res = fn(X[:0])
        return res
    cat = [torch.cat(parts, dim=0) for parts in outs]
    return cat[0] if single else tuple(cat)
