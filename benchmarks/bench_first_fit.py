"""Benchmark: what the first fit of a process costs beyond the next one (issue 49).

A user's script, a test run or each worker of a parallel grid search fits in a fresh
process. Each estimator's default fit (``device="cpu"``, ``random_state=0``, one thread) on
200 x 4 rows (a smooth regression target; its sign for the classifiers) runs in a child
process twice, on a fresh estimator each time: the first fit pays whatever the package and
torch load on first use, the second does not. scikit-learn's Gaussian process regressor and
classifier are measured the same way beside them, in the same run. The child also reports
whether the first fit imported torch's compiler (``torch._dynamo``) or SymPy, which torch
loads for a few of its functions and which took about a second a process.

Usage::

    python benchmarks/bench_first_fit.py          # about 1 min on 2 cores

Writes ``benchmarks/results/first_fit.{json,md}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from _harness import RESULTS, git_commit, machine, versions, write_results

MODELS = ("StudentTProcessRegressor", "StudentTProcessClassifier",
          "MixedActivationGPRegressor", "DBKRegressor", "RichBLLRegressor", "FiDGPClassifier",
          "sklearn GaussianProcessRegressor", "sklearn GaussianProcessClassifier")

CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
t0 = time.perf_counter()
import numpy as np
import torch
import skbnngp
from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
t_import = time.perf_counter() - t0
name = sys.argv[1]
rng = np.random.default_rng(0)
X = rng.normal(size=(200, 4))
y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=200)
classifier = "Classifier" in name
if classifier:
    y = (y > 0).astype(int)
def make():
    if name.startswith("sklearn "):
        cls = {"GaussianProcessRegressor": GaussianProcessRegressor,
               "GaussianProcessClassifier": GaussianProcessClassifier}[name.split()[1]]
        return cls(random_state=0)
    return getattr(skbnngp, name)(device="cpu", random_state=0)
times = []
for _ in range(2):
    t = time.perf_counter(); make().fit(X, y); times.append(time.perf_counter() - t)
loaded = [m for m in ("torch._dynamo", "sympy") if m in sys.modules]
print(json.dumps({"import": t_import, "first": times[0], "second": times[1], "loaded": loaded}))
"""


def run_child(name):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def markdown(result):
    lines = ["# The first fit of a process (issue 49)", "",
             f"`benchmarks/bench_first_fit.py`; commit `{result['commit']}`; "
             f"{result['machine']}; versions {result['versions']}. Default fit "
             "(`device=\"cpu\"`, `random_state=0`), 200 x 4 rows, one thread, in a fresh "
             "child process: the first fit, then a second on a fresh estimator; seconds of "
             "wall time (a fit's own, not the process start).", "",
             "| model | first fit s | second fit s | first - second s | torch compiler or "
             "SymPy imported |", "|---|---:|---:|---:|---|"]
    for name, r in result["rows"].items():
        lines.append(f"| {name} | {r['first']:.2f} | {r['second']:.2f} | "
                     f"{r['first'] - r['second']:.2f} | {', '.join(r['loaded']) or 'no'} |")
    lines += ["", f"Import of numpy, torch, skbnngp and scikit-learn's GP in the child: "
              f"{min(r['import'] for r in result['rows'].values()):.2f}-"
              f"{max(r['import'] for r in result['rows'].values()):.2f} s (not in the table).",
              ""]
    return "\n".join(lines)


def main():
    rows = {}
    for name in MODELS:
        rows[name] = run_child(name)
        print(name, {k: v if isinstance(v, list) else round(v, 3)
                     for k, v in rows[name].items()}, flush=True)
    result = {"commit": git_commit(), "machine": machine(), "versions": versions(),
              "rows": rows}
    write_results(RESULTS / "first_fit", result, markdown(result))


if __name__ == "__main__":
    main()
