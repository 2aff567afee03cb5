"""Benchmark: the cost-accuracy trade-off of MixedActivationGPRegressor's Nystrom rank.

One run measures, on one synthetic regression set (Friedman #1 of
:func:`sklearn.datasets.make_friedman1`: 8 features of which 5 informative, noise sd 1;
20,000 rows split 90/10 as in the paper; no real ~20k-row set ships with a package on this
machine and there is no internet):

* ``approx="nystrom"`` on all 18,000 training rows for n_anchors in {64, 128, 256, 512, 1024};
* ``approx="exact"`` on a 4,000-row subset of the training rows;
* scikit-learn's :class:`~sklearn.gaussian_process.GaussianProcessRegressor` (constant x
  anisotropic RBF + white noise, ``normalize_y=True``, one L-BFGS-B run) on the same subset;

reporting test RMSE, test NLPD (noise included), 95 % interval coverage, fit time (anchor
selection and hyperparameter optimisation included), predict time and the peak resident memory
of each model's own subprocess. A separate subprocess then runs the scale target of issue 3:
n = 100,000, d = 8, 512 anchors, fit + predict of 10,000 rows, with its wall time and peak
memory (``ru_maxrss`` of that process).

Usage::

    python benchmarks/bench_mixed_activation.py               # everything (tens of minutes)
    python benchmarks/bench_mixed_activation.py --ranks 64 256 --skip sklearn scale
    python benchmarks/bench_mixed_activation.py --from-json     # redraw from the JSON

Writes ``benchmarks/results/bench_mixed_activation.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import RESULTS, gaussian_scores  # noqa: E402 (adds the checkout)
from baselines import sklearn_gpr  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
N_ROWS, N_SUBSET, D, SEED = 20_000, 4_000, 8, 0
RANKS = (64, 128, 256, 512, 1024)
#: The Bayes predictive N(f(x), 1) of Friedman #1 with noise sd 1, expected values.
ORACLE = {"rmse": 1.0, "nlpd": 0.5 * np.log(2 * np.pi * np.e)}


def make_data(n_rows=N_ROWS, seed=SEED):
    from sklearn.datasets import make_friedman1
    X, y = make_friedman1(n_samples=n_rows, n_features=D, noise=1.0, random_state=seed)
    rng = np.random.default_rng(seed)
    test = rng.permutation(n_rows)[: n_rows // 10]
    mask = np.ones(n_rows, bool)
    mask[test] = False
    return X[mask], y[mask], X[~mask], y[~mask]


def metrics(y, mean, std):
    score = gaussian_scores(y, mean, std)
    return {"rmse": score["rmse"], "nlpd": score["nlpd"], "coverage95": score["coverage_95"]}


def run_model(spec):
    """Fit and evaluate one model (in a fresh subprocess); returns a dict."""
    import torch  # noqa: F401  (import cost outside the timings)
    Xtr, ytr, Xte, yte = make_data()
    kind = spec["kind"]
    if spec.get("subset"):
        idx = np.random.default_rng(SEED).permutation(len(ytr))[: spec["subset"]]
        Xtr, ytr = Xtr[idx], ytr[idx]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if kind == "sklearn":
        from sklearn.preprocessing import StandardScaler
        t0 = time.perf_counter()
        scaler = StandardScaler().fit(Xtr)
        model = sklearn_gpr(D, length_scale_bounds=(1e-2, 1e3), noise_level=0.1,
                            random_state=SEED)
        model.fit(scaler.transform(Xtr), ytr)
        t1 = time.perf_counter()
        mean, std = model.predict(scaler.transform(Xte), return_std=True)
        t2 = time.perf_counter()
        info = {"kernel": str(model.kernel_)}
    else:
        from skbnngp import MixedActivationGPRegressor
        params = dict(device="cpu", random_state=SEED, **spec.get("params", {}))
        t0 = time.perf_counter()
        model = MixedActivationGPRegressor(**params).fit(Xtr, ytr)
        t1 = time.perf_counter()
        mean, std = model.predict(Xte, return_std=True)
        t2 = time.perf_counter()
        info = {"n_anchors": model.n_anchors_, "n_iter": model.n_iter_,
                "converged": bool(model.converged_), "weights": model.weights_.tolist(),
                "noise_variance": model.noise_variance_, "leaky_slope": model.leaky_slope_}
    out = {"label": spec["label"], "n_train": len(ytr), "fit_s": t1 - t0, "predict_s": t2 - t1,
           "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "baseline_mb": base, **metrics(yte, mean, std), **info}
    return out


def run_scale():
    """Issue 3's scale target: n = 100,000, d = 8, 512 anchors, fit + predict 10,000 rows."""
    import torch  # noqa: F401
    from sklearn.datasets import make_friedman1
    from skbnngp import MixedActivationGPRegressor
    X, y = make_friedman1(n_samples=110_000, n_features=D, noise=1.0, random_state=SEED)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    model = MixedActivationGPRegressor(n_anchors=512, device="cpu", random_state=SEED)
    model.fit(X[:100_000], y[:100_000])
    t1 = time.perf_counter()
    mean, std = model.predict(X[100_000:], return_std=True)
    t2 = time.perf_counter()
    return {"label": "scale n=100000 d=8 m=512", "n_train": 100_000, "fit_s": t1 - t0,
            "predict_s": t2 - t1, "total_s": t2 - t0,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "baseline_mb": base, "n_iter": model.n_iter_, **metrics(y[100_000:], mean, std)}


def in_subprocess(spec):
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['label']} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"  {result['label']:<34} fit {result['fit_s']:8.1f}s  RMSE {result['rmse']:.4f}  "
          f"NLPD {result['nlpd']:.4f}  peak {result['peak_mb']:.0f} MB", flush=True)
    return result


def write_outputs(rows, scale, meta):
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / "bench_mixed_activation"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows,
                                                     "scale": scale}, indent=2))
    lines = ["# MixedActivationGPRegressor: Nystrom rank vs accuracy and cost", "",
             f"{meta['data']}; test rows: {meta['n_test']}. Machine: {meta['machine']}; "
             f"load average at start {meta['load_start']}, at end {meta['load_end']} "
             "(other jobs share the 2 cores, so times are inflated and noisy).", "",
             "| model | n_train | RMSE | NLPD | 95% coverage | fit (s) | predict (s) | "
             "peak RSS (MB) |", "|---|---|---|---|---|---|---|---|"]
    lines.append(f"| oracle N(f(x), 1) (the noise floor) | - | {ORACLE['rmse']:.4f} | "
                 f"{ORACLE['nlpd']:.4f} | 0.950 | - | - | - |")
    for r in rows:
        lines.append(f"| {r['label']} | {r['n_train']} | {r['rmse']:.4f} | {r['nlpd']:.4f} | "
                     f"{r['coverage95']:.3f} | {r['fit_s']:.1f} | {r['predict_s']:.2f} | "
                     f"{r['peak_mb']:.0f} |")
    lines += ["", "The oracle row is the expected score of the true predictive N(f(x), 1); on "
              f"{meta['n_test']} test rows its RMSE has a sampling sd of about "
              f"{1 / np.sqrt(2 * meta['n_test']):.3f}, so scores slightly below it are test-set "
              "noise. Peak RSS is each model's own process (torch and scikit-learn loaded)."]
    if scale:
        lines += ["", "## Scale target (n = 100,000, d = 8, 512 anchors; target < 60 s, < 2 GB)",
                  "", "| fit (s) | predict 10k rows (s) | total (s) | peak RSS (MB) | RMSE | "
                  "NLPD |", "|---|---|---|---|---|---|",
                  f"| {scale['fit_s']:.1f} | {scale['predict_s']:.2f} | {scale['total_s']:.1f} | "
                  f"{scale['peak_mb']:.0f} | {scale['rmse']:.4f} | {scale['nlpd']:.4f} |"]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    nys = [r for r in rows if r["label"].startswith("nystrom")]
    refs = [r for r in rows if not r["label"].startswith("nystrom")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ranks = [r["n_anchors"] for r in nys]
    for ax, key, name in zip(axes, ("rmse", "nlpd", "fit_s"), ("test RMSE", "test NLPD",
                                                                 "fit time (s)")):
        ax.plot(ranks, [r[key] for r in nys], "o-", label="Nystrom, 18k rows")
        if key in ORACLE:
            ax.axhline(ORACLE[key], color="0.6", lw=0.8, label="noise floor (oracle)")
        for ref, style in zip(refs, ("--", ":")):
            ax.axhline(ref[key], ls=style, color="k" if style == "--" else "C3",
                       label=f"{ref['label']}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n_anchors")
        ax.set_title(name)
        if key == "fit_s":
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle("MixedActivationGPRegressor on Friedman #1 (d = 8)")
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=list(RANKS))
    parser.add_argument("--skip", nargs="*", default=[], choices=["exact", "sklearn", "scale"])
    parser.add_argument("--child")
    parser.add_argument("--scale-child", action="store_true")
    parser.add_argument("--from-json", action="store_true",
                        help="rewrite the table and plot from the saved JSON")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads((RESULTS / "bench_mixed_activation.json").read_text())
        write_outputs(saved["rows"], saved["scale"], saved["meta"])
        return
    if args.child:
        print(json.dumps(run_model(json.loads(args.child))))
        return
    if args.scale_child:
        print(json.dumps(run_scale()))
        return
    meta = {"data": f"make_friedman1(n_samples={N_ROWS}, n_features={D}, noise=1.0, "
                    f"random_state={SEED}), 90/10 split",
            "n_test": N_ROWS // 10, "subset": N_SUBSET,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "load_start": os.getloadavg()[0]}
    rows = []
    print("Nystrom ranks:", args.ranks, flush=True)
    for r in args.ranks:
        rows.append(in_subprocess({"kind": "ours", "label": f"nystrom m={r}",
                                   "params": {"n_anchors": r}}))
    if "exact" not in args.skip:
        rows.append(in_subprocess({"kind": "ours", "label": f"exact, {N_SUBSET}-row subset",
                                   "subset": N_SUBSET, "params": {"approx": "exact"}}))
    if "sklearn" not in args.skip:
        rows.append(in_subprocess({"kind": "sklearn", "label": f"sklearn GPR (ARD RBF), "
                                   f"{N_SUBSET}-row subset", "subset": N_SUBSET}))
    scale = None
    if "scale" not in args.skip:
        proc = subprocess.run([sys.executable, __file__, "--scale-child"], capture_output=True,
                              text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        scale = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"  scale: total {scale['total_s']:.1f}s, peak {scale['peak_mb']:.0f} MB", flush=True)
    meta["load_end"] = os.getloadavg()[0]
    write_outputs(rows, scale, meta)


if __name__ == "__main__":
    main()
