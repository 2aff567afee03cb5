"""FiDGPClassifier and its layers: spec 004 §7 properties."""

import math
import pickle
import warnings
from unittest.mock import patch

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits, load_iris
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

from skbnngp import FiDGPClassifier, _fidgp
from skbnngp._backend._fid_network import kl_factor, layer_parameter_count
from skbnngp._backend._inducing import InducingLinear, inv_softplus, kl_conditional

zuko = pytest.importorskip("zuko")
from skbnngp._backend._flows import RowMAF  # noqa: E402

from ._promise import assert_same_predictions

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
F64 = torch.float64


def small_layer(**kw):
    kw.setdefault("flow_length", 0)
    return InducingLinear(3, 3, 2, 2, seed=1, **kw).to(F64)  # d_out = 3, d_in = 4


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ============================================================ prior and conditional algebra
def test_conditional_maps_match_explicit_inverses():
    layer = small_layer()
    with torch.no_grad():
        layer.rho_d_row.fill_(inv_softplus(0.3))
        layer.rho_d_col.fill_(inv_softplus(0.2))
        L_r, L_c, T_row, T_colT, d_r, d_c = layer.prior_factors()
        K_r = layer.z_row @ layer.z_row.T + torch.diag(d_r**2)
        K_c = layer.z_col @ layer.z_col.T + torch.diag(d_c**2)
        jr = 1e-5 * K_r.diagonal().mean() * torch.eye(2, dtype=F64)
        jc = 1e-5 * K_c.diagonal().mean() * torch.eye(2, dtype=F64)
    torch.testing.assert_close(T_row, layer.z_row.T @ torch.linalg.inv(K_r + jr), atol=1e-8,
                               rtol=0)
    torch.testing.assert_close(T_colT.T, layer.z_col.T @ torch.linalg.inv(K_c + jc), atol=1e-8,
                               rtol=0)
    torch.testing.assert_close(L_r @ L_r.T, K_r + jr, atol=1e-10, rtol=0)


@pytest.mark.parametrize("lam_zero", ["mean", "lambda0"])
def test_weight_is_deterministic_given_v_without_noise(lam_zero):
    layer = small_layer(init_lambda=1e-3)
    sampling = "mean" if lam_zero == "mean" else "matheron"
    with torch.no_grad():
        if lam_zero == "lambda0":
            layer.rho_lambda.fill_(-1e4)  # softplus -> 0
        W = layer.sample_weight(gen(3), sampling)
        V = layer.sample_v(gen(3))
        L_r, L_c, T_row, T_colT, _, _ = layer.prior_factors()
    expect = layer.sigma_p * T_row @ (L_r @ V @ L_c.T) @ T_colT
    torch.testing.assert_close(W, expect, atol=1e-12, rtol=0)


def test_matheron_joint_sample_has_the_prior_covariances():
    layer = small_layer()
    with torch.no_grad():
        layer.rho_d_row.copy_(torch.tensor([inv_softplus(0.4), inv_softplus(0.7)]))
        layer.rho_d_col.copy_(torch.tensor([inv_softplus(0.5), inv_softplus(0.3)]))
        _, _, T_row, T_colT, d_r, d_c = factors = layer.prior_factors()
        n = 100_000
        w, u = layer.joint_prior_sample(gen(0), d_r, d_c, batch=(n,))
        eps = w - (T_row @ u) @ T_colT
        K_r = layer.z_row @ layer.z_row.T + torch.diag(d_r**2)
        K_c = layer.z_col @ layer.z_col.T + torch.diag(d_c**2)
    U = u.reshape(n, -1)  # row-major vec
    E = eps.reshape(n, -1)
    cov_u = U.T @ U / n
    torch.testing.assert_close(cov_u, torch.kron(K_r, K_c), atol=0.03, rtol=0)
    P_r = layer.z_row.T @ torch.linalg.solve(K_r, layer.z_row)
    P_c = layer.z_col.T @ torch.linalg.solve(K_c, layer.z_col)
    target = torch.eye(12, dtype=F64) - torch.kron(P_r, P_c).detach()
    torch.testing.assert_close(E.T @ E / n, target, atol=0.03, rtol=0)
    torch.testing.assert_close(E.T @ U / n, torch.zeros(12, 4, dtype=F64), atol=0.03, rtol=0)
    # the same through the public draw
    eps2 = layer.conditional_noise(gen(1), "matheron", factors, batch=(n,)).reshape(n, -1)
    torch.testing.assert_close(eps2.T @ eps2 / n, target, atol=0.03, rtol=0)


def test_reparam_noise_is_standard_normal():
    layer = small_layer()
    n = 100_000
    e = layer.conditional_noise(gen(0), "reparam", layer.prior_factors(), batch=(n,))
    e = e.reshape(n, -1).detach()
    torch.testing.assert_close(e.mean(0), torch.zeros(12, dtype=F64), atol=0.02, rtol=0)
    torch.testing.assert_close(e.T @ e / n, torch.eye(12, dtype=F64), atol=0.03, rtol=0)


@pytest.mark.parametrize("lam", [1.0, 0.3])
def test_prior_marginal_of_weights(lam):
    """m = 0, s = 1, no flow, lambda = 1, Matheron: W / sigma_p ~ iid N(0, 1) (the prior
    marginal); lambda < 1 shrinks the variance."""
    layer = InducingLinear(3, 3, 2, 2, flow_length=0, init_sd_u=1.0, max_sd_u=1.0,
                           init_lambda=lam, max_lambda=1.0, seed=2).to(F64)
    with torch.no_grad():
        layer.v_mean.zero_()
        layer.rho_d_row.fill_(inv_softplus(0.5))
        layer.rho_d_col.fill_(inv_softplus(0.5))
        g = gen(4)
        W = torch.stack([layer.sample_weight(g, "matheron") for _ in range(6000)])
    w = (W / layer.sigma_p).reshape(6000, -1)
    cov = torch.cov(w.T)
    assert abs(float(w.mean())) < 0.03
    if lam == 1.0:
        torch.testing.assert_close(cov, torch.eye(12, dtype=F64), atol=0.1, rtol=0)
    else:
        assert float(cov.diagonal().max()) < 0.95


def test_prior_scale_counts_the_bias_column():
    layer = InducingLinear(7, 5, 3, 3, flow_length=0, prior_sd=2.0)
    assert layer.d_in == 8
    assert layer.sigma_p == pytest.approx(2.0 / math.sqrt(8))


def test_conditional_kl_closed_form():
    lam = torch.tensor([1e-3, 0.5, 1.0, 2.0], dtype=F64)
    kl = kl_conditional(lam, 1)
    assert float(kl[0]) == pytest.approx(6.4078, abs=1e-4)
    assert float(kl[2]) == 0.0
    assert bool((kl >= 0).all())
    assert float(kl_conditional(torch.tensor(0.5, dtype=F64), 10)) == pytest.approx(
        10 * float(kl[1]))


# ============================================================ variational posterior and flow
def test_no_flow_gives_the_diagonal_gaussian_and_the_analytic_kl():
    layer = small_layer(init_sd_u=0.05)
    with torch.no_grad():
        V = torch.stack([layer.sample_v(gen(s)) for s in range(4000)])
        m, s = layer.v_mean, layer.sd_u()
        torch.testing.assert_close(V.mean(0), m, atol=4 * 0.05 / math.sqrt(4000) * 1.5, rtol=0)
        torch.testing.assert_close(V.std(0), s, rtol=0.08, atol=0)
        lam = layer.lam()
        expect = (-torch.log(s) + 0.5 * (s**2 + m**2) - 0.5).sum() + kl_conditional(lam, 12)
        torch.testing.assert_close(layer.kl(), expect)


def _one_step_flow(C=5, seed=0):
    return RowMAF(C, 1, hidden=16, dropout=0.1, seed=seed).to(F64).eval()


def test_maf_jacobian_is_triangular_with_the_returned_log_det():
    flow = _one_step_flow()
    x = torch.randn(5, dtype=F64, generator=gen(1))
    J = torch.autograd.functional.jacobian(lambda v: flow(v)[0], x)
    assert torch.count_nonzero(torch.triu(J, diagonal=1)) == 0
    assert bool((J.diagonal() > 1e-3 - 1e-12).all())
    logdet = torch.linalg.slogdet(J)[1]
    torch.testing.assert_close(logdet, flow(x)[1], atol=1e-5, rtol=0)
    # the autoregressive structure: input j moves outputs k >= j only (and k > j for the
    # conditioner, i.e. the off-diagonal below)
    x2 = x.clone()
    x2[2] += 0.5
    d = (flow(x2)[0] - flow(x)[0]).abs().detach()
    assert float(d[:2].max()) == 0.0 and float(d[3:].max()) > 0


def test_stacked_flow_log_det_and_inverse():
    flow = RowMAF(6, 3, hidden=8, dropout=0.0, seed=2).to(F64).eval()
    x = torch.randn(4, 6, dtype=F64, generator=gen(2))
    y, ladj = flow(x)
    for i in range(4):
        J = torch.autograd.functional.jacobian(lambda v: flow(v)[0], x[i])
        torch.testing.assert_close(torch.linalg.slogdet(J)[1], ladj[i], atol=1e-5, rtol=0)
    torch.testing.assert_close(flow.inverse(y), x, atol=1e-5, rtol=0)


def test_flow_construction_leaves_the_global_random_state():
    state = torch.random.get_rng_state()
    a = RowMAF(4, 1, seed=7)
    assert torch.equal(state, torch.random.get_rng_state())
    b = RowMAF(4, 1, seed=7)
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values()):
        assert torch.equal(pa, pb)


def test_one_sample_flow_kl_is_unbiased_for_an_identity_flow():
    layer = InducingLinear(3, 3, 2, 2, flow_length=1, init_sd_u=0.08, seed=3).to(F64)

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x, torch.zeros(x.shape[:-1], dtype=x.dtype)

    layer.flow = Identity()
    with torch.no_grad():
        kls = []
        g = gen(5)
        for _ in range(2000):
            layer.sample_v(g)
            kls.append(float(layer.kl()))
        m, s = layer.v_mean, layer.sd_u()
        analytic = float((-torch.log(s) + 0.5 * (s**2 + m**2) - 0.5).sum()
                         + kl_conditional(layer.lam(), 12))
    mc = np.mean(kls)
    se = np.std(kls) / math.sqrt(len(kls))
    assert abs(mc - analytic) < 4 * se + 1e-9


def test_spectral_norm_of_each_conditioner_weight_is_one():
    flow = RowMAF(6, 1, hidden=16, seed=1).to(F64).train()
    x = torch.randn(3, 6, dtype=F64, generator=gen(0))
    for _ in range(20):
        flow(x)
    for lin in flow.masked_linears():
        sigma = torch.linalg.matrix_norm(lin.weight.detach(), ord=2)
        assert float(sigma) == pytest.approx(1.0, rel=1e-2)


# ============================================================ training and prediction
@pytest.fixture(scope="module")
def iris_fit():
    X, y = load_iris(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    names = np.array(["setosa", "versicolor", "virginica"])
    with patch.multiple(_fidgp, MAX_LAMBDA=0.5, INIT_SD_U=0.05):
        clf = FiDGPClassifier(hidden_layer_sizes=(16,), max_iter=30, batch_size=32,
                              learning_rate_init=1e-2, random_state=0,
                              device="cpu").fit(Xtr, names[ytr])
    return clf, Xte, names[yte]


def test_probabilities_and_string_labels(iris_fit):
    clf, X, y = iris_fit
    P = clf.predict_proba(X)
    assert P.shape == (len(X), 3)
    assert np.all((P >= 0) & (P <= 1))
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-6)
    assert list(clf.classes_) == ["setosa", "versicolor", "virginica"]
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[P.argmax(axis=1)])
    assert clf.score(X, y) >= 0.9
    np.testing.assert_allclose(clf.decision_function(X), np.log(P), atol=1e-10)
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X)), P, atol=1e-12)


def test_constraints_hold_after_training(iris_fit):
    clf = iris_fit[0]
    plan = clf.model_plan_  # the settings of the fit, kept with the model
    assert (plan["max_lambda"], plan["init_sd_u"]) == (0.5, 0.05)
    for _, layer in clf.model_.inducing_layers():
        assert float(layer.sd_u().max()) <= plan["max_sd_u"] + 1e-12
        lam = float(layer.lam())
        assert 0 <= lam <= plan["max_lambda"]
    # the shapes were clipped to d_out and d_in (with bias): 4 + 1 inputs, 3 classes
    assert clf.inducing_shapes_ == [(16, 5), (3, 17)]


def test_parameter_count_matches_the_formula(iris_fit):
    clf = iris_fit[0]
    expect = layer_parameter_count(16, 5, 16, 5) + layer_parameter_count(3, 17, 3, 17)
    assert clf.n_parameters_ == expect
    assert layer_parameter_count(10, 10, 4, 4, flow=True) - layer_parameter_count(
        10, 10, 4, 4, flow=False) == 50 * 4 + 1104


def test_reproducible_and_sample_count_matters(iris_fit):
    clf, X, _ = iris_fit
    np.testing.assert_array_equal(clf.predict_proba(X), clf.predict_proba(X))
    a = clf.sample_proba(X, n_samples=3, random_state=1)
    b = clf.sample_proba(X, n_samples=3, random_state=1)
    c = clf.sample_proba(X, n_samples=3, random_state=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    one = clf.sample_proba(X, n_samples=1).mean(0)
    eight = clf.sample_proba(X, n_samples=8).mean(0)
    assert not np.array_equal(one, eight)
    np.testing.assert_allclose(one.sum(1), 1, atol=1e-6)
    X2 = X[::-1]
    np.testing.assert_allclose(clf.predict_proba(X2), clf.predict_proba(X)[::-1], atol=1e-6)


def test_kept_draws_are_the_draws_of_the_predictive_seed(iris_fit, monkeypatch):
    """The weight draws kept at fit are those a fresh draw gives (same numbers), serve
    predict_proba, sample_proba without a seed and predict_uncertainty, are not pickled and
    are drawn again on loading; another count or seed draws afresh; above the size bound
    nothing is kept."""
    clf, X, _ = iris_fit
    kept = clf._predict_draws
    assert len(kept) == clf.n_predict_samples
    fresh = _fidgp.draw_weights(clf.model_, clf.n_predict_samples, clf._predict_seed,
                                clf.model_plan_["sampling"])
    for a, b in zip(kept, fresh):
        for Wa, Wb in zip(a, b):
            assert_same_predictions(Wa.numpy(), Wb.numpy())
    P = clf.predict_proba(X)
    calls = []
    real = _fidgp.draw_weights
    monkeypatch.setattr(_fidgp, "draw_weights", lambda *a: calls.append(a[1:3]) or real(*a))
    assert_same_predictions(clf.predict_proba(X), P)
    assert_same_predictions(clf.sample_proba(X).mean(0), P)
    clf.predict_uncertainty(X)
    assert calls == []  # every one of them read the kept draws
    clf.sample_proba(X, n_samples=3)
    clf.sample_proba(X, random_state=5)
    assert [c[0] for c in calls] == [3, clf.n_predict_samples]
    assert "_predict_draws" not in clf.__getstate__()
    loaded = pickle.loads(pickle.dumps(clf))
    assert loaded._predict_draws is not None
    assert_same_predictions(loaded.predict_proba(X), P)
    monkeypatch.setattr(_fidgp, "KEEP_DRAW_ELEMENTS", 10)
    assert clf._keep_draws() is None
    # an invalid count set after fit still loads; predictions refuse it by name
    bad = pickle.loads(pickle.dumps(clf.set_params(n_predict_samples="8")))
    clf.set_params(n_predict_samples=8)
    assert bad._predict_draws is None
    with pytest.raises(ValueError, match="n_predict_samples"):
        bad.predict_proba(X)


def test_monte_carlo_variance_falls_with_more_draws(iris_fit):
    clf, X, _ = iris_fit
    clf = FiDGPClassifier(**clf.get_params())  # fresh estimator: same settings
    X_tr, y_tr = load_iris(return_X_y=True)
    with patch.multiple(_fidgp, MAX_LAMBDA=0.5, INIT_LAMBDA=0.4):
        clf.fit(X_tr, y_tr)

    def spread(S):
        means = [clf.sample_proba(X, n_samples=S, random_state=r).mean(0) for r in range(12)]
        return np.var(np.stack(means), axis=0).mean()

    v1, v16 = spread(1), spread(16)
    assert v16 < v1 / 4


def test_same_seed_same_fit_different_seed_different_fit():
    X, y = load_iris(return_X_y=True)
    kw = {"hidden_layer_sizes": (8,), "max_iter": 5, "batch_size": 50, "device": "cpu"}
    state = torch.random.get_rng_state()
    p1 = FiDGPClassifier(random_state=3, **kw).fit(X, y).predict_proba(X)
    assert torch.equal(state, torch.random.get_rng_state())
    p2 = FiDGPClassifier(random_state=3, **kw).fit(X, y).predict_proba(X)
    p3 = FiDGPClassifier(random_state=4, **kw).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(p1, p2)
    assert not np.allclose(p1, p3)


def test_kl_schedule():
    E = 40
    k = [kl_factor(e, E, 0.5, 0.25, 0.7) for e in range(E)]
    assert all(v == 0 for v in k[:20])
    assert all(b >= a for a, b in zip(k, k[1:]))
    assert max(k) == pytest.approx(0.7) and k[30] == pytest.approx(0.7)
    assert kl_factor(25, E, 0.5, 0.0, 1.0) == 1.0


def test_loss_is_the_data_term_before_the_kl_is_switched_on():
    """With the KL off (first half of the epochs) the loss equals the smoothed cross-entropy,
    and switching the KL on adds KL / N."""
    X, y = load_iris(return_X_y=True)
    clf = FiDGPClassifier(hidden_layer_sizes=(8,), max_iter=8, batch_size=150, kl_weight=1.0,
                          calibration=None, random_state=0, device="cpu").fit(X, y)
    assert clf.kl_weights_[:4] == [0.0] * 4 and clf.kl_weights_[-1] == 1.0
    assert len(clf.loss_curve_) == clf.n_iter_ == 8
    ce = np.array(clf.loss_curve_[:4])
    assert np.all(ce < 2.0)  # cross-entropy of 3 classes: about log 3 at the start
    assert clf.loss_curve_[-1] > clf.kl_ * 0.5  # the KL per row enters with weight 1


def test_the_default_trains_the_whole_schedule_without_a_warning():
    """``n_iter_no_change=None`` (default) runs all ``max_iter`` epochs, the paper's budget,
    silently, and the default warm refit (``calibration="auto"``) adds a tenth of them; an
    explicit stopping rule that does not fire in time warns."""
    X, y = load_iris(return_X_y=True)
    kw = {"hidden_layer_sizes": (8,), "max_iter": 12, "batch_size": 150, "random_state": 0,
          "device": "cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf = FiDGPClassifier(**kw).fit(X, y)
        plain = FiDGPClassifier(calibration=None, **kw).fit(X, y)
    assert clf.calibration_ == "temperature" and clf.n_iter_ == 12 + 1 and clf.converged_
    assert plain.n_iter_ == 12 and plain.converged_
    with pytest.warns(ConvergenceWarning, match="reached max_iter=12"):
        ruled = FiDGPClassifier(n_iter_no_change=50, calibration=None, **kw).fit(X, y)
    assert ruled.n_iter_ == 12 and not ruled.converged_


def test_class_weight_shifts_the_decision():
    X, y = load_iris(return_X_y=True)
    y = (y == 2).astype(int)
    kw = {"hidden_layer_sizes": (8,), "max_iter": 20, "batch_size": 50,
          "learning_rate_init": 1e-2, "random_state": 0, "device": "cpu"}
    base = FiDGPClassifier(**kw).fit(X, y).predict_proba(X)[:, 1].mean()
    heavy = FiDGPClassifier(class_weight={0: 1.0, 1: 20.0}, **kw).fit(X, y)
    assert heavy.predict_proba(X)[:, 1].mean() > base
    bal = FiDGPClassifier(class_weight="balanced", **kw).fit(X, y)
    assert bal.predict_proba(X).shape == (150, 2)


# ============================================================ OoD score
@pytest.fixture(scope="module")
def digits_ood():
    X, y = load_digits(return_X_y=True)
    ind = y < 5
    Xtr, Xte, ytr, yte = train_test_split(X[ind], y[ind], test_size=0.3, random_state=0)
    clf = FiDGPClassifier(max_iter=40, random_state=0, device="cpu").fit(Xtr, ytr)
    return clf, Xte, yte, X[~ind]


def test_ood_score_separates_held_out_classes(digits_ood):
    clf, Xte, yte, Xood = digits_ood
    assert clf.score(Xte, yte) >= 0.9
    s_in, s_out = clf.ood_score(Xte), clf.ood_score(Xood)
    auroc = roc_auc_score(np.r_[np.zeros(len(s_in)), np.ones(len(s_out))], np.r_[s_in, s_out])
    assert auroc > 0.75
    rng = np.random.RandomState(0)
    noise = clf._X_offset + 3.0 * clf._X_scale * rng.standard_normal((300, Xte.shape[1]))
    s_noise = clf.ood_score(noise)
    auroc_noise = roc_auc_score(np.r_[np.zeros(len(s_in)), np.ones(300)], np.r_[s_in, s_noise])
    assert auroc_noise > 0.7
    far = clf.ood_score(Xte * 10)  # only finite and non-negative (spec T21)
    assert np.all(np.isfinite(far)) and np.all(far >= 0)


def test_ood_score_shape_batch_invariance_and_no_side_effects(digits_ood):
    clf, Xte, _, _ = digits_ood
    before = {k: v.detach().clone() for k, v in clf.model_.state_dict().items()}
    s = clf.ood_score(Xte)
    assert s.shape == (len(Xte),) and np.all(np.isfinite(s)) and np.all(s >= 0)
    parts = np.concatenate([clf.ood_score(Xte[:7]), clf.ood_score(Xte[7:])])
    np.testing.assert_allclose(parts, s, rtol=1e-4, atol=1e-6)
    for k, v in clf.model_.state_dict().items():
        assert torch.equal(before[k], v)
    assert all(p.grad is None for p in clf.model_.parameters())
    # every linear layer's input: the inputs, both hidden layers' features
    assert clf.ood_layers_ == [0, 1, 2] and len(clf.inducing_matrices_) == 3


def test_residual_projector_properties(digits_ood):
    clf = digits_ood[0]
    B = clf._ood["bases"][0].double()  # the default: an orthogonal projector of lower rank
    P = B @ B.T
    torch.testing.assert_close(P, P.T)
    ev = torch.linalg.eigvalsh(P)
    assert float(ev.min()) > -1e-5 and float(ev.max()) < 1.0 + 1e-5
    assert int((ev < 0.5).sum()) == P.shape[0] - clf.ood_ranks_[0] >= 1
    f = torch.randn(50, P.shape[0], dtype=F64, generator=gen(0))
    r = f - f @ P
    assert bool((r.norm(dim=1) <= f.norm(dim=1) + 1e-9).all())
    torch.testing.assert_close(r @ P, torch.zeros_like(r), atol=1e-5, rtol=0)  # orthogonal


def test_pickle_round_trip_keeps_outputs(digits_ood):
    clf, Xte, _, _ = digits_ood
    clone = pickle.loads(pickle.dumps(clf))
    assert_same_predictions(clone.predict_proba(Xte), clf.predict_proba(Xte))
    assert_same_predictions(clone.ood_score(Xte), clf.ood_score(Xte))
    state = clf.__getstate__()
    assert all(isinstance(v, np.ndarray) for v in state["model_"].values())
    assert all(isinstance(a, np.ndarray) for v in state["_ood"].values() for a in v)


def test_predict_uncertainty_decomposition(digits_ood):
    clf, Xte, _, Xood = digits_ood
    u = clf.predict_uncertainty(Xte)
    np.testing.assert_allclose(u["entropy"], u["expected_entropy"] + u["mutual_information"],
                               atol=1e-10)
    assert np.all(u["mutual_information"] >= 0)
    assert np.all(u["entropy"] <= math.log(5) + 1e-9)
    P = clf.predict_proba(Xte)
    np.testing.assert_allclose(u["entropy"], -(P * np.log(P)).sum(1), atol=1e-6)


@pytest.mark.parametrize("params,settings", [
    ({"flow_length": 0}, {"SAMPLING": "reparam"}),
    ({"flow_length": 2}, {"SAMPLING": "mean"}),
    ({"fid_layers": "last"}, {"OOD_METHOD": "principal"}),
    ({"layer_budget": 0.5}, {"OOD_METHOD": "inducing"}),
    ({"fid_layers": [0]}, {"FLOW_ON_OUTPUT_LAYER": False, "Z_INIT": "orthogonal",
                           "LAMBDA_LR": 1e-2, "LABEL_SMOOTHING": 0.1}),
])
def test_variants_train(params, settings):
    """The private settings (ablations) train, and the fit keeps what it ran with."""
    X, y = load_iris(return_X_y=True)
    with patch.multiple(_fidgp, **settings):
        clf = FiDGPClassifier(hidden_layer_sizes=(8,), max_iter=4, batch_size=75,
                              random_state=0, device="cpu", **params).fit(X, y)
    P = clf.predict_proba(X)
    assert P.shape == (150, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-6)
    s = clf.ood_score(X)
    assert np.all(np.isfinite(s)) and np.all((s >= 0) & (s <= 1 + 1e-6))
    assert clf.model_plan_["sampling"] == settings.get("SAMPLING", "matheron")
    assert clf.ood_method_ == settings.get("OOD_METHOD", "principal")
    if "Z_INIT" in settings:
        assert clf.inducing_shapes_ == [(8, 5), None] and clf.ood_layers_ == [0, 1]
        assert clf.inducing_matrices_[1] is None  # the dense output layer has no U


# ============================================================ fitted state
@pytest.fixture(scope="module")
def fitted_blob():
    X, y = load_iris(return_X_y=True)
    clf = FiDGPClassifier(hidden_layer_sizes=(8,), max_iter=4, batch_size=50, random_state=0,
                          device="cpu").fit(X, y)
    return pickle.dumps(clf), X


@pytest.mark.parametrize("param,value", [("activation", "tanh"), ("dtype", "float64"),
                                         ("hidden_layer_sizes", (3, 3)),
                                         ("inducing_rows", 2), ("normalize_X", False),
                                         ("calibration", "temperature"),
                                         ("validation_fraction", 0.5)])
def test_set_params_after_fit_changes_nothing_fitted(fitted_blob, param, value):
    blob, X = fitted_blob
    ref = pickle.loads(blob)
    est = pickle.loads(blob).set_params(**{param: value})
    back = pickle.loads(pickle.dumps(est))
    for method in ("predict_proba", "ood_score"):
        want = getattr(ref, method)(X)
        assert_same_predictions(getattr(est, method)(X), want, "float32")
        assert_same_predictions(getattr(back, method)(X), want, "float32")


def test_private_settings_changed_after_fit_change_nothing_fitted(fitted_blob):
    """What predict and the OoD score read was copied into the fitted state at fit."""
    blob, X = fitted_blob
    ref = pickle.loads(blob)
    with patch.multiple(_fidgp, SAMPLING="mean", OOD_METHOD="principal", MAX_SD_U=1.0):
        est = pickle.loads(blob)
        back = pickle.loads(pickle.dumps(est))
        for method in ("predict_proba", "ood_score"):
            want = getattr(ref, method)(X)
            assert_same_predictions(getattr(est, method)(X), want, "float32")
            assert_same_predictions(getattr(back, method)(X), want, "float32")


@pytest.mark.parametrize("param,value,methods", [
    ("n_predict_samples", 0, ["predict", "predict_proba", "predict_uncertainty",
                              "sample_proba"]),
    ("n_predict_samples", 2.5, ["predict_proba", "decision_function"]),
])
def test_predict_time_parameters_are_checked_like_fit(fitted_blob, param, value, methods):
    blob, X = fitted_blob
    for method in methods:
        est = pickle.loads(blob).set_params(**{param: value})
        with pytest.raises((ValueError, TypeError), match=param):
            getattr(est, method)(X)


# ============================================================ bad input
def test_bad_input():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="class"):
        FiDGPClassifier(max_iter=2).fit(X, np.zeros(150))
    with pytest.raises(NotFittedError):
        FiDGPClassifier().ood_score(X)
    with pytest.raises(ValueError, match="fid_layers"):
        FiDGPClassifier(fid_layers=[5], max_iter=2).fit(X, y)
    with patch.object(FiDGPClassifier, "_fit_network", side_effect=AssertionError("trained")), \
            pytest.raises(ValueError, match="ood_layers"):  # two linear layers, before training
        FiDGPClassifier(hidden_layer_sizes=(4,), ood_layers=[2], max_iter=2).fit(X, y)
    with patch.object(_fidgp, "OOD_METHOD", "inducing"), \
            pytest.raises(ValueError, match="ood_layers"):  # a dense layer has no U
        FiDGPClassifier(hidden_layer_sizes=(4,), fid_layers="last", ood_layers=[0],
                        max_iter=2).fit(X, y)
    with pytest.raises(ValueError, match="Unknown label type"):
        FiDGPClassifier(max_iter=2).fit(X, np.linspace(0, 1, 150))
    clf = FiDGPClassifier(hidden_layer_sizes=(4,), max_iter=2, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="ood_layers"):  # a failed refit keeps the model
        clf.set_params(ood_layers=[2]).fit(X[y < 2], y[y < 2])
    assert list(clf.classes_) == [0, 1, 2]
    clf.set_params(ood_layers=None)
    with pytest.raises(ValueError, match="features"):
        clf.ood_score(X[:, :3])
    bad = X[:5].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.predict_proba(bad)
    with pytest.raises(ValueError, match="n_samples"):
        clf.sample_proba(X, n_samples=0)
    # unseen labels at score count as errors, as in sklearn
    assert 0 <= clf.score(X[:10], np.full(10, 7)) == 0.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_matches_cpu():
    """Host-drawn noise: the same seed trains the same model on CUDA as on the CPU."""
    X, y = load_iris(return_X_y=True)
    kw = {"hidden_layer_sizes": (8,), "max_iter": 5, "batch_size": 50, "dtype": "float64",
          "random_state": 0}
    cpu = FiDGPClassifier(device="cpu", **kw).fit(X, y)
    gpu = FiDGPClassifier(device="cuda", **kw).fit(X, y)
    np.testing.assert_allclose(gpu.predict_proba(X), cpu.predict_proba(X), atol=1e-6)
    np.testing.assert_allclose(gpu.ood_score(X), cpu.ood_score(X), rtol=1e-4, atol=1e-8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_graph_steps_match_eager_steps(monkeypatch):
    """Steps replayed as CUDA graphs (two batch sizes: 40 and a last batch of 30) train the
    model that eager CUDA steps train, from the same host-drawn noise."""
    X, y = load_iris(return_X_y=True)
    kw = {"hidden_layer_sizes": (16,), "max_iter": 12, "batch_size": 40, "dtype": "float64",
          "random_state": 0, "device": "cuda"}
    graph = FiDGPClassifier(**kw).fit(X, y)
    assert all(err is None for *_, err in graph._graph_report), graph._graph_report
    assert sum(r[2] for r in graph._graph_report) >= 30  # most steps were replayed
    monkeypatch.setattr(FiDGPClassifier, "_cuda_graphs", False)
    eager = FiDGPClassifier(**kw).fit(X, y)
    assert sum(r[2] for r in eager._graph_report) == 0
    np.testing.assert_allclose(graph.predict_proba(X), eager.predict_proba(X), atol=1e-6)
    np.testing.assert_allclose(graph.ood_score(X), eager.ood_score(X), rtol=1e-4, atol=1e-8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_graph_capture_failure_falls_back_to_eager_steps(monkeypatch):
    """A capture that fails leaves the fit to eager steps: it completes, says why in its
    report, and trains the model that eager steps train."""
    from skbnngp._backend._train import NetworkTrainer

    X, y = load_iris(return_X_y=True)
    kw = {"hidden_layer_sizes": (8,), "max_iter": 5, "batch_size": 50, "dtype": "float64",
          "random_state": 0, "device": "cuda"}

    def refuse(self, rows):
        raise RuntimeError("no capture here")

    monkeypatch.setattr(NetworkTrainer, "_capture", refuse)
    fallback = FiDGPClassifier(**kw).fit(X, y)
    first = fallback._graph_report[0]
    assert first[2] == 0 and first[3] == "RuntimeError: no capture here"
    monkeypatch.setattr(FiDGPClassifier, "_cuda_graphs", False)
    eager = FiDGPClassifier(**kw).fit(X, y)
    np.testing.assert_allclose(fallback.predict_proba(X), eager.predict_proba(X), atol=1e-6)
