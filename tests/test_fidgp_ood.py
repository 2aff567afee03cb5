"""FiDGPClassifier's OoD score is sound at the defaults, and the compression option
(``layer_budget``) keeps each FiD-GP layer under its budget."""

import copy
from unittest.mock import patch

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from skbnngp import FiDGPClassifier, _fidgp
from skbnngp._backend._fid_network import build_network, layer_parameter_count

pytest.importorskip("zuko")
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def subspace_blobs(n, seed, d=40, k=4):
    """Two classes living on a k-dimensional subspace of R^d (plus a little noise)."""
    rng = np.random.RandomState(seed)
    basis = np.linalg.qr(np.random.RandomState(0).standard_normal((d, k)))[0]
    y = rng.randint(0, 2, n)
    latent = rng.standard_normal((n, k)) + 2.0 * y[:, None]
    return latent @ basis.T + 0.05 * rng.standard_normal((n, d)), y


@pytest.fixture(scope="module")
def toy():
    X, y = subspace_blobs(300, 1)
    with patch.object(_fidgp, "OOD_METHOD", "principal"):
        clf = FiDGPClassifier(max_iter=30, batch_size=100, learning_rate_init=1e-2,
                              random_state=0, device="cpu").fit(X, y)
    return clf, X


def test_defaults_make_the_inducing_matrix_and_the_projector_rank_deficient(toy):
    clf, _ = toy
    (R0, C0), (R1, C1), _ = clf.inducing_shapes_
    assert R1 < C1 and R0 < C0  # widths 40 + 1 -> 64 -> 64: R = 16 < C = 32
    for k, i in enumerate(clf.ood_layers_):
        U = clf.inducing_matrices_[k]
        assert np.linalg.matrix_rank(U) <= min(U.shape) < U.shape[1]
        width = clf.model_plan_["widths"][i] + 1
        B = clf._ood["bases"][k].double()
        torch.testing.assert_close(B.T @ B, torch.eye(B.shape[1], dtype=torch.float64),
                                   atol=1e-5, rtol=0)
        ev = torch.linalg.eigvalsh(B @ B.T)
        assert clf.ood_ranks_[k] == B.shape[1] < width
        # eigenvalues 0 or 1, and not all ~1 (the old ridge projector had 30 of 32 near 1)
        assert int((ev > 0.5).sum()) == clf.ood_ranks_[k]
        assert int((ev < 1e-5).sum()) == width - clf.ood_ranks_[k]


def test_principal_subspace_keeps_the_requested_energy(toy):
    clf, X = toy
    A = clf._layer_inputs(clf._input(X))
    for a, B in zip(A, clf._ood["bases"]):
        a = a.double()
        r = a - (a @ B.double()) @ B.double().T
        assert float(r.square().sum() / a.square().sum()) <= 1 - _fidgp.OOD_ENERGY + 1e-6


def test_score_is_lower_in_distribution_than_off_the_data_subspace(toy):
    clf, _ = toy
    X_in, _ = subspace_blobs(200, 2)
    rng = np.random.RandomState(3)
    X_off = rng.standard_normal((200, 40)) * X_in.std()  # same scale, every direction
    s_in, s_off = clf.ood_score(X_in), clf.ood_score(X_off)
    assert np.all((s_in >= 0) & (s_in <= 1)) and np.all((s_off >= 0) & (s_off <= 1))
    auc = roc_auc_score(np.r_[np.zeros(200), np.ones(200)], np.r_[s_in, s_off])
    assert auc > 0.95 and np.median(s_in) < 0.5 * np.median(s_off)
    # scale-free: far along the data subspace is not OoD, far off it is
    assert np.median(clf.ood_score(10 * X_in)) < np.median(s_off)
    # the default ("combined") adds the inducing residual, larger in distribution, and
    # still separates
    comb = copy.deepcopy(clf)
    comb._fit_ood(comb.model_, comb._input(X_in), np.random.RandomState(0), 1,
                  method="combined")
    c_in, c_off = comb.ood_score(X_in), comb.ood_score(X_off)
    assert roc_auc_score(np.r_[np.zeros(200), np.ones(200)], np.r_[c_in, c_off]) > 0.95
    assert np.median(c_in) < 0.7 * np.median(c_off)


def test_inducing_subspace_is_the_row_space_of_the_mean_weight():
    X, y = subspace_blobs(200, 4)
    with patch.object(_fidgp, "OOD_METHOD", "inducing"):
        clf = FiDGPClassifier(hidden_layer_sizes=(16, 16), max_iter=5, random_state=0,
                              device="cpu").fit(X, y)
    for k, i in enumerate(clf.ood_layers_):
        layer = clf.model_.layers[i]
        with torch.no_grad():
            M = (torch.as_tensor(clf.inducing_matrices_[k]) @ layer.prior_factors()[3]).double()
        B = clf._ood["bases"][k].double()
        assert B.shape[1] == min(clf.inducing_shapes_[i])
        torch.testing.assert_close(M @ B @ B.T, M, atol=1e-4 * float(M.abs().max()), rtol=0)


@pytest.mark.parametrize("budget", [0.5, 1.0])
def test_layer_budget_makes_each_layer_smaller_than_the_dense_one(budget):
    X, y = subspace_blobs(120, 5)
    clf = FiDGPClassifier(layer_budget=budget, max_iter=2, random_state=0,
                          device="cpu").fit(X, y)
    widths = clf.model_plan_["widths"]
    n_lin = len(widths) - 1
    total = 0
    for i, layer in clf.model_.inducing_layers():
        d_out, d_in = widths[i + 1], widths[i] + 1
        if i < n_lin - 1:
            assert layer.n_parameters() <= budget * d_out * d_in
        else:  # a 2-class output layer keeps rank 2, its smallest FiD-GP layer: 2 x 3
            assert clf.inducing_shapes_[i][0] == 2
            assert (layer.n_parameters() <= budget * d_out * d_in
                    or clf.inducing_shapes_[i] == (2, 3))
        total += layer.n_parameters()
    assert clf.n_parameters_ == total
    full = FiDGPClassifier(max_iter=1, random_state=0, device="cpu").fit(X, y)
    assert clf.n_parameters_ < full.n_parameters_


@pytest.mark.parametrize("budget", [0.25, 0.5, 1.0])
def test_layer_budget_keeps_the_output_rank_and_gives_up_the_flow_before_rank(budget):
    """A 64-64-10 network (digits): the shrink rule once sent the output layer to 1 x 1
    (its dense layer is smaller than the flow's conditioner alone), a rank-1 logit map,
    and digits accuracy fell to 0.19. The output layer keeps rank K = 10, and a
    hidden layer drops its flow rather than rank: at 1.0 it keeps R = 16."""
    clf = FiDGPClassifier(layer_budget=budget)
    plan = clf._layer_plan(64, 10)
    (R0, C0), (R1, C1), (R2, C2) = plan["shapes"]
    assert (R2, C2) == (10, 11) and plan["flows"][2] is False
    for R, C, flow in [(R0, C0, plan["flows"][0]), (R1, C1, plan["flows"][1])]:
        assert R < C
        assert layer_parameter_count(64, 65, R, C, flow=flow) <= budget * 64 * 65
        # the largest rank that fits: below the requested 16, one more does not fit,
        # with or without the flow
        assert R == 16 or (layer_parameter_count(64, 65, R + 1, R + 2, flow=False)
                           > budget * 64 * 65)
    if budget == 1.0:
        assert R0 == 16 and plan["flows"][0] is False
    # the layers are built as planned: no flow where the plan dropped it
    net = build_network(plan, 0, "cpu", torch.float64)
    for i, layer in net.inducing_layers():
        assert layer.n_parameters() == layer_parameter_count(
            plan["widths"][i + 1], plan["widths"][i] + 1, *plan["shapes"][i],
            flow=plan["flows"][i])


@pytest.mark.parametrize("seed", [1, 2])
def test_layer_budget_output_rank_fits_every_class_of_iris(seed):
    """At ``layer_budget=1.0`` the output layer of a 3-class network kept rank K - 1 = 2
    (2 x 3) under the rule before, and a (16, 16) network on iris fitted two classes only
    (training accuracy 0.69 and 0.67 on these seeds); at rank K (3 x 4) it fits all
    three."""
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    clf = FiDGPClassifier(layer_budget=1.0, hidden_layer_sizes=(16, 16), device="cpu",
                          random_state=seed).fit(X, y)
    assert clf.model_plan_["shapes"][-1] == (3, 4)
    assert (clf.predict(X) == y).mean() > 0.9


def test_parameter_formula_counts_every_flow_step():
    X, y = subspace_blobs(60, 6)
    clf = FiDGPClassifier(hidden_layer_sizes=(8,), flow_length=2, max_iter=1,
                          random_state=0, device="cpu").fit(X, y)
    (R0, C0), (R1, C1) = clf.inducing_shapes_
    assert clf.n_parameters_ == (layer_parameter_count(8, 41, R0, C0, flow_length=2)
                                 + layer_parameter_count(2, 9, R1, C1, flow_length=2))


def test_combined_score_is_the_mean_of_principal_and_inducing():
    """The "combined" subspaces (an ablation) on one fitted network and the same key layer:
    the mean of the "principal" and the "inducing" scores, with both sets of ranks; the
    default ("principal", every linear layer) survives a pickle round trip."""
    import pickle

    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X, y = X[:400], y[:400]
    clf = FiDGPClassifier(hidden_layer_sizes=(16,), max_iter=5, random_state=0,
                          device="cpu").fit(X, y)
    Xt = clf._input(X)
    scores, ranks = {}, {}
    for method in ("combined", "principal", "inducing"):  # one weight draw for all three
        other = copy.deepcopy(clf)
        other.ood_layers = [0]
        other._fit_ood(other.model_, Xt, np.random.RandomState(0), 1, method=method)
        scores[method], ranks[method] = other.ood_score(X[:50]), other.ood_ranks_
    assert ranks["combined"] == ranks["principal"] + ranks["inducing"]
    assert clf.ood_method_ == "principal" and clf.ood_layers_ == [0, 1]
    assert len(clf.ood_ranks_) == 2 and clf.inducing_matrices_[1] is not None
    combined = scores["combined"]
    np.testing.assert_allclose(combined, 0.5 * (scores["principal"] + scores["inducing"]),
                               rtol=1e-5, atol=1e-7)
    assert not np.allclose(scores["principal"], scores["inducing"], rtol=1e-2)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(clf)).ood_score(X[:50]),
                               clf.ood_score(X[:50]), rtol=1e-10)
