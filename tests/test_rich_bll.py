"""RichBLLRegressor (spec 003): the formulas, the Jacobians, the estimator and its fitted
state. Each test names the spec item it checks."""

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from skbnngp import RichBLLRegressor, _rich_bll
from skbnngp._backend import build_mlp
from skbnngp._backend._jacobian import (
    GaussianSketch,
    body_jacobians,
    head_features,
    split_parameters,
)
from skbnngp._backend._projection import posterior_factor, projection_gram
from skbnngp.datasets import make_gap_1d

from ._promise import assert_same_predictions
from .conftest import NO_HELD_OUT

DT = torch.float64
pytestmark = [pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
              NO_HELD_OUT]
SMALL = {"hidden_layer_sizes": (16,), "max_iter": 40, "device": "cpu"}


def _data(n=80, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    return X, np.sin(3 * X[:, 0]) + 0.1 * rng.normal(size=n)


def _var(T, Phi):
    return (Phi @ T).square().sum(1)


def _features(seed=0, n=40, r=5, m=12):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, r, generator=g, dtype=DT), torch.randn(n, m, generator=g, dtype=DT),
            torch.randn(30, r, generator=g, dtype=DT), g)


# ============================================================================ formulas
@pytest.mark.parametrize("seed", range(10))
def test_dominance_for_any_projection(seed):
    """§8.1 (Thm 3.3): v_rich >= v_bll pointwise and S_rich - S_bll is PSD, for the exact,
    ridge, random (adversarial) A, and with subsample scaling shared by both."""
    Phi_r, Phi_m, Ps, g = _features(seed)
    G = Phi_r.T @ Phi_r
    noise = 0.05 + float(torch.rand(1, generator=g))
    A = 10 * torch.randn(7, 5, generator=g, dtype=DT)
    for AtA in (projection_gram(Phi_m.T @ Phi_r, G, 0.0),
                projection_gram(Phi_m.T @ Phi_r, G, 1.0), A.T @ A):
        for scale in (1.0, 3.0):
            rich = posterior_factor(G, AtA, noise, n_scale=scale)
            bll_s = posterior_factor(G, None, noise, n_scale=scale)
            assert bool((_var(rich, Ps) >= _var(bll_s, Ps) - 1e-10).all())
            diff = (Ps @ rich) @ (Ps @ rich).T - (Ps @ bll_s) @ (Ps @ bll_s).T
            assert float(torch.linalg.eigvalsh(diff).min()) >= -1e-9


def test_formula_equivalence():
    """§8.3: the r x r factor equals the N x N GP form (eq. 12) with k_B = Phi_r B^T B
    Phi_r^T, Thm 3.1 (prior covariance B^T B), and the (m + r)-dim weight-space form."""
    Phi_r, Phi_m, Ps, _ = _features(1)
    G = Phi_r.T @ Phi_r
    s2 = 0.3
    AtA = projection_gram(Phi_m.T @ Phi_r, G, 0.0)
    v = _var(posterior_factor(G, AtA, s2), Ps)
    BtB = torch.eye(5, dtype=DT) + AtA
    K = Phi_r @ BtB @ Phi_r.T + s2 * torch.eye(40, dtype=DT)
    ks = Ps @ BtB @ Phi_r.T
    gp = (Ps @ BtB * Ps).sum(1) - (ks * torch.linalg.solve(K, ks.T).T).sum(1)
    torch.testing.assert_close(v, gp, rtol=1e-9, atol=1e-12)
    thm31 = (Ps @ torch.linalg.inv(G / s2 + torch.linalg.inv(BtB)) * Ps).sum(1)
    torch.testing.assert_close(v, thm31, rtol=1e-9, atol=1e-12)
    A = torch.linalg.lstsq(Phi_r, Phi_m).solution.T  # m x r, eq. (8)
    B = torch.cat([A, torch.eye(5, dtype=DT)])  # eq. (10)
    Pb, Psb = Phi_r @ B.T, Ps @ B.T
    ws = (Psb @ torch.linalg.inv(Pb.T @ Pb / s2 + torch.eye(17, dtype=DT)) * Psb).sum(1)
    torch.testing.assert_close(v, ws, rtol=1e-8, atol=1e-11)


def test_projection_gram_is_the_least_squares_map():
    """§8.7: A = C G^-1 solves the normal equations Phi_r^T (Phi_m - Phi_r A^T) = 0."""
    Phi_r, Phi_m, _, _ = _features(2)
    A = torch.linalg.lstsq(Phi_r, Phi_m).solution.T
    resid = Phi_m - Phi_r @ A.T
    assert float((Phi_r.T @ resid).abs().max()) < 1e-10
    torch.testing.assert_close(projection_gram(Phi_m.T @ Phi_r, Phi_r.T @ Phi_r, 0.0), A.T @ A,
                               rtol=1e-9, atol=1e-10)


def test_limits_and_bll_closed_form():
    """§8.12: noise -> inf gives the prior variances |phi|^2 (BLL) and
    phi^T (I + A^T A) phi (Rich); v >= 0; BLL equals phi^T (G / s2 + I)^-1 phi."""
    Phi_r, Phi_m, Ps, _ = _features(3)
    G = Phi_r.T @ Phi_r
    AtA = projection_gram(Phi_m.T @ Phi_r, G, 1e-4)
    big = 1e12
    torch.testing.assert_close(_var(posterior_factor(G, None, big), Ps), Ps.square().sum(1),
                               rtol=1e-8, atol=0)
    torch.testing.assert_close(_var(posterior_factor(G, AtA, big), Ps),
                               ((Ps @ (torch.eye(5, dtype=DT) + AtA)) * Ps).sum(1), rtol=1e-8,
                               atol=0)
    closed = (Ps @ torch.linalg.inv(G / 0.2 + torch.eye(5, dtype=DT)) * Ps).sum(1)
    torch.testing.assert_close(_var(posterior_factor(G, None, 0.2), Ps), closed, rtol=1e-10,
                               atol=1e-12)
    # more data never increases the variance (fixed L)
    P = torch.randn(10, 5, dtype=DT)
    G_more = G + P.T @ P
    assert bool((_var(posterior_factor(G_more, AtA, 0.2), Ps)
                 <= _var(posterior_factor(G, AtA, 0.2), Ps) + 1e-12).all())


def test_random_projection_is_unbiased():
    """§8.9: averaged over sketch seeds, (P^T C)^T (P^T C) approaches C^T C."""
    g = torch.Generator().manual_seed(0)
    C = torch.randn(60, 4, generator=g, dtype=DT)
    exact = C.T @ C
    est = torch.zeros(4, 4, dtype=DT)
    for seed in range(300):
        sk = GaussianSketch(60, 16, seed, "cpu", DT, block=25)(C.T)  # rows: the r columns
        est += sk @ sk.T / 300
    assert float((est - exact).norm() / exact.norm()) < 0.05
    single = GaussianSketch(60, 16, 0, "cpu", DT)(C.T)
    assert float(torch.linalg.eigvalsh(single @ single.T).min()) >= -1e-10


def test_random_projection_route_approaches_the_exact_one(monkeypatch):
    """§8.9 through the estimator: the sketched A^T A (``JACOBIAN="random_projection"``)
    gives nearly the exact route's variance for a wide sketch, and still dominates the BLL."""
    X, y = _data(n=80)
    common = {"network": build_mlp(2, (16,), 1, activation="tanh", seed=0),
              "train_network": False, "noise_variance": 0.1, "include_noise": False,
              "device": "cpu", "random_state": 0}
    Xq = 2 * X[:20]
    exact = RichBLLRegressor(**common).fit(X, y).predict_std(Xq)
    bll = RichBLLRegressor(**common, uncertainty="bll").fit(X, y).predict_std(Xq)
    monkeypatch.setattr(_rich_bll, "JACOBIAN", "random_projection")
    monkeypatch.setattr(_rich_bll, "PROJECTION_DIM", 20000)
    sketched = RichBLLRegressor(**common).fit(X, y).predict_std(Xq)
    assert not np.array_equal(sketched, exact)
    np.testing.assert_allclose(sketched, exact, rtol=0.02)
    assert np.all(sketched >= bll - 1e-12)


# ============================================================================ Jacobians
def test_head_features_and_jacobians_match_autograd():
    """§8.8: phi_r = (last hidden activation, 1); the streamed per-sample Jacobians equal a
    loop of torch.autograd.grad, in any chunking."""
    net = build_mlp(3, (5,), 1, activation="tanh", seed=0)
    X = torch.randn(7, 3, dtype=DT)
    head, head_names, body = split_parameters(net)
    assert head is net[2] and head_names == ["2.weight", "2.bias"]
    f, Phi_r = head_features(net, head, X, 3)
    torch.testing.assert_close(Phi_r, torch.cat([torch.tanh(net[0](X)),
                                                 torch.ones(7, 1, dtype=DT)], 1).detach())
    torch.testing.assert_close(f, net(X).detach())
    J = torch.cat([j for _, j in body_jacobians(net, body, X, 2)])
    for i in range(7):
        grads = torch.autograd.grad(net(X[i:i + 1]).sum(), [net[0].weight, net[0].bias])
        torch.testing.assert_close(J[i], torch.cat([g.reshape(-1) for g in grads]))


# ============================================================================ estimator
def _identity_net(d, seed=0):
    g = torch.Generator().manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Linear(d, 1)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=DT))
    return net


def test_exact_span_network_gives_the_ntk_gp():
    """§8.5: with identity activation and a square first layer, phi_m is linear in phi_r,
    so Rich-BLL (no ridge) equals the exact NTK-GP; §8.6: NTK-GP >= BLL."""
    X, y = _data(n=50, d=3)
    common = {"network": _identity_net(3), "train_network": False, "noise_variance": 0.05,
              "projection_ridge": 0.0, "device": "cpu", "normalize_X": False,
              "include_noise": False}
    Xq = X[:10] * 2.5
    rich = RichBLLRegressor(**common).fit(X, y).predict(Xq, return_std=True)[1]
    ntk = RichBLLRegressor(**common, uncertainty="ntk").fit(X, y).predict(Xq, return_std=True)[1]
    bll = RichBLLRegressor(**common, uncertainty="bll").fit(X, y).predict(Xq, return_std=True)[1]
    np.testing.assert_allclose(rich, ntk, rtol=1e-7)
    assert np.all(ntk >= bll - 1e-12) and np.any(ntk > bll * 1.01)


def test_no_earlier_layers_gives_the_bll():
    """§8.4: a linear model, or a network whose body is frozen (m = 0): Rich = BLL."""
    X, y = _data(n=40)
    lin = torch.nn.Linear(2, 1).double()
    frozen = torch.nn.Sequential(torch.nn.Linear(2, 6), torch.nn.Tanh(),
                                 torch.nn.Linear(6, 1)).double()
    frozen[0].requires_grad_(False)
    for net in (lin, frozen):
        common = {"network": net, "train_network": False, "noise_variance": 0.1,
                  "device": "cpu"}
        a = RichBLLRegressor(**common).fit(X, y)
        b = RichBLLRegressor(**common, uncertainty="bll").fit(X, y)
        assert a.n_params_body_ == 0
        np.testing.assert_allclose(a.predict(X, return_std=True)[1],
                                   b.predict(X, return_std=True)[1], rtol=1e-12)


def test_bll_equals_independent_closed_form():
    """§8.10 without laplace-torch: the BLL std equals sqrt(phi^T (G/s2 + I)^-1 phi + s2)
    computed in NumPy from the network's own last hidden layer."""
    X, y = _data(n=60)
    reg = RichBLLRegressor(**SMALL, uncertainty="bll", normalize_y=False,
                           random_state=0).fit(X, y)
    net = reg.network_
    Xs = torch.as_tensor((X - reg._X_offset) / reg._X_scale)
    with torch.no_grad():
        hidden = net[:-1](Xs).numpy()
    Phi = np.c_[hidden, np.ones(60)]
    s2 = reg.noise_variance_
    S = np.linalg.inv(Phi.T @ Phi / s2 + np.eye(Phi.shape[1]))
    expect = np.sqrt(np.einsum("ij,jk,ik->i", Phi, S, Phi) + s2)
    np.testing.assert_allclose(reg.predict(X, return_std=True)[1], expect, rtol=1e-9)
    with torch.no_grad():
        np.testing.assert_allclose(reg.predict(X), net(Xs).numpy()[:, 0] + y.mean(),
                                   rtol=1e-10)


@pytest.mark.filterwarnings("ignore:.*subsample gives:UserWarning")
def test_estimator_dominance_and_full_subsample_is_exact():
    """§8.1 and §8.2 through the estimator: Rich >= BLL with the same subsample; a
    subsample of all rows (1.0 or N) gives the non-subsampled result."""
    X, y = _data(n=120)
    # the theorem is about the posterior: no calibration (each model would get its own
    # factor and degrees of freedom from the validation rows)
    base = RichBLLRegressor(**SMALL, calibration=None, random_state=0).fit(X, y)
    Xq = np.r_[X[:20], 3 * X[:20]]
    v = base.predict(Xq, return_std=True)[1]
    for sub in (1.0, 120):
        full = clone(base).set_params(subsample=sub).fit(X, y)
        np.testing.assert_allclose(full.predict(Xq, return_std=True)[1], v, rtol=1e-10)
        assert full.subsample_indices_ is None
    for sub in (0.5, None):
        r = clone(base).set_params(subsample=sub).fit(X, y)
        b = clone(base).set_params(subsample=sub, uncertainty="bll").fit(X, y)
        assert np.all(r.predict(Xq, return_std=True)[1] >= b.predict(Xq, return_std=True)[1]
                      - 1e-12)
    sub = clone(base).set_params(subsample=0.5).fit(X, y)
    assert len(sub.subsample_indices_) == 60


def test_target_independence():
    """§8.11: with a fixed network and noise, the variances depend on X only."""
    X, y = _data(n=50)
    common = {"network": _identity_net(2), "train_network": False, "noise_variance": 0.1,
              "device": "cpu"}
    a = RichBLLRegressor(**common).fit(X, y)
    b = RichBLLRegressor(**common).fit(X, np.random.default_rng(1).permutation(y) + 5)
    np.testing.assert_allclose(a.predict(X, return_std=True)[1],
                               b.predict(X, return_std=True)[1], rtol=1e-12)


def test_dead_units_keep_the_fit_finite():
    """§8.14: dead ReLU units (rank-deficient features) need the ridge: finite variances,
    dominance kept."""
    X, y = _data(n=40)
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 1)).double()
    with torch.no_grad():
        net[0].bias[:4] = -1e3
    common = {"network": net, "train_network": False, "device": "cpu"}
    rich = RichBLLRegressor(**common).fit(X, y).predict(X * 3, return_std=True)[1]
    bll = RichBLLRegressor(**common, uncertainty="bll").fit(X, y).predict(X * 3,
                                                                       return_std=True)[1]
    assert np.all(np.isfinite(rich)) and np.all(rich >= bll - 1e-12)


def test_posthoc_head_on_a_network_trained_elsewhere():
    """The post-hoc head: a user-trained module is used as is (not retrained, not
    modified), and gives mean = network output, std and predict_dist."""
    X, y = _data(n=80)
    net = build_mlp(2, (16,), 1, activation="tanh", seed=0)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)[:, None]
    for _ in range(300):
        opt.zero_grad()
        (net(Xt) - yt).square().mean().backward()
        opt.step()
    before = [p.detach().clone() for p in net.parameters()]
    reg = RichBLLRegressor(network=net, train_network=False, normalize_X=False,
                           normalize_y=False, device="cpu").fit(X, y)
    for p, q in zip(net.parameters(), before):
        assert torch.equal(p, q)
    assert reg.n_iter_ == 0
    with torch.no_grad():
        out = net(Xt).numpy()[:, 0]
    # the targets are centred inside fit; the network output is used as the mean
    np.testing.assert_allclose(reg.predict(X), out + y.mean(), rtol=1e-10)
    # without a validation split, noise_variance="auto" is the training MSE
    assert reg.noise_variance_ == pytest.approx(np.mean((out + y.mean() - y) ** 2), rel=1e-9)
    dist = reg.predict_dist(X[:5])
    assert np.all(dist.std() > np.sqrt(reg.noise_variance_) - 1e-12)


def test_gap_problem_rich_exceeds_bll_in_the_gap():
    """Issue 9 story: on the 1-D gap problem, Rich-BLL's in-gap std exceeds the BLL's."""
    X, y = make_gap_1d(100, random_state=0)
    grid = np.linspace(-0.8, 0.8, 9)[:, None]
    common = {"max_iter": 200, "random_state": 0, "device": "cpu"}
    rich = RichBLLRegressor(**common).fit(X, y).predict(grid, return_std=True)[1]
    bll = RichBLLRegressor(**common, uncertainty="bll").fit(X, y).predict(grid,
                                                                          return_std=True)[1]
    assert np.mean(rich) > 1.2 * np.mean(bll)


def test_api_shapes_pickle_and_determinism():
    """§8.15: n_features_in_, shapes, sample_y, std == sqrt(diag cov), pickle round trip,
    reproducible with random_state."""
    X, y = _data(n=60)
    a = RichBLLRegressor(**SMALL, random_state=0)
    assert a.fit(X, y) is a and a.n_features_in_ == 2
    b = RichBLLRegressor(**SMALL, random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.predict(X, return_std=True)[1],
                                  b.predict(X, return_std=True)[1])
    _mean, std = a.predict(X[:6], return_std=True)
    _, cov = a.predict(X[:6], return_cov=True)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-10)
    # joint draws follow the predictive: each point's 90 % interval holds about 90 % of them
    draws = a.sample_y(X[:6], 2000, random_state=0)
    assert draws.shape == (6, 2000)
    lo, hi = a.predict_dist(X[:6]).interval(0.9)
    inside = ((draws >= lo[:, None]) & (draws <= hi[:, None])).mean(1)
    np.testing.assert_allclose(inside, 0.9, atol=0.03)
    back = pickle.loads(pickle.dumps(a))
    assert_same_predictions(back.predict(X, return_std=True)[1],
                            a.predict(X, return_std=True)[1])
    with pytest.raises(NotFittedError):
        RichBLLRegressor().predict(X)


# ============================================================================ bad input
def test_bad_networks_and_subsamples():
    X, y = _data(n=40)
    with pytest.raises(ValueError, match="one value per row"):
        RichBLLRegressor(network=torch.nn.Linear(2, 3).double(), device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="nn.Linear"):
        RichBLLRegressor(network=torch.nn.Sequential(torch.nn.Tanh()), device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="train_network=False needs"):
        RichBLLRegressor(train_network=False).fit(X, y)
    with pytest.raises(ValueError, match="subsample=100 exceeds"):
        RichBLLRegressor(**SMALL, subsample=100).fit(X, y)
    with pytest.raises(ValueError, match="fewer than r \\+ 1"):
        RichBLLRegressor(**SMALL, subsample=5).fit(X, y)
    with pytest.raises(ValueError, match="subsample"):
        RichBLLRegressor(**SMALL, subsample=1.5).fit(X, y)
    with pytest.raises(ValueError, match="uncertainty='ntk' needs"):
        RichBLLRegressor(**dict(SMALL, hidden_layer_sizes=(80, 80), max_iter=1),
                         uncertainty="ntk").fit(X, y)
    with pytest.raises(ValueError):
        RichBLLRegressor(**SMALL).fit(X, np.c_[y, y])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_matches_cpu():
    """§8.16: CPU and CUDA give equal predictions for the same seed (weights on the host)."""
    X, y = _data(n=60)
    cpu = RichBLLRegressor(**dict(SMALL, device="cpu"), random_state=0).fit(X, y)
    gpu = RichBLLRegressor(**dict(SMALL, device="cuda"), random_state=0).fit(X, y)
    np.testing.assert_allclose(gpu.predict(X, return_std=True)[1],
                               cpu.predict(X, return_std=True)[1], rtol=1e-6)


# ============================================================================ fitted state
# set_params after fit and the predict-time checks: tests/test_fitted_state.py, for every
# parameter
@pytest.fixture(scope="module")
def fitted():
    X, y = _data(n=60)
    est = RichBLLRegressor(hidden_layer_sizes=(6,), max_iter=20, device="cpu",
                           random_state=0).fit(X, y)
    return est, X


def test_module_settings_are_read_at_fit_only(fitted, monkeypatch):
    """The private settings steer fit; a fitted model predicts as it was fitted."""
    est, X = fitted
    std = est.predict_std(X)
    for name, value in [("JACOBIAN", "random_projection"), ("REFIT", True),
                        ("PLATEAU_DROPS", 0), ("GRAD_CLIP", None)]:
        monkeypatch.setattr(_rich_bll, name, value)
    np.testing.assert_array_equal(est.predict_std(X), std)


def test_default_network_trains_without_autograd(monkeypatch):
    """The default ReLU network's training steps take the hand-written gradient
    (``_backend._mlp_grad``): no autograd backward pass runs during its fit. An activation
    it does not cover keeps autograd, so the counter sees backward passes when they run."""
    calls = []
    real = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", backward)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    est = RichBLLRegressor(max_iter=20, device="cpu", random_state=0).fit(X, y)
    assert est.n_iter_ == 20 and not calls
    RichBLLRegressor(activation="gelu", max_iter=20, device="cpu", random_state=0).fit(X, y)
    assert len(calls) >= 20
