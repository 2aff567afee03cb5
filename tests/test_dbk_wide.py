"""DBK on wide data: a fixed whitened projection of the inputs, its size chosen on the
validation rows (issue 51)."""

import pickle

import numpy as np
import pytest

from skbnngp import DBKRegressor
from skbnngp._backend._wide import input_projection, is_wide

from .conftest import FAST


def _wide(n, p=60, k=4, seed=0):
    """``n`` rows of ``p`` features driven by ``k`` latent factors (strongly correlated)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, k))
    X = Z @ rng.normal(size=(k, p)) + 0.1 * rng.normal(size=(n, p))
    return X, np.sin(Z[:, 0]) + 0.5 * Z[:, 1] + 0.1 * rng.normal(size=n)


def test_the_projection_whitens_and_fills_half_the_unit_interval():
    X, _ = _wide(200)
    W, b = input_projection(X, 10)
    P = X @ W.T + b
    assert W.shape == (10, 60)
    np.testing.assert_allclose(P.min(axis=0), -0.5, atol=1e-12)
    np.testing.assert_allclose(P.max(axis=0), 0.5, atol=1e-12)
    C = np.corrcoef(P, rowvar=False)  # whitened components are uncorrelated
    np.testing.assert_allclose(C, np.eye(10), atol=1e-8)
    # weights: integer weights equal repeated rows
    w = np.r_[np.ones(100), 2 * np.ones(100)]
    Wa, ba = input_projection(X, 5, sample_weight=w)
    Wb, bb = input_projection(np.r_[X, X[100:]], 5)
    np.testing.assert_allclose(np.abs(X @ Wa.T + ba), np.abs(X @ Wb.T + bb), atol=1e-8)


def test_rank_deficient_inputs_keep_only_the_components_they_have():
    X, _ = _wide(100, k=3)
    X = X[:, :3] @ np.ones((3, 40))  # rank 1
    W, _ = input_projection(X, 10)
    assert W.shape[0] == 1


def test_wide_rule():
    assert is_wide(100, 60, 10, 1 / 3)
    assert not is_wide(100, 30, 10, 1 / 3)  # fewer than a third of the rows
    assert not is_wide(20, 8, 10, 1 / 3)  # no more features than components


def test_dbk_projects_wide_inputs_and_keeps_narrow_ones():
    from unittest import mock

    from skbnngp._backend._wide import projected_network

    X, y = _wide(120)
    built = []

    def spy(W, b, body):
        built.append((W.copy(), b.copy()))
        return projected_network(W, b, body)

    with mock.patch("skbnngp._dbk.wide.projected_network", spy):
        reg = DBKRegressor(**dict(FAST["DBKRegressor"], random_state=0)).fit(X, y)
    assert reg.input_components_ in (5, 10, 20)
    first = reg.network_[0]
    assert not first.weight.requires_grad and first.in_features == 60
    # training (with weight decay) leaves the projection as it was built
    W, b = next((W, b) for W, b in built if W.shape[0] == reg.input_components_)
    np.testing.assert_array_equal(first.weight.detach().numpy(), W)
    np.testing.assert_array_equal(first.bias.detach().numpy(), b)
    mean, std = reg.predict(X[:10], return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_allclose(again.predict(X[:10]), mean, rtol=1e-10, atol=1e-12)
    narrow = DBKRegressor(**dict(FAST["DBKRegressor"], random_state=0)).fit(X[:, :5], y)
    assert narrow.input_components_ is None


@pytest.mark.parametrize("state", [0, "instance"])
def test_the_candidates_repeat_with_the_random_state(state):
    X, y = _wide(120)

    def fit():
        rs = np.random.RandomState(0) if state == "instance" else state
        return DBKRegressor(**dict(FAST["DBKRegressor"], random_state=rs)).fit(X, y)

    a, b = fit(), fit()
    assert a.input_components_ == b.input_components_
    np.testing.assert_allclose(a.predict(X[:5]), b.predict(X[:5]), rtol=1e-10, atol=1e-12)
