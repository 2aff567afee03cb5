"""Benchmark: intervals at every level, calibrated and conformal.

Two sections, every fit a ``Pipeline([StandardScaler(), model])``:

1. **Calibration over levels.** Each default regressor of the package and scikit-learn's
   ``GaussianProcessRegressor`` (amplitude x ARD RBF + WhiteKernel, ``normalize_y=True``;
   its Gaussian predictive from ``predict(return_std=True)``) gets out-of-fold predictives
   from :func:`skbnngp.model_selection.cross_val_predict_dist` (``KFold(shuffle=True,
   random_state=FOLD_SEED)``); the score is
   :func:`skbnngp.metrics.regression_calibration_error`, the mean ``|observed - nominal|``
   coverage of the central intervals at the 19 levels 0.05, 0.10, ..., 0.95.
2. **Conformal coverage and width.** Over random 75/25 train/test splits, the test coverage
   and mean width at 80/90/95 % of ``ConformalRegressor(method="cv+")`` around the
   package's regressors, against MAPIE's ``CrossConformalRegressor`` (CV+, absolute
   residuals) around scikit-learn's GP and around ``GradientBoostingRegressor``, all with
   the same folds count. MAPIE is optional (``pip install ".[bench]"``); without it the
   section reports the package's rows alone and says so.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_intervals.py --quick   # a few minutes
    OMP_NUM_THREADS=1 python benchmarks/bench_intervals.py           # hours: the full run

``--quick`` uses two small data sets, 3 folds and 2 splits, and wraps only the Student-t
process in section 2. Both write ``benchmarks/results/intervals.md`` (and ``.json``), the
mode stated at the top.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.gaussian_process import GaussianProcessRegressor

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))

#: Fold seed of section 1: nothing in the package was tuned on it.
FOLD_SEED = 11
LEVELS = (0.8, 0.9, 0.95)
REGRESSORS = ("StudentTProcessRegressor", "MixedActivationGPRegressor", "DBKRegressor",
              "RichBLLRegressor")
FULL_SETS = ("auto_mpg", "concrete", "cpu_performance", "diabetes", "friedman_1000",
             "smooth", "step", "heteroscedastic", "heavy_tailed")
QUICK_SETS = ("cpu_performance", "smooth")


def load(name):
    """``(X, y)`` of a benchmark set: embedded, scikit-learn's or synthetic (seeded)."""
    from sklearn.datasets import load_diabetes, make_friedman1

    from skbnngp.datasets import load_dataset, make_heavy_tailed

    if name in ("auto_mpg", "concrete", "cpu_performance"):
        return load_dataset(name, return_X_y=True)
    if name == "diabetes":
        return load_diabetes(return_X_y=True)
    if name == "friedman_1000":
        return make_friedman1(1000, 8, noise=1.0, random_state=0)
    if name in ("smooth", "step", "heteroscedastic"):  # the defaults benchmark's sets
        from bench_defaults import load as load_defaults

        return load_defaults(name, [])
    if name == "heavy_tailed":
        return make_heavy_tailed(n_samples=300, random_state=0)
    raise ValueError(f"unknown data set {name!r}")


class GaussianGP(GaussianProcessRegressor):
    """scikit-learn's GP with a ``predict_dist``: the Gaussian of its mean and std."""

    def predict_dist(self, X):
        mean, std = self.predict(X, return_std=True)
        return stats.norm(mean, np.maximum(std, 1e-300))


def model(name, n_features):
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import skbnngp

    if name == "sklearn_gp":
        from skbnngp.compare._registry import _sklearn_gpr

        est = GaussianGP(**_sklearn_gpr(n_features).get_params(deep=False))
    elif name == "gradient_boosting":
        est = GradientBoostingRegressor(random_state=0)
    else:
        est = getattr(skbnngp, name)(device="cpu", random_state=0)
    return make_pipeline(StandardScaler(), est)


def calibration_section(sets, folds, models=REGRESSORS + ("sklearn_gp",), fold_seed=FOLD_SEED):
    from sklearn.model_selection import KFold

    from skbnngp.metrics import regression_calibration_error
    from skbnngp.model_selection import cross_val_predict_dist

    rows = []
    for ds in sets:
        X, y = load(ds)
        cv = KFold(folds, shuffle=True, random_state=fold_seed)
        for name in models:
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dist = cross_val_predict_dist(model(name, X.shape[1]), X, y, cv=cv)
            rows.append({"dataset": ds, "model": name, "seconds": time.perf_counter() - t0,
                         "calibration_error": regression_calibration_error(y, dist)})
            print(f"  calibration {ds:16s} {name:28s} {rows[-1]['calibration_error']:.3f}",
                  flush=True)
    return rows


def _coverage_width(y, lo, hi):
    """Per level: fraction of y in [lo, hi], and the mean width."""
    inside = (y[:, None] >= lo) & (y[:, None] <= hi)
    return inside.mean(axis=0).tolist(), (hi - lo).mean(axis=0).tolist()


def conformal_section(sets, n_splits, folds, wrapped, first_split=0, signed=False, mapie=True):
    from sklearn.model_selection import train_test_split

    from skbnngp import ConformalRegressor

    try:
        from mapie.regression import CrossConformalRegressor
    except ImportError:
        CrossConformalRegressor = None
    if not mapie:
        CrossConformalRegressor = None
    # the ablation: equal-tailed intervals from signed scores, labelled apart
    tag = "conformal cv+ (signed)" if signed else "conformal cv+"
    rows = []
    for ds in sets:
        X, y = load(ds)
        for split in range(first_split, first_split + n_splits):
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=split)
            runs = [(f"{tag} / {w}", "skbnngp", w) for w in wrapped]
            if CrossConformalRegressor is not None:
                runs += [("MAPIE cv+ / sklearn_gp", "mapie", "sklearn_gp"),
                         ("MAPIE cv+ / gradient_boosting", "mapie", "gradient_boosting")]
            for label, kind, base in runs:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if kind == "skbnngp":
                        reg = ConformalRegressor(model(base, X.shape[1]), method="cv+",
                                                 cv=folds, symmetric=not signed).fit(Xtr, ytr)
                        lo, hi = reg.predict_interval(Xte, confidence=LEVELS)
                    else:
                        reg = CrossConformalRegressor(
                            model(base, X.shape[1]), confidence_level=list(LEVELS),
                            method="plus", cv=folds, random_state=split)
                        pis = reg.fit_conformalize(Xtr, ytr).predict_interval(Xte)[1]
                        lo, hi = pis[:, 0, :], pis[:, 1, :]
                cover, width = _coverage_width(yte, lo, hi)
                rows.append({"dataset": ds, "split": split, "model": label, "coverage": cover,
                             "width": width, "seconds": time.perf_counter() - t0})
                print(f"  conformal {ds:16s} split {split} {label:34s} cover "
                      f"{np.round(cover, 3)} width {np.round(width, 3)}", flush=True)
    return rows, CrossConformalRegressor is not None


def report(calib, conf, has_mapie, args, seconds, argv=None):
    import sklearn
    import torch

    import skbnngp

    lines = ["# Intervals: calibration over levels and conformal coverage", ""]
    mode = ("**Quick mode** (`--quick`): 2 small sets, 3 folds, 2 splits, conformal around "
            "the Student-t process only. The full run is pending." if args.quick else
            "Full run.")
    if argv:
        mode += f" Arguments: `{' '.join(argv)}`."
    lines += [mode, "",
              (f"Written by `benchmarks/bench_intervals.py{' --quick' if args.quick else ''}` "
              f"in {seconds / 60:.1f} min; {platform.machine()}, {os.cpu_count()} cores "
              f"visible, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; skbnngp "
              f"{skbnngp.__version__}, scikit-learn {sklearn.__version__}, torch "
              f"{torch.__version__}, MAPIE "
              f"{__import__('mapie').__version__ if has_mapie else 'not installed'}."), ""]
    sets = list(dict.fromkeys(r["dataset"] for r in calib))
    models = list(dict.fromkeys(r["model"] for r in calib))
    lines += ["## 1. Calibration error over the levels 0.05...0.95 (lower is better)", "",
              (f"Out-of-fold predictives ({args.folds}-fold `KFold(shuffle=True, "
               f"random_state={args.fold_seed})`), mean |observed - nominal| coverage of the "
               "central intervals at 19 levels. **Bold**: at most sklearn's GP's."), "",
              "| data set | " + " | ".join(models) + " |",
              "|---" * (len(models) + 1) + "|"]
    wins = dict.fromkeys(models, 0)
    for ds in sets:
        val = {r["model"]: r["calibration_error"] for r in calib if r["dataset"] == ds}
        ref = val.get("sklearn_gp", -np.inf)
        cells = []
        for m in models:
            good = m != "sklearn_gp" and val[m] <= ref
            wins[m] += good
            cells.append(f"**{val[m]:.3f}**" if good else f"{val[m]:.3f}")
        lines.append(f"| {ds} | " + " | ".join(cells) + " |")
    lines += ["", "Sets where each regressor's calibration error is at most sklearn's GP's: "
              + ", ".join(f"{m} {wins[m]}/{len(sets)}" for m in models if m != "sklearn_gp")
              + ".", ""]
    if not conf:
        return "\n".join(lines) + "\n"
    lines += conformal_report(conf, args.folds, has_mapie)
    return "\n".join(lines) + "\n"


def conformal_report(conf, folds, has_mapie=True):
    """Section 2's Markdown: per set and method the mean coverage (bold where at least the
    nominal level less two Monte-Carlo standard errors, ``sqrt(a (1 - a) / N)`` with N the
    test rows over all splits) and mean width, then each method's width against MAPIE's
    rows on the same splits."""
    import math

    splits = sorted({r["split"] for r in conf})
    lines = ["## 2. Conformal coverage and width at 80 / 90 / 95 %", "",
             f"Mean over the random 75/25 splits {splits[0]}-{splits[-1]} of the test coverage "
             f"and the mean interval width (in y's units), CV+ with {folds} folds for every "
             "method. **Bold**: coverage at least the nominal level less two Monte-Carlo "
             "standard errors." + ("" if has_mapie else " MAPIE is not installed: its rows are "
                                    "missing."), "",
             "| data set | method | splits | coverage 80 | 90 | 95 | width 80 | 90 | 95 |",
             "|---|---|---|---|---|---|---|---|---|"]
    sets = list(dict.fromkeys(r["dataset"] for r in conf))
    models = list(dict.fromkeys(r["model"] for r in conf))
    peers = [m for m in models if m.startswith("MAPIE")]

    def mean(ds, m, keep=None):
        sel = [r for r in conf if r["dataset"] == ds and r["model"] == m
               and (keep is None or r["split"] in keep)]
        if not sel:  # a method not run on this set
            return None, None, sel
        return (np.mean([r["coverage"] for r in sel], axis=0),
                np.mean([r["width"] for r in sel], axis=0), sel)

    summary = {m: {"ok": 0, "n": 0, **{p: [] for p in peers}} for m in models}
    for ds in sets:
        n_test = math.ceil(0.25 * len(load(ds)[1]))  # train_test_split's test rows
        for m in models:
            cov, wid, sel = mean(ds, m)
            if not sel:
                continue
            cells = []
            for c, a in zip(cov, LEVELS):
                ok = c >= a - 2 * math.sqrt(a * (1 - a) / (len(sel) * n_test))
                summary[m]["ok"] += ok
                summary[m]["n"] += 1
                cells.append(f"**{c:.3f}**" if ok else f"{c:.3f}")
            keep = {r["split"] for r in sel}
            for p in peers:
                summary[m][p] += list(wid / mean(ds, p, keep)[1])
            lines.append(f"| {ds} | {m} | {len(sel)} | " + " | ".join(cells) + " | "
                         + " | ".join(f"{w:.3g}" for w in wid) + " |")
    if peers:
        lines += ["", ("Each method's width against MAPIE's on the same splits, over the sets "
                       "and levels: median ratio (the set-levels where it is narrower)."), "",
                  "| method | coverage held | " + " | ".join(f"width / {p}" for p in peers)
                  + " |", "|---" * (2 + len(peers)) + "|"]
        for m in models:
            ratios = [np.asarray(summary[m][p]) for p in peers]
            lines.append(f"| {m} | {summary[m]['ok']}/{summary[m]['n']} | " + " | ".join(
                f"{np.median(x):.3f} ({int((x < 1).sum())}/{x.size})" for x in ratios) + " |")
    return lines


def combine(paths):
    """The conformal rows of several runs' JSON files (``--combine``), the first row of
    each (set, method, split) kept: runs that extend one another repeat MAPIE's rows."""
    seen, rows = set(), []
    for path in paths:
        for r in json.loads(Path(path).read_text(encoding="utf-8"))["conformal"]:
            key = (r["dataset"], r["model"], r["split"])
            if key not in seen:
                seen.add(key)
                rows.append(r)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "intervals"))
    ap.add_argument("--sections", nargs="+", choices=("calibration", "conformal"),
                    default=("calibration", "conformal"))
    ap.add_argument("--sets", nargs="+", choices=FULL_SETS, default=None,
                    help="data sets (default: all, or the quick ones)")
    ap.add_argument("--models", nargs="+", choices=REGRESSORS + ("sklearn_gp",),
                    default=None, help="section 1's regressors (default: all)")
    ap.add_argument("--folds", type=int, default=None, help="default: 3 quick, 5 full")
    ap.add_argument("--fold-seed", type=int, default=FOLD_SEED,
                    help="section 1's fold seed (tune on others than the default)")
    ap.add_argument("--splits", type=int, default=None,
                    help="section 2's random splits (default: 2 quick, 20 full)")
    ap.add_argument("--first-split", type=int, default=0,
                    help="section 2's first split seed (to extend an earlier run)")
    ap.add_argument("--wrapped", nargs="+", choices=REGRESSORS, default=None,
                    help="section 2's regressors inside ConformalRegressor (default: all, "
                         "or the Student-t process quick)")
    ap.add_argument("--signed", action="store_true",
                    help="section 2's ablation: ConformalRegressor(symmetric=False), rows "
                         "labelled 'conformal cv+ (signed)'")
    ap.add_argument("--skip-mapie", action="store_true",
                    help="section 2 without the MAPIE rows (an earlier run has them)")
    ap.add_argument("--combine", nargs="+", default=None, metavar="JSON",
                    help="report section 2 from the conformal rows of earlier runs' JSON "
                         "files (runs that extend one another with --first-split); runs "
                         "nothing")
    args = ap.parse_args(argv)
    if args.combine:
        text = "\n".join(["# Conformal intervals against MAPIE's CV+", "",
                           "Combined by `benchmarks/bench_intervals.py --combine "
                           + " ".join(Path(p).name for p in args.combine) + "`.", ""]
                          + conformal_report(combine(args.combine), args.folds or 5)) + "\n"
        Path(args.out).with_suffix(".md").write_text(text, encoding="utf-8")
        print(text)
        return {"conformal": combine(args.combine)}
    sets = args.sets or (QUICK_SETS if args.quick else FULL_SETS)
    folds, splits = (3, 2) if args.quick else (5, 20)
    args.folds, args.splits = args.folds or folds, args.splits or splits
    wrapped = tuple(args.wrapped or (("StudentTProcessRegressor",) if args.quick
                                     else REGRESSORS))
    models = tuple(args.models or REGRESSORS + ("sklearn_gp",))
    t0 = time.perf_counter()
    calib = (calibration_section(sets, args.folds, models, args.fold_seed)
             if "calibration" in args.sections else [])
    conf, has_mapie = (conformal_section(sets, args.splits, args.folds, wrapped,
                                           args.first_split, args.signed, not args.skip_mapie)
                       if "conformal" in args.sections else ([], False))
    text = report(calib, conf, has_mapie, args, time.perf_counter() - t0,
                  sys.argv[1:] if argv is None else argv)
    out = Path(args.out)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(
        {"quick": args.quick, "calibration": calib, "conformal": conf}, indent=1), encoding="utf-8")
    print(text)
    return {"calibration": calib, "conformal": conf}


if __name__ == "__main__":
    main()
