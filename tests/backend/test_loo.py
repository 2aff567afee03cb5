"""Closed-form leave-one-out residuals of the GP engines, and the variance factor built on them."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from skbnngp._backend import ExactGP, NystromGP, loo_variance_factor


def _rbf(p, X1, X2=None, diag=False):
    if diag:
        return p["amp"] * torch.ones(X1.shape[0], dtype=X1.dtype)
    X2 = X1 if X2 is None else X2
    return p["amp"] * torch.exp(-0.5 * torch.cdist(X1, X2).square() / p["ls"] ** 2)


def _unpack(raw):
    return {"amp": raw[0].exp(), "ls": raw[1].exp(), "noise_variance": raw[2].exp()}


def _data(n=40, C=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand((n, 2), generator=g, dtype=torch.float64) * 4 - 2
    Y = torch.stack([torch.sin(X[:, 0]) + 0.3 * X[:, 1] * c for c in range(1, C + 1)], 1)
    Y = Y + 0.2 * torch.randn(Y.shape, generator=g, dtype=torch.float64)
    return X, Y


def _brute_force(Kn, Y):
    """Condition on all rows but i, by explicit solves: the LOO mean error and variance."""
    n = Kn.shape[0]
    r, v = np.empty(Y.shape), np.empty(n)
    for i in range(n):
        o = np.delete(np.arange(n), i)
        w = np.linalg.solve(Kn[np.ix_(o, o)], Kn[o, i])
        r[i] = Y[i] - w @ Y[o]
        v[i] = Kn[i, i] - Kn[i, o] @ w
    return r, v


def test_exact_loo_equals_refitting_without_each_row():
    X, Y = _data()
    raw = torch.log(torch.tensor([1.3, 0.8, 0.05], dtype=torch.float64))
    eng = ExactGP(_rbf, _unpack, X, Y, block_elements=7 * 40)  # column blocks of 7
    r, v = eng.loo(eng.state(raw))
    Kn = (_rbf(_unpack(raw), X) + 0.05 * torch.eye(40, dtype=torch.float64)).numpy()
    r_bf, v_bf = _brute_force(Kn, Y.numpy())
    np.testing.assert_allclose(r.numpy(), r_bf, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(v.numpy(), v_bf, rtol=1e-7)


def test_tiled_exact_loo_equals_refitting(monkeypatch):
    """The CUDA path of the LOO variances (``L^-1`` by tiles), forced on the CPU with ragged
    tiles of 6 rows, equals refitting without each row."""
    import skbnngp._backend._gp as gp_module

    monkeypatch.setattr(gp_module, "TILED_DEVICES", ("cpu",))
    monkeypatch.setattr(gp_module, "ADJOINT_TILE", 6)
    X, Y = _data()
    raw = torch.log(torch.tensor([1.3, 0.8, 0.05], dtype=torch.float64))
    eng = ExactGP(_rbf, _unpack, X, Y)
    r, v = eng.loo(eng.state(raw))
    Kn = (_rbf(_unpack(raw), X) + 0.05 * torch.eye(40, dtype=torch.float64)).numpy()
    r_bf, v_bf = _brute_force(Kn, Y.numpy())
    np.testing.assert_allclose(r.numpy(), r_bf, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(v.numpy(), v_bf, rtol=1e-7)


@pytest.mark.parametrize("tile", [6, 2048])
@pytest.mark.parametrize("relative_noise", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tiled_gradient_equals_dense_for_two_targets(relative_noise, dtype, tile, monkeypatch):
    """The tiled gradient (the CUDA route, forced on the CPU with ragged 6-row tiles, or one
    tile holding every row) equals the dense adjoint's for two targets, with and without a
    noise relative to the kernel's mean diagonal, in float64 and float32."""
    import skbnngp._backend._gp as gp_module

    monkeypatch.setattr(gp_module, "KEEP_GRAPH_ELEMENTS", 0)
    X, Y = _data()
    X, Y = X.to(dtype), Y.to(dtype)
    raw = torch.log(torch.tensor([1.3, 0.8, 0.05], dtype=dtype))
    eng = ExactGP(_rbf, _unpack, X, Y, relative_noise=relative_noise)
    v0, g0 = eng.value_and_grad(raw)
    monkeypatch.setattr(gp_module, "TILED_DEVICES", ("cpu",))
    monkeypatch.setattr(gp_module, "ADJOINT_TILE", tile)
    assert (gp_module._adjoint_tile(eng.n, eng.block) >= eng.n) == (tile >= eng.n)  # one tile
    v1, g1 = eng.value_and_grad(raw)
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    assert float(v1) == pytest.approx(float(v0), rel=1e-12)  # the same factorisation, recomputed
    np.testing.assert_allclose(g1.numpy(), g0.numpy(), rtol=tol, atol=tol * float(g0.abs().max()))


def test_adjoint_tile_grows_with_the_memory_budget(monkeypatch):
    """The tiled adjoint's tile is as large as the row-block budget allows (a GPU's budget
    gives 2,000 rows one tile, where an eighth of the rows gave 36 launch-bound tile pairs),
    never above ADJOINT_TILE, and never below an eighth of the rows or 256."""
    import skbnngp._backend._gp as gp_module
    from skbnngp._backend._chunks import CPU_BLOCK_ELEMENTS, block_elements

    tile = gp_module._adjoint_tile
    gpu = block_elements("cuda", mem_get_info=lambda dev: (70 * 2**30, 80 * 2**30))
    assert tile(2000, gpu) >= 2000
    assert tile(5000, gpu) == tile(50_000, gpu) == gp_module.ADJOINT_TILE == 2048
    cpu = tile(2000, CPU_BLOCK_ELEMENTS)  # the smallest budget: a tile graph within it
    assert 256 <= cpu < 2000
    assert cpu**2 * gp_module.GRAPH_TEMPORARIES <= CPU_BLOCK_ELEMENTS * 12
    assert tile(100, 1) == 256 and tile(8 * 300, 1) == 300
    monkeypatch.setattr(gp_module, "ADJOINT_TILE", 7)
    assert tile(2000, gpu) == 7


def test_nystrom_loo_equals_refitting_under_the_low_rank_kernel():
    X, Y = _data(n=50, seed=1)
    Z = X[::5].clone()
    raw = torch.log(torch.tensor([0.9, 1.1, 0.03], dtype=torch.float64))
    eng = NystromGP(_rbf, _unpack, X, Y, Z, jitter=1e-8, block_elements=13 * 10)
    p = _unpack(raw)
    r, v = eng.loo(eng.state(raw), p)
    Kzz = _rbf(p, Z) + 1e-8 * _rbf(p, Z).diagonal().mean() * torch.eye(10, dtype=torch.float64)
    Kxz = _rbf(p, X, Z)
    Q = Kxz @ torch.linalg.solve(Kzz, Kxz.T)
    Kn = (Q + 0.03 * torch.eye(50, dtype=torch.float64)).numpy()
    r_bf, v_bf = _brute_force(Kn, Y.numpy())
    np.testing.assert_allclose(r.numpy(), r_bf, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(v.numpy(), v_bf, rtol=1e-6)


def test_factor_is_the_conformal_quantile_squared_and_never_below_one():
    q = stats.norm.ppf(0.975)
    z = np.arange(1.0, 20.0)  # 19 residuals: ceil(20 * 0.95) = 19, the largest
    assert loo_variance_factor(z, q) == pytest.approx((19.0 / q) ** 2)
    z = np.linspace(0.1, 4.0, 40)  # ceil(41 * 0.95) = 39th smallest, not ceil(40 * 0.95)
    assert loo_variance_factor(-z, q) == pytest.approx((z[38] / q) ** 2)
    assert loo_variance_factor(np.full(50, 0.5), q) == 1.0  # narrower is never applied
    # non-finite residuals are ignored; nothing left or a bad quantile gives 1
    assert loo_variance_factor(np.r_[z, np.nan, np.inf], q) == pytest.approx((z[38] / q) ** 2)
    assert loo_variance_factor(np.array([np.nan]), q) == 1.0
    assert loo_variance_factor(z, 0.0) == 1.0


def test_factor_after_widening_covers_the_level_of_the_residuals():
    rng = np.random.default_rng(0)
    z = rng.standard_t(3, size=(300, 2)) * 1.7
    q = stats.norm.ppf(0.975)
    k = loo_variance_factor(z, q)
    inside = np.mean(np.abs(z) <= q * math.sqrt(k) * (1 + 1e-12))
    assert k > 1 and 0.95 <= inside <= 0.95 + 2 / z.size


def _brute_force_groups(Kn, Y, groups):
    """Condition on every row outside each group: its residuals and marginal variances."""
    n = Kn.shape[0]
    r, v = np.empty(Y.shape), np.empty(n)
    for g in groups:
        o = np.setdiff1d(np.arange(n), g)
        W = np.linalg.solve(Kn[np.ix_(o, o)], Kn[np.ix_(o, g)])
        r[g] = Y[g] - W.T @ Y[o]
        v[g] = np.diag(Kn[np.ix_(g, g)] - Kn[np.ix_(g, o)] @ W)
    return r, v


@pytest.mark.parametrize("batch", [1024, 4])  # one batch of blocks, or several
@pytest.mark.parametrize("engine", ["exact", "nystrom"])
def test_leave_group_out_equals_refitting_without_each_group(engine, batch, monkeypatch):
    """Rows that repeat one input, left out together (issue 53 item 1): residuals and
    variances equal conditioning on the other rows by explicit solves."""
    import skbnngp._backend._gp as gp_module
    from skbnngp._backend import leave_group_out
    from skbnngp._rows import duplicate_groups

    monkeypatch.setattr(gp_module, "GROUP_BATCH_ROWS", batch)

    X, Y = _data(n=30)
    X = torch.cat([X, X[:8], X[:3]])  # rows 0-2 three times, 3-7 twice
    Y = torch.cat([Y, Y[:8] + 0.1, Y[:3] - 0.1])
    raw = torch.log(torch.tensor([1.3, 0.8, 0.05], dtype=torch.float64))
    groups = duplicate_groups(X.numpy())
    assert sorted(len(g) for g in groups) == [2] * 5 + [3] * 3
    if engine == "exact":
        eng = ExactGP(_rbf, _unpack, X, Y)
        Kn = _rbf(_unpack(raw), X) + 0.05 * torch.eye(X.shape[0], dtype=torch.float64)
    else:
        Z = X[::3]
        eng = NystromGP(_rbf, _unpack, X, Y, Z, jitter=1e-8)
        p = _unpack(raw)
        Kzz = _rbf(p, Z) + 1e-8 * _rbf(p, Z).diagonal().mean() * torch.eye(Z.shape[0],
                                                                             dtype=torch.float64)
        Kxz = _rbf(p, X, Z)
        Kn = Kxz @ torch.linalg.solve(Kzz, Kxz.T) + 0.05 * torch.eye(X.shape[0],
                                                                      dtype=torch.float64)
    st = eng.state(raw)
    r, v = eng.loo(st, _unpack(raw))
    r, v = leave_group_out(eng, st, _unpack(raw), r, v, groups)
    all_groups = groups + [np.array([i]) for i in range(X.shape[0])
                           if not any(i in g for g in groups)]
    r_bf, v_bf = _brute_force_groups(Kn.numpy(), Y.numpy(), all_groups)
    np.testing.assert_allclose(r.numpy(), r_bf, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(v.numpy(), v_bf, rtol=1e-6, atol=1e-10)


def test_classifier_noise_search_counts_each_copy_of_a_replicate():
    """The Student-t classifier's leave-one-out noise search on merged rows (weights w,
    one copy out at a time) scores exactly as on the repeated rows, each left out alone
    with its twins kept: the same chosen noise, loss, label noise and per-row losses."""
    from skbnngp._backend._onehot import loo_noise_search
    from skbnngp._scale_mixture import Mixing

    rng = np.random.default_rng(0)
    Xd = torch.as_tensor(np.repeat(np.eye(4), 2, axis=0), dtype=torch.float64)  # 4 inputs
    yi = np.array([0, 1] * 4)  # each input carries both labels: 8 distinct rows
    w = rng.integers(1, 6, size=8).astype(float)
    rep = np.repeat(np.arange(8), w.astype(int))
    Y = torch.as_tensor((yi[:, None] == np.arange(2)[None, :]) + 0.1, dtype=torch.float64)
    K = _rbf({"amp": torch.tensor(1.5), "ls": torch.tensor(1.0)}, Xd)
    grid = np.geomspace(1e-2, 10.0, 13)

    def posterior(q, logdet):
        return Mixing("delta", value=0.7)

    common = {"low": 0.1, "weights": (0.0, 0.5), "coarse": 1}
    merged = loo_noise_search(K, Y, yi, posterior, grid, 6, row_weights=torch.as_tensor(w),
                              copies=True, **common)
    repeated = loo_noise_search(K[rep][:, rep], Y[rep], yi[rep], posterior, grid, 6, **common)
    assert merged[0] == repeated[0] and merged[2] == repeated[2] and merged[4] == repeated[4]
    assert merged[1] == pytest.approx(repeated[1], rel=1e-9)
    np.testing.assert_allclose(merged[3], repeated[3][np.searchsorted(rep, np.arange(8))],
                               rtol=1e-8)
