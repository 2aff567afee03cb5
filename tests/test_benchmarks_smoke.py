"""Smoke tests of the benchmark harnesses (benchmarks/bench_uncertainty.py and
bench_classification.py, bench_gpu.py's CPU path): one tiny run of each script produces its
report with fast models; the shared baselines match ``skbnngp compare``'s."""

import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("_harness")
    finally:
        sys.path.remove(str(BENCH))


def test_baselines_gp_factories_are_compares_and_extras_fail_with_a_skip_message(harness):
    """At its defaults the sklearn GP baseline is ``skbnngp compare``'s reference GP (the
    same kernel and settings); a missing extra names the skipped baseline and its install."""
    baselines = importlib.import_module("baselines")
    from skbnngp.compare._registry import _sklearn_gpc, _sklearn_gpr

    for ours, theirs in ((baselines.sklearn_gpr(3), _sklearn_gpr(3)),
                         (baselines.sklearn_gpc(3), _sklearn_gpc(3)),
                         (baselines.sklearn_gpc(64), _sklearn_gpc(64))):
        assert repr(ours.kernel) == repr(theirs.kernel)
        assert {k: v for k, v in ours.get_params(deep=False).items() if k != "kernel"} \
            == {k: v for k, v in theirs.get_params(deep=False).items() if k != "kernel"}
    with pytest.raises(ImportError, match="GPyTorch SVGP skipped: no_such_extra is not "):
        baselines.require("no_such_extra", "GPyTorch SVGP")


def test_uncertainty_script_tiny_run(harness, tmp_path):
    bench = importlib.import_module("bench_uncertainty")
    out = tmp_path / "u"
    result = bench.main(["--quick", "--sections", "cv", "cv_folds", "extrap", "--sets",
                         "smooth", "gap", "--models", "gpr", "--out", str(out)])
    assert {r["section"] for r in result["records"]} == {"cv", "cv_folds", "extrap"}
    assert {r["fold_seed"] for r in result["records"] if r["section"] == "cv_folds"} \
        == set(bench.FOLD_SEEDS)
    assert all(r["error"] is None for r in result["records"])
    text = out.with_suffix(".md").read_text()
    assert "95 % interval coverage" in text and "Extrapolation" in text
    assert "Interpolation at other fold seeds" in text and "### Fold seed 2: test NLPD" in text
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


def test_classification_fold_seed_gives_other_splits_and_keeps_seed_zero_keys(harness):
    bench = importlib.import_module("bench_classification")
    zero = bench.build_tasks(["iris"], ["lr"], 5)
    one = bench.build_tasks(["iris"], ["lr"], 5, fold_seed=1)
    # seed 0's keys are the stored records' keys; another seed's cannot collide with them
    assert all("fold_seed" not in t[0] for t in zero)
    assert {harness.task_id(t[0]) for t in zero}.isdisjoint(harness.task_id(t[0]) for t in one)
    # every row is tested once under either seed, in different folds
    for tasks in (zero, one):
        assert sorted(np.concatenate([t[4] for t in tasks])) == list(range(150))
    assert any(not np.array_equal(a[4], b[4]) for a, b in zip(zero, one))


def test_classification_ece_pvalue_separates_calibrated_from_overconfident(harness):
    bench = importlib.import_module("bench_classification")
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.5, 1.0, size=(5, 60))  # five folds, binary top-label confidences
    probas = [np.column_stack([c, 1 - c]) for c in conf]
    draws = bench.ece_calibrated_draws(probas, n_draws=2000, seed=0)
    assert draws.shape == (2000,) and np.all(draws >= 0)
    # its mean is the per-fold floor (up to Monte-Carlo error)
    floor = np.mean([bench.ece_noise_floor(p) for p in probas])
    assert abs(draws.mean() - floor) < 0.1 * floor

    def ece_with(labels):
        return np.mean([bench.ece_of(y, p) for y, p in zip(labels, probas)])

    # labels drawn from the predictions: p-values close to uniform over repeated label sets
    pvals = [bench.ece_pvalue(ece_with([(rng.random(60) >= c).astype(int) for c in conf]),
                              draws) for _ in range(200)]
    assert 0.35 < np.mean(pvals) < 0.65 and 0.02 < np.mean(np.array(pvals) < 0.1) < 0.2
    # over-confident: the top label is right only 60 % of the time whatever the confidence
    p_bad = bench.ece_pvalue(ece_with([(rng.random(60) >= 0.6).astype(int) for _ in conf]),
                             draws)
    assert p_bad < 0.01
    assert bench.ece_pvalue(0.0, draws) == 1.0  # a p-value, never above 1


def test_classification_pooled_ece_check(harness):
    """The pooled check reads the ECE of all out-of-fold predictions: a model right 96 % of
    the time at confidence 0.96 passes, one right 90 % of the time at 0.99 misses; a set
    without every fold's probabilities gives no verdict."""
    bench = importlib.import_module("bench_classification")
    from sklearn.model_selection import StratifiedKFold

    _, y = bench.load("iris")
    rng = np.random.default_rng(0)

    def records(model, conf, acc, folds=5):
        wrong = rng.permutation(150) < round((1 - acc) * 150)
        out = []
        for k, (_, te) in enumerate(StratifiedKFold(5, shuffle=True, random_state=0)
                                    .split(np.zeros((150, 1)), y)):
            if k >= folds:
                break
            top = np.where(wrong[te], (y[te] + 1) % 3, y[te])
            P = np.full((te.size, 3), (1 - conf) / 2)
            P[np.arange(te.size), top] = conf
            metrics = {"accuracy": 1 - wrong[te].mean(), "nll": 0.1, "brier": 0.1,
                       "fit_s": 0.0, "ece": bench.ece_of(y[te], P)}
            out.append({"model": model, "set": "iris", "split": k, "error": None, "warnings": {},
                        "metrics": metrics, "test_rows": te.tolist(), "proba": P.tolist()})
        return out

    s = bench.summarise(records("lr", 0.96, 0.96) + records("mlp", 0.99, 0.90),
                        ["lr", "mlp"], ["iris"])
    assert s["mean"]["lr"]["iris"]["ece_pooled"] == pytest.approx(0.0, abs=1e-9)
    assert s["mean"]["mlp"]["iris"]["ece_pooled"] == pytest.approx(0.09)
    assert s["checks"]["lr"]["ece_pooled_ok"] is True
    assert s["checks"]["mlp"]["ece_pooled_ok"] is False
    assert s["checks"]["mlp"]["ece_pooled_misses"] == ["iris"]
    partial = bench.summarise(records("lr", 0.96, 0.96, folds=2), ["lr"], ["iris"])
    assert partial["checks"]["lr"]["ece_pooled_ok"] is None


def test_uncertainty_extrap_seeds_refits_only_the_network_models(harness, monkeypatch):
    bench = importlib.import_module("bench_uncertainty")
    args = bench.argparse.Namespace(quick=True, sections=["extrap_seeds"], sets=["gap"],
                                    models=["gpr", "richbll"])
    tasks, _ = bench.build_tasks(args)
    keys = [t[0] for t in tasks]
    assert {k["model"] for k in keys} == {"richbll"}
    assert sorted(k["split"] for k in keys) == list(bench.EXTRAP_SEEDS)
    # the split is the network's seed
    monkeypatch.setattr(bench, "run_fit", lambda key, make, *rest: make())
    for t in tasks:
        assert bench.run_task(t).named_steps["model"].random_state == t[0]["split"]


def test_uncertainty_extrap_seeds_report_counts_wins_over_the_seed_means(harness, tmp_path):
    bench = importlib.import_module("bench_uncertainty")
    records = tmp_path / "r.jsonl"
    # Rich-BLL wins on 3 of every 5 seeds but loses the mean (one bad seed in five): the set
    # is a loss
    k = len(bench.EXTRAP_SEEDS)
    nlpd = {"richbll": ([1.0, 1.0, 1.0, 9.0, 2.0] * k)[:k],
            "bll": ([2.0, 2.0, 2.0, 2.0, 1.0] * k)[:k]}
    wins = sum(a < b for a, b in zip(nlpd["richbll"], nlpd["bll"]))
    with records.open("w") as f:
        for model, values in nlpd.items():
            for seed, v in zip(bench.EXTRAP_SEEDS, values):
                key = {"section": "extrap_seeds", "set": "gap", "split": seed, "model": model}
                metrics = {k: 0.5 for k in bench.METRICS}
                metrics.update(nlpd=v, coverage_95=0.95)
                f.write(json.dumps(dict(key, n_train=300, n_test=200, metrics=metrics,
                                        error=None, warnings={},
                                        task_id=harness.task_id(key))) + "\n")
    out = tmp_path / "u"
    bench.main(["--report-only", "--records", str(records), "--sections", "extrap_seeds",
                "--sets", "gap", "--models", "richbll", "bll", "--out", str(out)])
    text = out.with_suffix(".md").read_text()
    assert "Extrapolation over network seeds" in text
    assert ("below RichBLLRegressor(uncertainty='bll'): on 0 of 1 sets in the mean over the "
            f"seeds (target: most); on {wins} of {k} set-seed pairs.") in text


def test_fidgp_variants_archive_keeps_earlier_rows_with_their_base(harness):
    bench = importlib.import_module("bench_fidgp")
    tasks = ["digits 0-4 vs 5-9", "digits vs corrupted"]

    def row(task, acc, variant=None):
        r = {"task": task, "seed": 0, "n_parameters": 100, "lambdas": [0.001],
             "fidgp": {"accuracy": acc, "nll": 0.1},
             "ood": {"x": {"ood_score": 0.9, "ensemble_entropy": 0.8}}}
        return dict(r, variant=variant) if variant else r

    result = {"ood": [row(t, 0.95) for t in tasks],
              "variants_base": [row(t, 0.90) for t in tasks],
              "variants_base_note": "run at the old defaults",
              "variants": [row(t, 0.92, "a") for t in tasks] + [row(t, 0.93, "b")
                                                                for t in tasks]}
    bench.archive_variants(result, ["a"])
    assert "variants" not in result and "variants_base" not in result
    (group,) = result["variants_earlier"]
    assert group["note"] == "run at the old defaults"
    assert {r["variant"] for r in group["rows"]} == {"b"}
    result["variants"] = [row(t, 0.97, "a") for t in tasks]  # the re-run, current defaults
    text = "\n".join(bench.variants_table(result))
    current, earlier = text.split("## Earlier variants")
    # each group is paired with its own defaults: a +2 points now, b +3 points then
    assert "| a | 0 | 100 | 0.970 (+2.0)" in current and "| b |" not in current
    assert "| b | 0 | 100 | 0.930 (+3.0)" in earlier and "run at the old defaults" in earlier


def test_uncertainty_cv_seeds_refits_the_network_models_on_the_synthetic_folds(harness,
                                                                              monkeypatch):
    bench = importlib.import_module("bench_uncertainty")
    args = bench.argparse.Namespace(quick=True, sections=["cv_seeds"],
                                    sets=["smooth", "diabetes"], models=["gpr", "dbk"])
    tasks, _ = bench.build_tasks(args)
    keys = [t[0] for t in tasks]
    assert {(k["set"], k["model"]) for k in keys} == {("smooth", "dbk")}
    pairs = sorted((k["split"], k["seed"]) for k in keys)
    assert pairs == [(f, s) for f in range(2) for s in bench.CV_SEEDS]  # 2 quick folds
    # each task's test rows are its fold's, and the seed reaches the model
    fold0 = [t for t in tasks if t[0]["split"] == 0]
    assert all(np.array_equal(t[4], fold0[0][4]) for t in fold0)
    # run_task builds the model with the task's seed
    monkeypatch.setattr(bench, "run_fit", lambda key, make, *rest: make())
    for t in tasks[:6]:
        assert bench.run_task(t).named_steps["model"].random_state == t[0]["seed"]


def _fake_fit(task):
    key = task[0]
    return dict(key, metrics={"nlpd": float(key.get("seed", -1))}, error=None)


def test_run_all_gives_each_record_the_id_of_its_own_task(harness, tmp_path):
    """A run whose tasks have different keys (cv, then cv_seeds with a seed) stores each
    record under its own task's id, so that a resumed run finds every record (the ids were
    once built from the first task's key, which dropped the seed)."""
    tasks = [({"section": "cv", "split": 0},),
             ({"section": "cv_seeds", "split": 0, "seed": 1},),
             ({"section": "cv_seeds", "split": 0, "seed": 2},)]
    path = tmp_path / "records.jsonl"
    recs = harness.run_all(tasks, _fake_fit, 1, str(path))
    assert sorted(r["task_id"] for r in recs) == sorted(harness.task_id(t[0]) for t in tasks)
    again = harness.run_all(tasks, _fake_fit, 1, str(path), run=False)
    assert len(again) == 3 and len(path.read_text().splitlines()) == 3


def test_gpu_script_cpu_smoke_run(harness, tmp_path):
    """bench_gpu.py has never run on CUDA: its CPU smoke path checks the plan, the children,
    the report and the per-row failure handling, so a lent GPU's minutes are not lost to a
    broken script."""
    bench = importlib.import_module("bench_gpu")
    out = tmp_path / "g"
    report = bench.main(["--device", "cpu", "--sizes", "200", "--models", "stp_ard",
                         "--n-test", "100", "--out", str(out)])
    (row,) = report["rows"]
    assert "error" not in row, row
    assert row["model"] == "stp_ard" and row["n"] == 200 and row["device"] == "cpu"
    assert row["fit_s"] > 0 and np.isfinite(row["nlpd"]) and 0 < row["rmse"] < 1.0
    saved = json.loads(Path(str(out) + ".json").read_text())
    assert saved["rows"][0]["nlpd"] == row["nlpd"]
    assert "| stp_ard | 200 |" in out.with_suffix(".md").read_text()
    # the engine's stages are timed: the gradient evaluations of the fit and one LOO pass
    assert row["stages"]["value_and_grad n=200"]["calls"] >= 1
    assert row["stages"]["loo n=200"]["calls"] == 1
    inside = sum(v["seconds"] for k, v in row["stages"].items() if "/" not in k)
    assert 0 < inside <= row["fit_s"]
    assert "Where the fit time went" in out.with_suffix(".md").read_text()
    # a row that overruns its timeout is reported, not fatal
    report = bench.main(["--device", "cpu", "--sizes", "200", "--models", "stp_ard",
                         "--timeout", "0.01", "--out", str(out)])
    assert report["rows"][0]["error"].startswith("timeout")
    assert "error: timeout" in out.with_suffix(".md").read_text()
    # the budget is a hard end: the row running when it is spent is cut
    report = bench.main(["--device", "cpu", "--sizes", "200", "--models", "stp_ard",
                         "--budget", "0.3", "--out", str(out)])
    (row,) = report["rows"]
    assert row["error"].startswith("timeout after 0.3 s") and row["wall_s"] < 10
    # a spent budget launches nothing more and says what was left out
    report = bench.main(["--device", "cpu", "--sizes", "200", "300", "--models", "stp_ard",
                         "dbk_svi", "--budget", "0", "--out", str(out)])
    assert report["rows"] == [] and len(report["skipped"]) == 4
    assert "Not run (the --budget was spent)" in out.with_suffix(".md").read_text()


def test_gpu_script_plan_and_targets(harness):
    bench = importlib.import_module("bench_gpu")
    rows = list(bench.plan([10**6, 5000]))
    assert rows[0] == ("stp_ard", 5000) and ("gpytorch_exact", 5000) in rows
    assert [k for k, n in rows if n == 10**6] == ["mixed_nystrom", "dbk_svi", "gpytorch_svgp"]
    assert list(bench.plan([5000], ["dbk_svi"])) == [("dbk_svi", 5000)]

    def row(model, n, fit_s, nlpd, peak_gb, device="cuda:0"):
        return {"model": model, "n": n, "fit_s": fit_s, "nlpd": nlpd, "peak_gb": peak_gb,
                "device": device}

    verdicts = dict(bench.targets([
        row("stp_ard", 20_000, 10.0, 0.30, 2.0), row("gpytorch_exact", 20_000, 20.0, 0.35, 1.0),
        row("stp_ard", 50_000, 75.0, 0.29, 60.0),
        {"model": "dbk_exact", "n": 50_000, "error": "timeout after 600 s"}]))
    assert verdicts["STP (ARD) at n = 50,000 fits in under 60 s"].startswith("no (75.0 s)")
    assert verdicts["STP at n = 20,000 faster than GPyTorch's exact GP with a better "
                    "NLPD"].startswith("yes (fit 10.0 s vs 20.0 s, ratio 0.50")
    mem = [v for t, v in verdicts.items() if t.startswith("stp_ard at n = 50,000")]
    assert mem == ["no (60.00 GB)"]  # 3 n^2 x 8 B = 55.9 GB at n = 50,000
    # CPU rows say nothing about device memory
    assert bench.targets([row("stp_ard", 5000, 1.0, 0.3, 0.5, device="cpu")]) == []


def test_gpu_profile_script_cpu_smoke_run():
    """benchmarks/gpu/profile_stp_gpu.py is run on lent GPU machines only; its CPU path checks that
    the wrapped functions still exist under the names it patches and that it reports each."""
    import re
    import subprocess
    script = BENCH / "gpu" / "profile_stp_gpu.py"
    out = subprocess.run([sys.executable, str(script), "--device", "cpu", "--sizes", "150",
                          "--top", "3"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"=== n=150: fit [0-9.]+ s", out.stdout)
    calls = dict(re.findall(r"^\s+(\w+)\s+(\d+) x", out.stdout, flags=re.M))
    assert int(calls["value_and_grad"]) >= 1 and int(calls["_publish"]) == 1
    assert int(calls["loo"]) == 1 and int(calls["fit_hyperparameters"]) == 1


def test_ood_partitions_script_tiny_run(harness, tmp_path):
    """Partitions are distinct in / out splits (the first three of a set flagged tuning);
    the candidates' parts average to ``ood_score``; a tiny run writes its report."""
    bench = importlib.import_module("bench_ood_partitions")
    runs = bench.partitions("digits", np.arange(10), 12, 4)
    assert len({ins for ins, _, _ in runs}) == 12 and all(len(ins) == 5 for ins, _, _ in runs)
    assert [role for _, _, role in runs] == ["tuning"] * 3 + ["held out"] * 9
    more = bench.partitions("digits", np.arange(10), 14, 4)
    assert more[:12] == runs and [role for _, _, role in more[12:]] == ["new"] * 2
    assert [seed for _, seed, _ in runs] == list(range(12))
    three = bench.partitions("iris", np.arange(3), 12, 2)
    assert sorted({ins for ins, _, _ in three}) == [(0, 1), (0, 2), (1, 2)]
    assert [ins for ins, _, role in three if role == "tuning"] == [(1, 2), (1, 2)]
    ref = {"a": np.array([0.0, 2.0]), "b": np.array([1.0, 3.0])}
    s = {"a": np.array([1.0]), "b": np.array([2.0])}
    assert bench.combine(ref, s, "z", ("a", "b")) == pytest.approx(0.0)
    assert bench.combine(ref, s, "rank", ("a", "b")) == pytest.approx(1.0)

    out = tmp_path / "p"
    result = bench.main(["--quick", "--sets", "iris", "--out", str(out)])
    recs = result["records"]
    assert len(recs) == 3 and {r["role"] for r in recs} == {"tuning", "held out"}
    assert all(0.0 <= a <= 1.0 for r in recs for a in r["auroc"].values())
    X, y = bench.load("iris")
    Xtr, ytr, _, _, Xout = bench.split(X, y, [0, 1], 0, 50)
    assert len(ytr) == 50 and len(Xout) == 30 and set(ytr) == {0, 1}
    clf, prev, _, _ = bench.fit_models(Xtr, ytr, 0, True)
    parts = bench.fidgp_scores(clf, prev, Xout)
    layers = np.mean([parts[f"principal L{i}"] for i in clf.ood_layers_], axis=0)
    np.testing.assert_allclose(layers, parts["ood_score"], rtol=1e-10)
    both = (parts["principal (hidden layers)"] + parts["inducing (hidden layers)"]) / 2
    np.testing.assert_allclose(both, parts["combined (hidden layers)"], rtol=1e-10)
    # the previous default is rebuilt under the fit's own weight draw: its first layer's
    # principal basis is the fit's own
    assert prev[0] == [0, 1] and len(prev[1]) == 4  # principal, then inducing bases
    np.testing.assert_allclose(prev[1][0].numpy(), clf._ood["bases"][0].numpy(), atol=1e-6)
    assert "## Candidates" in out.with_suffix(".md").read_text()
