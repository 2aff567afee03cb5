"""Row-chunked evaluation so that predicting on millions of rows has bounded memory."""

from __future__ import annotations

import torch

#: Default number of float elements one (rows x n_train) block may hold: 2**24 elements is
#: 128 MiB in float64.
DEFAULT_BLOCK_ELEMENTS = 2**24


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
