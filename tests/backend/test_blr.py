"""Bayesian linear regression on features (the low-rank GP algebra of DBK; spec 002 §1.3, §7
items 1-7)."""

import math

import numpy as np
import pytest
import torch

from skbnngp._backend import blr_log_evidence, blr_posterior, blr_stats

DT = torch.float64


def _dense(Phi, y, s2, Phi_star):
    """Dense GP formulas with K = Phi Phi^T (eq. 1)."""
    n = Phi.shape[0]
    Sigma = Phi @ Phi.T + s2 * torch.eye(n, dtype=DT)
    k_star = Phi_star @ Phi.T
    mean = k_star @ torch.linalg.solve(Sigma, y)
    var = (Phi_star.square().sum(1)
           - (k_star * torch.linalg.solve(Sigma, k_star.T).T).sum(1))
    return mean, var


@pytest.mark.parametrize("n, r", [(1, 3), (5, 1), (30, 4), (6, 10), (40, 40)])
def test_log_evidence_equals_dense_mvn(n, r):
    """§7.1: eq. (5) equals the dense MultivariateNormal log density, for r < n, r > n,
    r = 1 and n = 1."""
    g = torch.Generator().manual_seed(n * 100 + r)
    Phi = torch.randn(n, r, generator=g, dtype=DT)
    Y = torch.randn(n, 2, generator=g, dtype=DT)
    s2 = torch.tensor(0.3, dtype=DT)
    dense = torch.distributions.MultivariateNormal(
        torch.zeros(n, dtype=DT), Phi @ Phi.T + s2 * torch.eye(n, dtype=DT))
    expect = sum(dense.log_prob(Y[:, c]) for c in range(2))
    assert float(blr_log_evidence(Phi, Y, s2)) == pytest.approx(float(expect), rel=1e-10)


@pytest.mark.parametrize("n, r", [(25, 4), (5, 12)])
def test_posterior_matches_dense_gp(n, r):
    """§7.2 and §7.4: mean and latent variance from mu_w = Lambda^-1 Phi^T y, S_w = s2
    Lambda^-1 equal the dense GP posterior, and S_w = F F^T."""
    g = torch.Generator().manual_seed(3)
    Phi = torch.randn(n, r, generator=g, dtype=DT)
    y = torch.randn(n, 1, generator=g, dtype=DT)
    Ps = torch.randn(7, r, generator=g, dtype=DT)
    s2 = 0.05
    post = blr_posterior(*blr_stats(Phi, y), s2)
    mean, var = post.predict(Ps)
    dm, dv = _dense(Phi, y, s2, Ps)
    torch.testing.assert_close(mean, dm, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(var, dv, rtol=1e-9, atol=1e-11)
    Lam = Phi.T @ Phi + s2 * torch.eye(r, dtype=DT)
    torch.testing.assert_close(post.factor @ post.factor.T, s2 * torch.linalg.inv(Lam),
                               rtol=1e-9, atol=1e-12)
    # Bayesian linear regression reference: posterior over w with prior N(0, I)
    S = torch.linalg.inv(torch.eye(r, dtype=DT) + Phi.T @ Phi / s2)
    torch.testing.assert_close(post.mean, S @ Phi.T @ y / s2, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(post.covariance(Ps).diagonal(), var, rtol=1e-10, atol=1e-12)


def test_variance_bounds_and_more_data():
    """§7.3: 0 <= Var[f*|y] <= |phi*|^2, and adding rows never raises the latent variance."""
    g = torch.Generator().manual_seed(5)
    Phi = torch.randn(40, 6, generator=g, dtype=DT)
    y = torch.randn(40, 1, generator=g, dtype=DT)
    Ps = 3 * torch.randn(50, 6, generator=g, dtype=DT)
    _, v_small = blr_posterior(*blr_stats(Phi[:10], y[:10]), 0.1).predict(Ps)
    _, v_big = blr_posterior(*blr_stats(Phi, y), 0.1).predict(Ps)
    assert bool((v_small >= 0).all()) and bool((v_small <= Ps.square().sum(1) + 1e-12).all())
    assert bool((v_big <= v_small + 1e-12).all())
    assert bool((v_big < v_small).any())


def test_rotation_invariance():
    """§7.5: Phi -> Phi Q (Q orthogonal) leaves the evidence and predictions unchanged."""
    g = torch.Generator().manual_seed(7)
    Phi = torch.randn(20, 5, generator=g, dtype=DT)
    y = torch.randn(20, 1, generator=g, dtype=DT)
    Ps = torch.randn(4, 5, generator=g, dtype=DT)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=DT))
    a = blr_posterior(*blr_stats(Phi, y), 0.2).predict(Ps)
    b = blr_posterior(*blr_stats(Phi @ Q, y), 0.2).predict(Ps @ Q)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-12)
    assert float(blr_log_evidence(Phi, y, 0.2)) == pytest.approx(
        float(blr_log_evidence(Phi @ Q, y, 0.2)), rel=1e-12)


def test_nystrom_features_give_subset_of_regressors():
    """§7.6: Phi = K_XZ K_ZZ^{-1/2} gives the GP with kernel K_XZ K_ZZ^-1 K_ZX plus noise."""
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(30, 2)), rng.normal(size=(6, 2))

    def rbf(A, B):
        return np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1))

    Kzz = rbf(Z, Z) + 1e-10 * np.eye(6)
    w, V = np.linalg.eigh(Kzz)
    Phi = rbf(X, Z) @ V @ np.diag(w ** -0.5) @ V.T
    Q = rbf(X, Z) @ np.linalg.solve(Kzz, rbf(Z, X))
    y = rng.normal(size=30)
    dense = torch.distributions.MultivariateNormal(
        torch.zeros(30, dtype=DT), torch.as_tensor(Q + 0.1 * np.eye(30)))
    got = blr_log_evidence(torch.as_tensor(Phi), torch.as_tensor(y[:, None]), 0.1)
    assert float(got) == pytest.approx(float(dense.log_prob(torch.as_tensor(y))), rel=1e-7)


def test_gradient_matches_closed_form_and_gradcheck():
    """§7.7: autograd through eq. (5) passes gradcheck, and grad_Phi equals the A.1 formula
    -Sigma^-1 Phi + Sigma^-1 y y^T Sigma^-1 Phi."""
    g = torch.Generator().manual_seed(11)
    Phi = torch.randn(9, 3, generator=g, dtype=DT, requires_grad=True)
    y = torch.randn(9, 1, generator=g, dtype=DT)
    s2 = torch.tensor(0.4, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(lambda P, s: blr_log_evidence(P, y, s), (Phi, s2))
    (grad,) = torch.autograd.grad(blr_log_evidence(Phi, y, s2), Phi)
    Si = torch.linalg.inv(Phi.detach() @ Phi.detach().T + 0.4 * torch.eye(9, dtype=DT))
    expect = -Si @ Phi.detach() + Si @ y @ y.T @ Si @ Phi.detach()
    torch.testing.assert_close(grad, expect, rtol=1e-9, atol=1e-11)


def test_failed_factorisation_is_nan_not_an_exception():
    """Inside a training step a non-PD Lambda gives NaN (caught by the trainer), no sync."""
    Phi = torch.ones(3, 2, dtype=DT)
    val = blr_log_evidence(Phi, torch.ones(3, 1, dtype=DT), torch.tensor(-5.0, dtype=DT))
    assert math.isnan(float(val))


def test_row_weights_are_a_heteroscedastic_gp():
    """Row weights w_i = s2 / s_i^2 give the GP with per-row noise s_i^2 (used by eq. 12)."""
    g = torch.Generator().manual_seed(2)
    Phi = torch.randn(15, 4, generator=g, dtype=DT)
    y = torch.randn(15, 1, generator=g, dtype=DT)
    Ps = torch.randn(3, 4, generator=g, dtype=DT)
    s2 = 0.1
    noise = s2 + torch.rand(15, generator=g, dtype=DT)
    mean, var = blr_posterior(*blr_stats(Phi, y, s2 / noise), s2).predict(Ps)
    Sigma = Phi @ Phi.T + torch.diag(noise)
    ks = Ps @ Phi.T
    torch.testing.assert_close(mean, ks @ torch.linalg.solve(Sigma, y), rtol=1e-10, atol=1e-12)
    dv = Ps.square().sum(1) - (ks * torch.linalg.solve(Sigma, ks.T).T).sum(1)
    torch.testing.assert_close(var, dv, rtol=1e-9, atol=1e-12)
