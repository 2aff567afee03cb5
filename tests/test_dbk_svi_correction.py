"""DBKRegressor, inference="svi": the variance correction's ``M`` is the maximum of
``|phi(x)|^2`` over the data (paper eq. 11, spec 002 §3.2), in the training regulariser and in
the fitted model, whatever the mini-batches (issue 19)."""

import numpy as np
import pytest
import torch

from skbnngp import DBKRegressor
from skbnngp._dbk import _DBKState, svi_objective, trace_penalty

DT = torch.float64
SMALL = dict(n_basis=6, hidden_layer_sizes=(12,), device="cpu", inference="svi",
             variance_correction=True)
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _data(n=90, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    return X, np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.normal(size=n)


def _features(reg, X):
    Xs = torch.as_tensor(reg._scale_X(X), dtype=DT)
    with torch.no_grad():
        return reg.feature_scale_ * reg.network_(Xs)


def _loss_setup(n=90, seed=0):
    """A network, q(w) and the SVI loss closure of an estimator, on fixed data."""
    X, y = _data(n, seed=seed)
    reg = DBKRegressor(**SMALL, random_state=seed)
    reg._fit_scaling(X)
    Y = reg._normalise_targets(y)
    net = reg._make_network(X.shape[1], 3, torch.device("cpu"), DT)
    scale = reg._feature_scale()
    feat = reg._feature_fn(net, scale)
    state = _DBKState(reg.n_basis, 1, 0.05, 1e-6, True, torch.device("cpu"), DT)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # a q(w) away from the prior, so that every term is non-trivial
        state.m.copy_(torch.randn(reg.n_basis, 1, generator=g, dtype=DT))
        state.raw_L.copy_(0.3 * torch.randn(reg.n_basis, reg.n_basis, generator=g, dtype=DT))
    Xt, Yt = torch.as_tensor(reg._scale_X(X), dtype=DT), torch.as_tensor(Y, dtype=DT)
    reg._test_net = net
    return reg, feat, state, Xt, Yt


@pytest.mark.parametrize("batch_size", [1, 7, 32, 90])
@pytest.mark.parametrize("order_seed", [0, 1])
def test_svi_trace_regulariser_uses_the_data_maximum(batch_size, order_seed):
    """Every mini-batch loss equals eq. (9) minus ``(n/b) sum_B (M - |phi_i|^2)/(2 s2)`` with
    ``M`` the maximum over all n rows, for any batch size and order; the batch maximum (the
    old statistic, biased low) gives a different loss on small batches."""
    reg, feat, state, X, Y = _loss_setup()
    n = X.shape[0]
    with torch.no_grad():
        M_data = feat(X).square().sum(1).max()
    data = {"X": X, "Y": Y, "n": n,
            "kappa": reg._prior_vars(feat, X, 1000)}
    loss = reg._svi_loss(feat, state, data, True)
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
    reg, feat, state, X, Y = _loss_setup()
    n = X.shape[0]
    kappa = reg._prior_vars(feat, X, 1000)
    j = int(torch.argmax(kappa))
    rows = torch.as_tensor([i for i in range(8) if i != j])
    data = {"X": X, "Y": Y, "n": n, "kappa": kappa.clone()}
    params = list(reg._test_net.parameters())
    g_loss = torch.autograd.grad(reg._svi_loss(feat, state, data, True)(rows, 0), params)
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


@pytest.mark.parametrize("batch_size", [5, 64])
def test_svi_fitted_max_prior_var_is_the_data_maximum(batch_size):
    """``max_prior_var_`` after fit(svi) is the maximum of |phi|^2 over the training rows
    under the fitted network (not a batch's), for any batch size."""
    X, y = _data()
    reg = DBKRegressor(**SMALL, batch_size=batch_size, max_iter=3, early_stopping=False,
                       random_state=0).fit(X, y)
    kappa = _features(reg, X).square().sum(1)
    assert reg.max_prior_var_ == pytest.approx(float(kappa.max()), rel=1e-12)


def test_partial_fit_max_prior_var_is_the_running_data_maximum():
    """After partial_fit calls, ``M`` is the maximum over every row seen, each block measured
    by the network at the end of the call that saw it; it never depends on the batch size."""
    X, y = _data(120)
    for bs in (4, 40):
        reg = DBKRegressor(**SMALL, batch_size=bs, random_state=0)
        reg.partial_fit(X[:60], y[:60])
        M1 = reg.max_prior_var_
        assert M1 == pytest.approx(float(_features(reg, X[:60]).square().sum(1).max()),
                                   rel=1e-12)
        reg.partial_fit(X[60:], y[60:])
        M2 = float(_features(reg, X[60:]).square().sum(1).max())
        assert reg.max_prior_var_ == pytest.approx(max(M1, M2), rel=1e-12)
    # same network at the start, and a learning rate this small barely moves it
    fixed = [DBKRegressor(**SMALL, batch_size=bs, learning_rate=1e-12, random_state=0)
             .partial_fit(X, y).max_prior_var_ for bs in (4, 40)]
    assert fixed[0] == pytest.approx(fixed[1], rel=1e-9)
