"""The shared kernel checklist (STYLE.md section 3; spec 000, section 8 item 17).

Every check runs over every activation (closed forms and quadrature) and over both the NNGP
``Kbar`` and the NTK ``Thetabar`` (spec 000, sections 2.1-2.2).
"""

import pickle

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose
from scipy.optimize import approx_fprime

from skbnngp.kernels import (
    LeakyReLU,
    NNGPKernel,
    NTKKernel,
    QuadratureActivation,
    Sigmoid,
    Tanh,
    layer_variances,
    nngp_kernel,
    nngp_kernel_block,
)

CASES = {
    "relu-L1": dict(depth=1, weight_variance=2.0, bias_variance=0.0, activation="relu"),
    "relu-L3": dict(depth=3, weight_variance=1.6, bias_variance=0.1, activation="relu"),
    "leaky-L2": dict(depth=2, weight_variance=1.3, bias_variance=0.2, activation=LeakyReLU(0.2)),
    "erf-L2": dict(depth=2, weight_variance=1.5, bias_variance=0.05, activation="erf"),
    "tanh-L2": dict(depth=2, weight_variance=1.5, bias_variance=0.1, activation=Tanh(24)),
    "sigmoid-L1": dict(depth=1, weight_variance=3.0, bias_variance=0.1, activation=Sigmoid(24)),
    "callable-L2": dict(
        depth=2,
        weight_variance=1.2,
        bias_variance=0.1,
        activation=QuadratureActivation(torch.sin, n_quadrature=24),
    ),
}
WHICH = ["nngp", "ntk"]


def kernel(X1, X2=None, which="nngp", **params):
    if which == "nngp":
        return nngp_kernel(X1, X2, **params)
    return nngp_kernel(X1, X2, return_ntk=True, **params)[1]


def data(n, d=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=dtype)


def awkward(dtype=torch.float64):
    """Inputs with a zero row, exact duplicates and a collinear pair (x' = 2x)."""
    X = data(6, dtype=dtype)
    X[1] = 0.0
    X[3] = X[0]
    X[4] = 2.0 * X[2]
    return X


params_ids = pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
which_ids = pytest.mark.parametrize("which", WHICH)


@params_ids
@which_ids
def test_symmetric(case, which):
    X, Y = data(12, seed=1), data(9, seed=2)
    K = kernel(X, which=which, **CASES[case]).numpy()
    assert_allclose(K, K.T, rtol=0, atol=1e-13 * np.abs(K).max())
    KXY = kernel(X, Y, which=which, **CASES[case]).numpy()
    KYX = kernel(Y, X, which=which, **CASES[case]).numpy()
    assert_allclose(KXY, KYX.T, rtol=1e-12, atol=1e-14)


@params_ids
@which_ids
def test_psd(case, which):
    X = data(40, seed=3)
    K = kernel(X, which=which, **CASES[case])
    eig = torch.linalg.eigvalsh(K)
    assert eig.max() > 0
    assert eig.min() >= -1e-10 * eig.max()


@params_ids
@which_ids
def test_diag_equals_diagonal(case, which):
    X = awkward()
    params = CASES[case]
    full = kernel(X, which=which, **params)
    cross = kernel(X, X.clone(), which=which, **params)
    diag = nngp_kernel(X, diag=True, return_ntk=True, **params)[WHICH.index(which)]
    assert diag.shape == (X.shape[0],)
    # The symmetric kernel carries the exact diagonal recursion ...
    assert torch.equal(torch.diagonal(full), diag)
    # ... and the off-diagonal formula agrees with it where x = x'.
    assert_allclose(torch.diagonal(cross).numpy(), diag.numpy(), rtol=1e-7, atol=1e-12)
    dup = torch.tensor([0, 3]), torch.tensor([3, 0])
    assert_allclose(full[dup].numpy(), diag[[0, 0]].numpy(), rtol=1e-7)


@params_ids
@which_ids
def test_row_blocks_equal_whole(case, which):
    X = data(23, seed=4)
    params = CASES[case]
    w = torch.tensor(params["weight_variance"], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(params["bias_variance"], dtype=torch.float64, requires_grad=True)
    hyper = dict(weight_variance=w, bias_variance=b, activation=params["activation"])
    R = data(23, d=23, seed=5)
    whole = kernel(X, which=which, depth=params["depth"], **hyper)
    g_whole = torch.autograd.grad((whole * R).sum(), (w, b))

    var = layer_variances(X, depth=params["depth"], **hyper)
    rows = []
    for start, stop in [(0, 7), (7, 8), (8, 23)]:
        out = nngp_kernel_block(
            X[start:stop],
            X,
            var[..., start:stop],
            var,
            return_ntk=which == "ntk",
            diag_offset=start,
            **hyper,
        )
        rows.append(out[1] if which == "ntk" else out)
    blocked = torch.cat(rows)
    g_blocked = torch.autograd.grad((blocked * R).sum(), (w, b))
    assert_allclose(blocked.detach().numpy(), whole.detach().numpy(), rtol=1e-12, atol=1e-14)
    assert_allclose(torch.stack(g_blocked).numpy(), torch.stack(g_whole).numpy(), rtol=1e-10)


@params_ids
@which_ids
def test_float32_close_to_float64(case, which):
    X = data(15, seed=6)
    K64 = kernel(X, which=which, **CASES[case])
    K32 = kernel(X.float(), which=which, **CASES[case])
    assert K32.dtype == torch.float32
    err = (K32.double() - K64).abs().max() / K64.abs().max()
    assert err < 2e-5


@params_ids
@which_ids
@pytest.mark.parametrize("bias_variance", [0.0, 0.1])
def test_finite_at_duplicates_and_zero(case, which, bias_variance):
    params = dict(CASES[case], bias_variance=bias_variance)
    X = awkward().requires_grad_(True)
    Y = awkward()[[3, 1, 0, 5]]  # duplicates of X rows and the zero row, in a cross kernel
    w = torch.tensor(params.pop("weight_variance"), dtype=torch.float64, requires_grad=True)
    b = torch.tensor(params.pop("bias_variance"), dtype=torch.float64, requires_grad=True)
    for other in (None, Y):
        K = kernel(X, other, which=which, weight_variance=w, bias_variance=b, **params)
        assert torch.isfinite(K).all()
        R = data(K.shape[0], d=K.shape[1], seed=7)
        grads = torch.autograd.grad((K * R).sum(), (w, b, X))
        for g in grads:
            assert torch.isfinite(g).all()
        assert grads[0].abs() > 0


@params_ids
@which_ids
def test_sklearn_adapter_equals_torch(case, which):
    X, Y = data(10, seed=8), data(7, seed=9)
    params = CASES[case]
    adapter = (NNGPKernel if which == "nngp" else NTKKernel)(**params)
    assert_allclose(adapter(X.numpy()), kernel(X, which=which, **params).numpy(), rtol=1e-12)
    assert_allclose(
        adapter(X.numpy(), Y.numpy()), kernel(X, Y, which=which, **params).numpy(), rtol=1e-12
    )
    assert_allclose(adapter.diag(X.numpy()), np.diag(adapter(X.numpy())), rtol=1e-14)


@params_ids
@which_ids
def test_sklearn_gradient_matches_finite_differences(case, which):
    X = awkward().numpy()
    params = CASES[case]
    adapter = (NNGPKernel if which == "nngp" else NTKKernel)(**dict(params, bias_variance=0.3))
    K, K_gradient = adapter(X, eval_gradient=True)
    assert K_gradient.shape == (6, 6, 2)

    def flat(theta):
        return adapter.clone_with_theta(theta)(X).ravel()

    numeric = approx_fprime(adapter.theta, flat, 1e-7).reshape(6, 6, 2)
    assert_allclose(K_gradient, numeric, rtol=1e-5, atol=1e-6 * np.abs(K_gradient).max())


@params_ids
@which_ids
def test_pickle_round_trip(case, which):
    X = data(8, seed=10)
    params = CASES[case]
    adapter = (NNGPKernel if which == "nngp" else NTKKernel)(**params)
    again = pickle.loads(pickle.dumps(adapter))
    assert again == adapter
    assert_allclose(again(X.numpy()), adapter(X.numpy()), rtol=0, atol=0)
    activation = pickle.loads(pickle.dumps(params["activation"]))
    expected = kernel(X, which=which, **params)
    assert torch.equal(kernel(X, which=which, **dict(params, activation=activation)), expected)


@params_ids
@which_ids
def test_gradcheck_hyperparameters(case, which):
    params = dict(CASES[case])
    depth, activation = params["depth"], params["activation"]
    X, Y = awkward(), data(4, seed=11)
    w = torch.tensor(params["weight_variance"], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(0.25, dtype=torch.float64, requires_grad=True)

    def fn(w, b):
        hyper = dict(depth=depth, weight_variance=w, bias_variance=b, activation=activation)
        return kernel(X, which=which, **hyper), kernel(X, Y, which=which, **hyper)

    assert torch.autograd.gradcheck(fn, (w, b), atol=1e-7, rtol=1e-6, fast_mode=True)
