"""Benchmark: calibration of every regressor against scikit-learn's GP and network baselines.

The reference for the package's claims about regression uncertainty (issue 19, item 1).
Every model is ``Pipeline([StandardScaler(), model])`` with its defaults (``device="cpu"``,
``random_state=0``); every model standardises y itself (the package's regressors and
scikit-learn's GP by ``normalize_y=True``, the baselines (``baselines.py``) internally). Scores come from
the predictive distribution, in the units of y (``skbnngp.compare``'s scoring): NLPD, CRPS,
RMSE of the median, 90 % / 95 % central-interval coverage, mean 95 % interval width and the
calibration error (mean |observed - nominal| over 19 central intervals).

Models (``--models``):

* ``stp`` ``StudentTProcessRegressor`` (its default ``calibration="auto"``, the Student-t
  calibration: the leave-one-out residuals choose the predictive t's degrees of freedom,
  since late on 2026-11-26), ``stp_loo`` the same with ``calibration="gaussian"`` (the
  t-process's own t widened, the default before; cv, extrap and concrete20), ``stp_auto`` the
  default with ``ard="auto"`` (ARD only where its leave-one-out densities beat the shared
  kernel's; cv, cv_folds, extrap and concrete20), ``stp_noprior`` the default with its
  private ``RELEVANCE_PRIOR = None`` (the ARD relevances by maximum evidence, the default
  before 2026-11-27; cv, cv_folds, extrap and concrete20), ``mixed``
  ``MixedActivationGPRegressor`` (its default
  ``calibration="auto"``, the Student-t: the leave-one-out residuals also choose a
  Student-t predictive, since later on 2026-11-26), ``mixed_loo`` the same with
  ``calibration="gaussian"`` (the Gaussian widened, the default before; cv, extrap
  and concrete20), ``stp_nocal`` and ``mixed_nocal`` with
  ``calibration=None``, ``dbk``
  ``DBKRegressor`` (trained on the exact evidence of its corrected kernel with a tenth of
  the trace regulariser; its default ``calibration="auto"``, a unit-scale Student-t on the
  leave-one-out residuals, since late on 2026-11-26), ``dbk_loo`` the same with
  ``calibration="gaussian"`` (the default before; cv, cv_folds, extrap and concrete20),
  ``dbk_nocal`` the same with ``calibration=None`` (the default of 2026-11-25),
  ``dbk_paper`` trained on the paper's bound (the private ``skbnngp._dbk.EXACT_OBJECTIVE =
  "bound"``, the default before 2026-11-25), ``dbk_ev0`` the exact evidence alone
  (``EVIDENCE_TRACE_WEIGHT = 0``; both patched during fit, see ``_harness.with_settings``),
  ``richbll`` ``RichBLLRegressor`` (default ``calibration="auto"``: the Student-t
  calibration on the held-out rows, since 2026-11-26), ``richbll_nocal`` the same with
  ``calibration=None`` (the paper's Gaussian predictive, the default before),
  ``richbll_cal`` with ``calibration="gaussian"`` (split-conformal widening of
  the Gaussian; cv, extrap and concrete20 only), ``bll``
  ``RichBLLRegressor(uncertainty="bll")`` (the plain Bayesian last layer on the same
  network, with the same default calibration) and ``bll_nocal`` (its Gaussian predictive);
* ``gpr`` scikit-learn's ``GaussianProcessRegressor`` (amplitude x ARD RBF + WhiteKernel,
  ``normalize_y=True``);
* ``svgp`` GPyTorch's SVGP (500 inducing points, 2,000 steps, ARD RBF, Adam on the ELBO in mini-batches of
  1,024), only where the training set has more than 5,000 rows;
* ``laplace`` laplace-torch's last-layer Laplace (``hessian_structure="full"``) on a 2 x 50
  ReLU MLP trained with Adam on MSE (early stopping on 10 %), prior precision and noise by
  the Laplace marginal likelihood;
* ``ensemble`` a deep ensemble of 5 such MLPs with Gaussian (mean, variance) heads trained on
  the Gaussian NLL (Lakshminarayanan et al. 2017, without adversarial training); the
  predictive is the equal-weight mixture of the members' Gaussians.

Sections (``--sections``):

* ``cv``: 5-fold ``KFold(shuffle=True, random_state=0)`` on the embedded sets ``diabetes``,
  ``concrete``, ``auto_mpg``, ``cpu_performance`` and the synthetic ``smooth`` (200 rows),
  ``step`` (300), ``heteroscedastic`` (300), ``heavy_tailed`` (``make_heavy_tailed(300)``,
  Cauchy noise) and ``gap`` (``make_gap_1d(300)``);
* ``cv_seeds``: the cross-validation folds of the synthetic sets with the network models
  refitted with ``random_state`` 0-4 (the ``cv`` section fits seed 0 only), so that a
  coverage miss can be told from the draw of one network;
* ``cv_folds``: the ``cv`` section again at fold seeds 1 and 2 (``KFold(shuffle=True,
  random_state=1 / 2)``) for the package's default regressors and sklearn's GP
  (``FOLD_SEED_MODELS``): the defaults were chosen at fold seed 0, and these folds check
  them on splits nobody tuned on (mean NLPD minus the GP and 95 % coverage per fold seed);
* ``extrap``: each real set sorted by the feature with the largest |corr| with y, trained on
  the lower 80 %, tested on the top 20 %; plus ``gap`` tested inside the gap (-1, 1);
* ``extrap_seeds``: the same splits, the network models (the three DBKs, Rich-BLL, BLL,
  laplace-torch, the ensemble) refitted with ``random_state`` 0-9 (5-9 added in stop 39):
  with one split per set,
  one network seed decides much of an extrapolation score, so the Rich-BLL claims are
  judged on the means over the seeds;
* ``concrete20``: the protocol of Lakshminarayanan et al. 2017 (Table 1) on concrete: 20
  random 90/10 splits, mean test NLL in nats (published: MC dropout 3.04, deep ensembles
  3.06 +- 0.18, PBP 3.16);
* ``large``: ``make_friedman1`` with 20,000 training and 5,000 test rows, DBK (the default
  and the paper's objective) against SVGP (NLPD and fit time).

Usage::

    python benchmarks/bench_uncertainty.py --quick          # a few minutes on one core
    python benchmarks/bench_uncertainty.py --jobs 2         # the full run (hours on 2 cores)
    python benchmarks/bench_uncertainty.py --sections cv --sets diabetes smooth \
        --models gpr dbk --out /tmp/u                        # a subset, written to /tmp/u.*
    python benchmarks/bench_uncertainty.py --records /tmp/u.jsonl ...   # resumable

Only the full run writes ``benchmarks/results/bench_uncertainty.{md,json}``; ``--quick`` and
subsets write only when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (  # noqa: E402
    RESULTS,
    fmt,
    git_commit,
    machine,
    mean_or_nan,
    run_all,
    run_fit,
    task_id,
    versions,
    warning_counts,
    with_settings,
    write_results,
)
from baselines import (  # noqa: E402
    DeepEnsembleRegressor,
    LaplaceLastLayerRegressor,
    SVGPRegressor,
    sklearn_gpr,
)

REAL = ("diabetes", "concrete", "auto_mpg", "cpu_performance")
SYNTHETIC = ("smooth", "step", "heteroscedastic", "heavy_tailed", "gap")
SETS = REAL + SYNTHETIC
MODELS = ("stp", "stp_auto", "stp_noprior", "stp_loo", "stp_nocal", "mixed", "mixed_loo", "mixed_nocal", "dbk", "dbk_loo", "dbk_nocal", "dbk_paper", "dbk_ev0",
          "richbll", "richbll_nocal", "richbll_cal", "bll", "bll_nocal", "gpr", "svgp",
          "laplace", "ensemble")
LABELS = {"stp": "StudentTProcessRegressor",
          "stp_auto": "StudentTProcessRegressor(ard='auto')",
          "stp_noprior": "StudentTProcessRegressor, RELEVANCE_PRIOR=None",
          "stp_loo": "StudentTProcessRegressor(calibration='gaussian')",
          "stp_nocal": "StudentTProcessRegressor(calibration=None)",
          "mixed": "MixedActivationGPRegressor",
          "mixed_loo": "MixedActivationGPRegressor(calibration='gaussian')",
          "mixed_nocal": "MixedActivationGPRegressor(calibration=None)",
          "dbk": "DBKRegressor",
          "dbk_loo": "DBKRegressor(calibration='gaussian')",
          "dbk_nocal": "DBKRegressor(calibration=None)",
          "dbk_paper": "DBKRegressor, paper's bound (EXACT_OBJECTIVE='bound')",
          "dbk_ev0": "DBKRegressor, evidence alone (EVIDENCE_TRACE_WEIGHT=0)",
          "richbll": "RichBLLRegressor",
          "richbll_cal": "RichBLLRegressor(calibration='gaussian')",
          "richbll_nocal": "RichBLLRegressor(calibration=None)",
          "bll": "RichBLLRegressor(uncertainty='bll')",
          "bll_nocal": "RichBLLRegressor(uncertainty='bll', calibration=None)",
          "gpr": "sklearn GP (ARD RBF + White)",
          "svgp": "GPyTorch SVGP (500 inducing)", "laplace": "laplace-torch last-layer",
          "ensemble": "deep ensemble (5 MLPs)"}
SECTIONS = ("cv", "cv_seeds", "cv_folds", "extrap", "extrap_seeds", "concrete20", "large")
#: ``cv_folds``: the fold seeds (``KFold``'s ``random_state``) beside the ``cv`` section's 0,
#: and the models refitted on them (the package's default regressors and the reference GP).
FOLD_SEEDS = (1, 2)
FOLD_SEED_MODELS = ("stp", "stp_auto", "stp_noprior", "mixed", "dbk", "dbk_loo", "richbll", "richbll_nocal", "gpr")
#: ``extrap_seeds``: the models whose fit depends on the seed (a network's initialisation
#: and batches), refitted with these ``random_state`` values on the extrapolation splits.
NETWORK_MODELS = ("dbk", "dbk_nocal", "dbk_paper", "dbk_ev0", "richbll", "richbll_nocal", "bll",
                  "bll_nocal", "laplace", "ensemble")
EXTRAP_SEEDS = tuple(range(10))
#: ``cv_seeds``: the network seeds of the synthetic sets' folds.
CV_SEEDS = (0, 1, 2, 3, 4)
SVGP_MIN_ROWS = 5000
PUBLISHED_CONCRETE = {"MC dropout": "3.04 ± 0.02", "deep ensembles": "3.06 ± 0.18",
                      "PBP": "3.16 ± 0.02"}
COVERAGE_OK = (0.92, 0.98)


def make_model(name, n_features, quick=False, seed=0):
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    import skbnngp

    common = {"device": "cpu", "random_state": seed}
    model = {
        "stp": lambda: skbnngp.StudentTProcessRegressor(**common),
        "stp_auto": lambda: skbnngp.StudentTProcessRegressor(ard="auto", **common),
        "stp_noprior": lambda: with_settings(skbnngp.StudentTProcessRegressor,
                                             {"RELEVANCE_PRIOR": None})(**common),
        "stp_loo": lambda: skbnngp.StudentTProcessRegressor(calibration="gaussian", **common),
        "stp_nocal": lambda: skbnngp.StudentTProcessRegressor(calibration=None, **common),
        "mixed": lambda: skbnngp.MixedActivationGPRegressor(**common),
        "mixed_loo": lambda: skbnngp.MixedActivationGPRegressor(calibration="gaussian",
                                                                **common),
        "mixed_nocal": lambda: skbnngp.MixedActivationGPRegressor(calibration=None,
                                                                  **common),
        "dbk": lambda: skbnngp.DBKRegressor(**common),
        "dbk_loo": lambda: skbnngp.DBKRegressor(calibration="gaussian", **common),
        "dbk_nocal": lambda: skbnngp.DBKRegressor(calibration=None, **common),
        "dbk_paper": lambda: with_settings(skbnngp.DBKRegressor,
                                           {"EXACT_OBJECTIVE": "bound"})(**common),
        "dbk_ev0": lambda: with_settings(skbnngp.DBKRegressor,
                                         {"EVIDENCE_TRACE_WEIGHT": 0.0})(**common),
        "richbll": lambda: skbnngp.RichBLLRegressor(**common),
        "richbll_cal": lambda: skbnngp.RichBLLRegressor(calibration="gaussian", **common),
        "richbll_nocal": lambda: skbnngp.RichBLLRegressor(calibration=None, **common),
        "bll": lambda: skbnngp.RichBLLRegressor(uncertainty="bll", **common),
        "bll_nocal": lambda: skbnngp.RichBLLRegressor(uncertainty="bll", calibration=None,
                                                      **common),
        "gpr": lambda: sklearn_gpr(n_features),
        "svgp": lambda: (SVGPRegressor(n_inducing=100, n_steps=300) if quick
                         else SVGPRegressor()),
        "laplace": lambda: (LaplaceLastLayerRegressor(n_hyper_steps=100, max_epochs=200,
                                                      patience=20, random_state=seed) if quick
                            else LaplaceLastLayerRegressor(random_state=seed)),
        "ensemble": lambda: (DeepEnsembleRegressor(max_epochs=200, patience=20,
                                                   random_state=seed) if quick
                             else DeepEnsembleRegressor(random_state=seed)),
    }[name]()
    return Pipeline([("scale", StandardScaler()), ("model", model)])


# ============================================================================ data
def load(name, quick=False):
    """``(X, y)``; with ``quick`` the real sets are cut to 200 random rows."""
    from bench_defaults import load as load_defaults

    from skbnngp.datasets import load_dataset, make_gap_1d, make_heavy_tailed

    if name in REAL:
        X, y = load_dataset(name, return_X_y=True)
        if quick:
            idx = np.random.RandomState(0).choice(len(y), min(200, len(y)), replace=False)
            X, y = X[idx], y[idx]
    elif name in ("smooth", "step", "heteroscedastic"):
        X, y = load_defaults(name, [])
    elif name == "heavy_tailed":
        X, y = make_heavy_tailed(300, 1, random_state=0)
    elif name == "gap":
        X, y = make_gap_1d(300, random_state=0)
    else:
        raise ValueError(f"unknown data set {name!r}")
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)


def extrapolation_split(X, y):
    """Rows sorted by the feature most correlated with y: lower 80 % train, top 20 % test."""
    corr = [abs(np.corrcoef(X[:, j], y)[0, 1]) if np.std(X[:, j]) > 0 else 0.0
            for j in range(X.shape[1])]
    j = int(np.nanargmax(corr))
    order = np.argsort(X[:, j], kind="stable")
    cut = int(round(0.8 * len(y)))
    return order[:cut], order[cut:], j


def gap_in_gap(n_test=200):
    """``make_gap_1d(300)`` for training and ``n_test`` rows inside its gap (-1, 1)."""
    from skbnngp.datasets import make_gap_1d

    X, y = make_gap_1d(300, random_state=0)
    rng = np.random.RandomState(1)
    xt = rng.uniform(-1.0, 1.0, n_test)
    yt = np.sin(2 * xt) + 0.3 * xt + 0.1 * rng.standard_normal(n_test)  # make_gap_1d's law
    return np.vstack([X, xt[:, None]]), np.concatenate([y, yt]), len(y)


def friedman(n_train, n_test=5000):
    from sklearn.datasets import make_friedman1

    X, y = make_friedman1(n_train + n_test, 10, noise=1.0, random_state=0)
    return X, y


# ============================================================================ tasks
def run_task(task):
    key, X, y, train, test, quick = task
    seed = key.get("seed", key["split"] if key["section"] == "extrap_seeds" else 0)
    return run_fit(key, lambda: make_model(key["model"], X.shape[1], quick, seed), X, y, train,
                   test, "regression")


def build_tasks(args):
    from sklearn.model_selection import KFold, ShuffleSplit

    tasks, notes = [], []
    folds = 2 if args.quick else 5
    wanted = [m for m in args.models]

    def models_for(n_train):
        return [m for m in wanted if m != "svgp" or n_train > SVGP_MIN_ROWS]

    if "cv" in args.sections:
        for ds in args.sets:
            X, y = load(ds, args.quick)
            for fold, (tr, te) in enumerate(KFold(folds, shuffle=True,
                                                  random_state=0).split(X)):
                for m in models_for(len(tr)):
                    tasks.append(({"section": "cv", "set": ds, "split": fold, "model": m},
                                  X, y, tr, te, args.quick))
    if "cv_seeds" in args.sections:  # the synthetic sets' folds, network seeds 0-4
        for ds in [d for d in args.sets if d in SYNTHETIC]:
            X, y = load(ds, args.quick)
            for fold, (tr, te) in enumerate(KFold(folds, shuffle=True,
                                                  random_state=0).split(X)):
                for m in [m for m in models_for(len(tr)) if m in NETWORK_MODELS]:
                    for seed in CV_SEEDS:
                        tasks.append(({"section": "cv_seeds", "set": ds, "split": fold,
                                       "seed": seed, "model": m}, X, y, tr, te, args.quick))
    if "cv_folds" in args.sections:  # the cv section at other fold seeds
        for ds in args.sets:
            X, y = load(ds, args.quick)
            for fold_seed in FOLD_SEEDS:
                for fold, (tr, te) in enumerate(KFold(folds, shuffle=True,
                                                      random_state=fold_seed).split(X)):
                    for m in [m for m in models_for(len(tr)) if m in FOLD_SEED_MODELS]:
                        tasks.append(({"section": "cv_folds", "set": ds, "split": fold,
                                       "fold_seed": fold_seed, "model": m},
                                      X, y, tr, te, args.quick))
    if "extrap" in args.sections or "extrap_seeds" in args.sections:
        for ds in [d for d in args.sets if d in REAL] + (["gap"] if "gap" in args.sets else []):
            if ds == "gap":
                X, y, n = gap_in_gap()
                tr, te = np.arange(n), np.arange(n, len(y))
                notes.append("extrap `gap`: trained on `make_gap_1d(300, random_state=0)`, "
                             "tested on 200 rows uniform in the gap (-1, 1).")
            else:
                X, y = load(ds, args.quick)
                tr, te, j = extrapolation_split(X, y)
                notes.append(f"extrap `{ds}`: sorted by feature {j}; {len(tr)} train rows, "
                             f"{len(te)} test rows.")
            if "extrap" in args.sections:
                for m in models_for(len(tr)):
                    tasks.append(({"section": "extrap", "set": ds, "split": 0, "model": m},
                                  X, y, tr, te, args.quick))
            if "extrap_seeds" in args.sections:  # the same split, network seeds 0-4
                for m in [m for m in models_for(len(tr)) if m in NETWORK_MODELS]:
                    for seed in EXTRAP_SEEDS:
                        tasks.append(({"section": "extrap_seeds", "set": ds, "split": seed,
                                       "model": m}, X, y, tr, te, args.quick))
    if "concrete20" in args.sections:
        X, y = load("concrete", args.quick)
        n_splits = 2 if args.quick else 20
        for s, (tr, te) in enumerate(ShuffleSplit(n_splits, test_size=0.1,
                                                  random_state=0).split(X)):
            for m in models_for(len(tr)):
                tasks.append(({"section": "concrete20", "set": "concrete", "split": s,
                               "model": m}, X, y, tr, te, args.quick))
    if "large" in args.sections:
        n_train = 5500 if args.quick else 20000
        n_test = 1000 if args.quick else 5000
        X, y = friedman(n_train, n_test)
        tr, te = np.arange(n_train), np.arange(n_train, n_train + n_test)
        notes.append(f"large: `make_friedman1({n_train + n_test}, 10, noise=1, "
                     f"random_state=0)`, first {n_train} rows train, last {n_test} test.")
        for m in [m for m in ("dbk", "dbk_paper", "svgp") if m in wanted]:
            tasks.append(({"section": "large", "set": f"friedman1_{n_train}", "split": 0,
                           "model": m}, X, y, tr, te, args.quick))
    # section by section, small sets first, one set complete before the next: an interrupted
    # run (see --records) leaves whole sets behind
    tasks.sort(key=lambda t: (SECTIONS.index(t[0]["section"]), len(t[3]), t[0]["set"]))
    return tasks, notes


# ============================================================================ summary
METRICS = ("nlpd", "crps", "rmse", "coverage_90", "coverage_95", "width_95",
           "calibration_error", "fit_s")


def cell_table(records, section):
    """``{model: {set: {metric: [values over splits]}}}`` and error counts."""
    table, errors = {}, {}
    for r in records:
        if r["section"] != section:
            continue
        if r["error"]:
            errors.setdefault(r["model"], {}).setdefault(r["set"], []).append(r["error"])
            continue
        cell = table.setdefault(r["model"], {}).setdefault(r["set"], {})
        for k in METRICS:
            cell.setdefault(k, []).append(r["metrics"][k])
    return table, errors


def summarise(records, models, sets):
    out = {}
    for section in SECTIONS:
        table, errors = cell_table(records, section)
        if not table and not errors:
            continue
        sec_sets = [s for s in list(sets) + ["gap"] if any(s in table.get(m, {})
                                                           for m in table)]
        sec_sets += sorted({s for m in table for s in table[m]} - set(sec_sets))
        sec_sets = list(dict.fromkeys(sec_sets))
        means = {m: {s: {k: mean_or_nan(v) for k, v in table[m][s].items()}
                     for s in table[m]} for m in table}
        stds = {m: {s: {k: float(np.std(v)) for k, v in table[m][s].items()}
                    for s in table[m]} for m in table}
        counts = {m: {s: len(table[m][s]["nlpd"]) for s in table[m]} for m in table}
        out[section] = {"sets": sec_sets, "mean": means, "std": stds, "n": counts,
                        "errors": errors,
                        "models": [m for m in models if m in table or m in errors]}
    out["warnings"] = warning_counts(records)
    return out


def _metric_table(sec, metric, spec, mark=None, mean_col=True):
    sets = sec["sets"]
    lines = ["| model | " + " | ".join(sets) + (" | mean |" if mean_col else " |"),
             "|---|" + "---:|" * (len(sets) + (1 if mean_col else 0))]
    for m in sec["models"]:
        vals = [sec["mean"].get(m, {}).get(s, {}).get(metric, float("nan")) for s in sets]
        cells = []
        for s, v in zip(sets, vals):
            text = fmt(v, spec)
            if s in sec["errors"].get(m, {}):
                text += f" ({len(sec['errors'][m][s])} failed)"
            if mark and np.isfinite(v) and mark(v):
                text = f"**{text}**"
            cells.append(text)
        mean = (f" | {fmt(float(np.mean(vals)), spec)}" if all(np.isfinite(vals)) else " | —") \
            if mean_col else ""
        lines.append(f"| {LABELS[m]} | " + " | ".join(cells) + mean + " |")
    return lines


def _coverage_miss(v):
    # rounded: a mean of fold fractions such as 276/300 arrives as 0.9199999999999999
    return not COVERAGE_OK[0] <= round(v, 9) <= COVERAGE_OK[1]


def _seeds_tables(sec, what, where, intro, seeds):
    """Markdown lines of a section refitted over ``seeds``: its title, NLPD and 95 %
    coverage, each the mean over the seeds (and folds)."""
    return ["", (f"## {what} over network seeds ({where}; the network models refitted "
                 f"with random_state {seeds[0]}-{seeds[-1]})"), "", intro, "",
            "### Test NLPD, mean over the seeds", "", *_metric_table(sec, "nlpd", ".3f"),
            "", "### 95 % coverage, mean over the seeds (misses in bold)", "",
            *_metric_table(sec, "coverage_95", ".3f", mark=_coverage_miss, mean_col=False)]


def _fold_seed_section(result, s):
    """Markdown lines of ``cv_folds``: for each fold seed (0 from the ``cv`` section), each
    model's mean NLPD minus sklearn's GP and its 95 % coverage misses, then the NLPD and
    coverage tables of the other fold seeds."""
    models = [m for m in s["cv_folds"]["models"]]
    by_seed = {0: s["cv"]} if "cv" in s else {}
    for fold_seed in FOLD_SEEDS:
        recs = [r for r in result["records"]
                if r["section"] == "cv_folds" and r.get("fold_seed") == fold_seed]
        if recs:
            by_seed[fold_seed] = summarise(recs, models, s["cv_folds"]["sets"])["cv_folds"]
    seeds = sorted(by_seed)

    def minus_gp(sec, m):
        gp, own = sec["mean"].get("gpr", {}), sec["mean"].get(m, {})
        if not all(st in gp and st in own for st in sec["sets"]):
            return float("nan")
        return float(np.mean([own[st]["nlpd"] - gp[st]["nlpd"] for st in sec["sets"]]))

    def misses(sec, m):
        own = sec["mean"].get(m, {})
        return ", ".join(f"{st} {own[st]['coverage_95']:.3f}" for st in sec["sets"]
                         if st in own and _coverage_miss(own[st]["coverage_95"])) or "none"

    out = ["", "## Interpolation at other fold seeds (the cv section's sets and protocol, "
           f"`KFold(random_state={', '.join(map(str, FOLD_SEEDS))})`)", "",
           "The defaults were chosen at fold seed 0 (the cv section); these folds were not "
           "used to choose anything. Fold seed 0's column repeats the cv section.", "",
           "### Mean NLPD minus sklearn GP (target <= +0.05)", "",
           "| model | " + " | ".join(f"fold seed {k}" for k in seeds) + " | mean |",
           "|---|" + "---:|" * (len(seeds) + 1)]
    for m in models:
        if m == "gpr":
            continue
        d = [minus_gp(by_seed[k], m) for k in seeds]
        out.append(f"| {LABELS[m]} | " + " | ".join(fmt(v, "+.3f") for v in d)
                   + f" | {fmt(float(np.mean(d)), '+.3f')} |")
    out += ["", "### 95 % coverage outside 0.92-0.98", "",
            "| model | " + " | ".join(f"fold seed {k}" for k in seeds) + " |",
            "|---|" + "---|" * len(seeds)]
    for m in models:
        out.append(f"| {LABELS[m]} | " + " | ".join(misses(by_seed[k], m) for k in seeds)
                   + " |")
    for k in seeds:
        if k == 0:
            continue
        out += ["", f"### Fold seed {k}: test NLPD", "", *_metric_table(by_seed[k], "nlpd",
                                                                         ".3f"),
                "", f"### Fold seed {k}: 95 % coverage (misses in bold)", "",
                *_metric_table(by_seed[k], "coverage_95", ".3f", mark=_coverage_miss,
                               mean_col=False)]
    return out


def markdown(result):
    s = result["summary"]
    out = ["# Calibration of the regressors (issue 19)", "",
           f"Measured on commit `{result['commit']}`"
           + (" (quick profile: 2 folds, real sets cut to 200 rows; not the reference run)"
              if result["quick"] else "")
           + f". {result['machine']}; jobs={result['jobs']}, one thread per fit. "
           + (f"Wall time {result['wall_s'] / 60:.1f} min. " if result["wall_s"] is not None
              else "") + "Versions: "
           + ", ".join(f"{k} {v}" for k, v in result["versions"].items()) + ".", "",
           "Every model is `Pipeline([StandardScaler(), model])` with its defaults "
           "(`device='cpu'`, `random_state=0`); scores are in the units of y. Model details "
           "are in the docstring of `benchmarks/bench_uncertainty.py`.", ""]
    if result.get("partial"):
        out += [f"**Partial run**: {result['partial']}", ""]
    out += [f"- {n}" for n in result["notes"]] + [""]
    if "cv" in s:
        sec = s["cv"]
        k = result["folds"]
        out += [f"## Interpolation: {k}-fold cross-validation", "",
                "### Test NLPD (mean over folds; lower is better)", ""]
        out += _metric_table(sec, "nlpd", ".3f")
        gp = sec["mean"].get("gpr")
        if gp:
            ref = {st: gp[st]["nlpd"] for st in gp}
            diffs = []
            for m in sec["models"]:
                if m == "gpr":
                    continue
                common = [st for st in sec["sets"] if st in ref
                          and np.isfinite(sec["mean"].get(m, {}).get(st, {}).get("nlpd",
                                                                                 np.nan))]
                if common:
                    d = np.mean([sec["mean"][m][st]["nlpd"] - ref[st] for st in common])
                    diffs.append(f"{m} {d:+.3f}" + ("" if len(common) == len(sec["sets"])
                                                    else f" ({len(common)} sets)"))
            out += ["", "**Mean NLPD minus sklearn GP** (over the sets both have; target "
                    "<= +0.05): " + ", ".join(diffs)]
        out += ["", "### 95 % interval coverage (misses outside 0.92-0.98 in bold)", ""]
        out += _metric_table(sec, "coverage_95", ".3f", mark=_coverage_miss, mean_col=False)
        out += ["", "### 90 % interval coverage", ""]
        out += _metric_table(sec, "coverage_90", ".3f", mean_col=False)
        for metric, title, spec in (("crps", "CRPS", ".3f"), ("rmse", "RMSE", ".3g"),
                                    ("width_95", "Mean 95 % interval width", ".3g"),
                                    ("calibration_error", "Calibration error", ".3f"),
                                    ("fit_s", "Fit time per fold (s)", ".1f")):
            out += ["", f"### {title}", ""] + _metric_table(sec, metric, spec)
        out += ["", "### Issue 19 targets (interpolation)", "",
                "| model | 95 % coverage misses | mean NLPD - GP | target met |",
                "|---|---|---:|---|"]
        for m in sec["models"]:
            if m == "gpr":
                continue
            miss = [f"{st} {sec['mean'][m][st]['coverage_95']:.2f}"
                    for st in sec["sets"] if st in sec["mean"].get(m, {})
                    and _coverage_miss(sec["mean"][m][st]["coverage_95"])]
            d = float("nan")
            if gp and all(st in sec["mean"].get(m, {}) and st in gp for st in sec["sets"]):
                d = float(np.mean([sec["mean"][m][st]["nlpd"] - gp[st]["nlpd"]
                                   for st in sec["sets"]]))
            ok = not miss and np.isfinite(d) and d <= 0.05
            out.append(f"| {LABELS[m]} | {', '.join(miss) or 'none'} | {fmt(d, '+.3f')} | "
                       f"{'yes' if ok else 'no'} |")
    if "cv_seeds" in s:
        sec = s["cv_seeds"]
        out += _seeds_tables(sec, "Interpolation", "the synthetic sets' folds above",
                             "The cross-validation above fits one network seed; here each "
                             "cell is the mean over the five folds and the five seeds.",
                             CV_SEEDS)
        out += ["", "### 95 % coverage of each seed (mean over the folds)", "",
                "| model | set | " + " | ".join(f"seed {k}" for k in CV_SEEDS) + " |",
                "|---|---|" + "---:|" * len(CV_SEEDS)]
        per = {}
        for r in result["records"]:
            if r["section"] == "cv_seeds" and not r["error"]:
                per.setdefault((r["model"], r["set"], r["seed"]), []).append(
                    r["metrics"]["coverage_95"])
        for m in sec["models"]:
            for st in sec["sets"]:
                if any((m, st, k) in per for k in CV_SEEDS):
                    out.append(f"| {LABELS[m]} | {st} | " + " | ".join(
                        fmt(mean_or_nan(per.get((m, st, k), [])), ".3f")
                        for k in CV_SEEDS) + " |")
    if "cv_folds" in s:
        out += _fold_seed_section(result, s)
    if "extrap" in s:
        sec = s["extrap"]
        out += ["", "## Extrapolation (train on the lower 80 % of the most relevant feature, "
                "test on the top 20 %; gap: test inside the gap)", "", "### Test NLPD", ""]
        out += _metric_table(sec, "nlpd", ".3f")
        out += ["", "### 95 % coverage (misses in bold)", ""]
        out += _metric_table(sec, "coverage_95", ".3f", mark=_coverage_miss, mean_col=False)
        out += ["", "### RMSE", ""] + _metric_table(sec, "rmse", ".3g")
        rb = sec["mean"].get("richbll", {})
        for other in ("bll", "laplace"):
            ob = sec["mean"].get(other, {})
            common = [st for st in rb if st in ob]
            if common:
                wins = sum(rb[st]["nlpd"] < ob[st]["nlpd"] for st in common)
                out += ["", f"Rich-BLL NLPD below {LABELS[other]} on {wins} of {len(common)} "
                        "sets (target: most)."]
    if "extrap_seeds" in s:
        sec = s["extrap_seeds"]
        out += _seeds_tables(sec, "Extrapolation", "the splits above",
                             "One split per set, so a single seed's network decides much of "
                             "the score above.", EXTRAP_SEEDS)
        table, _ = cell_table(result["records"], "extrap_seeds")
        rb = table.get("richbll", {})
        for other in ("bll", "laplace"):
            ob = table.get(other, {})
            common = [st for st in sec["sets"] if st in rb and st in ob]
            if not common:
                continue
            wins = sum(np.mean(rb[st]["nlpd"]) < np.mean(ob[st]["nlpd"]) for st in common)
            pairs = [(a, b) for st in common for a, b in zip(rb[st]["nlpd"], ob[st]["nlpd"])]
            out += ["", (f"Rich-BLL NLPD below {LABELS[other]}: on {wins} of {len(common)} "
                         f"sets in the mean over the seeds (target: most); on "
                         f"{sum(a < b for a, b in pairs)} of {len(pairs)} set-seed pairs.")]
    if "concrete20" in s:
        sec = s["concrete20"]
        out += ["", "## Concrete, protocol of Lakshminarayanan et al. 2017 "
                f"({result['concrete_splits']} random 90/10 splits)", "",
                "| model | test NLL (nats), mean ± std over splits | ± s.e. | RMSE | "
                "95 % coverage | fit s |", "|---|---:|---:|---:|---:|---:|"]
        for m in sec["models"]:
            c = sec["mean"].get(m, {}).get("concrete")
            if not c:
                out.append(f"| {LABELS[m]} | failed | | | | |")
                continue
            sd, n = sec["std"][m]["concrete"]["nlpd"], sec["n"][m]["concrete"]
            fails = len(sec["errors"].get(m, {}).get("concrete", []))
            out.append(f"| {LABELS[m]} | {c['nlpd']:.2f} ± {sd:.2f}"
                       + (f" ({fails} failed)" if fails else "")
                       + f" | {sd / math.sqrt(n):.2f} | {c['rmse']:.2f} | "
                       f"{c['coverage_95']:.3f} | {c['fit_s']:.1f} |")
        for name, value in PUBLISHED_CONCRETE.items():
            out.append(f"| published: {name} | {value} | | | | |")
        out += ["", "Published figures: Table 1 of Lakshminarayanan et al. (2017), as printed "
                "there (mean ± the paper's error bar, 20 splits). Target: the package's best estimator below "
                "3.04."]
    if "large" in s:
        sec = s["large"]
        out += ["", "## Large data: DBK against SVGP", "",
                "| data | model | NLPD | RMSE | 95 % coverage | fit s |",
                "|---|---|---:|---:|---:|---:|"]
        for m in sec["models"]:
            for st, c in sec["mean"].get(m, {}).items():
                out.append(f"| {st} | {LABELS[m]} | {c['nlpd']:.3f} | {c['rmse']:.3f} | "
                           f"{c['coverage_95']:.3f} | {c['fit_s']:.0f} |")
            for st, errs in sec["errors"].get(m, {}).items():
                out.append(f"| {st} | {LABELS[m]} | failed: {errs[0][:80]} | | | |")
        out += ["", "Target: DBK's NLPD below SVGP's at a lower fit time."]
    out += ["", "## Warnings raised by the fits (count, per data set)", ""]
    if s["warnings"]:
        for m, per in s["warnings"].items():
            for w, where in per.items():
                out.append(f"- {m}: {w[:160]} ("
                           + ", ".join(f"{k} {v}" for k, v in where.items()) + ")")
    else:
        out.append("None.")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="2 folds, real sets cut to 200 rows, a subset of sets and models, "
                         "shorter baseline training (SVGP 100 inducing points, 300 steps; "
                         "MLPs at most 200 epochs)")
    ap.add_argument("--sets", nargs="+", choices=SETS)
    ap.add_argument("--models", nargs="+", choices=MODELS)
    ap.add_argument("--sections", nargs="+", choices=SECTIONS)
    ap.add_argument("--jobs", type=int, default=1, help="fits run in parallel (joblib)")
    ap.add_argument("--out", help="output stem (writes OUT.md and OUT.json)")
    ap.add_argument("--records", help="JSON-lines file of fit records: reused and appended, "
                                      "so an interrupted run resumes")
    ap.add_argument("--report-only", action="store_true",
                    help="no fits: report what --records holds (a partial run says so)")
    ap.add_argument("--partial-note", help="label written into the report of a partial run")
    args = ap.parse_args(argv)
    full = not (args.quick or args.sets or args.models or args.sections)
    if args.quick:
        args.sets = args.sets or ["smooth", "heavy_tailed", "diabetes"]
        args.models = args.models or ["stp", "dbk", "richbll", "bll", "gpr", "svgp",
                                      "laplace", "ensemble"]
        args.sections = args.sections or ["cv", "extrap", "concrete20", "large"]
    args.sets = args.sets or list(SETS)
    args.models = args.models or list(MODELS)
    args.sections = args.sections or list(SECTIONS)

    start = time.perf_counter()
    tasks, notes = build_tasks(args)
    records = run_all(tasks, run_task, args.jobs, args.records, run=not args.report_only)
    wall = time.perf_counter() - start
    missing = len(tasks) - len(records)
    if missing:  # report only (section, set) groups with every fit done
        have = {r["task_id"] for r in records}
        groups = {}
        for t in tasks:
            groups.setdefault((t[0]["section"], t[0]["set"]), []).append(task_id(t[0]))
        whole = {g for g, ids in groups.items() if all(i in have for i in ids)}
        dropped = sorted(f"{sec} {st}" for sec, st in set(groups) - whole)
        records = [r for r in records if (r["section"], r["set"]) in whole]
        args.partial_note = " ".join(filter(None, [
            f"{missing} of {len(tasks)} fits not run yet; not reported (incomplete): "
            + ", ".join(dropped) + ".", args.partial_note]))
    result = {"commit": git_commit(), "machine": machine(), "versions": versions(),
              "quick": args.quick, "jobs": args.jobs, "folds": 2 if args.quick else 5,
              "concrete_splits": 2 if args.quick else 20, 
              "wall_s": None if args.report_only else wall,
              "sets": args.sets, "models": args.models, "sections": args.sections,
              "partial": args.partial_note, "notes": notes,
              "summary": summarise(records, args.models, args.sets), "records": records}
    text = markdown(result)
    print(text)
    if args.out or (full and not missing):
        write_results(args.out or RESULTS / "bench_uncertainty", result, text)
    return result


if __name__ == "__main__":
    main()
