"""DBKRegressor's input-dependent noise (``noise_variance``, issue 51)."""

import pickle

import numpy as np
import pytest
from scipy import stats

from skbnngp import DBKRegressor

SMALL = {"n_basis": 16, "hidden_layer_sizes": (32,), "max_iter": 400, "device": "cpu", "random_state": 0}
#: The default network: a smaller one under-fits the mean, whose error then hides the noise.
DEFAULT = {"device": "cpu", "random_state": 0}


def growing_noise(n, seed):
    """1-d rows with noise sd growing linearly from 0.05 to 0.8 over [-3, 3]."""
    rng = np.random.RandomState(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    sd = 0.05 + 0.75 * (X[:, 0] + 3) / 6
    return X, np.sin(2 * X[:, 0]) + sd * rng.standard_normal(n)


@pytest.fixture(scope="module")
def het_fit():
    X, y = growing_noise(300, 0)
    return DBKRegressor(noise_variance="heteroscedastic", **DEFAULT).fit(X, y)


def test_std_grows_with_the_noise(het_fit):
    assert het_fit.noise_model_ == "heteroscedastic"
    grid = np.linspace(-2.5, 2.5, 21)[:, None]
    _, std = het_fit.predict(grid, return_std=True)
    # the noise sd grows 0.05 + 0.125 (x + 3): x 6.7 from the first to the last grid point
    assert stats.spearmanr(grid[:, 0], std)[0] > 0.9
    assert std[-1] > 3 * std[0]
    _, latent = het_fit.set_params(include_noise=False).predict(grid, return_std=True)
    het_fit.set_params(include_noise=True)
    assert np.all(latent < std)


def test_coverage_in_both_halves(het_fit):
    X, y = growing_noise(4000, 1)
    lo, hi = het_fit.predict_interval(X, 0.95)
    inside = (y >= lo) & (y <= hi)
    # ~2000 rows per half: the binomial sd of a 0.95 coverage is 0.005; the tolerance
    # leaves room for the model's error, not for one half borrowing the other's width
    for half in (X[:, 0] < 0, X[:, 0] >= 0):
        assert 0.90 <= inside[half].mean() <= 0.99


def test_predict_dist_scale_is_return_std(het_fit):
    X, _ = growing_noise(50, 2)
    mean, std = het_fit.predict(X, return_std=True)
    dist = het_fit.predict_dist(X)
    np.testing.assert_allclose(dist.mean(), mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dist.std(), std, rtol=1e-8)


def test_pickle_keeps_the_noise_head(het_fit):
    X, _ = growing_noise(20, 3)
    clone = pickle.loads(pickle.dumps(het_fit))
    np.testing.assert_allclose(clone.predict(X, return_std=True)[1],
                               het_fit.predict(X, return_std=True)[1], rtol=1e-10)


def test_auto_keeps_one_noise_level_on_homoscedastic_data():
    rng = np.random.RandomState(0)
    X = rng.uniform(-3, 3, size=(300, 1))
    y = np.sin(3 * X[:, 0]) + 0.3 * X[:, 0] + 0.1 * rng.standard_normal(300)
    reg = DBKRegressor(**SMALL).fit(X, y)
    assert reg.noise_model_ == "homoscedastic"
    mean, se = reg.noise_gain_
    assert se > 0 and mean < 2 * se
    homo = DBKRegressor(noise_variance="homoscedastic", **SMALL).fit(X, y)
    assert homo.noise_gain_ is None
    np.testing.assert_allclose(reg.predict(X, return_std=True)[1],
                               homo.predict(X, return_std=True)[1])


def test_sample_weight_is_repetition():
    X, y = growing_noise(80, 4)
    kw = dict(SMALL, max_iter=50, noise_variance="heteroscedastic")
    weighted = DBKRegressor(**kw).fit(X, y, sample_weight=np.full(80, 2.0))
    repeated = DBKRegressor(**kw).fit(np.vstack([X, X]), np.concatenate([y, y]))
    np.testing.assert_allclose(weighted.predict(X, return_std=True)[1],
                               repeated.predict(X, return_std=True)[1], rtol=1e-6)


@pytest.mark.parametrize("bad", ["hetero", "evidence", 0.1])
def test_bad_noise_variance_raises(bad):
    X, y = growing_noise(20, 5)
    with pytest.raises((ValueError, TypeError), match="noise_variance"):
        DBKRegressor(noise_variance=bad, **SMALL).fit(X, y)


def test_heteroscedastic_svi_raises():
    X, y = growing_noise(20, 5)
    with pytest.raises(ValueError, match="noise_variance='heteroscedastic'"):
        DBKRegressor(noise_variance="heteroscedastic", inference="svi", **SMALL).fit(X, y)


@pytest.mark.parametrize("unseen", [-0.05, 0.05])
def test_auto_needs_the_gain_on_the_validation_rows(monkeypatch, unseen):
    """The cross-fitted gain is large on the rows the network trained on; "auto" keeps the
    noise head only if the mean gain on the validation rows (the last rows of the
    conditioning set) is positive as well."""
    import torch

    from skbnngp._backend import _dbk as dbk_backend

    n_trained = {}
    original = DBKRegressor._fit_noise

    def spy(self, *args):
        n_trained["n"] = args[-1]
        return original(self, *args)

    def fake_gain(X, Phi, Y, *args, **kwargs):
        gain = torch.full((Y.shape[0],), 0.5, dtype=Y.dtype)
        gain += 0.01 * torch.linspace(-1, 1, Y.shape[0], dtype=Y.dtype)  # a nonzero se
        gain[n_trained["n"]:] = unseen
        return gain

    monkeypatch.setattr(DBKRegressor, "_fit_noise", spy)
    monkeypatch.setattr(dbk_backend, "noise_gain", fake_gain)
    X, y = growing_noise(200, 6)
    reg = DBKRegressor(**dict(SMALL, max_iter=50)).fit(X, y)
    assert 0 < n_trained["n"] < 200
    # over all rows the gain pays either way: only the validation rows decide
    mean, se = reg.noise_gain_
    assert mean > 2 * se + 0.01
    assert reg.noise_model_ == ("heteroscedastic" if unseen > 0 else "homoscedastic")
