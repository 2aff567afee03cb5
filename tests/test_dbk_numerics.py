"""DBK numerics (``skbnngp._backend._dbk``, spec 002): the training objectives and the ELBO
(§2.2), the variance correction (§3) and its mini-batch regulariser, the evidence with the
features fixed, and the choice of the noise and the prior scale. Each test names the spec
item it checks where there is one."""

import math

import numpy as np
import pytest
import torch

from skbnngp._backend import (BLREvidence, BLRPosterior, DiagNoiseEvidence, blr_fit_scales,
                              blr_log_evidence, blr_posterior, blr_stats, build_mlp)
from skbnngp._backend import _dbk as dbk
from skbnngp._backend._dbk import exact_objective, kl_to_prior, svi_objective, trace_penalty

DT = torch.float64


def _phi(n=30, r=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, r, generator=g, dtype=DT),
            torch.randn(n, 1, generator=g, dtype=DT), g)


# ============================================================================ SVI (§2.2)
def test_elbo_bounds_evidence_and_is_tight_at_the_posterior():
    """§7.8: ELBO <= log p(y) for random q; equality at m* = Lambda^-1 Phi^T y,
    L* = chol(s2 Lambda^-1); the SVI predictive (10) then equals the exact one (6)."""
    Phi, y, g = _phi()
    s2 = torch.tensor(0.2, dtype=DT)
    logp = float(blr_log_evidence(Phi, y, s2))
    for _ in range(5):
        m = torch.randn(4, 1, generator=g, dtype=DT)
        L = torch.tril(torch.randn(4, 4, generator=g, dtype=DT))
        assert float(svi_objective(Phi, y, m, L, s2, 30, correction=False)) < logp
    post = blr_posterior(*blr_stats(Phi, y), s2)
    Lam = Phi.T @ Phi + s2 * torch.eye(4, dtype=DT)
    Lstar = torch.linalg.cholesky(s2 * torch.linalg.inv(Lam))
    elbo = float(svi_objective(Phi, y, post.mean, Lstar, s2, 30, correction=False))
    assert elbo == pytest.approx(logp, rel=1e-10)
    Ps = torch.randn(6, 4, generator=g, dtype=DT)
    for a, b in zip(post.predict(Ps), BLRPosterior(post.mean, Lstar).predict(Ps)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_kl_closed_form():
    """§7.9: KL(N(m, LL^T) || N(0, I)) equals torch.distributions' value."""
    g = torch.Generator().manual_seed(1)
    m = torch.randn(5, 2, generator=g, dtype=DT)
    L = torch.tril(torch.randn(5, 5, generator=g, dtype=DT))
    L.diagonal().abs_().add_(0.1)
    prior = torch.distributions.MultivariateNormal(torch.zeros(5, dtype=DT),
                                                   torch.eye(5, dtype=DT))
    expect = sum(torch.distributions.kl_divergence(
        torch.distributions.MultivariateNormal(m[:, c], scale_tril=L), prior) for c in range(2))
    assert float(kl_to_prior(m, L)) == pytest.approx(float(expect), rel=1e-12)


def test_minibatch_elbo_is_unbiased():
    """§7.10: with b = 1 the average of eq. (9) over all rows equals eq. (8) exactly; with
    b = 8 random batches average to eq. (8) within 4 standard errors (2000 draws)."""
    Phi, y, g = _phi(n=40)
    m = torch.randn(4, 1, generator=g, dtype=DT)
    L = torch.tril(torch.randn(4, 4, generator=g, dtype=DT)) + 2 * torch.eye(4, dtype=DT)
    s2 = torch.tensor(0.5, dtype=DT)
    full = float(svi_objective(Phi, y, m, L, s2, 40, correction=False))
    per_row = [float(svi_objective(Phi[i:i + 1], y[i:i + 1], m, L, s2, 40, False))
               for i in range(40)]
    assert np.mean(per_row) == pytest.approx(full, rel=1e-12)
    rng = np.random.default_rng(0)
    draws = [float(svi_objective(Phi[idx], y[idx], m, L, s2, 40, False))
             for idx in (rng.choice(40, 8, replace=False) for _ in range(2000))]
    assert abs(np.mean(draws) - full) < 4 * np.std(draws) / math.sqrt(2000)


# ============================================================================ correction (§3)
def test_trace_of_correction():
    """§7.11: c_i = M - kappa_i >= 0, tr(C) >= 0, and tr(C) = 0 iff all norms are equal."""
    Phi, _, _ = _phi()
    assert float(trace_penalty(Phi, 1.0)) > 0
    equal = Phi / Phi.norm(dim=1, keepdim=True) * 1.7
    assert float(trace_penalty(equal, 1.0)) == pytest.approx(0.0, abs=1e-12)
    kappa = Phi.square().sum(1)
    assert float(trace_penalty(Phi, 0.5)) == pytest.approx(
        float((kappa.max() - kappa).sum()), rel=1e-12)


def test_correction_bound_eq11():
    """§7.12: log N(y; 0, Phi Phi^T + C + s2 I) >= log p(y) - tr(C)/(2 s2), for the diagonal
    correction and for random PSD C."""
    Phi, y, g = _phi(n=20)
    s2 = 0.3
    kappa = Phi.square().sum(1)
    C_diag = torch.diag(kappa.max() - kappa)
    base = torch.distributions.MultivariateNormal
    for C in [C_diag] + [(lambda A: A @ A.T)(torch.randn(20, 5, generator=g, dtype=DT))
                         for _ in range(3)]:
        cov = Phi @ Phi.T + C + s2 * torch.eye(20, dtype=DT)
        lhs = float(base(torch.zeros(20, dtype=DT), cov).log_prob(y[:, 0]))
        rhs = float(blr_log_evidence(Phi, y, s2)) - float(C.trace()) / (2 * s2)
        assert lhs >= rhs
    J = exact_objective(Phi, y, torch.tensor(s2, dtype=DT), correction=True)
    assert float(J) == pytest.approx(float(blr_log_evidence(Phi, y, s2))
                                     - float(C_diag.trace()) / (2 * s2), rel=1e-12)


def test_evidence_objective_is_the_exact_evidence_of_the_corrected_kernel():
    """The exact objective ``"evidence"`` (the default, ``EXACT_OBJECTIVE``): the objective is log N(Y; 0, Phi Phi^T +
    diag(M - kappa) + s2 I) summed over the targets (dense check), never below the paper's
    bound (eq. 11), differentiable, and eq. (5) itself without the correction."""
    Phi, _, g = _phi(n=25, r=3)
    Y = torch.randn(25, 2, generator=g, dtype=DT)
    s2 = torch.tensor(0.2, dtype=DT)
    kappa = Phi.square().sum(1)
    cov = Phi @ Phi.T + torch.diag(kappa.max() - kappa) + s2 * torch.eye(25, dtype=DT)
    dense = sum(float(torch.distributions.MultivariateNormal(torch.zeros(25, dtype=DT), cov)
                      .log_prob(Y[:, j])) for j in range(2))
    J = exact_objective(Phi, Y, s2, correction=True, objective="evidence")
    assert float(J) == pytest.approx(dense, rel=1e-10)
    assert float(J) > float(exact_objective(Phi, Y, s2, correction=True, objective="bound"))
    assert float(exact_objective(Phi, Y, s2, correction=False, objective="evidence")) == \
        pytest.approx(float(blr_log_evidence(Phi, Y, s2)), rel=1e-12)
    # the trace weight subtracts that share of the regulariser (per target) from either objective
    kappa_trace = float((kappa.max() - kappa).sum()) / (2 * float(s2))
    for objective, base in (("evidence", float(J)), ("bound", float(blr_log_evidence(Phi, Y,
                                                                                      s2)))):
        Jw = exact_objective(Phi, Y, s2, True, objective, trace_weight=0.25)
        assert float(Jw) == pytest.approx(base - 0.25 * 2 * kappa_trace, rel=1e-10)
    P = Phi.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(exact_objective(P, Y, s2, True, "evidence"), P)
    assert torch.isfinite(grad).all() and float(grad.abs().max()) > 0


def _corrected(correction, Phi, y, s2, Ps):
    """Predictive moments at ``Ps`` of the exact posterior on ``(Phi, y)`` (row blocks of 7)."""
    s2 = torch.tensor(s2, dtype=DT)
    post, M = dbk.exact_posterior(lambda x: x, Phi, y, s2, correction, 7)
    return dbk.moments(post, Ps, s2, M, correction), M


def test_normalisation_trick_equals_dense_heteroscedastic_gp():
    """§7.13: eq. (12) equals the dense GP with K = Phi Phi^T + diag(c) on the training set
    and k(x*, x*) = |phi*|^2 + c(x*, x*), no cross-covariance from the correction."""
    Phi, y, g = _phi(n=25, r=5)
    Ps = torch.randn(8, 5, generator=g, dtype=DT) * torch.linspace(0.2, 2, 8,
                                                                    dtype=DT)[:, None]
    s2 = 0.1
    (mean, var), M = _corrected(True, Phi, y, s2, Ps)
    kappa = Phi.square().sum(1)
    K = Phi @ Phi.T + torch.diag(M - kappa) + s2 * torch.eye(25, dtype=DT)
    ks = Ps @ Phi.T
    kss = torch.maximum(Ps.square().sum(1), M)
    dm = ks @ torch.linalg.solve(K, y)
    dv = kss - (ks * torch.linalg.solve(K, ks.T).T).sum(1) + s2
    torch.testing.assert_close(mean, dm, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(var, dv, rtol=1e-10, atol=1e-12)


def test_corrected_prior_variance_is_max_of_M_and_norm():
    """§7.14: k(x*, x*) = max(M, |phi*|^2) (the prior: no data, S = I, mean 0)."""
    g = torch.Generator().manual_seed(4)
    Ps = torch.randn(50, 3, generator=g, dtype=DT)
    prior = BLRPosterior(torch.zeros(3, 1, dtype=DT), torch.eye(3, dtype=DT))
    M = torch.tensor(3.0, dtype=DT)
    _, var = dbk.moments(prior, Ps, torch.tensor(0.0, dtype=DT), M, True)
    torch.testing.assert_close(var, torch.maximum(Ps.square().sum(1), M))
    assert bool((var >= M).all())


@pytest.mark.parametrize("seed", range(20))
def test_correction_never_lowers_variance(seed):
    """§7.15: for fixed Phi and s2 the corrected Var[y*|y] >= the uncorrected, exact and
    SVI (a random q)."""
    Phi, y, g = _phi(n=15, r=6, seed=seed)
    Phi = Phi * torch.rand(15, 1, generator=g, dtype=DT) * 3
    Ps = torch.randn(30, 6, generator=g, dtype=DT) * 2
    s2 = float(torch.rand(1, generator=g)) * 0.5 + 1e-3
    (_, v_on), M = _corrected(True, Phi, y, s2, Ps)
    (_, v_off), _ = _corrected(False, Phi, y, s2, Ps)
    assert bool((v_on >= v_off - 1e-12).all())
    q = BLRPosterior(torch.randn(6, 1, generator=g, dtype=DT),
                     torch.tril(torch.randn(6, 6, generator=g, dtype=DT)))
    s2t = torch.tensor(s2, dtype=DT)
    assert bool((dbk.moments(q, Ps, s2t, M, True)[1]
                 >= dbk.moments(q, Ps, s2t, M, False)[1]).all())


def test_equal_norms_make_the_correction_vanish():
    """§7.16: all |phi_i| equal and |phi*|^2 >= M give the uncorrected predictions."""
    Phi, y, g = _phi(n=20, r=4)
    Phi = Phi / Phi.norm(dim=1, keepdim=True)
    Ps = torch.randn(7, 4, generator=g, dtype=DT)
    Ps = Ps / Ps.norm(dim=1, keepdim=True) * torch.linspace(1, 2, 7, dtype=DT)[:, None]
    on, _ = _corrected(True, Phi, y, 0.05, Ps)
    off, _ = _corrected(False, Phi, y, 0.05, Ps)
    for a, b in zip(on, off):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


# ============================================================ the SVI regulariser's M (eq. 11)
def _loss_setup(n=90, seed=0):
    """A network, q(w), the features and standardised data of the SVI loss (r = 6)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    net = build_mlp(3, (12,), 6, seed=3, dtype=DT)
    feat = dbk.scaled_features(net, 1 / math.sqrt(6))
    state = dbk.DBKState(6, 1, 0.05, 1e-6, True, torch.device("cpu"), DT)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a q(w) away from the prior, so that every term is non-trivial
        state.m.copy_(torch.randn(6, 1, generator=g, dtype=DT))
        state.raw_L.copy_(0.3 * torch.randn(6, 6, generator=g, dtype=DT))
    Y = torch.as_tensor((y - y.mean()) / y.std(), dtype=DT).reshape(-1, 1)
    return net, feat, state, torch.as_tensor(X, dtype=DT), Y


@pytest.mark.parametrize("batch_size", [1, 7, 32, 90])
@pytest.mark.parametrize("order_seed", [0, 1])
def test_svi_trace_regulariser_uses_the_data_maximum(batch_size, order_seed):
    """Every mini-batch loss equals eq. (9) minus ``(n/b) sum_B (M - |phi_i|^2)/(2 s2)`` with
    ``M`` the maximum over all n rows, for any batch size and order; the batch maximum (the
    old statistic, biased low) gives a different loss on small batches."""
    net, feat, state, X, Y = _loss_setup()
    n = X.shape[0]
    with torch.no_grad():
        M_data = feat(X).square().sum(1).max()
    data = {"X": X, "Y": Y, "n": n,
            "kappa": dbk.prior_vars(feat, X, 1000)}
    loss = dbk.svi_loss(feat, state, data, True)
    order = torch.as_tensor(np.random.RandomState(order_seed).permutation(n))
    differs = False
    for start in range(0, n, batch_size):
        rows = order[start:start + batch_size]
        got = float(loss(rows, 0).detach())
        with torch.no_grad():
            Phi = feat(X[rows])
            want = -float(svi_objective(Phi, Y[rows], state.m, state.L(), state.noise(), n,
                                        True, max_prior_var=M_data)) / n
            batch_max = -float(svi_objective(Phi, Y[rows], state.m, state.L(),
                                             state.noise(), n, True)) / n
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
        differs |= abs(batch_max - want) > 1e-6 * abs(want)
    assert differs == (batch_size < n)


def test_svi_trace_regulariser_gradient_reaches_the_arg_max():
    """The gradient of ``n M`` flows to the row holding the data maximum at every step (it is
    evaluated with each batch), as in the full-data regulariser (spec §6 A5: never detached)."""
    net, feat, state, X, Y = _loss_setup()
    n = X.shape[0]
    kappa = dbk.prior_vars(feat, X, 1000)
    j = int(torch.argmax(kappa))
    rows = torch.as_tensor([i for i in range(8) if i != j])
    data = {"X": X, "Y": Y, "n": n, "kappa": kappa.clone()}
    params = list(net.parameters())
    g_loss = torch.autograd.grad(dbk.svi_loss(feat, state, data, True)(rows, 0), params)
    # the same loss written out with the arg-max row's |phi|^2 (with its graph) as M
    Phi_j = feat(X[j:j + 1])
    want = -svi_objective(feat(X[rows]), Y[rows], state.m, state.L(), state.noise(), n, True,
                          max_prior_var=Phi_j.square().sum()) / n
    g_want = torch.autograd.grad(want, params)
    for a, b in zip(g_loss, g_want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_trace_penalty_with_a_given_maximum():
    """``trace_penalty(Phi, s2, M) = sum_i (M - |phi_i|^2) / (2 s2)``; without ``M`` the rows'
    own maximum (the exact objective's full batch)."""
    g = torch.Generator().manual_seed(0)
    Phi = torch.randn(20, 4, generator=g, dtype=DT)
    kappa = Phi.square().sum(1)
    M = float(kappa.max()) + 0.7
    assert float(trace_penalty(Phi, 0.5, M)) == pytest.approx(float((M - kappa).sum()),
                                                              rel=1e-12)
    assert float(trace_penalty(Phi, 0.5)) == pytest.approx(
        float(trace_penalty(Phi, 0.5, kappa.max())), rel=1e-12)


# ============================================================ noise and prior scale
def _dense(Phi, Y, a, s, c):
    n = Phi.shape[0]
    cov = a * (Phi @ Phi.T + torch.diag(c)) + s * torch.eye(n, dtype=DT)
    return sum(float(torch.distributions.MultivariateNormal(torch.zeros(n, dtype=DT), cov)
                     .log_prob(Y[:, j])) for j in range(Y.shape[1]))


@pytest.mark.parametrize("n, r", [(30, 5), (6, 9)])
def test_evidence_functions_equal_the_dense_gaussian(n, r):
    g = torch.Generator().manual_seed(n)
    Phi = torch.randn(n, r, generator=g, dtype=DT)
    Y = torch.randn(n, 2, generator=g, dtype=DT)
    c = torch.rand(n, generator=g, dtype=DT)
    ev = BLREvidence(Phi.T @ Phi, Phi.T @ Y, float((Y * Y).sum()), n)
    diag = DiagNoiseEvidence(Phi, Y, c)
    for a, s in [(1.0, 0.3), (4.0, 0.01), (0.2, 2.0)]:
        zero = torch.zeros(n, dtype=DT)
        assert ev(a, s) == pytest.approx(_dense(Phi, Y, a, s, zero), rel=1e-10)
        assert ev(a, s) == pytest.approx(float(blr_log_evidence(math.sqrt(a) * Phi, Y, s)),
                                         rel=1e-10)
        assert diag(a, s) == pytest.approx(_dense(Phi, Y, a, s, c), rel=1e-10)
        # gradients in (log a, log s) against central differences
        for fn in (ev, diag):
            _, grad = fn(a, s, grad=True)
            h = 1e-6
            num = [(fn(a * math.exp(h), s) - fn(a * math.exp(-h), s)) / (2 * h),
                   (fn(a, s * math.exp(h)) - fn(a, s * math.exp(-h))) / (2 * h)]
            np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-6)


def test_fit_scales_finds_the_maximum():
    g = torch.Generator().manual_seed(1)
    Phi = torch.randn(60, 4, generator=g, dtype=DT)
    Y = Phi @ (2.0 * torch.randn(4, 1, generator=g, dtype=DT)) \
        + 0.5 * torch.randn(60, 1, generator=g, dtype=DT)
    c = 0.3 * torch.rand(60, generator=g, dtype=DT)
    for ev in (BLREvidence(Phi.T @ Phi, Phi.T @ Y, float((Y * Y).sum()), 60),
               DiagNoiseEvidence(Phi, Y, c)):
        a, s = blr_fit_scales(ev, 1.0, 1.0)
        best = ev(a, s)
        for fa, fs in [(1.1, 1), (0.9, 1), (1, 1.1), (1, 0.9)]:
            assert ev(a * fa, s * fs) < best
        if isinstance(ev, BLREvidence):  # with c, a c takes part of the noise
            assert 0.1 < s < 0.5  # the true noise variance is 0.25


def test_heldout_mse_is_the_dense_posterior_mean_error():
    """``heldout_mse``: the validation MSE of the Bayesian linear model's posterior mean
    given the first k rows, with a per-row noise ``noise + c_i`` (dense O(n^3) reference)."""
    rng = np.random.RandomState(3)
    Phi = torch.as_tensor(rng.standard_normal((30, 5)), dtype=DT)
    Y = torch.as_tensor(rng.standard_normal((30, 2)), dtype=DT)
    c = torch.as_tensor(rng.uniform(0, 0.5, 30), dtype=DT)
    k, s2 = 20, 0.3
    K = Phi[:k] @ Phi[:k].T + torch.diag(s2 + c[:k])
    mean = Phi[k:] @ Phi[:k].T @ torch.linalg.solve(K, Y[:k])
    expected = float((Y[k:] - mean).square().mean())
    assert dbk.heldout_mse(Phi, Y, k, s2, c) == pytest.approx(expected, rel=1e-10)
    K0 = Phi[:k] @ Phi[:k].T + s2 * torch.eye(k, dtype=DT)
    mean0 = Phi[k:] @ Phi[:k].T @ torch.linalg.solve(K0, Y[:k])
    assert dbk.heldout_mse(Phi, Y, k, s2) == pytest.approx(
        float((Y[k:] - mean0).square().mean()), rel=1e-10)


def test_heldout_noise_floor_stops_the_evidence_sending_the_noise_to_its_bound(monkeypatch):
    """Rows whose noise is exactly the correction diag(M - |phi_i|^2): the held-out evidence
    alone puts the noise on its lower bound (the correction stands in for it on every row
    but the argmax of |phi|^2); the floor keeps it at 0.1 of the held-out MSE."""
    g = torch.Generator().manual_seed(0)
    n, r, k = 200, 10, 150
    Phi = torch.randn(n, r, generator=g, dtype=DT) * torch.rand(n, 1, generator=g, dtype=DT)
    kappa = Phi.square().sum(1)
    c = kappa.max() - kappa
    Y = (Phi @ torch.randn(r, 1, generator=g, dtype=DT)
         + c.sqrt()[:, None] * torch.randn(n, 1, generator=g, dtype=DT))
    mse = dbk.heldout_mse(Phi, Y, k, 0.01, c)
    _, noise = dbk.choose_scales(Phi, Y, c, 0.01, k, 1e-6)
    assert noise >= 0.1 * mse * (1 - 1e-12)
    monkeypatch.setattr(dbk, "HELDOUT_NOISE_FLOOR", 0.0)
    _, noise = dbk.choose_scales(Phi, Y, c, 0.01, k, 1e-6)
    assert noise < 1e-5


def test_heldout_noise_is_at_least_the_full_evidence_noise():
    """Heavy-tailed noise whose outliers all fall in the training rows: the held-out rows
    alone ask for a tiny noise, the evidence of all rows for a larger one; the chosen noise
    is at least the latter (5-fold NLPD on the Cauchy benchmark set 5.625 -> 5.210)."""
    g = torch.Generator().manual_seed(1)
    n, r, k = 200, 8, 160
    Phi = torch.randn(n, r, generator=g, dtype=DT)
    Y = Phi @ torch.randn(r, 1, generator=g, dtype=DT) + 0.05 * torch.randn(n, 1, generator=g,
                                                                             dtype=DT)
    Y[:k:10] += 5.0 * torch.randn(k // 10, 1, generator=g, dtype=DT)  # outliers, train only
    full = blr_fit_scales(DiagNoiseEvidence(Phi, Y, None), 1.0, 0.01)[1]
    held = blr_fit_scales(DiagNoiseEvidence(Phi, Y, None), 1.0, 0.01,
                          condition=DiagNoiseEvidence(Phi[:k], Y[:k], None))[1]
    assert held < 0.1 * full  # the situation: the clean held-out rows want far less noise
    _, noise = dbk.choose_scales(Phi, Y, None, 0.01, k, 1e-6)
    assert noise >= full * (1 - 1e-6)
