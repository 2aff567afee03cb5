"""Properties of MixedActivationGPRegressor (spec 001 §7; the item is cited in each test)."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.optimize import approx_fprime
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import WhiteKernel

import skbnngp._backend._gp as gp_module
from skbnngp import MixedActivationGPRegressor, _mixed_activation
from skbnngp.exceptions import NumericalWarning
from skbnngp.kernels import MixedActivationKernel, mixed_activation_kernel

from ._factor_checks import check_factor_read_on_demand
from ._promise import assert_same_predictions

FIXED = {"optimizer": None, "device": "cpu", "noise_variance": 0.05, "sigma_b2": 0.7,
         "sigma_v2": 1.3, "sigma_u2": 1.8, "sigma_a2": 0.6, "leaky_slope": 0.3,
         "weights": [0.6, 0.4],
         "calibration": None}  # the GP's own predictive (tests/test_loo_calibration)


@pytest.fixture
def no_jitter(monkeypatch):
    """Nystrom without jitter on the anchor kernel (the private ``JITTER``)."""
    monkeypatch.setattr(_mixed_activation, "JITTER", 0.0)


@pytest.fixture
def fixed_kernel(monkeypatch):
    """sigma_b2, the slope and the weights held at their initial values."""
    monkeypatch.setattr(_mixed_activation, "HYPERPARAMETER_BOUNDS", {
        **_mixed_activation.HYPERPARAMETER_BOUNDS, "sigma_b2": "fixed",
        "leaky_slope": "fixed", "weights": "fixed"})


def toy(n=60, d=3, seed=0, targets=None):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 2, size=(n, d))
    f = np.sin(3 * X[:, 0]) + 0.5 * X[:, 1] ** 2
    y = f + 0.1 * rng.normal(size=n)
    if targets:
        y = np.column_stack([y + k * X[:, -1] for k in range(targets)])
    return X, y


def fixed(**kw):
    return MixedActivationGPRegressor(**{**FIXED, **kw})


def kernel_np(reg, A, B=None):
    """K_mix on the estimator's scaled inputs at its fitted hyperparameters (numpy)."""
    def t(Z):
        return torch.as_tensor(reg._scale_X(Z))

    K = mixed_activation_kernel(t(A), None if B is None else t(B), sigma_b2=reg.sigma_b2_,
                                sigma_v2=reg.sigma_v2_, sigma_u2=reg.sigma_u2_,
                                sigma_a2=reg.sigma_a2_, leaky_slope=reg.leaky_slope_,
                                weights=reg.weights_)
    return K.numpy()


# ----------------------------------------------------------------------------- likelihoods
def test_exact_nll_equals_scipy_and_map_adds_priors(monkeypatch):
    """T12: the exact log marginal likelihood is scipy's multivariate-normal logpdf; the MAP
    objective minus the NLL equals the prior terms of (20) computed by hand."""
    X, y = toy()
    reg = fixed(approx="exact").fit(X, y)
    K = kernel_np(reg, X) + reg.noise_variance_ * np.eye(len(X))
    expected = stats.multivariate_normal(np.zeros(len(X)), K).logpdf(reg.y_train_[:, 0])
    assert reg.log_marginal_likelihood_value_ == pytest.approx(expected, rel=1e-9)
    priors = {"sigma_b2": (2.0, 1.0), "sigma_v2": (3.0, 0.5), "sigma_u2": (2.0, 1.0),
              "sigma_a2": (2.5, 1.5), "noise_variance": (2.0, 0.1), "leaky_slope": (2.0, 3.0),
              "weights": 1.5}
    monkeypatch.setattr(_mixed_activation, "PRIORS", priors)
    reg = fixed(approx="exact").fit(X, y)
    by_hand = sum((priors[h][0] + 1) * np.log(getattr(reg, f"{h}_"))
                  + priors[h][1] / getattr(reg, f"{h}_")
                  for h in ("sigma_b2", "sigma_v2", "sigma_u2", "sigma_a2", "noise_variance"))
    al = reg.leaky_slope_
    by_hand += -(2.0 - 1) * np.log(al) - (3.0 - 1) * np.log(1 - al)
    by_hand += -(1.5 - 1) * np.log(reg.weights_).sum()
    got = reg.map_objective_value_ + reg.log_marginal_likelihood_value_
    assert got == pytest.approx(by_hand, rel=1e-10)
    # and up to normalising constants it is minus scipy's invgamma/beta log densities
    ref = -stats.invgamma(3.0, scale=0.5).logpdf(reg.sigma_v2_) - stats.beta(2, 3).logpdf(al)
    ref0 = -stats.invgamma(3.0, scale=0.5).logpdf(1.0) - stats.beta(2, 3).logpdf(0.5)
    def mine(v, a):
        return 4.0 * np.log(v) + 0.5 / v - np.log(a) - 2 * np.log(1 - a)

    assert mine(reg.sigma_v2_, al) - mine(1.0, 0.5) == pytest.approx(ref - ref0, rel=1e-10)


@pytest.mark.parametrize("approx", ["exact", "nystrom"])
@pytest.mark.parametrize("keep", [True, False])
def test_lml_gradient_matches_finite_differences(approx, keep, monkeypatch):
    """T11: the adjoint gradient of the (Nystrom) log marginal likelihood in every raw
    hyperparameter equals finite differences, on both the kept-graph and the two-pass paths,
    with duplicate rows and two targets."""
    if not keep:
        monkeypatch.setattr(gp_module, "KEEP_GRAPH_ELEMENTS", 0)
    X, y = toy(n=40, targets=2)
    X[7] = X[3]
    reg = fixed(approx=approx, n_anchors=15).fit(X, y)
    theta = reg.theta_ + np.random.default_rng(1).normal(scale=0.3, size=reg.theta_.size)
    value, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(reg.log_marginal_likelihood(theta), rel=1e-12)
    numeric = approx_fprime(theta, reg.log_marginal_likelihood, 1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-4)


def test_nystrom_with_all_rows_equals_exact(no_jitter):
    """T13: anchors = every training row ("first", r = n, jitter 0): the Nystrom NLL,
    predictive mean and variance equal the exact GP's to ~1e-8."""
    X, y = toy(n=80, d=2)
    Xt, _ = toy(n=15, d=2, seed=1)
    exact = fixed(approx="exact").fit(X, y)
    nys = fixed(approx="nystrom", anchors="first", n_anchors=80).fit(X, y)
    assert nys.n_anchors_ == 80
    assert nys.log_marginal_likelihood_value_ == pytest.approx(
        exact.log_marginal_likelihood_value_, rel=1e-8)
    m1, s1 = exact.predict(Xt, return_std=True)
    m2, s2 = nys.predict(Xt, return_std=True)
    np.testing.assert_allclose(m2, m1, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(s2, s1, rtol=1e-8)


def test_nystrom_likelihood_is_low_rank_plus_noise(no_jitter):
    """T16 / A1: for r < n the NLL is that of Q + noise I (finite), computed without any
    n x n matrix, and equals the dense formula; the paper's literal eq (22) is singular."""
    X, y = toy(n=70)
    reg = fixed(anchors="first", n_anchors=9).fit(X, y)
    K_nS = kernel_np(reg, X, reg.anchors_)
    Q = K_nS @ np.linalg.solve(kernel_np(reg, reg.anchors_), K_nS.T)
    dense = stats.multivariate_normal(np.zeros(70), Q + reg.noise_variance_ * np.eye(70),
                                      allow_singular=False).logpdf(reg.y_train_[:, 0])
    assert np.isfinite(reg.log_marginal_likelihood_value_)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(dense, rel=1e-8)
    Kt = kernel_np(reg, X) + reg.noise_variance_ * np.eye(70)
    literal = Kt[:, :9] @ np.linalg.solve(Kt[:9, :9], Kt[:9, :])  # eq (22)
    assert np.linalg.matrix_rank(literal) == 9


@pytest.mark.parametrize("approx, r", [("exact", None), ("nystrom", 4), ("nystrom", 25)])
def test_predictive_variance_bounds(approx, r):
    """T15 / A2: 0 <= var_f <= k(x, x) and var_y >= noise; std == sqrt(diag(cov)), also
    with a rank so low that the paper's hybrid predictive goes negative."""
    X, y = toy(n=60)
    Xt = np.random.default_rng(2).uniform(-3, 4, size=(40, 3))
    reg = fixed(approx=approx, n_anchors=r or 10, anchors="random", random_state=0,
                include_noise=False).fit(X, y)
    _, std = reg.predict(Xt, return_std=True)
    var_f = (std / reg._y_train_std[0]) ** 2
    kss = np.diag(kernel_np(reg, Xt))
    assert np.all(var_f >= 0) and np.all(var_f <= kss * (1 + 1e-10))
    reg.set_params(include_noise=True)
    _, cov = reg.predict(Xt, return_cov=True)
    _, std_y = reg.predict(Xt, return_std=True)
    np.testing.assert_allclose(std_y, np.sqrt(np.diag(cov)), rtol=1e-10)
    assert np.all(std_y**2 >= reg.noise_variance_ * reg._y_train_std[0] ** 2 * (1 - 1e-12))
    assert np.all(np.isfinite(std_y))


# ----------------------------------------------------------------------------- anchors
def test_anchor_strategies():
    """T17: "first" == the first rows; random / kmeans++ / kmeans repeat with the seed;
    kmeans++ gives distinct data rows and kmeans centroids; user anchors are kept."""
    X, y = toy(n=60)
    first = fixed(anchors="first", n_anchors=7).fit(X, y)
    np.testing.assert_array_equal(first.anchors_, X[:7])
    np.testing.assert_array_equal(first.anchor_indices_, np.arange(7))
    for name in ("random", "kmeans++", "kmeans"):
        a = fixed(anchors=name, n_anchors=12, random_state=3).fit(X, y)
        b = fixed(anchors=name, n_anchors=12, random_state=3).fit(X, y)
        np.testing.assert_array_equal(a.anchors_, b.anchors_)
        assert a.anchors_.shape == (12, 3)
        if name == "kmeans":
            assert a.anchor_indices_ is None
        else:
            assert np.unique(a.anchor_indices_).size == 12
            np.testing.assert_allclose(a.anchors_, X[a.anchor_indices_], rtol=1e-14)
    user = fixed(anchors=X[10:15] + 0.01).fit(X, y)
    np.testing.assert_allclose(user.anchors_, X[10:15] + 0.01, rtol=1e-13)
    assert user.n_anchors_ == 5 and user.anchor_indices_ is None


def test_duplicates_and_too_many_anchors(no_jitter):
    """Bad input: duplicate rows never become duplicate anchors; a user array with duplicates
    is deduplicated with a warning; n_anchors > n is clipped with a warning; no Cholesky
    failure in any case."""
    X, y = toy(n=30)
    X[10:20] = X[0]  # eleven copies of one row: 20 distinct rows
    with pytest.warns(UserWarning, match="exceeds the 20 distinct"):
        reg = fixed(anchors="first", n_anchors=50).fit(X, y)
    assert reg.n_anchors_ == 20 and np.unique(reg.anchors_, axis=0).shape[0] == 20
    with pytest.warns(UserWarning, match="dropped 2 duplicate anchors"):
        reg = fixed(anchors=np.vstack([X[:5], X[:2]])).fit(X, y)
    assert reg.n_anchors_ == 5
    assert np.all(np.isfinite(reg.predict(X)))


def test_auto_anchors_take_every_distinct_row_silently_up_to_the_cap(monkeypatch, no_jitter):
    """n_anchors="auto": all distinct rows (no warning) below the cap, the cap above it, and
    the Nystrom model on all rows is the exact GP up to jitter."""
    X, y = toy(n=30)
    X[10:20] = X[0]  # 20 distinct rows
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg = fixed().fit(X, y)
    assert reg.n_anchors_ == 20 and reg.get_params()["n_anchors"] == "auto"
    exact = fixed(approx="exact").fit(X, y)
    np.testing.assert_allclose(reg.predict(X), exact.predict(X), atol=1e-6)
    monkeypatch.setattr(_mixed_activation, "AUTO_ANCHORS", 8)
    assert fixed().fit(X, y).n_anchors_ == 8


def test_nystrom_error_decreases_with_rank():
    """T18: the error of the Nystrom predictive mean against the exact GP decreases on
    average (3 seeds, random anchors) as r grows."""
    X, y = toy(n=120, d=4)
    Xt, _ = toy(n=50, d=4, seed=5)
    exact = fixed(approx="exact").fit(X, y).predict(Xt)
    errors = []
    for r in (4, 16, 64):
        errs = [np.sqrt(np.mean((fixed(anchors="random", n_anchors=r, random_state=s)
                                 .fit(X, y).predict(Xt) - exact) ** 2)) for s in range(3)]
        errors.append(np.mean(errs))
    assert errors[0] > errors[1] > errors[2]


# ----------------------------------------------------------------------------- fitting
def test_fit_reproducible_and_map_decreases():
    """T20, T22: the same random_state gives the same fit; weights sum to one, alpha and w
    in (0, 1); the MAP objective at the optimum is below its initial value."""
    X, y = toy(n=60)
    kw = {"n_anchors": 40, "max_iter": 25, "device": "cpu", "random_state": 0}
    a = MixedActivationGPRegressor(**kw).fit(X, y)
    b = MixedActivationGPRegressor(**kw).fit(X, y)
    np.testing.assert_array_equal(a.theta_, b.theta_)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert a.weights_.sum() == pytest.approx(1.0, abs=1e-12)
    assert 0 < a.leaky_slope_ < 1 and np.all((a.weights_ > 0) & (a.weights_ < 1))
    assert a.loss_curve_[-1] <= a.loss_curve_[0] and min(a.loss_curve_) < a.loss_curve_[0]
    assert a.n_iter_ > 0 and a.score(X, y) > 0.7


def test_noise_initialisation_rule(monkeypatch):
    """T24 / rule (25): noise_variance="auto" starts at 0.04 x mean diag K on scaled X (and
    at the private ratio when it is patched)."""
    X, y = toy(n=50)
    reg = fixed(noise_variance="auto").fit(X, y)
    assert reg.noise_variance_ == pytest.approx(0.04 * np.mean(np.diag(kernel_np(reg, X))),
                                                rel=1e-12)
    monkeypatch.setattr(_mixed_activation, "NOISE_INIT_RATIO", 0.1)
    again = fixed(noise_variance="auto").fit(X, y)
    assert again.noise_variance_ == pytest.approx(2.5 * reg.noise_variance_, rel=1e-12)
    scaled = reg._scale_X(X)
    assert scaled.min() == pytest.approx(-0.5) and scaled.max() == pytest.approx(0.5)


def test_normalize_y_affine_equivariance():
    """T23: fitting a y + b gives a mu + b, |a| std and the same hyperparameters."""
    X, y = toy(n=50)
    kw = {"n_anchors": 15, "max_iter": 10, "device": "cpu", "random_state": 0, "anchors": "first"}
    r1 = MixedActivationGPRegressor(**kw).fit(X, y)
    with pytest.warns(ConvergenceWarning):
        r2 = MixedActivationGPRegressor(**kw).fit(X, -3.0 * y + 7.0)
    # The standardised targets agree up to sign and rounding (~1e-16); ten L-BFGS steps with
    # line searches amplify that rounding to ~2e-10 relative under some thread counts (seen
    # with OMP_NUM_THREADS=1). 1e-7 still fails by orders of magnitude for a wrong scaling.
    np.testing.assert_allclose(r2.theta_, r1.theta_, rtol=1e-7, atol=1e-9)
    m1, s1 = r1.predict(X[:5], return_std=True)
    m2, s2 = r2.predict(X[:5], return_std=True)
    np.testing.assert_allclose(m2, -3.0 * m1 + 7.0, rtol=1e-7)
    np.testing.assert_allclose(s2, 3.0 * s1, rtol=1e-7)


def test_paper_protocol_barely_moves():
    """T27 / A6: the paper's protocol (Adam, 50 steps of 1e-3 in the raw coordinates, on all
    rows), the user guide's recipe, moves every raw parameter by at most ~0.05 * 1.1 from its
    start, and says it did not converge. The optimiser steps in the box's squashed
    coordinates, 18.4 / 4 = 4.6 times steeper than the raw ones at the box centre, hence
    the learning rate 1e-3 / 4.6."""
    X, y = toy(n=60)
    start = fixed(approx="exact").fit(X, y).theta_  # optimizer=None: the initial values
    with pytest.warns(ConvergenceWarning, match="max_iter=50"):
        reg = fixed(approx="exact", optimizer="adam", learning_rate_init=2.2e-4, max_iter=50,
                    tol=0.0, subset_size=None).fit(X, y)
    assert reg.n_iter_ == 50 and not reg.converged_
    assert np.max(np.abs(reg.theta_ - start)) <= 0.05 * 1.1


def test_convergence_warning_and_fixed_bounds(fixed_kernel):
    X, y = toy(n=40)
    with pytest.warns(ConvergenceWarning, match="MixedActivationGPRegressor: hyperparameter"):
        reg = MixedActivationGPRegressor(max_iter=1, n_anchors=10, device="cpu").fit(X, y)
    assert not reg.converged_
    reg = MixedActivationGPRegressor(max_iter=5, n_anchors=10, device="cpu", sigma_b2=0.3,
                                     leaky_slope=0.2, weights=[0.25, 0.75])
    with pytest.warns(ConvergenceWarning):
        reg.fit(X, y)
    assert reg.sigma_b2_ == 0.3 and reg.leaky_slope_ == pytest.approx(0.2, rel=1e-12)
    np.testing.assert_allclose(reg.weights_, [0.25, 0.75], rtol=1e-12)


def test_subset_warm_start_then_refine(monkeypatch):
    """More rows than subset_size: optimise on a subset, refine on all rows (the private
    ``REFINE_ITER``)."""
    X, y = toy(n=90)
    monkeypatch.setattr(_mixed_activation, "REFINE_ITER", 2)
    reg = MixedActivationGPRegressor(n_anchors=10, subset_size=40, max_iter=10,
                                     device="cpu", random_state=0)
    with pytest.warns(ConvergenceWarning):
        reg.fit(X, y)
    assert reg.n_iter_ >= 3 and len(reg.loss_curve_) > reg.n_iter_ - 1


# ----------------------------------------------------------------------------- estimator API
def test_sklearn_gpr_with_adapter_gives_the_exact_fit(fixed_kernel):
    """The sklearn adapter inside GaussianProcessRegressor gives the exact mode's fit: equal
    log marginal likelihood and predictions at the same hyperparameters, and both optimisers
    reach the same optimum (sigma_b2, alpha, w fixed in both: the full optimum is weakly
    identified, spec 001 §3.4)."""
    X, y = toy(n=40, d=2)
    Xt, _ = toy(n=10, d=2, seed=3)
    kw = {"approx": "exact", "normalize_X": False, "device": "cpu", "random_state": 0,
          "calibration": None}
    reg = MixedActivationGPRegressor(**kw).fit(X, y)

    def kernel_of(r):
        odds = r.weights_[0] / r.weights_[1]
        return MixedActivationKernel(r.sigma_b2_, r.sigma_v2_, r.sigma_u2_, r.sigma_a2_,
                                     r.leaky_slope_, odds, sigma_b2_bounds="fixed",
                                     leaky_slope_bounds="fixed", mix_odds_bounds="fixed") \
            + WhiteKernel(r.noise_variance_)

    gpr = GaussianProcessRegressor(kernel_of(reg), alpha=0.0, optimizer=None,
                                   normalize_y=True).fit(X, y)
    assert gpr.log_marginal_likelihood_value_ == pytest.approx(
        reg.log_marginal_likelihood_value_, rel=1e-10)
    m1, s1 = reg.predict(Xt, return_std=True)
    m2, s2 = gpr.predict(Xt, return_std=True)
    np.testing.assert_allclose(m1, m2, rtol=1e-8)
    np.testing.assert_allclose(s1, s2, rtol=1e-8)
    start = fixed(approx="exact", normalize_X=False, sigma_b2=1.0, leaky_slope=0.5,
                  weights=[0.5, 0.5])
    gpr = GaussianProcessRegressor(kernel_of(start.fit(X, y)), alpha=0.0,
                                   normalize_y=True).fit(X, y)
    assert gpr.log_marginal_likelihood_value_ == pytest.approx(
        reg.log_marginal_likelihood_value_, abs=2e-3)
    np.testing.assert_allclose(gpr.predict(Xt), m1, atol=2e-2 * np.std(y))


def test_shapes_multioutput_and_sample_y():
    X, y = toy(n=40, targets=2)
    reg = fixed(n_anchors=10).fit(X, y)
    mean, std = reg.predict(X[:6], return_std=True)
    assert mean.shape == std.shape == (6, 2)
    assert reg.predict(X[:6], return_cov=True)[1].shape == (6, 6, 2)
    assert reg.sample_y(X[:6], n_samples=3).shape == (6, 2, 3)
    reg1 = fixed(n_anchors=10).fit(X, y[:, 0])
    draws = reg1.sample_y(X[:4], n_samples=4000, random_state=0)
    m, s = reg1.predict(X[:4], return_std=True)
    assert draws.shape == (4, 4000)
    assert np.all(np.abs(draws.mean(1) - m) < 5 * s / np.sqrt(4000))
    np.testing.assert_array_equal(draws, reg1.sample_y(X[:4], 4000, random_state=0))
    with pytest.raises(RuntimeError):
        reg1.predict(X, return_std=True, return_cov=True)
    with pytest.raises(ValueError, match="n_samples"):
        reg1.sample_y(X[:4], n_samples=0)


def test_predict_dist_includes_noise():
    X, y = toy(n=40)
    reg = fixed(n_anchors=10).fit(X, y)
    dist = reg.predict_dist(X[:5])
    assert dist.dist.name == "norm"
    np.testing.assert_allclose(dist.std(), reg.predict_std(X[:5]), rtol=1e-14)
    latent = reg.set_params(include_noise=False).predict_std(X[:5])
    np.testing.assert_allclose(dist.var() - latent**2,
                               reg.noise_variance_ * reg._y_train_std[0] ** 2, rtol=1e-8)


def test_pickle_row_blocks_and_float32(monkeypatch):
    """Pickles predict the same (the repeatability promise); row blocks do not change
    predictions; float32 agrees with float64 to ~1e-4 relative."""
    X, y = toy(n=50)
    reg = fixed(n_anchors=12, random_state=0).fit(X, y)
    again = pickle.loads(pickle.dumps(reg))
    assert "_cache" not in again.__dict__
    assert_same_predictions(again.predict(X), reg.predict(X))
    assert again.log_marginal_likelihood(reg.theta_) == pytest.approx(
        reg.log_marginal_likelihood_value_, rel=1e-12)
    whole = reg.predict_std(X)
    with monkeypatch.context() as m:  # blocks of 3 rows (36 kernel entries against 12 anchors)
        m.setattr(gp_module, "_block", lambda X, block: 36)
        np.testing.assert_allclose(reg.predict_std(X), whole, rtol=1e-12)
    whole = fixed(n_anchors=12, random_state=0).fit(X, y)
    r32 = fixed(n_anchors=12, dtype="float32", random_state=0).fit(X, y)
    np.testing.assert_allclose(r32.predict(X), whole.predict(X), rtol=1e-4, atol=1e-4)


def test_bad_input_errors():
    X, y = toy(n=20)
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fixed().fit(bad, y)
    with pytest.raises(ValueError, match="infinity"):
        fixed().fit(X, np.r_[np.inf, y[1:]])
    reg = fixed(n_anchors=5).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        reg.predict(X[:, :2])
    cases = [({"weights": [0.5, 0.6]}, "weights"), ({"activations": ("swish",)}, "swish"),
             ({"activations": ("tanh", "tanh")}, "repeat"),
             ({"noise_variance_bounds": (1.0, 0.1)}, "noise_variance_bounds"),
             ({"noise_variance": 1e3}, "noise_variance_bounds"),
             ({"anchors": np.zeros((3, 2))}, "anchors has 2 features"),
             ({"anchors": np.full((3, 3), np.nan)}, "anchors"),
             ({"optimizer": "lbfgs", "sigma_u2": 1e5}, "sigma_u2"),
             ({"optimizer": "lbfgs", "leaky_slope": 1e-5}, "leaky_slope"),
             ({"n_anchors": 0}, "n_anchors"), ({"approx": "fitc"}, "approx")]
    for params, match in cases:
        with pytest.raises(ValueError, match=match):
            fixed(**params).fit(X, y)
    with pytest.warns(UserWarning, match="not identifiable"):
        fixed(activations=("relu", "leaky_relu"), weights=None).fit(X, y)
    with pytest.raises(ValueError, match="theta"):
        reg.log_marginal_likelihood(np.zeros(2))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            fixed(device="cuda").fit(X, y)


def test_variance_clipping_is_reported(monkeypatch):
    """Negative variances are clipped with a NumericalWarning (never silently beyond 1e-8)."""
    X, y = toy(n=20)
    reg = fixed(n_anchors=5, include_noise=False).fit(X, y)
    reg._get_cache()["dual"]  # build the cache, then corrupt the noise-free variance
    reg._cache["L"] = reg._cache["L"] * 0.5
    with pytest.warns(NumericalWarning, match="clipped"):
        _, std = reg.predict(X, return_std=True)
    assert np.all(std >= 0)


def test_same_seed_same_anchors():
    """Anchors are drawn on the host from random_state (issue 11: the CUDA-vs-CPU test had
    no random_state, so each fit drew k-means++ anchors from the global NumPy RNG; two CPU
    fits then differ by about 0.2 too)."""
    X, y = toy(n=40)
    a = fixed(n_anchors=10, random_state=0).fit(X, y)
    b = fixed(n_anchors=10, random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.anchors_, b.anchors_)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_cuda_matches_cpu():
    X, y = toy(n=40)
    cpu = fixed(n_anchors=10, random_state=0).fit(X, y)
    gpu = fixed(n_anchors=10, device="cuda", random_state=0).fit(X, y)
    np.testing.assert_array_equal(gpu.anchors_, cpu.anchors_)
    np.testing.assert_allclose(gpu.predict(X), cpu.predict(X), rtol=1e-8)


# ----------------------------------------------------------------------------- fitted state
@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 2))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(60)
    est = MixedActivationGPRegressor(n_anchors=15, max_iter=10, device="cpu",
                                     random_state=0).fit(X, y)
    return est, X


@pytest.mark.parametrize("change, constants", [
    ({"dtype": "float32"}, {}), ({"activations": ("relu",)}, {}), ({"approx": "exact"}, {}),
    ({"normalize_X": False}, {}), ({"optimizer": None, "calibration": None}, {}),
    ({}, {"JITTER": 0.1, "INPUT_SCALING": "standard", "NOISE_INIT_RATIO": 1.0})])
def test_set_params_then_pickle_predicts_as_fitted(fitted, change, constants, monkeypatch):
    """Fitted state is self-contained (issue 18, items 3 and 4): neither a parameter changed
    after fit nor a patched private setting changes predictions or the likelihood, before
    or after a pickle round trip."""
    est, X = fitted
    est = pickle.loads(pickle.dumps(est))
    mean, std = est.predict(X, return_std=True)
    lml = est.log_marginal_likelihood(est.theta_)
    est.set_params(**change)
    for name, value in constants.items():
        monkeypatch.setattr(_mixed_activation, name, value)
    back = pickle.loads(pickle.dumps(est))
    for model in (est, back):
        m2, s2 = model.predict(X, return_std=True)
        np.testing.assert_allclose(m2, mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(s2, std, rtol=0, atol=1e-12)
        assert model.log_marginal_likelihood(model.theta_) == pytest.approx(lml, abs=1e-10)


def test_predict_time_parameters_are_validated(fitted):
    est = pickle.loads(pickle.dumps(fitted[0])).set_params(include_noise="yes")
    with pytest.raises(ValueError, match="include_noise"):
        est.predict(fitted[1], return_std=True)


def test_exact_cholesky_factor_is_read_on_demand_and_not_pickled():
    """The exact mode's n x n factor stays on the device: ``L_`` is read from it when asked
    for, is the read-only lower factor of ``K + noise I`` (``L L^T dual_coef_ =
    y_train_``), and a pickle carries no n x n array (the loaded model refactorises at
    ``theta_`` and predicts the same)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(150, 2))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(150)
    est = MixedActivationGPRegressor(approx="exact", max_iter=5, device="cpu",
                                     random_state=0).fit(X, y)
    check_factor_read_on_demand(est)
    back = pickle.loads(pickle.dumps(est))
    m0, s0 = est.predict(X, return_std=True)
    m1, s1 = back.predict(X, return_std=True)
    assert_same_predictions(m1, m0)  # a round trip: the documented tolerance
    assert_same_predictions(s1, s0)


def test_nystrom_anchor_factor_is_saved(fitted):
    """Under Nystrom ``L_`` is the m x m anchor factor (read-only), saved with the model."""
    est, X = fitted
    m = est.n_anchors_
    L = est.L_
    assert L.shape == (m, m) and not L.flags.writeable
    assert np.allclose(L, np.tril(L)) and np.all(np.diag(L) > 0)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.L_, L)
    assert_same_predictions(back.predict(X), est.predict(X))


def test_calibration_auto_runs_the_student_t(fitted):
    """``calibration="auto"`` is the Student-t calibration (``calibration_``), and
    ``"gaussian"`` widens the same model's Gaussian predictive by a factor >= 1."""
    est, X = fitted
    assert est.calibration_ == "student_t"
    y = np.sin(4 * X[:, 0])

    def fit(**kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return MixedActivationGPRegressor(n_anchors=15, max_iter=10, device="cpu",
                                              random_state=0, **kw).fit(X, y)

    t, auto, g = fit(calibration="student_t"), fit(), fit(calibration="gaussian")
    assert auto.calibration_ == t.calibration_ == "student_t"
    assert auto.predictive_df_ == t.predictive_df_
    assert auto.calibration_factor_ == t.calibration_factor_
    assert g.calibration_ == "gaussian" and g.calibration_factor_ >= 1.0
    assert np.isinf(g.predictive_df_) and g.predict_dist(X[:3]).dist.name == "norm"
    np.testing.assert_allclose(g.predict_std(X[:3]), np.sqrt(g.calibration_factor_)
                               * fit(calibration=None).predict_std(X[:3]), rtol=1e-12)
    assert fit(calibration=None).calibration_ is None
    with pytest.raises(ValueError, match="calibration"):
        MixedActivationGPRegressor(calibration="loo").fit(X, y)
