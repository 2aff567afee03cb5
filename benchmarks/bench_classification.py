"""Benchmark: probability quality of the classifiers against scikit-learn baselines.

Issue 20, item 1. ``StudentTProcessClassifier`` and ``FiDGPClassifier`` (defaults,
``device="cpu"``, ``random_state=0``) against

* ``lr`` ``LogisticRegression(max_iter=1000)`` (L2, C=1);
* ``gpc`` scikit-learn's ``GaussianProcessClassifier`` (Laplace, one-vs-rest for more than two
  classes) with amplitude x ARD RBF; on sets with more than 20 features (digits) an isotropic
  RBF, since the ARD fit of 64 length scales per class is impractically slow;
* ``mlp`` ``MLPClassifier(max_iter=1000, random_state=0)`` (one hidden layer of 100 ReLU,
  Adam, L2 1e-4);
* ``ensemble`` 5 such MLPs (``random_state`` 0-4), probabilities averaged.

Every model is ``Pipeline([StandardScaler(), model])``. Data: the embedded ``iris``, ``wine``,
``breast_cancer`` and ``digits``, and two synthetic sets: ``overlap`` (3 classes,
``make_classification(600, 6, n_informative=4, class_sep=0.5)``) and ``imbalanced`` (binary,
1:20, ``make_classification(1050, 8, n_informative=4, weights=[20/21])``).
``--small-multiclass`` (issue 52) runs instead three small sets with 6-10 classes, on which
FiD-GP's held-out temperature sees a handful of rows per class: ``digits6_214`` (digits 0-5,
214 rows drawn at random), ``digits_300`` (300 stratified rows of the ten digits) and
``mc6_300`` (``make_classification(300, 20, n_informative=6, n_classes=6)``), 3 folds.
``StratifiedKFold(5, shuffle=True, random_state=0)`` (``--fold-seed`` for other splits, a
check of the defaults on splits they were not chosen on). Metrics: accuracy, NLL (log loss),
multi-class Brier score, top-label ECE with 15 equal-width bins, fit time.

ECE is reported three ways, since the per-fold figure is biased upward on small test folds
(iris: 30 rows per fold) even for a perfectly calibrated model:

* ``ece``: mean over the folds of each test fold's ECE (the target's figure);
* ``ece_pooled``: the ECE of the pooled out-of-fold predictions (every row once);
* ``ece_floor`` and ``ece_pooled_floor``: the noise floor of each, the mean ECE that a
  perfectly calibrated model with the same predicted probabilities gets when its labels are
  drawn from those probabilities (``N_FLOOR_DRAWS`` draws; only the top-label correctness
  matters, which is Bernoulli(confidence));
* ``ece_p`` and ``ece_pooled_p``: a one-sided Monte-Carlo test of calibration, the share of
  ``N_PVALUE_DRAWS`` such calibrated draws whose ECE reaches the observed one.

Ablations (``--models`` only): ``fidgp_none``, ``fidgp_temp`` (FiD-GP's ``calibration``),
``fidgp_trefit`` (temperature scaling with ``refit=True``), ``fidgp_cccv`` (FiD-GP with
``calibration=None`` inside scikit-learn's ``CalibratedClassifierCV(method="temperature",
cv=5, ensemble=False)``: a temperature cross-fitted on every training row, five more fits),
``stpc_alpha10`` (the Student-t classifier's old noise box, its private
``HYPERPARAMETER_BOUNDS["alpha"] = (1e-6, 10)``), ``stpc_lv0`` (its private
``LABEL_VARIANCE = 0``, the probabilities before the label variance) and ``stpc_shared``
(``ard=False``, the Student-t classifier's default before ``ard="auto"``).

Targets (issue 20): each classifier's mean NLL over the sets no worse than the better of
LogisticRegression and the GP classifier + 0.02, and ECE <= 0.05 on every set.

Usage::

    python benchmarks/bench_classification.py --quick     # a few minutes on one core
    python benchmarks/bench_classification.py --jobs 2    # the full run
    python benchmarks/bench_classification.py --small-multiclass --models fidgp lr \
        --out benchmarks/results/bench_classification_small_multiclass

Only the full run writes ``benchmarks/results/bench_classification.{md,json}``; ``--quick`` and
subsets write only when ``--out`` is given.
"""

from __future__ import annotations

import argparse
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
    versions,
    warning_counts,
    with_settings,
    write_results,
)
from baselines import (  # noqa: E402
    MLPEnsembleClassifier,
    logistic_regression,
    mlp_classifier,
    sklearn_gpc,
)

from skbnngp.metrics import expected_calibration_error  # noqa: E402 (after _harness's path)

SETS = ("iris", "wine", "breast_cancer", "digits", "overlap", "imbalanced")
#: Small multi-class sets (``--small-multiclass``; issue 52): a few hundred rows, 6-10 classes,
#: so that the held-out calibration split has a handful of rows per class.
SMALL_SETS = ("digits6_214", "digits_300", "mc6_300")
MODELS = ("stpc", "fidgp", "lr", "gpc", "mlp", "ensemble")
#: Ablations (``--models`` only; not in the full run): name -> (model, parameters) or
#: (model, parameters, private settings of the model's module, patched during its fit)
_STPC_MODULE = "skbnngp._student_t_classifier"
VARIANTS = {"fidgp_none": ("fidgp", {"calibration": None}),
            "fidgp_temp": ("fidgp", {"calibration": "temperature", "refit": False}),
            "fidgp_trefit": ("fidgp", {"calibration": "temperature", "refit": True}),
            "stpc_alpha10": ("stpc", {}, {"HYPERPARAMETER_BOUNDS": {"alpha": (1e-6, 10.0)}}),
            "stpc_shared": ("stpc", {"ard": False}),
            "stpc_lv0": ("stpc", {}, {"LABEL_VARIANCE": 0.0})}
LABELS = {"stpc": "StudentTProcessClassifier", "fidgp": "FiDGPClassifier",
          "fidgp_none": "FiD-GP, calibration=None (the default before 2026-11-27)",
          "fidgp_temp": "FiD-GP, calibration='temperature', refit=False",
          "fidgp_trefit": "FiD-GP, calibration='temperature', refit=True",
          "fidgp_cccv": "FiD-GP, calibration=None, in CalibratedClassifierCV(temperature, cv=5)",
          "stpc_alpha10": "Student-t, alpha bounds (1e-6, 10)",
          "stpc_shared": "Student-t, ard=False",
          "stpc_lv0": "Student-t, no label variance",
          "lr": "LogisticRegression", "gpc": "sklearn GP classifier",
          "mlp": "MLPClassifier", "ensemble": "5-MLP ensemble"}
METRICS = ("accuracy", "nll", "brier", "ece", "fit_s")
NLL_SLACK = 0.02
ECE_MAX = 0.05
N_BINS = 15
N_FLOOR_DRAWS = 200
N_PVALUE_DRAWS = 2000


def _normalised(proba):
    p = np.clip(np.asarray(proba, dtype=np.float64), 0.0, 1.0)
    return p / p.sum(axis=1, keepdims=True)


def _calibrated_eces(proba, u):
    """ECE (:func:`skbnngp.metrics.expected_calibration_error`) of each row of uniforms ``u``
    (draws, n) turned into labels: the top label where ``u < confidence`` (so that it is
    right with probability equal to its confidence), another label elsewhere."""
    p = _normalised(proba)
    top = p.argmax(axis=1)
    other = (top + 1) % p.shape[1]
    conf = p.max(axis=1)
    return np.array([expected_calibration_error(np.where(row < conf, top, other), p,
                                                n_bins=N_BINS) for row in u])


def ece_noise_floor(proba, n_draws=N_FLOOR_DRAWS, seed=0):
    """Mean ECE of a perfectly calibrated model with these probabilities: labels drawn from
    each row's predictive, so the top label is right with probability equal to its
    confidence."""
    u = np.random.default_rng(seed).random((n_draws, np.shape(proba)[0]))
    return float(np.mean(_calibrated_eces(proba, u)))


def ece_calibrated_draws(probas, n_draws=N_PVALUE_DRAWS, seed=0):
    """ECE of a perfectly calibrated model with these probabilities, ``n_draws`` times.

    ``probas`` is a list of (n_i, k) probability arrays, one per test fold; labels are drawn
    from each row's predictive, independently per fold, and each draw's ECE is the mean over
    the folds of the fold's ECE (one fold: the ECE of that set). Returns ``(n_draws,)``."""
    rng = np.random.default_rng(seed)
    out = np.zeros(n_draws)
    for proba in probas:
        out += _calibrated_eces(proba, rng.random((n_draws, np.shape(proba)[0])))
    return out / len(probas)


def ece_pvalue(observed, draws):
    """One-sided Monte-Carlo p-value of an observed ECE against calibrated ``draws``: the
    chance that a calibrated model with the same probabilities scores at least as high."""
    draws = np.asarray(draws)
    return float((1 + np.sum(draws >= observed - 1e-12)) / (draws.size + 1))


def ece_of(y_idx, proba):
    """Top-label ECE of labels ``y_idx`` (column indices) under ``proba``."""
    return expected_calibration_error(y_idx, _normalised(proba), n_bins=N_BINS)


def _variant(base, params, settings=None):
    import skbnngp

    cls = {"fidgp": skbnngp.FiDGPClassifier, "stpc": skbnngp.StudentTProcessClassifier}[base]
    if settings:
        cls = with_settings(cls, settings, module={"stpc": _STPC_MODULE}[base])
    return cls(device="cpu", random_state=0, **params)


def cross_fitted_temperature(model):
    """``model`` in scikit-learn's ``CalibratedClassifierCV`` with a temperature fitted on
    the out-of-fold predictions of five fits, then ``model`` refitted on every row."""
    from sklearn.calibration import CalibratedClassifierCV

    return CalibratedClassifierCV(model, method="temperature", cv=5, ensemble=False)


def make_model(name, n_features):
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    import skbnngp

    common = {"device": "cpu", "random_state": 0}
    model = {
        "stpc": lambda: skbnngp.StudentTProcessClassifier(**common),
        "fidgp": lambda: skbnngp.FiDGPClassifier(**common),
        **{k: (lambda spec=spec: _variant(*spec)) for k, spec in VARIANTS.items()},
        "fidgp_cccv": lambda: cross_fitted_temperature(
            skbnngp.FiDGPClassifier(calibration=None, **common)),
        "lr": lambda: logistic_regression(),
        "gpc": lambda: sklearn_gpc(n_features),  # isotropic above 20 features
        "mlp": lambda: mlp_classifier(),
        "ensemble": lambda: MLPEnsembleClassifier(),
    }[name]()
    return Pipeline([("scale", StandardScaler()), ("model", model)])


def load(name):
    from sklearn.datasets import make_classification

    from skbnngp.datasets import load_dataset

    if name in ("iris", "wine", "breast_cancer", "digits"):
        X, y = load_dataset(name, return_X_y=True)
    elif name == "digits6_214":  # digits 0-5, 214 rows drawn at random (a glass-sized set)
        X, y = load_dataset("digits", return_X_y=True)
        keep = np.flatnonzero(y < 6)
        X, y = X[keep], y[keep]
        keep = np.sort(np.random.default_rng(0).choice(len(y), 214, replace=False))
        X, y = X[keep], y[keep]
    elif name == "digits_300":  # 300 rows of the ten digits, stratified
        from sklearn.model_selection import train_test_split

        X, y = load_dataset("digits", return_X_y=True)
        _, X, _, y = train_test_split(X, y, test_size=300, stratify=y, random_state=0)
    elif name == "mc6_300":
        X, y = make_classification(300, 20, n_informative=6, n_classes=6, random_state=0)
    elif name == "overlap":
        X, y = make_classification(600, 6, n_informative=4, n_redundant=0, n_classes=3,
                                   n_clusters_per_class=1, class_sep=0.5, random_state=0)
    elif name == "imbalanced":
        X, y = make_classification(1050, 8, n_informative=4, n_redundant=0,
                                   weights=[20 / 21], flip_y=0.0, class_sep=1.0,
                                   random_state=0)
    else:
        raise ValueError(f"unknown data set {name!r}")
    return np.asarray(X, dtype=np.float64), np.asarray(y)


class _Recording:
    """A fitted model's stand-in that keeps the test probabilities it returned."""

    def __init__(self, model, sink):
        self.model, self.sink = model, sink

    def fit(self, X, y):
        self.model.fit(X, y)
        self.classes_ = self.model.classes_
        return self

    def predict_proba(self, X):
        proba = self.model.predict_proba(X)
        self.sink["proba"] = np.asarray(proba, dtype=np.float64)
        return proba


def run_task(task):
    key, X, y, train, test = task
    sink = {}
    rec = run_fit(key, lambda: _Recording(make_model(key["model"], X.shape[1]), sink), X, y,
                  train, test, "classification")
    if "proba" in sink and not rec["error"]:
        # kept for the pooled out-of-fold ECE and the noise floors (rounded: JSON size)
        rec["test_rows"] = [int(i) for i in test]
        rec["proba"] = np.round(sink["proba"], 8).tolist()
    return rec


def build_tasks(sets, models, folds, fold_seed=0):
    from sklearn.model_selection import StratifiedKFold

    tasks = []
    for ds in sets:
        X, y = load(ds)
        for fold, (tr, te) in enumerate(StratifiedKFold(folds, shuffle=True,
                                                        random_state=fold_seed).split(X, y)):
            for m in models:
                key = {"set": ds, "split": fold, "model": m}
                if fold_seed:  # seed 0's keys as before: stored records stay valid
                    key["fold_seed"] = fold_seed
                tasks.append((key, X, y, tr, te))
    # cheap sets first, one set complete before the next: an interrupted run (see --records)
    # leaves whole sets behind
    tasks.sort(key=lambda t: len(t[3]) * t[1].shape[1])
    return tasks


def summarise(records, models, sets):
    cells, errors = {}, {}
    for r in records:
        if r["error"]:
            errors.setdefault(r["model"], {}).setdefault(r["set"], []).append(r["error"])
        else:
            cell = cells.setdefault(r["model"], {}).setdefault(r["set"], {})
            for k in METRICS:
                cell.setdefault(k, []).append(r["metrics"][k])
    warns = warning_counts(records)
    mean = {m: {s: {k: mean_or_nan(v) for k, v in cells[m][s].items()} for s in cells[m]}
            for m in cells}
    # ECE of the pooled out-of-fold predictions and the noise floors (records that kept
    # their probabilities; the pooled figure needs every fold of the set)
    labels = {}
    for (m, st), recs in _group(records).items():
        recs = [r for r in recs if not r["error"] and "proba" in r]
        if not recs or m not in mean or st not in mean[m]:
            continue
        if st not in labels:
            _, yy = load(st)
            labels[st] = np.unique(yy, return_inverse=True)[1]
        y_idx = labels[st]
        floors = [ece_noise_floor(r["proba"]) for r in recs]
        whole = len(recs) == len(cells[m][st]["ece"])
        mean[m][st]["ece_floor"] = float(np.mean(floors)) if whole else float("nan")
        if whole:
            mean[m][st]["ece_p"] = ece_pvalue(mean[m][st]["ece"], ece_calibrated_draws(
                [r["proba"] for r in recs]))
        rows = np.concatenate([r["test_rows"] for r in recs])
        if len(rows) == len(y_idx) and len(np.unique(rows)) == len(y_idx):
            P = np.concatenate([np.asarray(r["proba"]) for r in recs])
            P = np.clip(P, 0.0, 1.0)
            P /= P.sum(axis=1, keepdims=True)
            mean[m][st]["ece_pooled"] = ece_of(y_idx[rows], P)
            mean[m][st]["ece_pooled_floor"] = ece_noise_floor(P)
            mean[m][st]["ece_pooled_p"] = ece_pvalue(mean[m][st]["ece_pooled"],
                                                     ece_calibrated_draws([P]))
    # sets every model has results on (all of them after a complete run)
    complete = [s for s in sets if mean and all(s in mean[m] for m in mean)]
    mean_nll = {m: (float(np.mean([mean[m][s]["nll"] for s in complete]))
                    if complete else float("nan")) for m in mean}
    ref = min([mean_nll.get(m, np.nan) for m in ("lr", "gpc") if m in mean_nll] or [np.nan])
    checks = {}
    for m in models:
        if m not in mean:
            continue
        bad_ece = [s for s in complete if mean[m][s]["ece"] > ECE_MAX]
        # the same threshold on the pooled out-of-fold ECE, the set's cross-validated ECE
        # (None when a set lacks it: records without probabilities, or a partial run)
        pooled = [mean[m][s].get("ece_pooled", float("nan")) for s in complete]
        checks[m] = {"nll_ok": bool(np.isfinite(ref) and mean_nll[m] <= ref + NLL_SLACK),
                     "ece_ok": not bad_ece,
                     "ece_misses": bad_ece,
                     "ece_pooled_ok": (None if not complete or not np.all(np.isfinite(pooled))
                                       else bool(max(pooled) <= ECE_MAX)),
                     "ece_pooled_misses": [s for s, v in zip(complete, pooled)
                                           if np.isfinite(v) and v > ECE_MAX]}
    return {"mean": mean, "mean_nll": mean_nll, "complete_sets": complete, "reference_nll": ref, "checks": checks,
            "errors": errors, "warnings": warns,
            "models": [m for m in models if m in mean or m in errors]}


def _group(records):
    out = {}
    for r in records:
        out.setdefault((r["model"], r["set"]), []).append(r)
    return out


def markdown(result):
    s, sets = result["summary"], result["sets"]
    out = ["# Classifier probabilities (issue 20)", "",
           (f"Report regenerated from stored fit records at commit `{result['commit']}` (no "
            "fit re-run; where the records were measured: below)"
            if result.get("report_only") else f"Measured on commit `{result['commit']}`")
           + (" (quick profile: 2 folds and a subset of sets; not the reference run)"
              if result["quick"] else "")
           + f". {result['machine']}"
           + ("" if result.get("report_only") else f"; jobs={result['jobs']}, one thread per fit")
           + ". "
           + (f"Wall time {result['wall_s'] / 60:.1f} min. " if result["wall_s"] is not None
              else "") + "Versions: "
           + ", ".join(f"{k} {v}" for k, v in result["versions"].items()) + ".", "",
           f"`StratifiedKFold({result['folds']}, shuffle=True, "
           f"random_state={result.get('fold_seed', 0)})`; every model "
           "`Pipeline([StandardScaler(), model])`; means over folds. Model and data details "
           "are in the docstring of `benchmarks/bench_classification.py`.", ""]
    if result.get("partial"):
        out += [f"**Partial run**: {result['partial']}", ""]
    ref = s["reference_nll"]
    for metric, title, spec in (("nll", "Test NLL (log loss)", ".3f"),
                                ("accuracy", "Accuracy", ".3f"),
                                ("brier", "Brier score", ".3f"),
                                ("ece", f"ECE (top label, 15 bins; > {ECE_MAX} in bold)", ".3f"),
                                ("fit_s", "Fit time per fold (s)", ".2f")):
        extra = metric == "nll"
        out += [f"## {title}", "",
                "| model | " + " | ".join(sets)
                + (f" | mean NLL | <= best(LR, GPC) + {NLL_SLACK} | ECE <= {ECE_MAX} |"
                   f" pooled ECE <= {ECE_MAX} |" if extra else " |"),
                "|---|" + "---:|" * len(sets) + ("---:|---|---|---|" if extra else "")]
        for m in s["models"]:
            cells = []
            for st in sets:
                v = s["mean"].get(m, {}).get(st, {}).get(metric, float("nan"))
                text = fmt(v, spec)
                if metric == "ece" and np.isfinite(v) and v > ECE_MAX:
                    text = f"**{text}**"
                if st in s["errors"].get(m, {}):
                    text += f" ({len(s['errors'][m][st])} failed)"
                cells.append(text)
            row = f"| {LABELS[m]} | " + " | ".join(cells) + " |"
            if extra:
                c = s["checks"].get(m, {})
                row += (f" {fmt(s['mean_nll'].get(m, float('nan')))} | "
                        f"{'yes' if c.get('nll_ok') else 'no'} | "
                        + ("yes" if c.get("ece_ok") else
                           "no (" + ", ".join(c.get("ece_misses", [])) + ")") + " | "
                        + {None: "n/a", True: "yes"}.get(
                            c.get("ece_pooled_ok"),
                            "no (" + ", ".join(c.get("ece_pooled_misses", [])) + ")") + " |")
            out.append(row)
        if extra:
            out += ["", f"Mean NLL and the checks over {', '.join(s['complete_sets'])}"
                    + ("" if len(s["complete_sets"]) == len(sets) else
                       " (the sets every model has results on)")
                    + f". Reference: best mean NLL of LR and GPC = {fmt(ref)}; "
                    f"threshold {fmt(ref + NLL_SLACK)}. ECE: the mean over the test folds "
                    "(the target's figure; biased upward on small folds, see the noise floors "
                    "below); pooled ECE: of all out-of-fold predictions together, each set's "
                    "cross-validated ECE (n/a without stored probabilities for every fold)."]
        out.append("")
    out += ["## ECE: per fold, pooled out-of-fold, and their noise floors", "",
            ("Per fold: the mean of the test folds' ECE (the table above). Pooled: the ECE of "
             "all out-of-fold predictions together (every row once). Floor: the mean ECE of a "
             "perfectly calibrated model with the same predicted probabilities (labels drawn "
             f"from the predictions, {N_FLOOR_DRAWS} draws); an ECE near its floor is "
             "indistinguishable from calibrated at this sample size. p: the share of "
             f"{N_PVALUE_DRAWS} such calibrated draws (per fold: every fold drawn, then "
             "averaged as the per-fold figure is) whose ECE is at least the observed one; a "
             "small p (say below 0.05) is evidence of miscalibration, a large one is not. "
             "Cells: ECE / floor (p)."), "",
            "| model | " + " | ".join(f"{st} per fold | {st} pooled" for st in sets) + " |",
            "|---|" + "---:|---:|" * len(sets)]
    for m in s["models"]:
        cells = []
        for st in sets:
            c = s["mean"].get(m, {}).get(st, {})
            for a, b in (("ece", "ece_floor"), ("ece_pooled", "ece_pooled_floor")):
                pv = c.get(f"{a}_p", float("nan"))
                cells.append(f"{fmt(c.get(a, float('nan')))} / {fmt(c.get(b, float('nan')))}"
                             + (f" (p {pv:.2f})" if np.isfinite(pv) else ""))
        out.append(f"| {LABELS[m]} | " + " | ".join(cells) + " |")
    out += ["", ("A dash: no stored probabilities for that cell (records from before the "
                 "pooled ECE was added)."), ""]
    out += ["## Warnings raised by the fits (count, per data set)", ""]
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
                    help="2 folds on iris, wine and overlap")
    ap.add_argument("--small-multiclass", action="store_true",
                    help="3 folds on the small multi-class sets (SMALL_SETS), FiD-GP and the "
                         "baselines; writes only with --out")
    ap.add_argument("--sets", nargs="+", choices=SETS + SMALL_SETS)
    ap.add_argument("--models", nargs="+", choices=MODELS + tuple(VARIANTS) + ("fidgp_cccv",))
    ap.add_argument("--jobs", type=int, default=1, help="fits run in parallel (joblib)")
    ap.add_argument("--out", help="output stem (writes OUT.md and OUT.json)")
    ap.add_argument("--records", help="JSON-lines file of fit records: reused and appended, "
                                      "so an interrupted run resumes")
    ap.add_argument("--report-only", action="store_true",
                    help="no fits: report what --records holds (a partial run says so)")
    ap.add_argument("--partial-note", help="label written into the report of a partial run")
    ap.add_argument("--fold-seed", type=int, default=0,
                    help="StratifiedKFold's random_state: another seed checks the defaults "
                         "on splits they were not chosen on (never the stored report)")
    args = ap.parse_args(argv)
    full = not (args.quick or args.sets or args.models or args.fold_seed
                or args.small_multiclass)
    sets = args.sets or (["iris", "wine", "overlap"] if args.quick else
                         list(SMALL_SETS) if args.small_multiclass else list(SETS))
    models = args.models or list(MODELS)
    folds = 2 if args.quick else 3 if args.small_multiclass else 5

    start = time.perf_counter()
    tasks = build_tasks(sets, models, folds, args.fold_seed)
    records = run_all(tasks, run_task, args.jobs, args.records, run=not args.report_only)
    wall = time.perf_counter() - start
    missing = len(tasks) - len(records)
    result = {"commit": git_commit(), "machine": machine(), "versions": versions(),
              "quick": args.quick, "jobs": args.jobs, "folds": folds,
              "fold_seed": args.fold_seed,
              "wall_s": None if args.report_only else wall, "report_only": args.report_only,
              "sets": sets, "models": models,
              "partial": " ".join(filter(None, [
                  f"{missing} of {len(tasks)} fits not run yet." if missing else None,
                  args.partial_note])) or None,
              "summary": summarise(records, models, sets), "records": records}
    text = markdown(result)
    print(text)
    if args.out or (full and not missing):
        write_results(args.out or RESULTS / "bench_classification", result, text)
    return result


if __name__ == "__main__":
    main()
