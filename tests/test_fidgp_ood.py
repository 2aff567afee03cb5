"""FiD-GP's OoD score is sound at the defaults (issue 20, item 2): the subspace of each key
layer is rank-deficient (Lemma 1 needs k < C), the residual is normalised by the projector
output's norm, and in-distribution rows have a clearly smaller normalised residual than far
away rows."""

import numpy as np
import pytest
import torch

from skbnngp import FiDGPClassifier


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    centres = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.5]])
    y = np.repeat(np.arange(3), 60)
    X = centres[y] + 0.5 * rng.standard_normal((180, 2))
    est = FiDGPClassifier(hidden_layer_sizes=(16, 16), max_iter=60, batch_size=32,
                          learning_rate_init=1e-2, ood_projector_steps=200, device="cpu",
                          dtype="float64", random_state=0).fit(X, y)
    return est, X, rng


def test_default_rank_is_below_the_width(fitted):
    est = fitted[0]
    assert est.get_params()["ood_rank"] == "auto"
    assert len(est.ood_ranks_) == len(est.ood_layers_)
    for i, k, U, P in zip(est.ood_layers_, est.ood_ranks_, est.inducing_matrices_,
                          est._ood["projections"]):
        C = U.shape[1]
        assert k == max(1, C // 4) and k < C
        P = P.double()
        # an orthogonal projector of rank k onto the top right singular directions of U
        torch.testing.assert_close(P @ P, P, atol=1e-10, rtol=0)
        assert abs(float(torch.trace(P)) - k) < 1e-8
        Vh = np.linalg.svd(U)[2][:k]
        np.testing.assert_allclose(P.numpy() @ Vh.T, Vh.T, atol=1e-8)


def test_normalised_residual_in_distribution_below_far_away(fitted):
    est, X, rng = fitted
    s_in = est.ood_score(X)
    assert np.all((s_in >= 0) & (s_in <= 1 + 1e-9))
    far = 8.0 * rng.standard_normal((180, 2)) + np.array([12.0, -12.0])
    s_out = est.ood_score(far)
    assert np.all((s_out >= 0) & (s_out <= 1 + 1e-9))
    assert np.median(s_out) > 3 * np.median(s_in)
    # scale-free: the score of a row does not grow without bound as the row moves away
    assert np.median(est.ood_score(10 * far)) <= 1 + 1e-9


@pytest.mark.parametrize("rank,want", [(1, 1), (3, 3), (1000, None)])
def test_integer_rank_is_clipped_below_the_width(rank, want):
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((40, 3)), np.repeat([0, 1], 20)
    est = FiDGPClassifier(hidden_layer_sizes=(8,), max_iter=2, ood_projector_steps=2,
                          ood_rank=rank, device="cpu", random_state=0).fit(X, y)
    for k, U in zip(est.ood_ranks_, est.inducing_matrices_):
        R, C = U.shape
        assert k == (want if want is not None else min(R, C - 1))
        assert k < C


def test_rank_none_is_the_earlier_unnormalised_score():
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((40, 3)), np.repeat([0, 1], 20)
    est = FiDGPClassifier(hidden_layer_sizes=(8,), max_iter=2, ood_projector_steps=2,
                          ood_rank=None, device="cpu", random_state=0).fit(X, y)
    assert est.ood_ranks_ == [None] * len(est.ood_layers_)
    assert np.all(np.isfinite(est.ood_score(X)))
