"""Peak memory and time of a prediction on 10^6 rows, per estimator (issue 53 item 3).

Each estimator is fitted at its defaults on 200 x 3 rows in a fresh process; the process then
predicts 1,000 rows (warm-up), records its peak resident memory, predicts 10^6 x 3 rows and
reports how far the peak grew (the input itself, 24 MB, and the outputs are part of it).
Target: at most 300 MB for every estimator and method.

With ``--time-against REF`` (e.g. ``6a66488``, the commit before the redesign) it also
times each prediction against the code of ``REF`` in the same run: a temporary git worktree
of ``REF`` is imported by child processes through ``PYTHONPATH``, each fits its estimator
once at that version's defaults and predicts ``--time-rows`` rows (best of three, after a
warm-up), one thread each. Target: predict time unchanged within 10 %.

Usage: python benchmarks/bench_predict_memory.py [--rows N] [--out results/predict_memory.md]
       [--time-against REF] [--time-rows N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = [
    ("StudentTProcessRegressor", "predict_std"),
    ("MixedActivationGPRegressor", "predict_std"),
    ("DBKRegressor", "predict_std"),
    ("RichBLLRegressor", "predict_std"),
    ("StudentTProcessClassifier", "predict_proba"),
    ("FiDGPClassifier", "predict_proba"),
    ("FiDGPClassifier", "ood_score"),
]


def _fitted(name):
    """``(model, rng)``: ``name`` fitted at its defaults on the benchmark's 200 x 3 rows, on
    one thread."""
    import numpy as np
    import torch

    import skbnngp

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(200)
    if "Classifier" in name:
        y = (y > 0).astype(int)
    return getattr(skbnngp, name)(random_state=0, device="cpu").fit(X, y), rng


def _child(name, method, rows):
    import numpy as np

    model, rng = _fitted(name)
    getattr(model, method)(rng.normal(size=(1000, 3)))
    Xbig = rng.normal(size=(rows, 3))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    out = getattr(model, method)(Xbig)
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert np.all(np.isfinite(out))
    print(json.dumps({"estimator": name, "method": method, "rows": rows,
                      "peak_growth_mb": after - before, "seconds": seconds}))


def _time_child(name, rows):
    """Fit ``name`` once at its defaults; print the best of three timed predictions of
    every method of CASES it has (after a warm-up)."""
    model, rng = _fitted(name)
    Xbig = rng.normal(size=(rows, 3))
    out = []
    for method in [m for n, m in CASES if n == name]:
        getattr(model, method)(Xbig[:1000])
        times = []
        for _ in range(3):
            t = time.perf_counter()
            getattr(model, method)(Xbig)
            times.append(time.perf_counter() - t)
        out.append({"estimator": name, "method": method, "seconds": min(times)})
    print(json.dumps(out))


def _run_timing(ref, rows):
    """``[(estimator, method, seconds here, seconds at ref)]``, the two versions alternated
    per estimator so that both see the same load."""
    root = Path(__file__).resolve().parent.parent
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "-q", "--detach", str(old),
                        ref], check=True)
        try:
            for name in dict.fromkeys(n for n, _ in CASES):
                got = {}
                for label, path in (("head", root), ("ref", old)):
                    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(path)}
                    proc = subprocess.run([sys.executable, __file__, "--time-rows", str(rows),
                                           "--time-child", name], capture_output=True, check=False,
                                          text=True, env=env, cwd=str(path))
                    if proc.returncode:
                        print(f"{name} ({label}): failed\n{proc.stderr[-2000:]}",
                              file=sys.stderr)
                        break
                    got[label] = json.loads(proc.stdout.strip().splitlines()[-1])
                if len(got) < 2:
                    continue
                for h, r in zip(got["head"], got["ref"]):
                    results.append((name, h["method"], h["seconds"], r["seconds"]))
                    print(f"{name}.{h['method']}: {h['seconds']:.2f} s here, "
                          f"{r['seconds']:.2f} s at {ref}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force",
                            str(old)], check=False)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10**6)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "predict_memory.md"))
    ap.add_argument("--time-against", metavar="REF",
                    help="also time predictions against the code of this git commit")
    ap.add_argument("--time-rows", type=int, default=2 * 10**5)
    ap.add_argument("--skip-memory", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--time-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(*args.child, args.rows)
    if args.time_child:
        return _time_child(args.time_child, args.time_rows)
    results = []
    for name, method in ([] if args.skip_memory else CASES):
        proc = subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--child",
                               name, method], capture_output=True, text=True,
                              env={"OMP_NUM_THREADS": "1", **__import__("os").environ})
        if proc.returncode:
            print(f"{name}.{method}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(res)
        print(f"{name}.{method}: +{res['peak_growth_mb']:.0f} MB, {res['seconds']:.1f} s",
              flush=True)
    lines = ["# Peak memory of a prediction on 10^6 rows", "",
             f"`python benchmarks/bench_predict_memory.py --rows {args.rows}`: a model fitted "
             "at its defaults on 200 x 3 rows predicts the rows; the peak resident memory's "
             "growth over a warm process (target: at most 300 MB).", "",
             "| estimator | method | peak growth (MB) | seconds |", "|---|---|---:|---:|"]
    lines += [f"| {r['estimator']} | {r['method']} | {r['peak_growth_mb']:.0f} | "
              f"{r['seconds']:.1f} |" for r in results]
    if args.skip_memory:  # keep the memory table already written
        text = Path(args.out).read_text(encoding="utf-8")
        lines = text.split("\n## Predict time")[0].rstrip("\n").split("\n")
    if args.time_against:
        timing = _run_timing(args.time_against, args.time_rows)
        lines += ["", "## Predict time against the code before the redesign", "",
                  (f"`--time-against {args.time_against} --time-rows {args.time_rows}`: each "
                   "version fits at its own defaults on the same 200 x 3 rows and predicts "
                   f"{args.time_rows:,} rows, best of three after a warm-up, one thread, the "
                   "two versions alternated per estimator (target: within 10 %)."), "",
                  f"| estimator | method | seconds | seconds at {args.time_against} | ratio |",
                  "|---|---|---:|---:|---:|"]
        lines += [f"| {n} | {m} | {a:.2f} | {b:.2f} | {a / b:.2f} |"
                  for n, m, a, b in timing]
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
