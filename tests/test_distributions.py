"""ScaleMixtureNormal (the predictive of sampled/quadrature scale priors) and NormalMixture
(the predictive of an ensemble of Gaussians)."""

import numpy as np
import pytest
from scipy import integrate, stats

from skbnngp.distributions import NormalMixture, ScaleMixtureNormal


@pytest.fixture
def mix():
    return ScaleMixtureNormal(np.array([0.0, 1.5]), np.array([1.0, 0.3]),
                              np.array([0.5, 1.0, 6.0]), np.array([0.2, 0.5, 0.3]))


def test_pdf_integrates_to_one_and_matches_components(mix):
    for i in range(2):
        val, _ = integrate.quad(lambda y: mix.pdf(np.array([y, y]))[i], -np.inf, np.inf)
        assert val == pytest.approx(1.0, abs=1e-8)
    y = np.array([0.3, 1.0])
    ref = sum(w * stats.norm.pdf(y, mix.loc, np.sqrt(s) * mix.base_scale)
              for s, w in zip(mix.scales, mix.weights))
    np.testing.assert_allclose(mix.pdf(y), ref, rtol=1e-12)


def test_moments_cdf_ppf_interval(mix):
    np.testing.assert_allclose(mix.var(), (0.2 * 0.5 + 0.5 + 0.3 * 6) * mix.base_scale**2)
    q = np.array([0.05, 0.7])
    np.testing.assert_allclose(mix.cdf(mix.ppf(q)), q, atol=1e-10)
    lo, hi = mix.interval(0.8)
    np.testing.assert_allclose(mix.cdf(hi) - mix.cdf(lo), 0.8, atol=1e-10)
    np.testing.assert_allclose(mix.mean(), mix.loc)


def test_single_component_is_a_normal():
    d = ScaleMixtureNormal(np.array([1.0]), np.array([2.0]), np.array([4.0]), np.array([1.0]))
    ref = stats.norm(1.0, 4.0)
    np.testing.assert_allclose(d.logpdf(np.array([0.3])), ref.logpdf(0.3), rtol=1e-12)
    np.testing.assert_allclose(d.ppf(np.array([0.9])), ref.ppf(0.9), rtol=1e-9)
    assert d.effective_sample_size == 1.0


def test_rvs_moments_and_repeatability(mix):
    draws = mix.rvs(size=200000, random_state=0)
    assert draws.shape == (200000, 2)
    # variance of the sample variance is bounded by the fourth moment: 3% is > 5 sigma here
    np.testing.assert_allclose(draws.var(0), mix.var(), rtol=0.03)
    np.testing.assert_array_equal(mix.rvs(3, random_state=1), mix.rvs(3, random_state=1))


def test_validation():
    with pytest.raises(ValueError, match="weights"):
        ScaleMixtureNormal(np.zeros(1), np.ones(1), np.array([1.0]), np.array([0.5]))
    with pytest.raises(ValueError, match="scales"):
        ScaleMixtureNormal(np.zeros(1), np.ones(1), np.array([-1.0]), np.array([1.0]))
    d = ScaleMixtureNormal(np.zeros(1), np.ones(1), np.array([1.0]), np.array([1.0]))
    with pytest.raises(ValueError, match="q must"):
        d.ppf(np.array([1.5]))
    with pytest.raises(ValueError, match="confidence"):
        d.interval(2.0)


def test_normal_mixture_of_one_is_the_gaussian():
    loc, scale = np.array([0.0, 1.0, -2.0]), np.array([1.0, 0.5, 3.0])
    mix, ref = NormalMixture(loc[None], scale[None]), stats.norm(loc, scale)
    z = np.array([[0.3, 1.2, -7.0], [-1.0, 0.0, 2.0]])  # a leading axis broadcasts
    np.testing.assert_allclose(mix.logpdf(z), ref.logpdf(z), rtol=1e-12)
    np.testing.assert_allclose(mix.cdf(z), ref.cdf(z), rtol=1e-12)
    for q in (0.025, 0.5, 0.95):
        np.testing.assert_allclose(mix.ppf(q), ref.ppf(q), atol=1e-9)
    np.testing.assert_allclose(mix.std(), scale, rtol=1e-12)


def test_normal_mixture_moments_quantiles_and_density():
    rng = np.random.RandomState(0)
    loc, scale = rng.normal(size=(5, 4)), rng.uniform(0.2, 2.0, size=(5, 4))
    mix = NormalMixture(loc, scale)
    np.testing.assert_allclose(mix.mean(), loc.mean(0))
    np.testing.assert_allclose(mix.var(), (scale**2 + loc**2).mean(0) - loc.mean(0) ** 2)
    lo, hi = mix.interval(0.9)
    np.testing.assert_allclose(mix.cdf(hi) - mix.cdf(lo), 0.9, atol=1e-9)
    np.testing.assert_allclose(mix.cdf(mix.median()), 0.5, atol=1e-9)
    y = np.array([0.3, -1.0, 2.0, 0.0])
    ref = np.mean(stats.norm.pdf(y, loc, scale), axis=0)
    np.testing.assert_allclose(mix.pdf(y), ref, rtol=1e-12)
    grid = np.linspace(-15, 15, 20001)[:, None]
    np.testing.assert_allclose(np.trapezoid(mix.pdf(grid), grid[:, 0], axis=0), 1.0,
                               atol=1e-6)


def test_normal_mixture_rejects_a_non_positive_scale():
    with pytest.raises(ValueError, match="scale"):
        NormalMixture(np.zeros((2, 3)), np.array([1.0, 0.0, 1.0]))
