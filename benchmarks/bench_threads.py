"""Benchmark: default fits beside a busy process, and parallel cross-validation (issue 49).

Two parts, one run, on the machine as it is (run it on an otherwise quiet machine):

* ``busy``: each estimator's default fit on 200 x 4 and 2,000 x 8 rows (a smooth regression
  target; its sign for the classifiers), in a child process, three ways: one thread on the
  quiet machine (the reference), the package's own thread choice on the quiet machine, and the
  package's choice beside one CPU-bound process (a busy loop in another child). The target:
  beside the busy process at most 1.5x the quiet one-thread time.
* ``cv``: ``GridSearchCV`` over two values of one parameter, 3 folds, with ``n_jobs=1`` and
  ``n_jobs=2``, for each estimator on 200 x 4 rows, each search twice. The target:
  ``n_jobs=2`` not slower on the second search (the first is reported beside it: it also
  pays each process's one-time imports on first use). The
  joblib workers' one-time start-up (a new process importing torch and the package) is timed
  on its own first and reported beside the table: joblib keeps its workers between searches,
  so only a process's first parallel search pays it, and whichever estimator came first in
  the loop used to carry it alone.

Usage::

    python benchmarks/bench_threads.py            # about 15 min on 2 cores
    python benchmarks/bench_threads.py --quick    # 200 x 4 only, about 4 min

Writes ``benchmarks/results/threads.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

import numpy as np
from _harness import RESULTS, git_commit, machine, write_results

REGRESSORS = ("StudentTProcessRegressor", "MixedActivationGPRegressor", "DBKRegressor",
              "RichBLLRegressor")
CLASSIFIERS = ("StudentTProcessClassifier", "FiDGPClassifier")
GRID = {"StudentTProcessRegressor": {"normalize_y": [True, False]},
        "MixedActivationGPRegressor": {"normalize_y": [True, False]},
        "DBKRegressor": {"normalize_y": [True, False]},
        "RichBLLRegressor": {"normalize_y": [True, False]},
        "StudentTProcessClassifier": {"depth": [1, 2]},
        "FiDGPClassifier": {"normalize_X": [True, False]}}


def data(n, d, classify, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1] - 0.25 * X[:, 2 % d] ** 2
    if classify:
        return X, (f > np.median(f)).astype(int)
    return X, f + 0.1 * rng.standard_normal(n)


def _busy(stop):
    x = 0
    while not stop.is_set():
        x = (x * 1103515245 + 12345) % 2**31


def _child(name, n, d, threads):
    """Time one default fit in a fresh interpreter; ``threads``: 1 (forced) or None."""
    env = dict(os.environ)
    env.pop("SKBNNGP_NUM_THREADS", None)
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["SKBNNGP_NUM_THREADS"] = str(threads)
    code = (
        "import time, warnings, sys; sys.path.insert(0, %r)\n"
        "import bench_threads as b, skbnngp\n"
        "X, y = b.data(%d, %d, %r)\n"
        "est = getattr(skbnngp, %r)(random_state=0)\n"
        "warnings.simplefilter('ignore')\n"
        "getattr(skbnngp, %r)(random_state=0).fit(X[:40], y[:40])  # warm: imports\n"
        "t, c = time.perf_counter(), time.process_time()\n"
        "est.fit(X, y)\n"
        "print(time.perf_counter() - t, time.process_time() - c)\n"
    ) % (os.path.dirname(os.path.abspath(__file__)), n, d, name in CLASSIFIERS, name, name)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.split()
    return float(out[-2]), float(out[-1])


def busy_part(sizes):
    rows = []
    for n, d in sizes:
        for name in REGRESSORS + CLASSIFIERS:
            quiet1 = _child(name, n, d, 1)
            quiet = _child(name, n, d, None)
            stop = mp.Event()
            proc = mp.Process(target=_busy, args=(stop,))
            proc.start()
            try:
                busy = _child(name, n, d, None)
            finally:
                stop.set()
                proc.join()
            rows.append({"estimator": name, "n": n, "d": d, "quiet_1thread_s": quiet1[0],
                         "quiet_auto_s": quiet[0], "busy_auto_s": busy[0],
                         "busy_cpu_s": busy[1], "ratio_busy": busy[0] / quiet1[0]})
            print(rows[-1], flush=True)
    return rows


def _import_backend():
    import torch

    import skbnngp  # noqa: F401

    return torch.get_num_threads()


def cv_part():
    import warnings

    from joblib import Parallel, delayed
    from sklearn.model_selection import GridSearchCV

    import skbnngp

    t = time.perf_counter()  # the workers' start-up, paid once per process
    Parallel(n_jobs=2)(delayed(_import_backend)() for _ in range(2))
    rows = [{"estimator": "(worker start-up)", "n_jobs_1_s": 0.0,
             "n_jobs_2_s": time.perf_counter() - t, "ratio": float("nan")}]
    print(rows[-1], flush=True)
    for name in REGRESSORS + CLASSIFIERS:
        X, y = data(200, 4, name in CLASSIFIERS)
        times = {}
        for jobs in (1, 2):
            for run in ("first", "again"):  # "again": every process has met this estimator
                search = GridSearchCV(getattr(skbnngp, name)(random_state=0), GRID[name],
                                      cv=3, n_jobs=jobs)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t = time.perf_counter()
                    search.fit(X, y)
                    times[jobs, run] = time.perf_counter() - t
        rows.append({"estimator": name, "n_jobs_1_s": times[1, "again"],
                     "n_jobs_2_s": times[2, "again"],
                     "ratio": times[2, "again"] / times[1, "again"],
                     "first_n_jobs_1_s": times[1, "first"],
                     "first_n_jobs_2_s": times[2, "first"],
                     "first_ratio": times[2, "first"] / times[1, "first"]})
        print(rows[-1], flush=True)
    return rows


def markdown(result):
    lines = ["# Threads: default fits beside a busy process, and parallel CV", "",
             (f"{result['machine']}; commit {result['commit']}; load average at start "
              f"{result['load_start']:.2f}."), ""]
    if result["busy"]:
        lines += [("| estimator | n x d | quiet, 1 thread (s) | quiet, chosen (s) | "
                   "beside a busy process (s) | ratio to quiet 1 thread (target <= 1.5) |"),
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['estimator']} | {r['n']} x {r['d']} | {r['quiet_1thread_s']:.2f} | "
                  f"{r['quiet_auto_s']:.2f} | {r['busy_auto_s']:.2f} | {r['ratio_busy']:.2f} |"
                  for r in result["busy"]]
        lines.append("")
    if result["cv"]:
        lines += [("| estimator | GridSearchCV n_jobs=1 (s) | n_jobs=2 (s) | ratio (target <= 1) "
                   "| first search: n_jobs=1 (s) | n_jobs=2 (s) | ratio |"),
                  "|---|---|---|---|---|---|---|"]
        start = [r for r in result["cv"] if r["estimator"].startswith("(")]
        lines += [f"| {r['estimator']} | {r['n_jobs_1_s']:.2f} | {r['n_jobs_2_s']:.2f} | "
                  f"{r['ratio']:.2f} | {r.get('first_n_jobs_1_s', float('nan')):.2f} | "
                  f"{r.get('first_n_jobs_2_s', float('nan')):.2f} | "
                  f"{r.get('first_ratio', float('nan')):.2f} |"
                  for r in result["cv"] if r not in start]
        if start:
            lines += ["", (f"The two joblib workers' start-up (new processes importing torch "
                           f"and the package), timed before the table and paid once per "
                           f"process: {start[0]['n_jobs_2_s']:.2f} s. A first parallel "
                           "search shorter than about twice that is slower than n_jobs=1."),
                      "",
                      ("Each search runs twice; the ratio is the second's, when every "
                       "process (the main one and both workers) has met the estimator "
                       "once, as joblib keeps its workers between searches. The first "
                       "search also pays each process's one-time loading on first use "
                       "(the estimator's module and what it imports).")]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 x 4 rows only")
    parser.add_argument("--parts", nargs="*", default=["busy", "cv"], choices=["busy", "cv"])
    args = parser.parse_args()
    sizes = [(200, 4)] if args.quick else [(200, 4), (2000, 8)]
    result = {"machine": machine(), "commit": git_commit(), "load_start": os.getloadavg()[0],
              "busy": busy_part(sizes) if "busy" in args.parts else [],
              "cv": cv_part() if "cv" in args.parts else []}
    write_results(RESULTS / "threads", result, markdown(result))
    print(json.dumps({k: v for k, v in result.items() if k in ("busy", "cv")}, indent=1))


if __name__ == "__main__":
    main()
