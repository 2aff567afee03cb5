"""Reference for DBK's exact posterior: the dense corrected GP built from the fitted model."""

import numpy as np
import torch

DT = torch.float64


def assert_matches_dense_corrected_gp(reg, X, y, Xs):
    """``reg.predict(Xs)`` equals the dense GP on ``(X, y)`` whose kernel is
    ``Phi Phi^T + diag(M - |phi_i|^2)`` (eq. 12, ``M`` the data maximum) with the fitted
    features, noise and prior scale, its variance times ``calibration_factor_``. Returns ``M``."""
    cache = reg._get_cache()
    with torch.no_grad():
        Phi = cache["feat"](torch.as_tensor(reg._scale_X(X)))
        Ps = cache["feat"](torch.as_tensor(reg._scale_X(Xs)))
    s2, kappa = reg.noise_variance_, Phi.square().sum(1)
    M = kappa.max()
    K = Phi @ Phi.T + torch.diag(M - kappa) + s2 * torch.eye(len(X), dtype=DT)
    ks = Ps @ Phi.T
    dm = ks @ torch.linalg.solve(K, torch.as_tensor(y, dtype=DT))
    dv = (torch.maximum(Ps.square().sum(1), M) - (ks * torch.linalg.solve(K, ks.T).T).sum(1)
          + s2)
    mean, std = reg.predict(Xs, return_std=True)
    np.testing.assert_allclose(mean, dm.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(std ** 2, dv.numpy() * reg.calibration_factor_, rtol=1e-8)
    return float(M)
