"""Properties of StudentTProcessRegressor (spec 000 §8; item numbers cited): the closed forms,
other priors, the trained-network predictives, gradients, fitting, ``ard="auto"``, the
relevance hyperprior, the sklearn API and self-contained fitted state."""

import contextlib
import pickle
from unittest import mock

import joblib
import numpy as np
import pytest
import torch
from scipy import integrate, optimize, sparse, stats
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import skbnngp._student_t as st
from skbnngp import StudentTProcessRegressor
from skbnngp._backend._student_t import HYPERPARAMETERS, relevance_penalty
from skbnngp.distributions import ScaleMixtureNormal
from skbnngp.exceptions import NumericalWarning
from skbnngp.kernels import NNGPKernel, nngp_kernel

from ._factor_checks import check_factor_read_on_demand
from ._promise import assert_same_predictions

# End-to-end fixture of spec §8 (values from neural-tangents 0.6.5, float64)
X_TR = np.array([[1, 0, 0], [0, 2, 0], [1, 1, 1], [-1, 0.5, 2], [0.3, -0.7, 0.2]], float)
Y_TR = np.array([0.5, -1.0, 0.25, 2.0, -0.3])
X_TE = np.array([[0.5, 0.5, 0.5], [-2, 1, 0]], float)
Y_TE = np.array([0.4, 1.5])
FIXED = {"depth": 3, "activation": "relu", "weight_variance": 2.0, "bias_variance": 0.1,
         "alpha": 1e-2, "prior_shape": 2.0, "prior_scale": 2.0, "normalize_X": False,
         "normalize_y": False, "include_noise": False, "optimizer": None, "device": "cpu",
         "ard": False, "calibration": None}  # the paper's closed forms


def fixed(**kw):
    return StudentTProcessRegressor(**{**FIXED, **kw})


def fit_with(est, X, y, **settings):
    """``est.fit(X, y)`` with the module's private settings patched for the fit only."""
    with mock.patch.multiple(st, **settings) if settings else contextlib.nullcontext():
        return est.fit(X, y)


def bounds(**changes):
    return {**st.HYPERPARAMETER_BOUNDS, **changes}


def K_lambda(X, lam=1e-2, depth=3, wv=2.0, bv=0.1):
    K = nngp_kernel(torch.as_tensor(X), depth=depth, weight_variance=wv, bias_variance=bv,
                    activation="relu").numpy()
    return K + lam * np.eye(len(X))


# ----------------------------------------------------------------------------- closed form
def test_reference_fixture_posterior():
    """§8 end-to-end fixture: mean, latent covariance, q, df, t scale/std, log-ML, NLL."""
    reg = fixed().fit(X_TR, Y_TR)
    mean, cov = reg.predict(X_TE, return_cov=True)
    np.testing.assert_allclose(mean, [0.1429472554, 0.3462371655], atol=1e-9)
    assert reg.q_ == pytest.approx(14.604278855880564, rel=1e-10)
    assert reg.df_ == 9
    latent = np.array([[0.024978112, -0.0027396175], [-0.0027396175, 0.5657239986]])
    es = (2 * 2 + reg.q_) / (2 * 2 + 5 - 2)  # E[s|y] = (2b+q)/(2a+n-2)
    np.testing.assert_allclose(cov / es, latent, atol=1e-9)
    dist = reg.predict_dist(X_TE)
    assert dist.dist.name == "t"
    np.testing.assert_allclose(dist.kwds["scale"], [0.2272296344, 1.0814027426], atol=1e-9)
    np.testing.assert_allclose(reg.predict_std(X_TE), [0.2576541871, 1.2261954532], atol=1e-9)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(-8.679272176830295, abs=1e-10)
    np.testing.assert_allclose(-dist.logpdf(Y_TE), [0.1296074472, 1.6203996128], atol=1e-9)
    assert reg.posterior_shape_ == 2 + 5 / 2
    assert reg.posterior_scale_ == pytest.approx(2 + reg.q_ / 2)


def test_gaussian_prior_is_the_nngp():
    """§8 fixture: the GP with amplitude 1 has log-ML -9.785342648002954."""
    reg = fixed(prior="gaussian", prior_scale=1.0).fit(X_TR, Y_TR)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(-9.785342648002954, abs=1e-10)
    assert reg.predict_dist(X_TE).dist.name == "norm"
    assert np.isinf(reg.df_)


def test_mean_and_gp_limit_equal_sklearn_gpr():
    """§8 items 1 and 3: same mean as sklearn's GPR with the same kernel for every (a, b); with
    a = b = 1e8 the t std tends to the GPR std (relative error about |q - n + 2| / (4a))."""
    kern = NNGPKernel(depth=3, weight_variance=2.0, bias_variance=0.1, activation="relu")
    gpr = GaussianProcessRegressor(kernel=kern, alpha=1e-2, optimizer=None).fit(X_TR, Y_TR)
    g_mean, g_std = gpr.predict(X_TE, return_std=True)
    for a, b in [(0.7, 0.3), (2.0, 2.0), (50.0, 1.0)]:
        np.testing.assert_allclose(fixed(prior_shape=a, prior_scale=b).fit(X_TR, Y_TR)
                                   .predict(X_TE), g_mean, rtol=0, atol=1e-10)
    _, t_std = fixed(prior_shape=1e8, prior_scale=1e8).fit(X_TR, Y_TR).predict(
        X_TE, return_std=True)
    np.testing.assert_allclose(t_std / g_std, 1.0, rtol=1e-6)
    reg_g = fixed(prior="gaussian", prior_scale=1.0).fit(X_TR, Y_TR)
    np.testing.assert_allclose(reg_g.predict_std(X_TE), g_std, rtol=1e-10)
    # and the t log-pdf tends to the normal one
    d_t = fixed(prior_shape=1e8, prior_scale=1e8).fit(X_TR, Y_TR).predict_dist(X_TE)
    np.testing.assert_allclose(d_t.logpdf(Y_TE), stats.norm(g_mean, g_std).logpdf(Y_TE),
                               atol=1e-6)


@pytest.mark.parametrize("a,b", [(0.5, 0.1), (1.0, 3.0), (7.0, 0.5)])
def test_scale_formula(a, b):
    """§8 item 2: scale^2 = (2b+q)/(2a+n) v, std^2 = (2b+q)/(2a+n-2) v, df = 2a+n."""
    reg = fixed(prior_shape=a, prior_scale=b).fit(X_TR, Y_TR)
    v = fixed(prior="gaussian", prior_scale=1.0).fit(X_TR, Y_TR).predict_std(X_TE) ** 2
    n, q = 5, reg.q_
    dist = reg.predict_dist(X_TE)
    np.testing.assert_allclose(dist.kwds["scale"] ** 2, (2 * b + q) / (2 * a + n) * v, rtol=1e-10)
    np.testing.assert_allclose(reg.predict_std(X_TE) ** 2, (2 * b + q) / (2 * a + n - 2) * v,
                               rtol=1e-10)
    assert dist.kwds["df"] == 2 * a + n


def test_marginal_likelihood_is_multivariate_t():
    """§8 item 4: log-ML == scipy multivariate_t(0, (b/a) K_lambda, 2a) and == the quadrature
    log int N(y; 0, s K_lambda) IG(s; a, b) ds."""
    a, b = 1.5, 0.7
    reg = fixed(prior_shape=a, prior_scale=b).fit(X_TR, Y_TR)
    K = K_lambda(X_TR)
    ref = stats.multivariate_t(loc=np.zeros(5), shape=(b / a) * K, df=2 * a).logpdf(Y_TR)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(ref, abs=1e-9)
    integrand = lambda s: (stats.multivariate_normal(np.zeros(5), s * K).pdf(Y_TR)
                           * stats.invgamma.pdf(s, a, scale=b))
    val, _ = integrate.quad(integrand, 0, np.inf, limit=200)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(np.log(val), rel=1e-6)


def test_predictive_is_inverse_gamma_mixture():
    """§8 item 5: t_{2a+n}(y; mu, scale) == int N(y; mu, s v) IG(s; a + n/2, b + q/2) ds."""
    reg = fixed().fit(X_TR, Y_TR)
    gp = fixed(prior="gaussian", prior_scale=1.0).fit(X_TR, Y_TR)
    mu, v = gp.predict(X_TE, return_std=True)
    a_post, b_post = reg.posterior_shape_, reg.posterior_scale_
    dens = reg.predict_dist(X_TE).pdf(Y_TE)
    for i in range(2):
        def f(s, i=i):
            return (stats.norm.pdf(Y_TE[i], mu[i], np.sqrt(s) * v[i])
                    * stats.invgamma.pdf(s, a_post, scale=b_post))
        val, _ = integrate.quad(f, 0, np.inf, limit=200)
        assert dens[i] == pytest.approx(val, rel=1e-7)


def test_invariances():
    """§8 item 8: (K, lambda, b) -> (cK, c lambda, b/c) and (y, b) -> (cy, c^2 b); permutation."""
    c = 3.7
    base = {"depth": 1, "bias_variance": 0.2}  # depth-1 ReLU: (c wv, c bv) scales K by c
    r1 = fixed(**base).fit(X_TR, Y_TR)
    r2 = fixed(depth=1, weight_variance=2.0 * c, bias_variance=0.2 * c, alpha=1e-2 * c,
               prior_scale=2.0 / c).fit(X_TR, Y_TR)
    d1, d2 = r1.predict_dist(X_TE), r2.predict_dist(X_TE)
    np.testing.assert_allclose(d1.mean(), d2.mean(), atol=1e-10)
    np.testing.assert_allclose(d1.kwds["scale"], d2.kwds["scale"], rtol=1e-9)
    assert r1.log_marginal_likelihood_value_ == pytest.approx(r2.log_marginal_likelihood_value_,
                                                              abs=1e-9)
    r3 = fixed(**base, prior_scale=2.0 * c**2).fit(X_TR, c * Y_TR)
    d3 = r3.predict_dist(X_TE)
    np.testing.assert_allclose(d3.mean(), c * d1.mean(), atol=1e-10)
    np.testing.assert_allclose(d3.kwds["scale"], c * d1.kwds["scale"], rtol=1e-9)
    assert d3.kwds["df"] == d1.kwds["df"]
    assert r3.log_marginal_likelihood_value_ == pytest.approx(
        r1.log_marginal_likelihood_value_ - 5 * np.log(c), abs=1e-9)
    perm = np.array([3, 0, 4, 2, 1])
    r4 = fixed(**base).fit(X_TR[perm], Y_TR[perm])
    np.testing.assert_allclose(r4.predict_dist(X_TE).kwds["scale"], d1.kwds["scale"], rtol=1e-10)
    np.testing.assert_allclose(r4.predict(X_TE), d1.mean(), atol=1e-10)


def test_multi_output_shares_the_scale():
    """§8 item 9: C copies of y: df = 2a + nC and q = C q_1."""
    C = 3
    r1 = fixed().fit(X_TR, Y_TR)
    rc = fixed().fit(X_TR, np.tile(Y_TR[:, None], (1, C)))
    assert rc.df_ == 4 + 5 * C
    assert rc.q_ == pytest.approx(C * r1.q_, rel=1e-12)
    mean, std = rc.predict(X_TE, return_std=True)
    assert mean.shape == std.shape == (2, C)
    np.testing.assert_allclose(mean[:, 1], r1.predict(X_TE), atol=1e-12)
    _, cov = rc.predict(X_TE, return_cov=True)
    assert cov.shape == (2, 2, C)
    np.testing.assert_allclose(np.sqrt(np.diagonal(cov[:, :, 0])), std[:, 0], rtol=1e-12)
    lml = stats.multivariate_t(loc=np.zeros(5), shape=K_lambda(X_TR), df=4.0)
    assert np.isfinite(lml.logpdf(Y_TR))


def test_include_noise_adds_scaled_lambda():
    """include_noise=True adds s*lambda: variance(noisy) - variance(latent) = E[s|y] lambda."""
    noisy = fixed(include_noise=True).fit(X_TR, Y_TR)
    latent = fixed().fit(X_TR, Y_TR)
    es = noisy.posterior_scale_ / (noisy.posterior_shape_ - 1)
    np.testing.assert_allclose(noisy.predict_std(X_TE) ** 2 - latent.predict_std(X_TE) ** 2,
                               es * 1e-2, rtol=1e-9)
    d_n, d_l = noisy.predict_dist(X_TE), latent.predict_dist(X_TE)
    np.testing.assert_allclose(d_n.kwds["scale"] ** 2 - d_l.kwds["scale"] ** 2,
                               (2 * 2 + noisy.q_) / (2 * 2 + 5) * 1e-2, rtol=1e-9)
    assert StudentTProcessRegressor().include_noise  # default: the distribution of y


def test_std_is_sqrt_diag_cov_and_block_size_invariant(rng, monkeypatch):
    X = rng.normal(size=(60, 4))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    Xt = rng.normal(size=(17, 4))
    reg = StudentTProcessRegressor(random_state=0, max_iter=15, device="cpu").fit(X, y)
    mean, std = reg.predict(Xt, return_std=True)
    _, cov = reg.predict(Xt, return_cov=True)
    np.testing.assert_allclose(std, np.sqrt(np.diag(cov)), rtol=1e-10)
    import skbnngp._backend._gp as gp_module

    monkeypatch.setattr(gp_module, "auto_batch_size", lambda n, batch_size, elements: 3)
    m2, s2 = reg.predict(Xt, return_std=True)  # rows in blocks of 3
    np.testing.assert_allclose(m2, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s2, std, rtol=1e-10)


def test_sample_y_moments():
    """§8 item 10 analogue: sample variance at a point == E[s|y] v (n = 40000, 5% tolerance)."""
    reg = fixed().fit(X_TR, Y_TR)
    s = reg.sample_y(X_TE[:1], n_samples=40000, random_state=1)
    assert s.shape == (1, 40000)
    mean, std = reg.predict(X_TE[:1], return_std=True)
    assert np.var(s) == pytest.approx(std[0] ** 2, rel=0.05)
    assert np.mean(s) == pytest.approx(mean[0], abs=4 * std[0] / np.sqrt(40000) * 2)
    np.testing.assert_array_equal(reg.sample_y(X_TE, 3, random_state=2),
                                  reg.sample_y(X_TE, 3, random_state=2))
    for bad in (0, -1, 2.5, "a"):
        with pytest.raises(ValueError, match="n_samples must be an integer"):
            reg.sample_y(X_TE, n_samples=bad)


# ----------------------------------------------------------------------------- other priors
def test_snis_and_quadrature_reproduce_the_closed_form():
    """§8 items 6-7: with H = IG, SNIS (N = 2e5) gives E[s|y] within 2% and log-densities within
    0.01 nats; quadrature within 1e-6."""
    exact = fixed(prior_shape=2.0, prior_scale=2.0).fit(X_TR, Y_TR)
    ig = stats.invgamma(2.0, scale=2.0)
    snis = fit_with(fixed(prior=ig, inference="snis", random_state=0), X_TR, Y_TR,
                    N_PRIOR_SAMPLES=200000)
    quad = fixed(prior=ig, inference="quadrature").fit(X_TR, Y_TR)
    e_s = exact.posterior_scale_ / (exact.posterior_shape_ - 1)
    d_snis = snis.predict_dist(X_TE)
    assert isinstance(d_snis, ScaleMixtureNormal)
    assert d_snis.var()[0] / exact.predict_std(X_TE)[0] ** 2 == pytest.approx(1, rel=0.02)
    assert float(np.dot(d_snis.weights, d_snis.scales)) == pytest.approx(e_s, rel=0.02)
    ref = exact.predict_dist(X_TE).logpdf(Y_TE)
    np.testing.assert_allclose(d_snis.logpdf(Y_TE), ref, atol=0.01)
    np.testing.assert_allclose(quad.predict_dist(X_TE).logpdf(Y_TE), ref, atol=1e-6)
    assert quad.log_marginal_likelihood_value_ == pytest.approx(
        exact.log_marginal_likelihood_value_, abs=1e-6)
    assert 1 < snis.effective_sample_size_ < 200000
    assert exact.effective_sample_size_ is None


def test_burr_prior_snis_vs_quadrature():
    """Burr XII (spec §3.2) as a scipy prior: the two general-prior engines agree; mixture
    methods consistent."""
    burr = stats.burr12(2.0, 1.5)
    q = fixed(prior=burr, inference="quadrature").fit(X_TR, Y_TR)
    s = fit_with(fixed(prior=burr, inference="snis", random_state=0), X_TR, Y_TR,
                 N_PRIOR_SAMPLES=100000)
    dq, ds = q.predict_dist(X_TE), s.predict_dist(X_TE)
    np.testing.assert_allclose(ds.logpdf(Y_TE), dq.logpdf(Y_TE), atol=0.02)
    assert s.log_marginal_likelihood_value_ == pytest.approx(q.log_marginal_likelihood_value_,
                                                             abs=0.02)
    lo, hi = dq.interval(0.9)
    np.testing.assert_allclose(dq.cdf(hi) - dq.cdf(lo), 0.9, atol=1e-8)
    np.testing.assert_allclose(q.predict_std(X_TE), dq.std(), rtol=1e-12)
    np.testing.assert_allclose(q.predict(X_TE), fixed().fit(X_TR, Y_TR).predict(X_TE),
                               atol=1e-10)  # item 1: the mean ignores the prior


# ----------------------------------------------------------------------------- trained modes
def test_readout_trained_mode():
    """§8 item 12 (Thm 3.2): df = 2a, scale^2 = (b/a) v, mean = NNGP mean."""
    reg = fit_with(fixed(prior_shape=3.0, prior_scale=1.5), X_TR, Y_TR,
                   PREDICTIVE="readout_trained")
    gp = fixed(prior="gaussian", prior_scale=1.0).fit(X_TR, Y_TR)
    mu, v = gp.predict(X_TE, return_std=True)
    d = reg.predict_dist(X_TE)
    assert d.kwds["df"] == 6.0 and reg.df_ == 6.0
    np.testing.assert_allclose(d.kwds["scale"] ** 2, 0.5 * v**2, rtol=1e-10)
    np.testing.assert_allclose(d.mean(), mu, atol=1e-12)
    heavy = fit_with(fixed(prior_shape=0.9), X_TR, Y_TR, PREDICTIVE="readout_trained")
    assert np.all(np.isinf(heavy.predict_std(X_TE)))  # df = 1.8 <= 2: no variance (§7 item 16)


def test_ntk_trained_mode_reference_values():
    """§8 fixture, NTK mode (Thm 3.3): mean and Theta'; E[s] = b/(a-1) = 2 under IG(2, 2)."""
    reg = fit_with(fixed(calibration="auto"), X_TR, Y_TR, PREDICTIVE="ntk_trained")
    mean, cov = reg.predict(X_TE, return_cov=True)
    np.testing.assert_allclose(mean, [0.1562601456, 0.2615994819], atol=1e-9)
    theta = np.array([[0.0238003541, -0.0030275855], [-0.0030275855, 0.6590814033]])
    np.testing.assert_allclose(cov / 2.0, theta, atol=1e-9)
    np.testing.assert_allclose(reg.predict_std(X_TE), np.sqrt(np.diag(cov)), rtol=1e-10)
    assert reg.df_ == 4.0
    assert reg.calibration_ is None and reg.calibration_factor_ == 1.0  # never calibrated


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("kw,settings", [
    ({}, {}), ({}, {"ALPHA_MODE": "relative"}),
    ({"prior": stats.burr12(2.0, 1.0), "inference": "quadrature"}, {}),
    ({"prior": "gaussian"}, {}), ({"activation": "erf", "depth": 2}, {})])
def test_lml_gradient_matches_finite_differences(kw, settings):
    """§8 item 11: the explicit-adjoint gradient of the log-ML equals finite differences."""
    reg = fit_with(fixed(**kw), X_TR, Y_TR, **settings)
    theta = np.log([1.7, 0.3, 0.05, 2.5, 1.2])
    val, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    fd = optimize.approx_fprime(theta, lambda t: reg.log_marginal_likelihood(t), 1e-7)
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-6)
    assert val == pytest.approx(reg.log_marginal_likelihood(theta))


@pytest.mark.parametrize("kw", [{}, {"ALPHA_MODE": "relative"}, {"ard": True}])
def test_tiled_gradient_path_equals_the_dense_one_and_finite_differences(kw, monkeypatch):
    """The CUDA path of the exact gradient (through ``L^-1`` by tiles, no n x n adjoint),
    forced on the CPU with ragged 7-row tiles: the same value and gradient as the dense
    adjoint, and finite differences agree."""
    import skbnngp._backend._gp as gp_module

    r = np.random.default_rng(3)
    X, y = r.normal(size=(30, 3)), r.normal(size=30)
    monkeypatch.setattr(gp_module, "KEEP_GRAPH_ELEMENTS", 0)
    settings = {k: v for k, v in kw.items() if k.isupper()}
    reg = fit_with(fixed(**{k: v for k, v in kw.items() if not k.isupper()}), X, y, **settings)
    theta = np.log([1.7, 0.3, 0.05, 2.5, 1.2] + ([1.3, 0.6, 0.9] if kw.get("ard") else []))
    val, dense = reg.log_marginal_likelihood(theta, eval_gradient=True)
    monkeypatch.setattr(gp_module, "TILED_DEVICES", ("cpu",))
    monkeypatch.setattr(gp_module, "ADJOINT_TILE", 7)
    val_t, tiled = reg.log_marginal_likelihood(theta, eval_gradient=True)
    assert val_t == pytest.approx(val, rel=1e-12)  # the same factorisation, recomputed
    np.testing.assert_allclose(tiled, dense, rtol=1e-9, atol=1e-12)
    fd = optimize.approx_fprime(theta, lambda t: reg.log_marginal_likelihood(t), 1e-7)
    np.testing.assert_allclose(tiled, fd, rtol=1e-4, atol=1e-6)


def test_ard_gradient_and_relevance():
    """ARD: the relevance gradient matches finite differences, r = 1 reproduces ard=False, and
    an irrelevant feature ends with a much smaller relevance than the relevant one."""
    reg = fixed(ard=True).fit(X_TR, Y_TR)
    theta = np.concatenate([np.log([1.7, 0.3, 0.05, 2.5, 1.2]), [0.3, -0.5, 0.8]])
    _, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    fd = optimize.approx_fprime(theta, lambda t: reg.log_marginal_likelihood(t), 1e-7)
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-6)
    plain = fixed().fit(X_TR, Y_TR)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(
        plain.log_marginal_likelihood_value_, abs=1e-12)
    r = np.random.default_rng(0)
    X = r.normal(size=(120, 2))
    y = np.sin(2 * X[:, 0]) + 0.05 * r.normal(size=120)
    ard = StudentTProcessRegressor(ard=True, device="cpu", random_state=0).fit(X, y)
    assert ard.relevance_[1] < 0.25 * ard.relevance_[0]


def test_lml_gradient_matches_autograd_through_cholesky():
    """The fast adjoint path equals plain autograd through torch.linalg.cholesky."""
    reg = fixed().fit(X_TR, Y_TR)
    theta = np.log([1.7, 0.3, 0.05, 2.5, 1.2])
    _, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    th = torch.tensor(theta, requires_grad=True)
    p = th.exp()
    K = nngp_kernel(torch.as_tensor(X_TR), depth=3, weight_variance=p[0], bias_variance=p[1],
                    activation="relu") + p[2] * torch.eye(5, dtype=torch.float64)
    L = torch.linalg.cholesky(K)
    y = torch.as_tensor(Y_TR)[:, None]
    q = (torch.cholesky_solve(y, L) * y).sum()
    a, b = p[3], p[4]
    lml = (torch.lgamma(a + 2.5) - torch.lgamma(a) - 2.5 * torch.log(2 * np.pi * b)
           - torch.log(L.diagonal()).sum() - (a + 2.5) * torch.log1p(q / (2 * b)))
    lml.backward()
    np.testing.assert_allclose(grad, th.grad.numpy(), rtol=1e-8, atol=1e-10)


# ----------------------------------------------------------------------------- fitting
def _data(n=80, seed=0, d=3):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n, d))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 / 2 + 0.1 * r.normal(size=n)
    return X, y


def test_optimisation_improves_lml_and_converges():
    X, y = _data()
    start = StudentTProcessRegressor(optimizer=None, device="cpu").fit(X, y)
    reg = StudentTProcessRegressor(random_state=0, device="cpu").fit(X, y)
    assert reg.converged_
    assert reg.log_marginal_likelihood_value_ > start.log_marginal_likelihood_value_ + 1.0
    assert reg.loss_curve_[-1] < reg.loss_curve_[0]
    assert reg.n_iter_ > 0
    assert reg.hyperparameters_["prior_shape"] == 2.0  # fixed by default
    for h, v in reg.hyperparameters_.items():
        if st.HYPERPARAMETER_BOUNDS[h] == "fixed":
            continue
        lo, hi = st.HYPERPARAMETER_BOUNDS[h]
        assert lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)


def test_restarts_never_worse_and_fixed_bounds_respected():
    X, y = _data(n=50)
    one = StudentTProcessRegressor(random_state=0, device="cpu").fit(X, y)
    many = StudentTProcessRegressor(random_state=0, n_restarts_optimizer=2, device="cpu").fit(X, y)
    assert many.log_marginal_likelihood_value_ >= one.log_marginal_likelihood_value_ - 1e-6
    fixed_w = fit_with(StudentTProcessRegressor(weight_variance=1.3, device="cpu",
                                                random_state=0), X, y,
                       HYPERPARAMETER_BOUNDS=bounds(weight_variance="fixed"))
    assert fixed_w.hyperparameters_["weight_variance"] == pytest.approx(1.3)


def test_convergence_warning_when_max_iter_too_small():
    X, y = _data(n=40)
    with pytest.warns(ConvergenceWarning, match="StudentTProcessRegressor: hyperparameter"):
        reg = StudentTProcessRegressor(max_iter=1, device="cpu").fit(X, y)
    assert not reg.converged_


def test_subset_warm_start_matches_full_optimisation():
    X, y = _data(n=300, seed=1)
    full = fit_with(StudentTProcessRegressor(device="cpu", random_state=0), X, y,
                    SUBSET_SIZE=None)
    sub = fit_with(StudentTProcessRegressor(device="cpu", random_state=0), X, y,
                   SUBSET_SIZE=100, REFINE_ITER=10)
    # per-datum log-ML within 0.02 nats of the full optimisation
    assert (sub.log_marginal_likelihood_value_ / 300
            >= full.log_marginal_likelihood_value_ / 300 - 0.02)


def test_verbose_reports_progress(capsys):
    X, y = _data(n=30)
    StudentTProcessRegressor(verbose=1, max_iter=3, device="cpu").fit(X, y)
    assert "eval" in capsys.readouterr().out
    StudentTProcessRegressor(verbose=0, max_iter=3, device="cpu").fit(X, y)
    assert capsys.readouterr().out == ""


def test_adam_optimizer_and_float32():
    X, y = _data(n=60)
    reg = StudentTProcessRegressor(optimizer="adam", max_iter=100, device="cpu",
                                   random_state=0).fit(X, y)
    start = StudentTProcessRegressor(optimizer=None, device="cpu").fit(X, y)
    assert reg.log_marginal_likelihood_value_ > start.log_marginal_likelihood_value_
    r64 = StudentTProcessRegressor(optimizer=None, device="cpu").fit(X, y)
    r32 = StudentTProcessRegressor(optimizer=None, device="cpu", dtype="float32").fit(X, y)
    np.testing.assert_allclose(r32.predict(X[:5]), r64.predict(X[:5]), atol=1e-3)


def test_small_data_heavy_tails_beat_the_gaussian():
    """Few points, t(3) noise: the t predictive's mean test NLL over 10 fixed draws beats the
    NNGP's (spec §5.3's robustness demo; the setup of examples/plot_student_t_heavy_tails.py).
    The paper's predictives (``calibration=None``) are compared, measured 0.55 vs
    1.02; the default Student-t calibration (0.49) must not undo the t-process's gain."""
    from skbnngp.datasets import make_heavy_tailed
    nll_t, nll_g, nll_default = [], [], []
    for seed in range(10):
        X, y = make_heavy_tailed(n_samples=415, n_features=1, df=3, noise=0.1,
                                 random_state=seed)
        for nll, kw in ((nll_t, {"calibration": None}),
                        (nll_g, {"prior": "gaussian", "calibration": None}),
                        (nll_default, {})):
            m = StudentTProcessRegressor(device="cpu", random_state=0, **kw).fit(X[:15], y[:15])
            nll.append(-m.predict_dist(X[15:]).logpdf(y[15:]).mean())
    assert np.mean(nll_t) < np.mean(nll_g) - 0.2
    assert np.mean(nll_default) < np.mean(nll_t) + 0.05


# ----------------------------------------------------------------------------- sklearn API
def test_pipeline_gridsearch_cv_clone_pickle():
    X, y = _data(n=60)
    pipe = make_pipeline(StandardScaler(),
                         StudentTProcessRegressor(max_iter=10, device="cpu", random_state=0))
    scores = cross_val_score(pipe, X, y, cv=3)
    assert np.all(scores > 0.3)
    gs = GridSearchCV(StudentTProcessRegressor(max_iter=5, device="cpu", random_state=0),
                      {"depth": [1, 2]}, cv=2, n_jobs=2).fit(X, y)
    assert gs.best_params_["depth"] in (1, 2)
    reg = StudentTProcessRegressor(prior=stats.burr12(2.0, 1.0), max_iter=10, device="cpu",
                                   random_state=0).fit(X, y)
    for blob in (pickle.dumps(reg),):
        back = pickle.loads(blob)
        assert_same_predictions(back.predict(X[:7]), reg.predict(X[:7]))
        assert_same_predictions(back.predict_std(X[:7]), reg.predict_std(X[:7]))
    assert "_cache" not in reg.__getstate__()
    path = "/tmp/skbnngp_stp.joblib"
    joblib.dump(reg, path)
    assert_same_predictions(joblib.load(path).predict(X[:3]), reg.predict(X[:3]))
    c = clone(reg)
    assert not hasattr(c, "L_")
    params, cloned = reg.get_params(), c.get_params()
    assert cloned.pop("prior").args == params.pop("prior").args  # a deep copy of the prior
    assert cloned == params


def test_cholesky_factor_is_read_on_demand_and_not_pickled():
    # L_ is made from the device factorisation when asked for: it must still be the factor
    # of K + lambda I (L L^T dual_coef_ = y_train_), and a pickle must not carry the n x n
    # array (the loaded model refactorises and gives the same factor)
    X, y = _data(n=120)
    reg = StudentTProcessRegressor(max_iter=5, device="cpu", random_state=0).fit(X, y)
    check_factor_read_on_demand(reg)


def test_random_state_repeatable():
    X, y = _data(n=40)
    kw = {"prior": stats.burr12(2.0, 1.0), "n_restarts_optimizer": 1, "max_iter": 5,
          "device": "cpu"}
    a = StudentTProcessRegressor(random_state=3, **kw).fit(X, y).predict_std(X[:4])
    b = StudentTProcessRegressor(random_state=3, **kw).fit(X, y).predict_std(X[:4])
    np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("X,y,match", [
    (np.array([[1.0, np.nan], [2, 3], [3, 4]]), np.arange(3.0), "NaN"),
    (np.array([[1.0, np.inf], [2, 3], [3, 4]]), np.arange(3.0), "infinity"),
    (np.arange(5.0), np.arange(5.0), "2D array"),
    (np.ones((5, 2)), np.arange(4.0), "inconsistent numbers of samples"),
    (np.ones((1, 2)), np.arange(1.0), "1 sample"),
    (np.array([["a", "b"], ["c", "d"]]), np.arange(2.0), "X must be numeric"),
    (np.ones((3, 2)) + 1j, np.arange(3.0), "Complex"),
    (np.ones((3, 2)), np.array([1.0, np.nan, 2.0]), "NaN"),
])
def test_bad_input_raises_value_error(X, y, match):
    with pytest.raises(ValueError, match=match):
        StudentTProcessRegressor(device="cpu").fit(X, y)


def test_sparse_and_wrong_feature_count():
    X, y = _data(n=20)
    with pytest.raises(TypeError, match="[Ss]parse"):
        StudentTProcessRegressor(device="cpu").fit(sparse.csr_matrix(X), y)
    reg = StudentTProcessRegressor(max_iter=3, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="features"):
        reg.predict(X[:, :2])


@pytest.mark.parametrize("params,match", [
    ({"weight_variance": -1.0}, "weight_variance"),
    ({"prior_shape": 0.0}, "prior_shape"),
    ({"alpha": 0.0}, "alpha"),
    ({"depth": 0}, "depth"),
    ({"prior": "cauchy"}, "prior"),
    ({"prior": "burr12"}, "prior"),
    ({"weight_variance": 5e3}, "outside weight_variance_bounds"),
    ({"prior": "gaussian", "inference": "snis"}, "point mass"),
    ({"prior": stats.burr12(2.0, 1.0), "inference": "exact"}, "inference='exact'"),
    ({"device": "nonsense:0"}, "device"),
    ({"calibration": "loo"}, "calibration"),
    ({"ard": "sometimes"}, "ard"),
])
def test_invalid_parameters(params, match):
    X, y = _data(n=10)
    with pytest.raises(ValueError, match=match):
        StudentTProcessRegressor(**params).fit(X, y)


def test_invalid_bounds_are_refused():
    X, y = _data(n=10)
    with pytest.raises(ValueError, match="weight_variance_bounds"):
        fit_with(StudentTProcessRegressor(), X, y,
                 HYPERPARAMETER_BOUNDS=bounds(weight_variance=(2.0, 1.0)))


def test_constant_y_and_duplicated_rows_are_handled():
    X, y = _data(n=20)
    reg = StudentTProcessRegressor(max_iter=5, device="cpu").fit(X, np.full(20, 3.0))
    mean, std = reg.predict(X[:3], return_std=True)
    np.testing.assert_allclose(mean, 3.0, atol=1e-8)
    assert np.all(np.isfinite(std))
    Xd = np.vstack([X, X])
    # repeated inputs with other targets keep a singular kernel (exact (x, y) duplicates are
    # merged into weighted rows and do not)
    yd = np.concatenate([y, y + 0.01])
    with pytest.warns(NumericalWarning, match="jitter"):
        dup = fixed(alpha=1e-16, normalize_X=True).fit(Xd, yd)
    assert np.all(np.isfinite(dup.predict(X[:4], return_std=True)[1]))
    merged = fixed(alpha=1e-16, normalize_X=True).fit(Xd, np.concatenate([y, y]))
    assert merged.X_train_.shape[0] == 20
    assert np.all(np.isfinite(merged.predict(X[:4], return_std=True)[1]))




# ----------------------------------------------------------------------------- ard="auto"
def _fit(X, y, **kw):
    return StudentTProcessRegressor(device="cpu", random_state=0, **kw).fit(X, y)


@pytest.fixture(scope="module")
def one_relevant():
    # y varies fast along feature 0 and not at all along the other three: a shared kernel
    # must either blur feature 0 or read the three noise features as signal
    rng = np.random.RandomState(0)
    X = rng.randn(120, 4)
    return X, np.sin(3 * X[:, 0]) + 0.1 * rng.randn(120)


@pytest.fixture(scope="module")
def isotropic():
    # every feature counts the same: per-feature relevances have nothing to add
    rng = np.random.RandomState(1)
    X = rng.randn(120, 4)
    return X, np.sin(X.sum(1)) + 0.1 * rng.randn(120)


def _loo_gain(ard, shared):
    a, s = ard._loo_log_density(), shared._loo_log_density()
    g = a - s
    return g.mean(), g.std(ddof=1) / np.sqrt(g.size)


def test_auto_takes_ard_where_one_feature_matters_and_is_the_explicit_fit(one_relevant):
    """Issue 19: the per-feature relevances are kept only when the paired leave-one-out log
    predictive densities say they pay."""
    X, y = one_relevant
    auto, ard, shared = _fit(X, y, ard="auto"), _fit(X, y, ard=True), _fit(X, y, ard=False)
    assert auto.ard_ and ard.ard_ and not shared.ard_
    gain, se = auto.ard_loo_gain_
    assert (gain, se) == pytest.approx(_loo_gain(ard, shared), rel=1e-8)
    assert gain > 2 * se > 0
    Xq = np.random.RandomState(2).randn(20, 4)
    assert_same_predictions(auto.predict(Xq), ard.predict(Xq))
    assert_same_predictions(auto.predict_std(Xq), ard.predict_std(Xq))
    assert auto.relevance_[0] > 10 * auto.relevance_[1:].max()
    assert ard.ard_loo_gain_ is None and shared.ard_loo_gain_ is None


def test_auto_keeps_the_shared_kernel_where_features_count_alike(isotropic):
    X, y = isotropic
    auto, shared = _fit(X, y, ard="auto"), _fit(X, y, ard=False)
    assert not auto.ard_
    gain, se = auto.ard_loo_gain_
    assert not gain > max(2 * se, 1e-3)
    np.testing.assert_array_equal(auto.relevance_, np.ones(4))
    Xq = np.random.RandomState(3).randn(20, 4)
    assert_same_predictions(auto.predict(Xq), shared.predict(Xq))
    assert auto.get_params()["ard"] == "auto"  # the parameter is kept, the choice is ard_


def test_one_feature_needs_no_comparison(one_relevant):
    X, y = one_relevant
    auto = _fit(X[:, :1], y, ard="auto")
    assert auto.ard_ is False and auto.ard_loo_gain_ is None


def test_loo_log_density_is_the_density_of_each_row_given_the_others(one_relevant):
    """A Gaussian prior without calibration: each row's leave-one-out density, from the
    conditional of the fitted training covariance, as refitting without the row at the same
    hyperparameters would give it."""
    X, y = one_relevant
    X, y = X[:40], y[:40]
    reg = _fit(X, y, ard=True, prior="gaussian", calibration=None)
    K = reg.L_ @ reg.L_.T  # the noisy training covariance, unit amplitude
    Y = reg.y_train_[:, 0]
    want = []
    for i in range(len(Y)):
        o = np.arange(len(Y)) != i
        w = np.linalg.solve(K[np.ix_(o, o)], K[o, i])
        mean, var = w @ Y[o], K[i, i] - K[i, o] @ w
        want.append(stats.norm(mean, np.sqrt(var * reg._variance_multiplier())).logpdf(Y[i]))
    np.testing.assert_allclose(reg._loo_log_density(), want, rtol=1e-8)


# ----------------------------------------------------------------------------- relevance prior
@pytest.fixture(scope="module")
def few_rows():
    # 40 rows, six features, two of them relevant: maximum evidence spreads the relevances
    # of the four noise features over the whole box
    rng = np.random.RandomState(3)
    X = rng.randn(40, 6)
    return X, np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.randn(40)


def _fit_tau(X, y, tau, **kw):
    return fit_with(StudentTProcessRegressor(device="cpu", random_state=0, **kw), X, y,
                    RELEVANCE_PRIOR=tau)


def _spread(reg):
    return float(np.std(np.log(reg.relevance_)))


def _log_theta(reg):
    return np.log([reg.hyperparameters_[h] for h in HYPERPARAMETERS] + list(reg.relevance_))


def test_penalty_is_the_centred_gaussian_log_prior():
    """Issue 19: a Gaussian hyperprior on the spread of the ARD log relevances around their
    mean makes the ARD hyperparameters maximum a posteriori."""
    tau = 0.7
    pen = relevance_penalty(tau, 4)
    raw = torch.tensor([0.3, -1.0, 0.2, 0.7, 0.1, 1.0, -2.0, 0.5, 3.0], dtype=torch.float64,
                       requires_grad=True)
    value, grad = pen(raw.detach())
    dev = raw[5:] - raw[5:].mean()
    ref = 0.5 * torch.sum(dev ** 2) / tau ** 2
    (ref_grad,) = torch.autograd.grad(ref, raw)
    assert float(value) == pytest.approx(float(ref.detach()), rel=1e-12)
    torch.testing.assert_close(grad, ref_grad)
    assert torch.all(grad[:5] == 0)
    # the common level of the relevances is free: a shift costs nothing
    shifted = raw.detach().clone()
    shifted[5:] += 2.5
    assert float(pen(shifted)[0]) == pytest.approx(float(value), rel=1e-12)
    # nothing to shrink with fewer than two relevances, or without the prior
    assert relevance_penalty(st.RELEVANCE_PRIOR, 1) is None
    assert relevance_penalty(None, 4) is None


def test_the_fit_is_a_stationary_point_of_the_map_objective(few_rows):
    X, y = few_rows
    tau = 1.5
    reg = _fit_tau(X, y, tau)
    theta = _log_theta(reg)
    _, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    rel = theta[5:]
    free = (np.abs(rel - np.log(1e-3)) > 1e-3) & (np.abs(rel - np.log(1e3)) > 1e-3)
    g_map = -grad[5:] + (rel - rel.mean()) / tau ** 2
    # the evidence alone is far from stationary there (the prior pulls), the MAP objective
    # is stationary in every relevance inside the box
    assert np.max(np.abs(grad[5:][free])) > 0.5
    assert np.max(np.abs(g_map[free])) < 0.05 * np.max(np.abs(grad[5:][free]))


def test_the_prior_shrinks_the_spread_towards_the_shared_kernel(few_rows):
    X, y = few_rows
    free = _fit_tau(X, y, None)
    spreads = [_spread(_fit_tau(X, y, tau)) for tau in (3.0, 1.0, 1e-3)]
    assert spreads[0] < _spread(free)
    assert spreads[1] < spreads[0]
    assert spreads[2] < 1e-2  # the limit: one relevance shared by every feature
    # the relevant features stay the most relevant
    reg = _fit(X, y)
    assert set(np.argsort(reg.relevance_)[-2:]) == {0, 1}


def test_a_wide_prior_is_the_maximum_evidence_fit(few_rows):
    X, y = few_rows
    wide, free = _fit_tau(X, y, 1e4), _fit_tau(X, y, None)
    np.testing.assert_allclose(np.log(wide.relevance_), np.log(free.relevance_), atol=1e-3)
    np.testing.assert_allclose(wide.predict(X[:10]), free.predict(X[:10]), rtol=1e-4,
                               atol=1e-6)


def test_no_effect_with_one_feature_or_without_ard():
    rng = np.random.RandomState(4)
    X = rng.randn(50, 1)
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.randn(50)
    a, b = _fit(X, y), _fit_tau(X, y, None)
    assert_same_predictions(a.predict(X), b.predict(X))
    X4 = rng.randn(50, 4)
    a, b = _fit(X4, y, ard=False), _fit_tau(X4, y, None, ard=False)
    assert_same_predictions(a.predict(X4), b.predict(X4))


# ----------------------------------------------------------------------------- fitted state
def _small():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)


@pytest.mark.parametrize("change", [{"depth": 1}, {"activation": "erf"}, {"ard": False},
                                    {"dtype": "float32"}, {"prior_shape": 50.0},
                                    {"ALPHA_MODE": "relative"},
                                    {"PREDICTIVE": "ntk_trained"},
                                    {"PREDICTIVE": "readout_trained"}])
def test_set_params_after_fit_changes_nothing_until_refit(change):
    """Issue 18 item 3: predict and an unpickled model read the fitted configuration, never
    a parameter or a module setting changed since fit."""
    X, y = _small()
    reg = StudentTProcessRegressor(max_iter=5, device="cpu", random_state=0).fit(X, y)
    mean, std = reg.predict(X, return_std=True)
    settings = {k: v for k, v in change.items() if k.isupper()}
    reg.set_params(**{k: v for k, v in change.items() if not k.isupper()})
    with mock.patch.multiple(st, **settings) if settings else contextlib.nullcontext():
        back = pickle.loads(pickle.dumps(reg))
        for est in (reg, back):
            m, s = est.predict(X, return_std=True)
            np.testing.assert_allclose(m, mean, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(s, std, rtol=1e-10, atol=1e-12)
    assert back.depth_ == 3 and back.activation_ == "relu" and back.ard_


def test_predict_time_parameters_are_validated():
    """Issue 18 item 4: ``include_noise``, read at predict time, is checked there."""
    X, y = _small()
    reg = StudentTProcessRegressor(max_iter=5, device="cpu", random_state=0).fit(X, y)
    reg.set_params(include_noise="maybe")
    with pytest.raises(ValueError, match="include_noise"):
        reg.predict(X, return_std=True)


def test_calibration_auto_is_the_student_t_calibration():
    X, y = _small()
    auto = StudentTProcessRegressor(max_iter=5, device="cpu", random_state=0).fit(X, y)
    t = clone(auto).set_params(calibration="student_t").fit(X, y)
    g = clone(auto).set_params(calibration="gaussian").fit(X, y)
    none = clone(auto).set_params(calibration=None).fit(X, y)
    assert auto.calibration == "auto" and auto.calibration_ == "student_t"
    assert (g.calibration_, none.calibration_) == ("gaussian", None)
    assert_same_predictions(auto.predict_std(X), t.predict_std(X))
    assert auto.predictive_df_ == t.predictive_df_ <= auto.df_
    assert (g.predictive_df_, none.predictive_df_) == (g.df_, none.df_)  # their own t
    assert g.calibration_factor_ >= 1.0 and none.calibration_factor_ == 1.0
    assert_same_predictions(g.predict(X), none.predict(X))  # the mean is never calibrated


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
@pytest.mark.parametrize("kw", [{"ard": False}, {"ard": True, "max_iter": 10}])
def test_cuda_matches_cpu(kw):
    """Issue 11: the same configuration fitted on CUDA and on the CPU predicts alike (the
    kernel blocks and the inverse route differ between devices, the model does not)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=150)
    cpu = StudentTProcessRegressor(device="cpu", random_state=0, **kw).fit(X, y)
    gpu = StudentTProcessRegressor(device="cuda", random_state=0, **kw).fit(X, y)
    m0, s0 = cpu.predict(X, return_std=True)
    m1, s1 = gpu.predict(X, return_std=True)
    np.testing.assert_allclose(m1, m0, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(s1, s0, rtol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
@pytest.mark.parametrize("kw", [{"ard": True}, {"ALPHA_MODE": "relative"}])
def test_cuda_tiled_gradient_and_loo_match_cpu(kw, monkeypatch):
    """On CUDA, above the kept-graph size, the gradient and the LOO variances go through
    ``L^-1`` by tiles (ragged 7-row tiles here): the same value, gradient and calibration
    factor as the CPU's dense route."""
    import skbnngp._backend._gp as gp_module

    monkeypatch.setattr(gp_module, "KEEP_GRAPH_ELEMENTS", 0)
    monkeypatch.setattr(gp_module, "ADJOINT_TILE", 7)
    r = np.random.default_rng(3)
    X, y = r.normal(size=(30, 3)), r.normal(size=30)
    theta = np.log([1.7, 0.3, 0.05, 2.5, 1.2] + ([1.3, 0.6, 0.9] if kw.get("ard") else []))
    out = {}
    for device in ("cpu", "cuda"):
        reg = fit_with(fixed(device=device, calibration="gaussian",
                             **{k: v for k, v in kw.items() if not k.isupper()}), X, y,
                       **{k: v for k, v in kw.items() if k.isupper()})
        out[device] = (*reg.log_marginal_likelihood(theta, eval_gradient=True),
                       reg.calibration_factor_)
    assert out["cuda"][0] == pytest.approx(out["cpu"][0], rel=1e-10)
    np.testing.assert_allclose(out["cuda"][1], out["cpu"][1], rtol=1e-8, atol=1e-10)
    assert out["cuda"][2] == pytest.approx(out["cpu"][2], rel=1e-8)


def _sparse_linear(n, d, seed):
    """Five relevant features among ``d``, Gaussian noise of sd 0.5."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, X[:, :5].sum(axis=1) + np.sin(X[:, 0]) + 0.5 * rng.standard_normal(n)


def test_ard_on_many_features_and_few_rows_warns_that_intervals_under_cover():
    """ARD fits one relevance per feature on the rows whose leave-one-out residuals then
    calibrate the predictive; with 100 features on 150 rows those residuals are narrower
    than fresh rows', and the 90 % intervals hold about 0.77 of 2,000 fresh rows (a
    Monte-Carlo error of 0.01). The fit says so and points to ConformalRegressor's cv+,
    which refits the relevances per fold and covers. Few features, ``ard=False`` or no
    calibration fit silently."""
    import warnings

    from skbnngp import ConformalRegressor

    X, y = _sparse_linear(2150, 100, 0)
    X, Xt, y, yt = X[:150], X[150:], y[:150], y[150:]
    with pytest.warns(UserWarning, match=r"100 feature relevances on 150 distinct rows.*"
                                          r"ConformalRegressor\(method='cv\+'\)"):
        reg = StudentTProcessRegressor(random_state=0).fit(X, y)
    lo, hi = reg.predict_interval(Xt, confidence=0.9)
    assert np.mean((yt >= lo) & (yt <= hi)) < 0.85
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conf = ConformalRegressor(StudentTProcessRegressor(random_state=0),
                                  method="cv+").fit(X, y)
    lo, hi = conf.predict_interval(Xt, confidence=0.9)
    assert np.mean((yt >= lo) & (yt <= hi)) >= 0.88
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        StudentTProcessRegressor(random_state=0).fit(X[:, :30], y)
        StudentTProcessRegressor(ard=False).fit(X, y)
        StudentTProcessRegressor(calibration=None, random_state=0).fit(X, y)
