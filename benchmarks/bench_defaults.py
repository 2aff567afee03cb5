"""Benchmark: which configuration of each regressor should be its default.

Every regressor of the package is cross-validated (5 folds, ``KFold(shuffle=True,
random_state=0)``) in each of its candidate default configurations, next to scikit-learn's
``GaussianProcessRegressor`` (amplitude x ARD RBF + WhiteKernel, ``normalize_y=True``), on

* the embedded data sets ``auto_mpg``, ``concrete`` and ``cpu_performance``;
* scikit-learn's ``diabetes`` and a 2,000-row subsample of California housing (downloaded by
  scikit-learn; without network access, ``make_friedman1(2000, 8, noise=1)`` stands in and
  the report says so);
* three 1-D problems: ``smooth`` (``sin(3x) + 0.3x``, 200 rows), ``step`` (the sharp step
  function of ``make_step_1d``, 300 rows) and ``heteroscedastic`` (noise sd growing from
  0.05 to 0.8 across the range, 300 rows).

Each fit is ``Pipeline([StandardScaler(), estimator])``, exactly as ``skbnngp compare`` fits
it, scored through its predictive distribution (``predict_dist``; Gaussian from mean and std
for scikit-learn). The rule (issue 13): an estimator's default is the candidate with the best
mean test NLPD over the data sets, unless its total fit time exceeds 1.5x that of the next
best candidate, in which case the rule moves on to that one. Warnings raised by the fits are
counted per candidate (a default fit on an embedded data set should raise none).

Usage::

    python benchmarks/bench_defaults.py              # about 25 min on 2 cores
    python benchmarks/bench_defaults.py --datasets smooth step --folds 2   # a quick look

Writes ``benchmarks/results/bench_defaults.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _harness import with_settings  # noqa: E402
from baselines import sklearn_gpr  # noqa: E402

#: Candidate defaults: estimator -> [(label, parameters)]; the first is the default the
#: package shipped before this benchmark. A ``"settings"`` entry of the parameters holds
#: private settings of the estimator's module, patched during its fit.
CANDIDATES = {
    "StudentTProcessRegressor": [("ard=False", {"ard": False}),
                                 ("ard=True, RELEVANCE_PRIOR=None",
                                  {"ard": True, "settings": {"RELEVANCE_PRIOR": None}}),
                                 ("ard=True", {"ard": True})],
    "MixedActivationGPRegressor": [("defaults", {})],
    "DBKRegressor": [("defaults", {})],
    "RichBLLRegressor": [("normalize_y=False, calibration=None",
                          {"normalize_y": False, "calibration": None}),
                         ("normalize_y=True, calibration=None",
                          {"normalize_y": True, "calibration": None}),
                         ("normalize_y=False", {"normalize_y": False}),
                         ("normalize_y=True", {"normalize_y": True})],
    "GaussianProcessRegressor": [("ARD RBF + White", {})],
}
DATASETS = ("auto_mpg", "concrete", "cpu_performance", "diabetes", "california_2000",
            "smooth", "step", "heteroscedastic")


def load(name, notes):
    """``(X, y)`` of a benchmark data set."""
    from sklearn.datasets import load_diabetes

    from skbnngp.datasets import load_dataset, make_step_1d

    rng = np.random.RandomState(0)
    if name in ("auto_mpg", "concrete", "cpu_performance"):
        return load_dataset(name, return_X_y=True)
    if name == "diabetes":
        return load_diabetes(return_X_y=True)
    if name == "california_2000":
        try:
            from sklearn.datasets import fetch_california_housing
            X, y = fetch_california_housing(return_X_y=True)
            idx = rng.choice(X.shape[0], 2000, replace=False)
            return X[idx], y[idx]
        except Exception as exc:  # noqa: BLE001 - offline: a stand-in of the same size
            from sklearn.datasets import make_friedman1
            notes.append(f"California housing could not be downloaded ({type(exc).__name__});"
                         " `make_friedman1(2000, 8, noise=1, random_state=0)` stands in for "
                         "`california_2000`.")
            return make_friedman1(2000, 8, noise=1.0, random_state=0)
    if name == "smooth":
        X = rng.uniform(-3, 3, size=(200, 1))
        return X, np.sin(3 * X[:, 0]) + 0.3 * X[:, 0] + 0.1 * rng.standard_normal(200)
    if name == "step":
        return make_step_1d(300, noise=0.1, random_state=0)
    if name == "heteroscedastic":
        X = rng.uniform(-3, 3, size=(300, 1))
        sd = 0.05 + 0.75 * (X[:, 0] + 3) / 6
        return X, np.sin(2 * X[:, 0]) + sd * rng.standard_normal(300)
    raise ValueError(f"unknown data set {name!r}")


def make_pipe(estimator, params, n_features):
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    if estimator == "GaussianProcessRegressor":
        model = sklearn_gpr(n_features)
    else:
        import skbnngp
        params = dict(params)
        cls = getattr(skbnngp, estimator)
        settings = params.pop("settings", None)
        if settings:
            cls = with_settings(cls, settings)
        model = cls(device="cpu", random_state=0, **params)
    return Pipeline([("scale", StandardScaler()), ("model", model)])


def run_task(task):
    import torch

    from skbnngp.compare._run import _run_one

    torch.set_num_threads(1)
    ds, estimator, label, params, fold, X, y, train, test = task
    rec = _run_one(f"{estimator} {label}", fold, make_pipe(estimator, params, X.shape[1]),
                   X, y, train, test, "regression", threads=1)
    rec.update(dataset=ds, estimator_class=estimator, config=label)
    rec.pop("curve", None)
    return rec


def select(configs):
    """The rule: best mean NLPD unless > 1.5x the fit time of the next best."""
    order = sorted(configs, key=lambda c: c["mean_nlpd"])
    for cur, nxt in zip(order, order[1:]):
        if cur["total_fit_s"] <= 1.5 * nxt["total_fit_s"]:
            return cur["config"]
    return order[-1]["config"]


def summarise(records, datasets):
    table = {}
    for r in records:
        key = (r["estimator_class"], r["config"])
        cell = table.setdefault(key, {}).setdefault(r["dataset"], {"nlpd": [], "rmse": [],
                                                                    "fit_s": [], "errors": 0,
                                                                    "warnings": {}})
        if r["error"]:
            cell["errors"] += 1
        else:
            for k in ("nlpd", "rmse", "fit_s"):
                cell[k].append(r["metrics"][k])
        for w, n in r["warnings"].items():
            cell["warnings"][w] = cell["warnings"].get(w, 0) + n
    rows = []
    for (est, config), per in table.items():
        nlpd = {d: float(np.mean(per[d]["nlpd"])) if per[d]["nlpd"] else float("nan")
                for d in datasets if d in per}
        rmse = {d: float(np.mean(per[d]["rmse"])) if per[d]["rmse"] else float("nan")
                for d in datasets if d in per}
        warn = {}
        for d in per:
            for w, n in per[d]["warnings"].items():
                warn.setdefault(w, {})[d] = n
        rows.append({"estimator": est, "config": config, "nlpd": nlpd, "rmse": rmse,
                     "mean_nlpd": float(np.mean(list(nlpd.values()))),
                     "total_fit_s": float(sum(sum(per[d]["fit_s"]) for d in per)),
                     "errors": sum(per[d]["errors"] for d in per), "warnings": warn})
    # rank of every configuration per data set (1 = best NLPD)
    for d in datasets:
        vals = sorted((r["nlpd"].get(d, np.inf), i) for i, r in enumerate(rows))
        for rank, (_, i) in enumerate(vals, 1):
            rows[i].setdefault("ranks", {})[d] = rank
    for r in rows:
        r["mean_rank"] = float(np.mean(list(r["ranks"].values())))
    chosen = {}
    for est in CANDIDATES:
        configs = [r for r in rows if r["estimator"] == est]
        if configs:
            chosen[est] = select(configs)
    return rows, chosen


def markdown(result):
    ds = result["datasets"]
    out = ["# Default configurations chosen by measurement", "",
           f"{result['folds']}-fold cross-validation (`KFold(shuffle=True, random_state=0)`), "
           "every model as `Pipeline([StandardScaler(), model])`, `random_state=0`, "
           f"`device='cpu'`, two fits at a time with one thread each. {result['machine']}. "
           f"Wall time {result['wall_s'] / 60:.1f} min.", ""]
    out += [f"- {n}" for n in result["notes"]] + ([""] if result["notes"] else [])
    out += ["## Test NLPD (mean over folds; lower is better)", "",
            "| estimator | configuration | " + " | ".join(ds) + " | mean | mean rank | fit s |",
            "|---|---|" + "---:|" * (len(ds) + 3)]
    for r in result["rows"]:
        mark = (" **(the rule's choice)**" if result["chosen"].get(r["estimator"]) == r["config"]
                else "")
        cells = [f"{r['nlpd'].get(d, float('nan')):.3f}" for d in ds]
        out.append(f"| `{r['estimator']}` | `{r['config']}`{mark} | " + " | ".join(cells)
                   + f" | {r['mean_nlpd']:.3f} | {r['mean_rank']:.1f} | "
                   f"{r['total_fit_s']:.0f} |")
    out += ["", "## Test RMSE (mean over folds)", "",
            "| estimator | configuration | " + " | ".join(ds) + " |",
            "|---|---|" + "---:|" * len(ds)]
    for r in result["rows"]:
        cells = [f"{r['rmse'].get(d, float('nan')):.3g}" for d in ds]
        out.append(f"| `{r['estimator']}` | `{r['config']}` | " + " | ".join(cells) + " |")
    out += ["", "## The rule applied", "",
            "An estimator's default is its candidate with the best mean NLPD, unless that "
            "candidate's total fit time exceeds 1.5x the next best's.", ""]
    for est, config in result["chosen"].items():
        out.append(f"- `{est}`: `{config}`")
    out += ["", "## Warnings raised by the fits (count over folds, per data set)", ""]
    any_w = False
    for r in result["rows"]:
        for w, per in r["warnings"].items():
            any_w = True
            where = ", ".join(f"{d} {n}" for d, n in per.items())
            out.append(f"- `{r['estimator']}` `{r['config']}`: {w[:160]} ({where})")
    if not any_w:
        out.append("None.")
    errors = [r for r in result["rows"] if r["errors"]]
    if errors:
        out += ["", "## Failed fits", ""]
        out += [f"- `{r['estimator']}` `{r['config']}`: {r['errors']}" for r in errors]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument("--estimators", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--output", default=str(RESULTS / "bench_defaults"))
    args = ap.parse_args()

    from joblib import Parallel, delayed
    from sklearn.model_selection import KFold

    notes, tasks = [], []
    for ds in args.datasets:
        X, y = load(ds, notes)
        X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        for fold, (train, test) in enumerate(KFold(args.folds, shuffle=True,
                                                   random_state=0).split(X)):
            for est in args.estimators:
                for label, params in CANDIDATES[est]:
                    tasks.append((ds, est, label, params, fold, X, y, train, test))
    tasks.sort(key=lambda t: -t[5].shape[0])  # large data first: better load balance
    start = time.perf_counter()
    done = 0
    records = []
    for rec in Parallel(n_jobs=args.n_jobs, return_as="generator_unordered")(
            delayed(run_task)(t) for t in tasks):
        done += 1
        records.append(rec)
        m = rec["metrics"]
        print(f"[{done}/{len(tasks)} {time.perf_counter() - start:6.0f}s] {rec['dataset']:16s}"
              f" {rec['estimator']:50s} fold {rec['fold']}: "
              + (rec["error"] or f"nlpd {m['nlpd']:.3f} fit {m['fit_s']:.1f}s"), flush=True)
    wall = time.perf_counter() - start
    rows, chosen = summarise(records, args.datasets)
    order = {e: i for i, e in enumerate(CANDIDATES)}
    rows.sort(key=lambda r: (order[r["estimator"]], r["config"]))
    result = {"datasets": args.datasets, "folds": args.folds, "notes": notes,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}",
              "wall_s": wall, "rows": rows, "chosen": chosen, "records": records}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output + ".json").write_text(json.dumps(result, indent=1, default=float))
    Path(args.output + ".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
