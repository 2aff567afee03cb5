"""Shared checks for an exact GP whose n x n Cholesky factor ``L_`` is read from the device
on demand and never pickled (the Student-t process, the mixed-activation GP's exact mode)."""

import pickle

import numpy as np
import pytest


def check_factor_read_on_demand(est):
    """``est`` is fitted. Returns the factor. Checks that it is not a stored attribute, is
    the read-only lower factor of ``K + noise I`` (``L L^T dual_coef_ = y_train_``), and
    that a pickle carries no n x n array and loads to the same factor."""
    cls = type(est)
    n = est.y_train_.shape[0]
    assert "L_" not in vars(est)
    L = est.L_
    assert L.shape == (n, n) and np.allclose(L, np.tril(L))
    with pytest.raises(ValueError, match="read-only"):  # it shares memory with the cache
        L[0, 0] = 0.0
    np.testing.assert_allclose(L @ (L.T @ est.dual_coef_), est.y_train_, rtol=1e-8, atol=1e-8)
    blob = pickle.dumps(est)
    assert len(blob) < n * n * 8
    np.testing.assert_allclose(pickle.loads(blob).L_, L, rtol=1e-10, atol=1e-12)
    with pytest.raises(AttributeError):
        _ = cls().L_
    return L
