"""Benchmark: are the estimators right on categorical designs? (replicates of a design)

Purely categorical inputs (one-hot columns, nothing continuous) make many rows share one
input, and integer targets make whole ``(x, y)`` rows repeat. Every fit merges exact repeats
into weighted rows and reads the rows as replicates of a design (``rows_replicate``): it
splits and leaves out one copy at a time instead of a whole category. This script measures
the result against the data's own truth and a peer, in the same run: 300 training rows,
3,000 (regression) or 4,000 (classification) fresh test rows from the same design, every
estimator at its defaults.

Regression designs (targets continuous, ``mean[cell] + 0.5 noise``, or Poisson counts of
``exp(mean[cell] / 2 + 1)``): ``onehot5`` and ``onehot20`` (cell means N(0, 1.5)), ``twoway``
(a 4 x 3 additive design), ``lookup5`` (one value per category, no noise). Scores: RMSE of
the mean against the cell's true mean, NLPD, 90 % coverage, calibration error over the levels
0.05...0.95; peer: scikit-learn's GP (ARD RBF + White, ``baselines.sklearn_gpr``).

Classification designs: ``cat8`` (8 categories, logits -2...2), ``cat20`` (20 categories,
five always 0 and five always 1), ``cls3`` (3 classes over 6 categories). Scores: log loss
against the true probabilities' (``true``), accuracy, ECE (15 bins); peer: logistic
regression (``baselines.logistic_regression``).

Seeds 3-6 by default (the figures in doc/whats_new.rst were chosen looking at seeds 0-2).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_categorical.py             # ~10 min
    OMP_NUM_THREADS=1 python benchmarks/bench_categorical.py --seeds 3 4 --quick

Writes ``benchmarks/results/bench_categorical.{md,json}``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _harness import RESULTS, git_commit, machine, write_results  # noqa: E402

REGRESSION = ("onehot5", "onehot20", "twoway", "lookup5")
CLASSIFICATION = ("cat8", "cat20", "cls3")
REGRESSORS = ("StudentTProcessRegressor", "MixedActivationGPRegressor", "DBKRegressor",
              "RichBLLRegressor", "sklearn_gp")
CLASSIFIERS = ("StudentTProcessClassifier", "FiDGPClassifier", "logistic_regression")


def regression_design(name, seed, counts):
    """``(X, y, X_test, y_test, f_test)``: 300 training and 3,000 test rows."""
    rng = np.random.default_rng(seed)
    if name == "twoway":
        a, b = rng.normal(0, 1, 4), rng.normal(0, 1, 3)

        def draw(n):
            i, j = rng.integers(0, 4, n), rng.integers(0, 3, n)
            return np.hstack([np.eye(4)[i], np.eye(3)[j]]), a[i] + b[j]
    else:
        k = 5 if name in ("onehot5", "lookup5") else 20
        means = rng.normal(0, 1.5, k)

        def draw(n):
            g = rng.integers(0, k, n)
            return np.eye(k)[g], means[g]
    (X, f), (Xt, ft) = draw(300), draw(3000)
    if name == "lookup5":
        return X, f, Xt, ft, ft
    if counts:
        lam, lam_t = np.exp(f / 2 + 1), np.exp(ft / 2 + 1)
        return X, rng.poisson(lam).astype(float), Xt, rng.poisson(lam_t).astype(float), lam_t
    return X, f + 0.5 * rng.normal(size=f.size), Xt, ft + 0.5 * rng.normal(size=ft.size), ft


def classification_design(name, seed):
    """``(X, y, X_test, y_test, P_test)``: 300 training and 4,000 test rows."""
    rng = np.random.default_rng(seed)
    if name == "cls3":
        logits = np.random.default_rng(99).normal(0, 1.2, (6, 3))
    elif name == "cat8":
        logits = np.c_[np.zeros(8), np.linspace(-2, 2, 8)]
    else:  # five cells always 0, five always 1, ten in between
        p = np.r_[np.zeros(5), np.linspace(0.1, 0.9, 10), np.ones(5)]
        logits = np.log(np.c_[1 - p, p].clip(1e-12))
    P = np.exp(logits - logits.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    k = P.shape[0]

    def draw(n):
        g = rng.integers(0, k, n)
        u = rng.uniform(size=(n, 1))
        return np.eye(k)[g], (u > np.cumsum(P[g], axis=1)).sum(axis=1), P[g]

    (X, y, _), (Xt, yt, Pt) = draw(300), draw(4000)
    return X, y, Xt, yt, Pt


def make(name, n_features):
    import baselines

    import skbnngp

    if name == "sklearn_gp":
        return baselines.sklearn_gpr(n_features)
    if name == "logistic_regression":
        return baselines.logistic_regression()
    return getattr(skbnngp, name)(device="cpu", random_state=0)


def regression_scores(model, Xt, yt, ft):
    from scipy import stats

    from skbnngp.metrics import interval_coverage, nlpd, regression_calibration_error

    if hasattr(model, "predict_dist"):
        dist = model.predict_dist(Xt)
    else:
        mean, std = model.predict(Xt, return_std=True)
        dist = stats.norm(mean, np.maximum(std, 1e-300))
    mean = model.predict(Xt)
    return {"rmse_mean": float(np.sqrt(np.mean((mean - ft) ** 2))),
            "nlpd": float(nlpd(yt, dist)),
            "coverage_90": float(interval_coverage(yt, dist, confidence=0.9)),
            "calibration_error": float(regression_calibration_error(yt, dist))}


def classification_scores(model, Xt, yt, Pt):
    from sklearn.metrics import log_loss

    from skbnngp.metrics import expected_calibration_error

    labels = np.arange(Pt.shape[1])
    P = np.zeros((len(yt), len(labels)))
    P[:, np.asarray(model.classes_, dtype=int)] = model.predict_proba(Xt)
    return {"log_loss": float(log_loss(yt, P, labels=labels)),
            "true_log_loss": float(log_loss(yt, Pt.clip(1e-3, 1), labels=labels)),
            "accuracy": float(np.mean(P.argmax(axis=1) == yt)),
            "ece": float(expected_calibration_error(yt, P, labels=labels))}


def fit_and_score(rows, task, design, seed, models, data, scorer):
    """Fit each of ``models`` on ``data = (X, y, X_test, y_test, truth)`` and append its
    scores (``scorer(model, X_test, y_test, truth)``) and time to ``rows``."""
    X, y, Xt, yt, truth = data
    for name in models:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make(name, X.shape[1]).fit(X, y)
            scores = scorer(model, Xt, yt, truth)
        rows.append({"task": task, "design": design, "seed": seed, "model": name,
                     "seconds": time.perf_counter() - t0, **scores})
        print(rows[-1], flush=True)


def run(seeds, quick):
    rows = []
    designs = [(d, c) for d in REGRESSION for c in ((False,) if d == "lookup5" else
                                                     (False, True))]
    if quick:
        designs = designs[:2]
    for design, counts in designs:
        for seed in seeds:
            fit_and_score(rows, "regression", design + ("_counts" * counts), seed, REGRESSORS,
                          regression_design(design, seed, counts), regression_scores)
    for design in CLASSIFICATION[:1] if quick else CLASSIFICATION:
        for seed in seeds:
            fit_and_score(rows, "classification", design, seed, CLASSIFIERS,
                          classification_design(design, seed), classification_scores)
    return rows


def report(rows, seeds, minutes):
    def mean(task, design, model, key):
        return np.mean([r[key] for r in rows if r["task"] == task and r["design"] == design
                        and r["model"] == model])

    lines = ["# Categorical designs: replicates of a design", "",
             f"`benchmarks/bench_categorical.py`, seeds {', '.join(map(str, seeds))}, "
             f"{minutes:.1f} min; {machine()}; commit {git_commit()}. 300 training rows, "
             "fresh test rows from the same design, every estimator at its defaults; means "
             "over the seeds.", "",
             "## Regression (RMSE of the mean against the true cell mean / NLPD / 90 % "
             "coverage / calibration error over levels)", "",
             "| design | " + " | ".join(REGRESSORS) + " |",
             "|---|" + "---|" * len(REGRESSORS)]
    for design in dict.fromkeys(r["design"] for r in rows if r["task"] == "regression"):
        cells = [" / ".join(f"{mean('regression', design, m, k):.3f}" for k in
                            ("rmse_mean", "nlpd", "coverage_90", "calibration_error"))
                 for m in REGRESSORS]
        lines.append(f"| {design} | " + " | ".join(cells) + " |")
    lines += ["", "`lookup5` is noiseless: only its RMSE of the mean is compared (its NLPD is "
              "unbounded below, and coverage and calibration error of near-zero residuals "
              "measure round-off).",
              "", "## Classification (log loss / accuracy / ECE; `true`: the log loss of the "
              "true probabilities)", "",
              "| design | true | " + " | ".join(CLASSIFIERS) + " |",
              "|---|---|" + "---|" * len(CLASSIFIERS)]
    for design in dict.fromkeys(r["design"] for r in rows if r["task"] == "classification"):
        true = mean("classification", design, CLASSIFIERS[0], "true_log_loss")
        cells = [" / ".join(f"{mean('classification', design, m, k):.3f}" for k in
                            ("log_loss", "accuracy", "ece")) for m in CLASSIFIERS]
        lines.append(f"| {design} | {true:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[3, 4, 5, 6])
    ap.add_argument("--quick", action="store_true",
                    help="two regression designs and one classification design")
    ap.add_argument("--out", default=str(RESULTS / "bench_categorical"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = run(args.seeds, args.quick)
    text = report(rows, args.seeds, (time.perf_counter() - t0) / 60)
    write_results(args.out, {"rows": rows, "seeds": args.seeds}, text)
    print(text)
    return rows


if __name__ == "__main__":
    main()
