"""Shared checks for an exact GP whose n x n Cholesky factor ``L_`` is read from the device
on demand and never pickled (the Student-t process, the mixed-activation GP's exact mode)."""

import pickle

import numpy as np
import pytest


def check_factor_read_on_demand(est, legacy_drop=(), legacy=True):
    """``est`` is fitted. Returns the factor. Checks that it is not a stored attribute, is
    the read-only lower factor of ``K + noise I`` (``L L^T dual_coef_ = y_train_``), that a
    pickle carries no n x n array and loads to the same factor, and that a state saved
    before ``L_`` was read on demand (with a stale ``L_``; keys ``legacy_drop`` absent)
    loads without it (unless ``legacy`` is False: an estimator without that pickle shim)."""
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
    if legacy:
        old = {k: v for k, v in est.__getstate__().items() if k not in legacy_drop}
        old["L_"] = np.zeros((n, n))
        back = cls.__new__(cls)
        back.__setstate__(old)
        assert "L_" not in vars(back)
        np.testing.assert_allclose(back.L_, L, rtol=1e-10, atol=1e-12)
    with pytest.raises(AttributeError):
        _ = cls().L_
    return L
