"""Peak memory and time of a prediction on 10^6 rows, per estimator (issue 53 item 3).

Each estimator is fitted at its defaults on 200 x 3 rows in a fresh process; the process then
predicts 1,000 rows (warm-up), records its peak resident memory, predicts 10^6 x 3 rows and
reports how far the peak grew (the input itself, 24 MB, and the outputs are part of it).
Target: at most 300 MB for every estimator and method.

Usage: python benchmarks/bench_predict_memory.py [--rows N] [--out results/predict_memory.md]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
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


def _child(name, method, rows):
    import numpy as np
    import torch

    import skbnngp

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(200)
    if "Classifier" in name:
        y = (y > 0).astype(int)
    model = getattr(skbnngp, name)(random_state=0, device="cpu").fit(X, y)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10**6)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "predict_memory.md"))
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(*args.child, args.rows)
    results = []
    for name, method in CASES:
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
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
