"""Spec 001 §7 T1-T11: single-hidden-layer activation kernels, their mixture and the sklearn
adapter (the formula each test checks is cited in its docstring)."""

import math
import pickle

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose
from scipy.optimize import approx_fprime
from scipy.special import erf
from sklearn.base import clone

from skbnngp.kernels import (PAPER_ACTIVATIONS, MixedActivationKernel, Tanh, activation_kernel,
                             mixed_activation_kernel, preactivation_covariances)

F64 = torch.float64
X_GOLD = torch.tensor([[0.3, -0.2, 0.5], [-0.1, 0.4, 0.2]], dtype=F64)
THETA2 = dict(sigma_b2=0.5, sigma_v2=2.0, sigma_u2=1.5, sigma_a2=0.3, leaky_slope=0.2,
              weights=[0.7, 0.3])


def data(n, d=3, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, d, generator=g, dtype=dtype) - 0.5


def awkward():
    X = data(7, seed=1)
    X[2] = 0.0
    X[4] = X[0]  # duplicate row: rho = 1, G = 0 off the diagonal
    X[5] = -X[1]  # antipodal (with sigma_a2 small, rho near -1)
    return X


# ------------------------------------------------------------------------------ values
def test_golden_values():
    """T5: golden values at the spec's x, x' (theta order s_b2, s_v2, s_u2, s_a2, alpha, w)."""
    k11, k22, k12 = preactivation_covariances(X_GOLD)
    assert k12[0, 1] == pytest.approx(0.99, abs=1e-15)
    assert math.sqrt(k11[0, 0]) == pytest.approx(1.17473401, abs=1e-8)
    assert math.sqrt(k22[0, 1]) == pytest.approx(1.1, abs=1e-12)
    expected = {"tanh": 0.3429468, "sigmoid": 0.29149489, "relu": 0.51719647}
    for act, value in expected.items():
        assert activation_kernel(X_GOLD, activation=act)[0, 1] == pytest.approx(value, abs=1e-7)
    leaky = activation_kernel(X_GOLD, activation="leaky_relu", leaky_slope=0.5)
    assert leaky[0, 1] == pytest.approx(0.62429912, abs=1e-8)
    K = mixed_activation_kernel(X_GOLD, leaky_slope=0.5, weights=[0.5, 0.5])
    assert K[0, 1] == pytest.approx(1.48362296, abs=1e-8)
    assert K[0, 0] == pytest.approx(1.67114798, abs=1e-8)
    K = mixed_activation_kernel(X_GOLD, **THETA2)
    assert K[0, 1] == pytest.approx(0.79603267, abs=1e-8)
    assert K[0, 0] == pytest.approx(1.32010779, abs=1e-8)


@pytest.mark.parametrize("act", PAPER_ACTIVATIONS)
def test_symmetric(act):
    """T1: K(X, X) = K(X, X)^T and K(X1, X2) = K(X2, X1)^T."""
    X, Y = data(15, seed=2), data(9, seed=3)
    K = activation_kernel(X, activation=act, sigma_a2=0.7, sigma_u2=1.3, leaky_slope=0.3)
    assert_allclose(K, K.T, rtol=1e-14, atol=0)
    KXY = activation_kernel(X, Y, activation=act, leaky_slope=0.3)
    KYX = activation_kernel(Y, X, activation=act, leaky_slope=0.3)
    assert_allclose(KXY, KYX.T, rtol=1e-14, atol=0)


@pytest.mark.parametrize("d", [1, 3, 20])
def test_mixture_psd(d):
    """T2 / §3.1: min eigenvalue >= -1e-10 trace at random interior theta; K + s I factors."""
    rng = np.random.default_rng(d)
    X = data(200, d=d, seed=d)
    for acts in [("tanh", "leaky_relu"), PAPER_ACTIVATIONS]:
        theta = dict(sigma_b2=rng.uniform(0.1, 2), sigma_v2=rng.uniform(0.1, 2),
                     sigma_u2=rng.uniform(0.1, 3), sigma_a2=rng.uniform(0.1, 3),
                     leaky_slope=rng.uniform(0.05, 0.95))
        w = rng.dirichlet(np.ones(len(acts)))
        K = mixed_activation_kernel(X, weights=w, activations=acts, **theta)
        eig = torch.linalg.eigvalsh(K)
        assert eig.min() >= -1e-10 * torch.trace(K)
        torch.linalg.cholesky(K + 1e-3 * torch.eye(200, dtype=F64))


def test_diagonal_closed_forms():
    """T3: diag forms A(x,x), s^2/2, s^2(1+a^2)/2, 1/4 + arcsin(..)/(2 pi) equal the
    diagonal of the full matrix (also at duplicate rows)."""
    X = awkward()
    s2 = 0.4 + 1.7 * (X * X).sum(1).numpy()
    formulas = {
        "tanh": 2 / np.pi * np.arcsin((np.pi / 2) * s2 / (1 + (np.pi / 2) * s2)),
        "relu": s2 / 2,
        "leaky_relu": s2 * (1 + 0.3**2) / 2,
        "sigmoid": 0.25 + np.arcsin((np.pi / 8) * s2 / (1 + (np.pi / 8) * s2)) / (2 * np.pi),
    }
    for act, expected in formulas.items():
        kw = dict(activation=act, sigma_a2=0.4, sigma_u2=1.7, leaky_slope=0.3)
        assert_allclose(activation_kernel(X, diag=True, **kw), expected, rtol=1e-13)
        assert_allclose(activation_kernel(X, **kw).diagonal(), expected, rtol=1e-13)
        assert_allclose(activation_kernel(X, X.clone(), **kw)[0, 4], expected[0], rtol=1e-12)
    K = mixed_activation_kernel(X, **THETA2)
    assert_allclose(mixed_activation_kernel(X, diag=True, **THETA2), K.diagonal(), rtol=1e-13)


def test_special_values_and_identities():
    """T4: ReLU at rho = 0 and -1; Leaky(0) = ReLU, Leaky(1) = C; B_{1/a} = B_a / a^2;
    K_sig(sa2, su2) = 1/4 + A(sa2/4, su2/4)/4; the G identity of §1.2."""
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]], dtype=F64)
    relu = activation_kernel(x, activation="relu", sigma_a2=1e-300, sigma_u2=1.0)
    assert relu[0, 1] == pytest.approx(1.0 * 2.0 / (2 * np.pi), rel=1e-12)  # rho = 0
    assert abs(relu[0, 2]) < 1e-15  # rho = -1
    X, Y = data(6, seed=4), data(5, seed=5)
    kw = dict(sigma_a2=0.8, sigma_u2=1.4)
    assert_allclose(activation_kernel(X, Y, activation="leaky_relu", leaky_slope=0.0, **kw),
                    activation_kernel(X, Y, activation="relu", **kw), rtol=1e-14)
    _, _, C = preactivation_covariances(X, Y, **kw)
    assert_allclose(activation_kernel(X, Y, activation="leaky_relu", leaky_slope=1.0, **kw),
                    C, rtol=1e-14)
    a = 0.3
    inv = activation_kernel(X, Y, activation="leaky_relu",
                            leaky_slope=torch.tensor(1 / a, dtype=F64), **kw)
    B = activation_kernel(X, Y, activation="leaky_relu", leaky_slope=a, **kw)
    assert_allclose(inv, B / a**2, rtol=1e-12)
    sig = activation_kernel(X, Y, activation="sigmoid", **kw)
    A4 = activation_kernel(X, Y, activation="tanh", sigma_a2=0.2, sigma_u2=0.35)
    assert_allclose(sig, 0.25 + 0.25 * A4, rtol=1e-14)
    k11, k22, k12 = preactivation_covariances(X, Y, **kw)
    G = k11 * k22 - k12**2
    diff2 = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
    cross = (X * X).sum(1)[:, None] * (Y * Y).sum(1)[None, :] - (X @ Y.T) ** 2
    assert_allclose(G, 0.8 * 1.4 * diff2 + 1.4**2 * cross, rtol=1e-12)


# ------------------------------------------------------------------------------ Monte Carlo
def _mc_pairs(x, x2, n, seed, sigma_a2=0.6, sigma_u2=1.3):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=g, dtype=F64) * math.sqrt(sigma_a2)
    u = torch.randn(n, x.numel(), generator=g, dtype=F64) * math.sqrt(sigma_u2)
    return (a + u @ x).numpy(), (a + u @ x2).numpy()


SURROGATES = {
    "tanh": lambda z: erf(np.sqrt(np.pi) * z / 2),
    "sigmoid": lambda z: 0.5 * (1 + erf(np.sqrt(np.pi) * z / 4)),
    "relu": lambda z: np.maximum(z, 0.0),
    "leaky_relu": lambda z: np.maximum(z, 0.35 * z),
}


@pytest.mark.parametrize("act", PAPER_ACTIVATIONS)
def test_monte_carlo_closed_forms(act):
    """T6: E[h(a + u.x) h(a + u.x')] by 10^6 draws of (a, u) equals eqs (8)-(11) within
    5 Monte-Carlo standard errors (h = the erf surrogates for tanh/sigmoid)."""
    x, x2 = data(2, seed=6)
    z, z2 = _mc_pairs(x, x2, 10**6, seed=7)
    h = SURROGATES[act]
    prod = h(z) * h(z2)
    se = prod.std() / math.sqrt(prod.size)
    X = torch.stack([x, x2])
    closed = activation_kernel(X, activation=act, sigma_a2=0.6, sigma_u2=1.3, leaky_slope=0.35)
    assert abs(prod.mean() - float(closed[0, 1])) <= 5 * se
    sq = h(z) ** 2
    assert abs(sq.mean() - float(closed[0, 0])) <= 5 * sq.std() / math.sqrt(sq.size)


def test_monte_carlo_true_tanh_and_sigmoid():
    """T7 / A17: the closed forms approximate true tanh within 0.03 and the logistic sigmoid
    within 0.01; the exact-tanh Activation (quadrature) matches Monte Carlo within 5 SE."""
    x, x2 = data(2, seed=8) * 4
    z, z2 = _mc_pairs(x, x2, 10**6, seed=9)
    X = torch.stack([x, x2])
    true = {"tanh": np.tanh, "sigmoid": lambda t: 1 / (1 + np.exp(-t))}
    for act, tol in (("tanh", 0.03), ("sigmoid", 0.01)):
        mc = (true[act](z) * true[act](z2)).mean()
        closed = activation_kernel(X, activation=act, sigma_a2=0.6, sigma_u2=1.3)
        assert abs(mc - float(closed[0, 1])) < tol
    prod = np.tanh(z) * np.tanh(z2)
    exact = activation_kernel(X, activation=Tanh(n_quadrature=60), sigma_a2=0.6, sigma_u2=1.3)
    assert abs(prod.mean() - float(exact[0, 1])) <= 5 * prod.std() / math.sqrt(prod.size)


def test_finite_width_additive_network():
    """T8 / Prop. 3.1: one wide network with shared pre-activations and blocks sqrt(w_m) h_m,
    sigma_b2 + sigma_v2 sum_m w_m (1/H) sum_j h_m(z_j(x)) h_m(z_j(x')), equals K_mix within
    5 standard errors (H = 4 x 10^5)."""
    x, x2 = data(2, seed=10)
    z, z2 = _mc_pairs(x, x2, 4 * 10**5, seed=11)
    w = np.array([0.6, 0.4])
    per_unit = w[0] * SURROGATES["tanh"](z) * SURROGATES["tanh"](z2) \
        + w[1] * SURROGATES["leaky_relu"](z) * SURROGATES["leaky_relu"](z2)
    emp = 0.3 + 1.7 * per_unit.mean()
    se = 1.7 * per_unit.std() / math.sqrt(per_unit.size)
    K = mixed_activation_kernel(torch.stack([x, x2]), sigma_b2=0.3, sigma_v2=1.7, sigma_a2=0.6,
                                sigma_u2=1.3, leaky_slope=0.35, weights=w)
    assert abs(emp - float(K[0, 1])) <= 5 * se


def test_table1_correlations():
    """T9 / Table 1: Pearson correlations of rho -> k(rho) at s = s' = 1 on 1001 points."""
    rho = torch.linspace(-1, 1, 1001, dtype=F64)
    k11 = torch.ones_like(rho)

    def curve(act, slope=0.5, scale=1.0):
        from skbnngp.kernels._mixture import _component
        return _component(act, k11 * scale, k11 * scale, rho * scale,
                          torch.tensor(slope, dtype=F64)).numpy()

    def corr(a, b):
        return np.corrcoef(a, b)[0, 1]

    assert round(corr(curve("tanh"), curve("sigmoid")), 4) == 0.9999
    assert round(corr(curve("relu"), curve("leaky_relu", 0.1)), 4) == 0.9983
    assert round(corr(curve("relu"), curve("leaky_relu", 0.3)), 4) == 0.9919


@pytest.mark.parametrize("d, expected, tol", [(20, 2.1315, 0.005), (80, 3.7700, 0.008)])
def test_table2_mean_diagonal(d, expected, tol):
    """T10 / Table 2: mean K_mix(x, x) at theta = (1,1,1,1,.5,.5), x ~ U[-0.5, 0.5]^d."""
    X = data(10_000, d=d, seed=d)
    assert abs(float(mixed_activation_kernel(X, diag=True).mean()) - expected) < tol


# ------------------------------------------------------------------------------ gradients
def test_gradcheck_all_hyperparameters_with_duplicates():
    """T11: autograd derivatives in every hyperparameter (slope, weights included) match
    finite differences, with duplicate rows and on K(X, X) (rho = 1 on the diagonal)."""
    X, Y = awkward(), data(4, seed=12)
    names = ("sigma_b2", "sigma_v2", "sigma_u2", "sigma_a2", "leaky_slope")
    start = [torch.tensor(v, dtype=F64, requires_grad=True) for v in (0.5, 1.2, 0.9, 0.4, 0.3)]
    w = torch.tensor([0.2, 0.3, 0.5], dtype=F64, requires_grad=True)
    acts = ("tanh", "sigmoid", "leaky_relu")

    def fn(*args):
        kw = dict(zip(names, args[:5]))
        return (mixed_activation_kernel(X, weights=args[5], activations=acts, **kw),
                mixed_activation_kernel(X, Y, weights=args[5], activations=acts, **kw))

    assert torch.autograd.gradcheck(fn, (*start, w), atol=1e-7, rtol=1e-6)
    K = fn(*start, w)[0]
    grads = torch.autograd.grad(K.sum(), (*start, w))
    assert all(torch.isfinite(g).all() for g in grads)


def test_weight_derivative_formula():
    """T11: dK/dw = sigma_v2 (A - B_alpha) for the two-component kernel (15)."""
    X = data(8, seed=13)
    w = torch.tensor(0.4, dtype=F64, requires_grad=True)
    K = mixed_activation_kernel(X, sigma_v2=1.7, leaky_slope=0.25, weights=torch.stack([w, 1 - w]))
    (g,) = torch.autograd.grad((K * torch.eye(8, dtype=F64)).sum() + K[0, 3], w)
    A = activation_kernel(X, activation="tanh")
    B = activation_kernel(X, activation="leaky_relu", leaky_slope=0.25)
    expected = 1.7 * ((A - B).diagonal().sum() + (A - B)[0, 3])
    assert float(g) == pytest.approx(float(expected), rel=1e-12)


def test_float32_and_row_blocks():
    """float32 agrees with float64 to 1e-6 relative; row blocks equal the whole matrix."""
    X, Y = data(30, seed=14), data(11, seed=15)
    K64 = mixed_activation_kernel(X, Y, **THETA2)
    K32 = mixed_activation_kernel(X.float(), Y.float(), **THETA2)
    assert K32.dtype == torch.float32
    assert float((K32.double() - K64).abs().max() / K64.abs().max()) < 1e-6
    blocks = torch.cat([mixed_activation_kernel(X[i:i + 7], Y, **THETA2) for i in range(0, 30, 7)])
    assert_allclose(blocks, K64, rtol=1e-14)


def test_bad_arguments():
    X = data(4)
    with pytest.raises(ValueError, match="activation"):
        activation_kernel(X, activation="swish")
    with pytest.raises(ValueError, match="weights"):
        mixed_activation_kernel(X, weights=[0.7, 0.7])
    with pytest.raises(ValueError, match="weights"):
        mixed_activation_kernel(X, weights=[1.0])
    with pytest.raises(ValueError, match="leaky_slope"):
        mixed_activation_kernel(X, leaky_slope=1.5)
    with pytest.raises(ValueError, match="sigma_u2"):
        mixed_activation_kernel(X, sigma_u2=-1.0)
    with pytest.raises(ValueError, match="same number of features"):
        mixed_activation_kernel(X, data(3, d=2))
    with pytest.raises(ValueError, match="activations"):
        mixed_activation_kernel(X, activations=())


# ------------------------------------------------------------------------------ sklearn adapter
ADAPTERS = {
    "paper": dict(sigma_b2=0.5, sigma_v2=2.0, sigma_u2=1.5, sigma_a2=0.3, leaky_slope=0.2,
                  mix_odds=0.7 / 0.3),
    "three": dict(activations=("tanh", "sigmoid", "leaky_relu"), mix_odds=[2.0, 0.5]),
    "relu-only": dict(activations=("relu",), sigma_a2=0.7),
}


@pytest.mark.parametrize("case", list(ADAPTERS))
def test_adapter_equals_torch_function(case):
    """The adapter evaluates mixed_activation_kernel with the weights implied by mix_odds."""
    kern = MixedActivationKernel(**ADAPTERS[case])
    X, Y = data(9, seed=16), data(5, seed=17)
    p = {k: v for k, v in ADAPTERS[case].items() if k != "mix_odds"}
    expected = mixed_activation_kernel(X, Y, weights=kern.weights, **p).numpy()
    assert_allclose(kern(X.numpy(), Y.numpy()), expected, rtol=1e-14)
    assert_allclose(kern.diag(X.numpy()), np.diag(kern(X.numpy())), rtol=1e-13)
    assert kern.weights.sum() == pytest.approx(1.0, abs=1e-15)
    again = pickle.loads(pickle.dumps(kern))
    assert_allclose(again(X.numpy()), kern(X.numpy()), rtol=0, atol=0)
    assert clone(kern).get_params() == kern.get_params()


@pytest.mark.parametrize("case", list(ADAPTERS))
def test_adapter_gradient_matches_finite_differences(case):
    """dK/dlog(theta) of the adapter equals central finite differences in theta."""
    kern = MixedActivationKernel(**ADAPTERS[case])
    X = awkward().numpy()
    K, grad = kern(X, eval_gradient=True)
    assert grad.shape == (7, 7, kern.n_dims)
    numeric = approx_fprime(kern.theta, lambda t: kern.clone_with_theta(t)(X).ravel(), 1e-7)
    assert_allclose(grad, numeric.reshape(7, 7, -1), rtol=1e-5, atol=1e-6 * np.abs(grad).max())


def test_adapter_hyperparameters():
    """Slope is fixed without a LeakyReLU component; one activation has no mixture odds;
    the weights follow the softmax of log-odds (M = 2: w = sigmoid(log odds))."""
    names = [h.name for h in MixedActivationKernel(activations=("tanh", "relu")).hyperparameters
             if not h.fixed]
    assert "leaky_slope" not in names and "mix_odds" in names
    assert MixedActivationKernel(activations=("relu",)).n_dims == 4
    k = MixedActivationKernel(mix_odds=3.0)
    assert_allclose(k.weights, [0.75, 0.25])
    assert MixedActivationKernel(activations=PAPER_ACTIVATIONS, mix_odds=[1, 2, 3]).n_dims == 8
    with pytest.raises(ValueError, match="mix_odds"):
        MixedActivationKernel(mix_odds=-1.0)(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="Gradient"):
        k(np.zeros((2, 2)), np.zeros((2, 2)), eval_gradient=True)
