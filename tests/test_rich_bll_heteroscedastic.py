"""Rich-BLL's input-dependent noise: ``noise_variance="heteroscedastic"`` and its choice by
``"auto"`` (issue 51)."""

import numpy as np
import pytest
import torch

import skbnngp._rich_bll as rich_bll
from skbnngp import RichBLLRegressor
from skbnngp._backend._log_noise import fit_log_noise

from .conftest import NO_HELD_OUT

pytestmark = [pytest.mark.filterwarnings("ignore:.*reached max_iter"), NO_HELD_OUT]

SETTINGS = {"hidden_layer_sizes": (32,), "max_iter": 400, "n_iter_no_change": 40,
            "device": "cpu"}


def _heteroscedastic(n, seed):
    """``sin(2x)`` with a noise sd growing linearly from 0.05 to 0.65 over ``[-3, 3]``."""
    rng = np.random.RandomState(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    sd = 0.05 + 0.6 * (X[:, 0] + 3) / 6
    return X, np.sin(2 * X[:, 0]) + sd * rng.standard_normal(n)


def _homoscedastic(n, seed):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(n)


def test_log_noise_regression_recovers_a_log_linear_variance():
    # r^2 = exp(0.5 + x) chi2_1: the bias-corrected regression recovers g(x) = 0.5 + x
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=20000)
    r2 = np.exp(0.5 + x) * rng.standard_normal(x.size) ** 2
    model = fit_log_noise(torch.as_tensor(x[:, None]), torch.as_tensor(r2))
    g = model(torch.tensor([[-0.5], [0.0], [0.5]], dtype=torch.float64)).numpy()
    # the estimate's sd is about sqrt(pi^2 / 2 / n) = 0.016 at the mean, 0.03 on the slope
    np.testing.assert_allclose(g, [0.0, 0.5, 1.0], atol=0.08)


@pytest.fixture(scope="module")
def hetero_fit():
    X, y = _heteroscedastic(400, 0)
    return RichBLLRegressor(random_state=0, **SETTINGS).fit(X, y)


def test_auto_fits_a_noise_that_grows_with_x(hetero_fit):
    reg = hetero_fit
    assert reg.noise_model_ == "heteroscedastic"
    mean, se = reg.noise_gain_
    assert mean > 2 * se
    grid = np.linspace(-2.8, 2.8, 15)[:, None]
    std = reg.predict(grid, return_std=True)[1]
    # the true sd grows 8-fold over the grid; the predictive std must grow with it
    assert np.corrcoef(grid[:, 0], std)[0, 1] > 0.9
    assert std[-1] > 2.5 * std[0]


def test_coverage_holds_in_the_low_and_high_noise_halves(hetero_fit):
    X, y = _heteroscedastic(4000, 1)
    lo, hi = hetero_fit.predict_interval(X, 0.95)
    inside = (y >= lo) & (y <= hi)
    left = X[:, 0] < 0
    # about 2,000 test rows a half (binomial sd 0.005) and 80 held-out rows calibrating
    # the level: 0.05 allows for the calibration's sampling error
    assert abs(inside[left].mean() - 0.95) < 0.05
    assert abs(inside[~left].mean() - 0.95) < 0.05


def test_predictive_scale_is_return_std(hetero_fit):
    X = np.linspace(-3, 3, 9)[:, None]
    _, std = hetero_fit.predict(X, return_std=True)
    np.testing.assert_allclose(hetero_fit.predict_dist(X).std(), std, rtol=1e-10)
    _, cov = hetero_fit.predict(X, return_cov=True)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-10)
    # the noise is per row: without it the std shrinks by different amounts
    latent = hetero_fit.set_params(include_noise=False).predict(X, return_std=True)[1]
    hetero_fit.set_params(include_noise=True)
    gap = std ** 2 - latent ** 2
    assert gap[-1] > 4 * gap[0] > 0


def test_auto_keeps_one_noise_on_homoscedastic_data(monkeypatch):
    X, y = _homoscedastic(300, 2)
    reg = RichBLLRegressor(random_state=0, **SETTINGS).fit(X, y)
    assert reg.noise_model_ == "homoscedastic"
    assert reg.noise_gain_ is not None
    # with the comparison switched off: the homoscedastic fit, identical
    monkeypatch.setattr(rich_bll, "NOISE_MIN_ROWS", 10**9)
    plain = RichBLLRegressor(random_state=0, **SETTINGS).fit(X, y)
    assert plain.noise_gain_ is None
    Xq = np.linspace(-3, 3, 7)[:, None]
    for a, b in zip(reg.predict(Xq, return_std=True), plain.predict(Xq, return_std=True)):
        np.testing.assert_array_equal(a, b)


def test_heteroscedastic_sample_weight_equals_repeated_rows():
    X, y = _heteroscedastic(120, 3)
    w = np.ones(120)
    w[::3] = 2
    settings = dict(SETTINGS, max_iter=30, noise_variance="heteroscedastic", random_state=0)
    a = RichBLLRegressor(**settings).fit(X, y, sample_weight=w)
    b = RichBLLRegressor(**settings).fit(np.repeat(X, w.astype(int), axis=0),
                                         np.repeat(y, w.astype(int)))
    assert a.noise_model_ == b.noise_model_ == "heteroscedastic"
    Xq = np.linspace(-3, 3, 7)[:, None]
    for u, v in zip(a.predict(Xq, return_std=True), b.predict(Xq, return_std=True)):
        np.testing.assert_allclose(u, v, rtol=1e-7, atol=1e-9)


def test_heteroscedastic_without_held_out_rows():
    X, y = _heteroscedastic(300, 4)
    reg = RichBLLRegressor(noise_variance="heteroscedastic", early_stopping=False,
                           random_state=0, **dict(SETTINGS, max_iter=100)).fit(X, y)
    assert reg.noise_model_ == "heteroscedastic" and reg.noise_gain_ is None
    assert reg.calibration_ is None
    Xq = np.array([[-2.5], [2.5]])
    std = reg.predict(Xq, return_std=True)[1]
    latent = reg.set_params(include_noise=False).predict(Xq, return_std=True)[1]
    noise = std ** 2 - latent ** 2
    # the true noise variance is 36 times larger at 2.5 than at -2.5; one noise level would
    # give a ratio near 1. The network's misfit adds to the low noise, so the fitted ratio
    # varies widely with random_state; the bound of 2 sits below its range over seeds
    assert noise[1] > 2 * noise[0]


@pytest.mark.parametrize("noise_variance", ["auto", "heteroscedastic"])
def test_the_ntk_posterior_runs_the_noise_test_on_all_parameters_features(noise_variance):
    """``uncertainty="ntk"``'s factor is over every parameter, so the held-out comparison of
    the two noise models must read every parameter's features: with 50 or more held-out rows
    it multiplied the last layer's (21) by the 101 x 101 factor (a torch shape error). The
    heteroscedastic data set pays for its noise model under the exact NTK posterior too."""
    X, y = _heteroscedastic(400, 0)
    reg = RichBLLRegressor(uncertainty="ntk", noise_variance=noise_variance, random_state=0,
                           **dict(SETTINGS, hidden_layer_sizes=(20,))).fit(X, y)
    assert reg.variance_factor_.shape == (61, 61)  # 2 x 20 + 20 + 1 parameters
    mean_gain, se = reg.noise_gain_
    assert np.isfinite(mean_gain) and se > 0
    assert reg.noise_model_ == "heteroscedastic"
    lo, hi = reg.predict_interval(X[:50], 0.9)
    assert np.all(np.isfinite(lo)) and np.all(hi > lo)
