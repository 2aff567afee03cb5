"""The scikit-learn adapters inside GaussianProcessRegressor and kernel algebra."""

import pickle

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.optimize import approx_fprime
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, WhiteKernel

from skbnngp.kernels import LeakyReLU, NNGPKernel, NTKKernel


def regression_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.normal(size=n)
    return X, y


def test_gpr_optimises_log_marginal_likelihood():
    X, y = regression_data()
    kernel = NNGPKernel(depth=2, weight_variance=1.0, bias_variance=0.5) + WhiteKernel(0.5)
    initial = GaussianProcessRegressor(kernel, optimizer=None).fit(X, y)
    gpr = GaussianProcessRegressor(kernel, random_state=0).fit(X, y)
    assert np.isfinite(gpr.log_marginal_likelihood_value_)
    assert gpr.log_marginal_likelihood_value_ >= initial.log_marginal_likelihood_value_ + 1.0
    assert_allclose(
        gpr.log_marginal_likelihood(gpr.kernel_.theta), gpr.log_marginal_likelihood_value_
    )
    # the hyperparameters moved and the fit explains the data better than the mean
    assert not np.allclose(gpr.kernel_.theta, kernel.theta)
    assert gpr.score(X, y) > 0.9


@pytest.mark.parametrize("kernel_cls", [NNGPKernel, NTKKernel])
def test_gpr_log_marginal_likelihood_gradient(kernel_cls):
    """sklearn's LML gradient through the adapter matches finite differences (test_gpr style)."""
    X, y = regression_data(25)
    kernel = ConstantKernel(1.3) * kernel_cls(depth=3, activation="erf") + WhiteKernel(0.1)
    gpr = GaussianProcessRegressor(kernel, optimizer=None).fit(X, y)
    theta = gpr.kernel_.theta
    lml, grad = gpr.log_marginal_likelihood(theta, eval_gradient=True)
    numeric = approx_fprime(theta, lambda t: gpr.log_marginal_likelihood(t), 1e-8)
    assert_allclose(grad, numeric, rtol=1e-4, atol=1e-5)


def test_kernel_algebra():
    X, _ = regression_data(10)
    k = NNGPKernel(depth=2)
    assert_allclose((2.0 * k)(X), 2.0 * k(X))
    assert_allclose((k + WhiteKernel(0.3))(X), k(X) + 0.3 * np.eye(10))
    assert_allclose((k * k)(X), k(X) ** 2)
    K, grad = (ConstantKernel(2.0) * k)(X, eval_gradient=True)
    assert grad.shape == (10, 10, 3)
    assert_allclose((k + WhiteKernel(0.3)).diag(X), np.diag(k(X)) + 0.3)


def test_hyperparameters_theta_and_bounds():
    k = NNGPKernel(depth=2, weight_variance=3.0, bias_variance=0.2)
    assert [h.name for h in k.hyperparameters] == ["bias_variance", "weight_variance"]
    assert_allclose(k.theta, np.log([0.2, 3.0]))
    assert_allclose(k.bounds, np.log([[1e-6, 1e3], [1e-3, 1e3]]))
    k2 = k.clone_with_theta(np.log([0.5, 1.5]))
    assert (k2.bias_variance, k2.weight_variance) == pytest.approx((0.5, 1.5))
    assert not k.is_stationary()
    assert k.requires_vector_input

    fixed = NNGPKernel(bias_variance_bounds="fixed")
    assert fixed.n_dims == 1 and fixed.hyperparameter_bias_variance.fixed
    X, _ = regression_data(5)
    _, grad = fixed(X, eval_gradient=True)
    _, full = NNGPKernel()(X, eval_gradient=True)
    assert_allclose(grad[..., 0], full[..., 1])  # only d/dlog(weight_variance) remains
    both = NNGPKernel(weight_variance_bounds="fixed", bias_variance_bounds="fixed")
    K, grad = both(X, eval_gradient=True)
    assert grad.shape == (5, 5, 0)


def test_gradient_only_without_Y():
    X, _ = regression_data(5)
    with pytest.raises(ValueError, match="Y is None"):
        NNGPKernel()(X, X, eval_gradient=True)


def test_clone_pickle_and_repr():
    k = NTKKernel(depth=3, weight_variance=1.5, activation=LeakyReLU(0.1))
    for other in (clone(k), pickle.loads(pickle.dumps(k))):
        assert other == k and other is not k
        X, _ = regression_data(6)
        assert_allclose(other(X), k(X), rtol=0, atol=0)
    assert k != NTKKernel(depth=3, weight_variance=1.5, activation=LeakyReLU(0.2))
    assert k != NNGPKernel(depth=3, weight_variance=1.5, activation=LeakyReLU(0.1))
    assert repr(NNGPKernel(depth=2)) == (
        "NNGPKernel(depth=2, weight_variance=2, bias_variance=0.1, activation='relu')"
    )
    params = k.get_params()
    assert params["depth"] == 3 and params["activation"] == LeakyReLU(0.1)


def test_adapter_inputs_not_mutated_and_float64_output():
    X, _ = regression_data(7)
    X32 = X.astype(np.float32)
    before = X32.copy()
    K = NNGPKernel()(X32)
    assert K.dtype == np.float64
    assert np.array_equal(X32, before)
    assert_allclose(K, NNGPKernel()(X32.astype(np.float64)))
