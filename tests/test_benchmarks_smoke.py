"""Smoke tests of the benchmark harnesses (benchmarks/bench_uncertainty.py and
bench_classification.py): the mixture predictive they score is a distribution, and one tiny
run of each script produces its report with fast models."""

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("_harness")
    finally:
        sys.path.remove(str(BENCH))


def test_mixture_of_one_is_the_gaussian(harness):
    loc, scale = np.array([0.0, 1.0, -2.0]), np.array([1.0, 0.5, 3.0])
    mix, ref = harness.GaussianMixture(loc[None], scale[None]), stats.norm(loc, scale)
    z = np.array([[0.3, 1.2, -7.0], [-1.0, 0.0, 2.0]])
    np.testing.assert_allclose(mix.logpdf(z), ref.logpdf(z), rtol=1e-12)
    np.testing.assert_allclose(mix.cdf(z), ref.cdf(z), rtol=1e-12)
    for q in (0.025, 0.5, 0.95):
        np.testing.assert_allclose(mix.ppf(q), ref.ppf(q), atol=1e-9)
    np.testing.assert_allclose(mix.std(), scale, rtol=1e-12)


def test_mixture_moments_and_quantiles(harness):
    rng = np.random.RandomState(0)
    loc, scale = rng.normal(size=(5, 4)), rng.uniform(0.2, 2.0, size=(5, 4))
    mix = harness.GaussianMixture(loc, scale)
    np.testing.assert_allclose(mix.mean(), loc.mean(0))
    np.testing.assert_allclose(mix.var(), (scale**2 + loc**2).mean(0) - loc.mean(0) ** 2)
    lo, hi = mix.interval(0.9)
    np.testing.assert_allclose(mix.cdf(hi) - mix.cdf(lo), 0.9, atol=1e-9)
    # the density integrates to one
    grid = np.linspace(-15, 15, 20001)[:, None]
    np.testing.assert_allclose(np.trapezoid(mix.pdf(grid), grid[:, 0], axis=0), 1.0,
                               atol=1e-6)


def test_uncertainty_script_tiny_run(harness, tmp_path):
    bench = importlib.import_module("bench_uncertainty")
    out = tmp_path / "u"
    result = bench.main(["--quick", "--sections", "cv", "extrap", "--sets", "smooth", "gap",
                         "--models", "gpr", "--out", str(out)])
    assert {r["section"] for r in result["records"]} == {"cv", "extrap"}
    assert all(r["error"] is None for r in result["records"])
    text = out.with_suffix(".md").read_text()
    assert "95 % interval coverage" in text and "Extrapolation" in text
    saved = json.loads(Path(str(out) + ".json").read_text())
    cov = saved["summary"]["cv"]["mean"]["gpr"]["smooth"]["coverage_95"]
    assert 0.0 <= cov <= 1.0


def test_classification_script_tiny_run(harness, tmp_path):
    bench = importlib.import_module("bench_classification")
    out = tmp_path / "c"
    result = bench.main(["--quick", "--sets", "iris", "--models", "lr", "--out", str(out)])
    assert len(result["records"]) == 2 and all(r["error"] is None for r in result["records"])
    m = result["summary"]["mean"]["lr"]["iris"]
    assert 0.8 <= m["accuracy"] <= 1.0 and 0.0 <= m["brier"] <= 2.0 and 0 <= m["ece"] <= 1
    assert "mean NLL" in out.with_suffix(".md").read_text()
