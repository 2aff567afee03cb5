"""Benchmark: FiDGPClassifier's OoD score on three tasks and its calibration on four sets.

OoD (a stratified 70/30 split per task and seed, five seeds by default, OoD = positive class
of the AUROC; the seed sets the split, the corruptions and every model's random_state):

* (i) digits: trained on classes 0-4, OoD = every image of 5-9;
* (ii) digits: trained on all classes, OoD = the test images inverted (16 - x), pixel-shuffled
  (a random permutation of each image's pixels) and Gaussian noise (the training per-pixel
  mean and std, clipped to [0, 16]);
* (iii) tabular: trained on breast_cancer, OoD = the test rows with 10 of the 30 features
  shifted by 3 training std, and 30 standardised digits columns put on breast_cancer's
  scale (a different set of the same width).

Per task: FiD-GP's ``ood_score`` (defaults; and the ``"inducing"`` subspace of the same fit),
its own max-softmax, sklearn's MLPClassifier (64, 64) max-softmax and a 5-MLP ensemble's
predictive entropy; accuracy of each. A run of the previous defaults on task (i) gives the
"before" figures.

Calibration: stratified 5-fold on iris, wine, breast_cancer and digits (digits subsampled to
600 rows, stratified, for speed): accuracy, NLL, ECE (15 bins) of FiD-GP, LogisticRegression
and sklearn's GaussianProcessClassifier; and FiD-GP with ``layer_budget`` (compression).

Variants (``--variants``): FiD-GP with one parameter changed (``VARIANTS``: the compression
``layer_budget`` 1.0 / 0.5 / 0.25, lambda learned at its own rate or started at 1e-2,
``max_sd_u`` 0.3 / 0.03, ``max_iter=400``) on the three OoD tasks of ``--seeds``, compared
seed by seed with the defaults' stored rows (accuracy, NLL, parameters, OoD AUROC, wins
against the ensemble). When the defaults change, the old defaults' rows are kept as
``variants_base`` in the JSON so that the stored variants stay paired with the defaults
they were run against; a later ``--variants`` run moves those variants (less the ones it
re-runs) and their base into ``variants_earlier`` and pairs the new ones with the current
defaults' rows.

Usage::

    python benchmarks/bench_fidgp.py                  # ~20 min on one core
    python benchmarks/bench_fidgp.py --skip-calibration --skip-previous --seeds 0 1 2 3 4
    python benchmarks/bench_fidgp.py --skip-ood --skip-calibration --seeds 0 1 2 \
        --variants layer_budget=1.0 layer_budget=0.5     # ~3 min a variant on one core

Writes ``benchmarks/results/bench_fidgp.{json,md}``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from _harness import with_settings  # noqa: E402
from baselines import (  # noqa: E402
    MLPEnsembleClassifier,
    logistic_regression,
    mlp_classifier,
    sklearn_gpc,
)

from skbnngp.metrics import expected_calibration_error, ood_auroc  # noqa: E402

HIDDEN = (64, 64)
#: ``--variants``: FiD-GP with one parameter changed, compared seed by seed with the defaults'
#: stored rows (compression by ``layer_budget``; the conditional noise lambda learned at its
#: own rate or started larger; a wider cap on the inducing posterior's std).
VARIANTS = {
    "layer_budget=1.0": {"layer_budget": 1.0},
    "layer_budget=0.5": {"layer_budget": 0.5},
    "layer_budget=0.25": {"layer_budget": 0.25},
    "lambda_lr=3e-2": {"LAMBDA_LR": 3e-2},
    "init_lambda=1e-2": {"INIT_LAMBDA": 1e-2},
    "max_sd_u=0.3": {"MAX_SD_U": 0.3},
    "max_sd_u=0.03": {"MAX_SD_U": 0.03},
    "max_iter=400": {"max_iter": 400},
}
#: The defaults before issue 20 (R = C = 32, kl_weight=1, label smoothing 0.05). Their
#: gradient score was deleted: a new run scores them with today's ``ood_score``.
OLD = dict(inducing_rows=32, kl_weight=1.0, LABEL_SMOOTHING=0.05)


def ood_tasks(seed=0):
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import train_test_split
    rng = np.random.RandomState(seed)
    X, y = load_digits(return_X_y=True)
    ind = y < 5
    Xtr, Xte, ytr, yte = train_test_split(X[ind], y[ind], test_size=0.3, random_state=seed,
                                          stratify=y[ind])
    yield "digits 0-4 vs 5-9", Xtr, ytr, Xte, yte, {"digits 5-9": X[~ind]}
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    yield "digits vs corrupted", Xtr, ytr, Xte, yte, {
        "inverted": 16 - Xte,
        "pixel-shuffled": np.array([r[rng.permutation(64)] for r in Xte]),
        "Gaussian noise": np.clip(Xtr.mean(0) + Xtr.std(0) * rng.standard_normal(Xte.shape),
                                  0, 16)}
    Xb, yb = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(Xb, yb, test_size=0.3, random_state=seed,
                                          stratify=yb)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    shifted = Xte.copy()
    cols = rng.choice(30, 10, replace=False)
    shifted[:, cols] += 3 * sd[cols]
    D = X[rng.choice(len(X), len(Xte), replace=False)][:, rng.choice(64, 30, replace=False)]
    D = (D - D.mean(0)) / np.where(D.std(0) > 0, D.std(0), 1.0)
    yield "breast_cancer vs shifted / other", Xtr, ytr, Xte, yte, {
        "shifted 3 sd": shifted, "digits as breast_cancer": mu + sd * D}


def calibration_sets():
    from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
    from sklearn.model_selection import train_test_split
    for name, load in [("iris", load_iris), ("wine", load_wine),
                       ("breast_cancer", load_breast_cancer), ("digits", load_digits)]:
        X, y = load(return_X_y=True)
        if name == "digits":
            X, _, y, _ = train_test_split(X, y, train_size=600, random_state=0, stratify=y)
        yield name, X, y


def scores(proba, y, n_classes):
    from sklearn.metrics import accuracy_score, log_loss
    return dict(accuracy=float(accuracy_score(y, proba.argmax(1))),
                nll=float(log_loss(y, np.clip(proba, 1e-12, 1), labels=np.arange(n_classes))),
                ece=float(expected_calibration_error(y, proba, n_bins=15)))


def entropy(p):
    return -(p * np.log(np.clip(p, 1e-300, 1))).sum(1)


def fidgp(seed=0, **params):
    """FiD-GP with ``params``: constructor parameters, and upper-case names for the private
    settings of ``skbnngp._fidgp`` (ablations no longer in the signature)."""
    from skbnngp import FiDGPClassifier
    settings = {k: params.pop(k) for k in list(params) if k.isupper()}
    cls = with_settings(FiDGPClassifier, settings) if settings else FiDGPClassifier
    return cls(device="cpu", random_state=seed, **params)


def refit_ood(clf, Xtr, method):
    """The same fitted network with another OoD subspace (benchmark only)."""
    other = copy.deepcopy(clf)
    other._fit_ood(other.model_, other._input(Xtr), np.random.RandomState(0), 1, method=method)
    return other


def mlp_peers(Xtr, ytr, seed):
    """The OoD peers: one ``MLPClassifier(HIDDEN)`` (``random_state=10 * seed``) and a 5-MLP
    ensemble (``random_state`` ``10 * seed + 1`` to ``+ 5``), each on standardised inputs."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [make_pipeline(StandardScaler(), model).fit(Xtr, ytr) for model in (
            mlp_classifier(HIDDEN, max_iter=300, random_state=10 * seed),
            MLPEnsembleClassifier(5, HIDDEN, max_iter=300, random_state=10 * seed + 1))]


def run_ood(params, seeds=(0,)):
    out = []
    for seed in seeds:
        out += _run_ood_seed(params, seed)
        if params:  # the previous defaults: task (i), seed 0 only
            break
    return out


def _run_ood_seed(params, seed):
    out = []
    for task, Xtr, ytr, Xte, yte, oods in ood_tasks(seed):
        K = len(np.unique(ytr))
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = fidgp(seed, **params).fit(Xtr, ytr)
        fit_s = time.perf_counter() - t0
        alt = refit_ood(clf, Xtr, "inducing") if clf.ood_method_ != "inducing" else None
        mlp, ens = mlp_peers(Xtr, ytr, seed)
        p_in = clf.predict_proba(Xte)
        m_in, e_in = mlp.predict_proba(Xte), ens.predict_proba(Xte)
        row = dict(task=task, seed=seed, fit_s=fit_s, n_parameters=clf.n_parameters_,
                   ood_ranks=clf.ood_ranks_, widths=[clf.inducing_matrices_[0].shape],
                   fidgp=scores(p_in, yte, K), mlp=scores(m_in, yte, K),
                   ensemble=scores(e_in, yte, K), ood={})
        s_in = clf.ood_score(Xte)
        a_in = alt.ood_score(Xte) if alt is not None else None
        for name, Xo in oods.items():
            p_out = clf.predict_proba(Xo)
            m_out = mlp.predict_proba(Xo)
            e_out = ens.predict_proba(Xo)
            row["ood"][name] = dict(
                ood_score=ood_auroc(s_in, clf.ood_score(Xo)),
                ood_score_inducing=None if alt is None else ood_auroc(a_in, alt.ood_score(Xo)),
                max_softmax=ood_auroc(1 - p_in.max(1), 1 - p_out.max(1)),
                mlp_max_softmax=ood_auroc(1 - m_in.max(1), 1 - m_out.max(1)),
                ensemble_entropy=ood_auroc(entropy(e_in), entropy(e_out)))
        print(json.dumps(row), flush=True)
        out.append(row)
        if params:  # the previous defaults: task (i) only
            break
    return out


def run_variant(name, seeds):
    """FiD-GP with ``VARIANTS[name]`` on the three OoD tasks: its accuracy, NLL, ECE, size,
    learned lambdas and the AUROC of ``ood_score`` and its own max-softmax (the peers are in
    the defaults' rows of the same seed)."""
    out = []
    for seed in seeds:
        for task, Xtr, ytr, Xte, yte, oods in ood_tasks(seed):
            K = len(np.unique(ytr))
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clf = fidgp(seed, **VARIANTS[name]).fit(Xtr, ytr)
            fit_s = time.perf_counter() - t0
            p_in, s_in = clf.predict_proba(Xte), clf.ood_score(Xte)
            row = {"variant": name, "task": task, "seed": seed, "fit_s": fit_s,
                   "n_parameters": clf.n_parameters_,
                   "shapes": [list(m.shape) for m in clf.inducing_matrices_],
                   "lambdas": [float(v) for v in clf.lambdas_],
                   "fidgp": scores(p_in, yte, K), "ood": {}}
            for oname, Xo in oods.items():
                p_out = clf.predict_proba(Xo)
                row["ood"][oname] = {
                    "ood_score": ood_auroc(s_in, clf.ood_score(Xo)),
                    "max_softmax": ood_auroc(1 - p_in.max(1), 1 - p_out.max(1))}
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def variants_table(r):
    """Markdown lines: each variant against the defaults on the same seeds (paired).

    The variants were run against the defaults of their time: ``r["variants_base"]`` (the
    defaults' rows they are paired with, when the defaults changed since) or ``r["ood"]``;
    then each group of ``r["variants_earlier"]`` (variants archived with the defaults' rows
    they were run against, when new variants were run after a change of the defaults).
    """
    L = _variants_table(r.get("variants", []), r.get("variants_base") or r.get("ood", []),
                        r.get("variants_base_note"),
                        "Variants of the defaults (paired with the defaults' rows of the "
                        "same seeds)")
    for group in r.get("variants_earlier", []):
        L += _variants_table(group["rows"], group["base"], group["note"],
                             "Earlier variants (paired with the defaults of their time)")
    return L


def archive_variants(result, rerun):
    """Move the stored variants and the defaults' rows they are paired with
    (``variants_base``) into ``result["variants_earlier"]``, without the variants named in
    ``rerun`` (superseded by the new run), so that new variants pair with the current
    defaults' rows."""
    rows = [row for row in result.pop("variants", []) if row["variant"] not in rerun]
    base = result.pop("variants_base")
    note = result.pop("variants_base_note", None)
    if rows:
        result.setdefault("variants_earlier", []).append(
            {"note": note, "base": base, "rows": rows})


def _variants_table(variant_rows, base_rows, note, title):
    base = {(row["task"], row["seed"]): row for row in base_rows}
    # only rows with a defaults' row of the same task and seed can be paired
    rows = [row for row in variant_rows if (row["task"], row["seed"]) in base]
    if not rows or not base:
        return []
    tasks = list(dict.fromkeys(row["task"] for row in base_rows))
    short = {t: t.split(" ")[0] + (" 0-4" if "0-4" in t else " all" if "corrupted" in t
                                   else "") for t in tasks}
    L = [f"## {title}", "", *([note, ""] if note else []),
         ("Accuracy and NLL: mean over the seeds, with the change against the defaults in "
          "points / nats. OoD: mean AUROC of `ood_score` over the six OoD sets and the "
          "set-seed pairs where it is above the 5-MLP ensemble's entropy (from the defaults' "
          "run of the same seed). Parameters: digits (all classes); the dense MLP has 8,970 "
          "there (sklearn's MLP counts 8,970 for 64-64-10 too)."), "",
         "| variant | seeds | parameters | " + " | ".join(
             f"acc {short[t]} | NLL {short[t]}" for t in tasks)
         + " | OoD AUROC | wins vs ensemble | lambdas (digits all) |",
         "|---|---|---:|" + "---:|" * (2 * len(tasks)) + "---:|---:|---|"]
    names = ["defaults"] + list(dict.fromkeys(row["variant"] for row in rows))
    var_seeds = sorted({row["seed"] for row in rows})
    for name in names:
        sel = ([base[k] for k in base if k[1] in var_seeds] if name == "defaults"
               else [row for row in rows if row["variant"] == name])
        seeds = sorted({row["seed"] for row in sel})
        cells = []
        for t in tasks:
            acc = [row["fidgp"]["accuracy"] for row in sel if row["task"] == t]
            nll = [row["fidgp"]["nll"] for row in sel if row["task"] == t]
            d_acc = [row["fidgp"]["accuracy"] - base[(t, row["seed"])]["fidgp"]["accuracy"]
                     for row in sel if row["task"] == t]
            d_nll = [row["fidgp"]["nll"] - base[(t, row["seed"])]["fidgp"]["nll"]
                     for row in sel if row["task"] == t]
            if name == "defaults":
                cells += [f"{np.mean(acc):.3f}", f"{np.mean(nll):.3f}"]
            else:
                cells += [f"{np.mean(acc):.3f} ({100 * np.mean(d_acc):+.1f})",
                          f"{np.mean(nll):.3f} ({np.mean(d_nll):+.3f})"]
        aur, wins, n = [], 0, 0
        for row in sel:
            for oname, a in row["ood"].items():
                aur.append(a["ood_score"])
                ens = base[(row["task"], row["seed"])]["ood"][oname]["ensemble_entropy"]
                wins += a["ood_score"] > ens
                n += 1
        npar = [row["n_parameters"] for row in sel if "corrupted" in row["task"]]
        lams = [row.get("lambdas") for row in sel if "corrupted" in row["task"]]
        lam = ("-" if not lams or lams[0] is None
               else ", ".join(f"{v:.3g}" for v in lams[0]))
        L.append(f"| {name} | {','.join(map(str, seeds))} | {npar[0]:,} | " + " | ".join(cells)
                 + f" | {np.mean(aur):.3f} | {wins}/{n} | {lam} |")
    return L + [""]


def run_calibration(folds=5, budget=None):
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    out = {}
    for name, X, y in calibration_sets():
        K = len(np.unique(y))
        models = {
            "FiDGPClassifier": lambda: fidgp(),
            "LogisticRegression": lambda: make_pipeline(StandardScaler(),
                                                        logistic_regression(max_iter=2000)),
            "GaussianProcessClassifier": lambda: make_pipeline(  # isotropic, from 3.0
                StandardScaler(), sklearn_gpc(length_scale=3.0, random_state=0)),
        }
        if budget is not None:
            models[f"FiDGPClassifier layer_budget={budget}"] = lambda: fidgp(layer_budget=budget)
        res = {m: [] for m in models}
        for tr, te in StratifiedKFold(folds, shuffle=True, random_state=0).split(X, y):
            for m, make in models.items():
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = make().fit(X[tr], y[tr])
                r = scores(est.predict_proba(X[te]), y[te], K)
                r["fit_s"] = time.perf_counter() - t0
                if hasattr(est, "n_parameters_"):
                    r["n_parameters"] = est.n_parameters_
                res[m].append(r)
        out[name] = {m: {k: float(np.mean([r[k] for r in v])) for k in v[0]}
                     for m, v in res.items()}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main():
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-calibration", action="store_true")
    ap.add_argument("--skip-ood", action="store_true")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                    help="seeds of the OoD tasks (split, corruptions, models)")
    ap.add_argument("--skip-previous", action="store_true",
                    help="keep the stored run of the previous defaults instead of re-running it")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                    help="run these FiD-GP variants on the OoD tasks of --seeds (kept with "
                         "the stored rows of other variants and seeds)")
    ap.add_argument("--budget", type=float, default=0.5,
                    help="layer_budget of the compressed FiD-GP in the calibration table")
    args = ap.parse_args()
    path = RESULTS / "bench_fidgp.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    if result.get("version") != 2:
        result = {"version": 2}
    if not args.skip_ood:
        result["ood"] = run_ood({}, args.seeds)
        if not args.skip_previous or "ood_before" not in result:
            result["ood_before"] = run_ood(OLD)
    if args.variants and result.get("variants_base"):
        # the stored variants are paired with earlier defaults: keep them as a group of
        # their own, so that the new ones pair with the current defaults' rows
        archive_variants(result, args.variants)
    if args.variants:
        keep = [row for row in result.get("variants", [])
                if not (row["variant"] in args.variants and row["seed"] in args.seeds)]
        for name in args.variants:
            keep += run_variant(name, args.seeds)
        result["variants"] = keep
    if not args.skip_calibration:
        result["calibration"] = run_calibration(budget=args.budget)
        result["budget"] = args.budget
    result.update(torch=torch.__version__, threads=torch.get_num_threads())
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (RESULTS / "bench_fidgp.md").write_text(md)
    print(md)


def ood_summary(rows):
    """Markdown lines: each OoD set's AUROC as mean and range over the seeds, how often
    ``ood_score`` beats each peer, and the accuracy gap to the MLP per task."""
    seeds = sorted({row.get("seed", 0) for row in rows})
    L = [f"## Summary over {len(seeds)} seed(s) ({', '.join(map(str, seeds))})", "",
         "AUROC mean (min-max) over the seeds; wins: seeds where `ood_score` is above the "
         "peer.", "",
         "| task | OoD set | ood_score | FiD-GP max-softmax | 5-MLP ensemble entropy | "
         "wins vs max-softmax | wins vs ensemble |", "|---|---|---|---|---|---|---|"]
    sets = {}
    for row in rows:
        for name, a in row["ood"].items():
            sets.setdefault((row["task"], name), []).append(a)

    def cell(v):
        return f"{np.mean(v):.3f} ({min(v):.3f}-{max(v):.3f})"
    for (task, name), runs in sets.items():
        own = [a["ood_score"] for a in runs]
        ms, en = [a["max_softmax"] for a in runs], [a["ensemble_entropy"] for a in runs]
        L.append(f"| {task} | {name} | {cell(own)} | {cell(ms)} | {cell(en)} | "
                 f"{sum(o > b for o, b in zip(own, ms))}/{len(runs)} | "
                 f"{sum(o > b for o, b in zip(own, en))}/{len(runs)} |")
    L += ["", "| task | FiD-GP accuracy | MLP accuracy | FiD-GP minus MLP, points (min-max) |",
          "|---|---|---|---|"]
    for task in dict.fromkeys(row["task"] for row in rows):
        f = [row["fidgp"]["accuracy"] for row in rows if row["task"] == task]
        m = [row["mlp"]["accuracy"] for row in rows if row["task"] == task]
        d = [100 * (a - b) for a, b in zip(f, m)]
        L.append(f"| {task} | {np.mean(f):.3f} | {np.mean(m):.3f} | {np.mean(d):+.1f} "
                 f"({min(d):+.1f} to {max(d):+.1f}) |")
    return L + [""]


def markdown(r):
    L = ["# bench_fidgp: OoD on three tasks, calibration on four sets", "",
         f"torch {r['torch']}, {r['threads']} CPU thread(s); one split per OoD task and seed "
         "(the previous defaults: seed 0 only).", ""]
    if "ood" in r:
        L += ood_summary(r["ood"])
        L += variants_table(r)
    for label, key in [("FiD-GP defaults", "ood"), ("previous defaults (R = C = 32, "
                                                     "kl_weight=1, label_smoothing=0.05)",
                                                     "ood_before")]:
        if key not in r:
            continue
        L += [f"## OoD AUROC per seed, {label}", "",
              "| task | seed | OoD set | ood_score | ood_score (inducing subspace) | FiD-GP "
              "max-softmax | MLP max-softmax | 5-MLP ensemble entropy |",
              "|---|---|---|---|---|---|---|---|"]
        for row in r[key]:
            for name, a in row["ood"].items():
                ind = "-" if a["ood_score_inducing"] is None else f"{a['ood_score_inducing']:.3f}"
                L.append(f"| {row['task']} | {row.get('seed', 0)} | {name} | "
                         f"{a['ood_score']:.3f} | {ind} | "
                         f"{a['max_softmax']:.3f} | {a['mlp_max_softmax']:.3f} | "
                         f"{a['ensemble_entropy']:.3f} |")
        L += ["", "| task | seed | FiD-GP acc | MLP acc | ensemble acc | FiD-GP NLL | FiD-GP "
              "ECE | parameters | subspace ranks | fit s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for row in r[key]:
            f, m, e = row["fidgp"], row["mlp"], row["ensemble"]
            L.append(f"| {row['task']} | {row.get('seed', 0)} | {f['accuracy']:.3f} | "
                     f"{m['accuracy']:.3f} | "
                     f"{e['accuracy']:.3f} | {f['nll']:.3f} | {f['ece']:.3f} | "
                     f"{row['n_parameters']:,} | {row['ood_ranks']} | {row['fit_s']:.0f} |")
        L.append("")
    if "calibration" in r:
        L += ["## Calibration, stratified 5-fold means (digits: 600 rows)", "",
              "| set | model | accuracy | NLL | ECE | fit s | parameters |",
              "|---|---|---|---|---|---|---|"]
        for name, ms in r["calibration"].items():
            for m, v in ms.items():
                npar = f"{int(v['n_parameters']):,}" if "n_parameters" in v else "-"
                L.append(f"| {name} | {m} | {v['accuracy']:.3f} | {v['nll']:.3f} | "
                         f"{v['ece']:.3f} | {v['fit_s']:.1f} | {npar} |")
        cal = r["calibration"]
        fid = np.mean([v["FiDGPClassifier"]["nll"] for v in cal.values()])
        lr = np.mean([v["LogisticRegression"]["nll"] for v in cal.values()])
        gp = np.mean([v["GaussianProcessClassifier"]["nll"] for v in cal.values()])
        worst = max(v["FiDGPClassifier"]["ece"] for v in cal.values())
        L += ["", f"Mean NLL over the sets: FiD-GP {fid:.3f}, LogisticRegression {lr:.3f}, "
              f"GP classifier {gp:.3f}; target <= {min(lr, gp) + 0.02:.3f} -> "
              f"{'met' if fid <= min(lr, gp) + 0.02 else 'NOT met'}. "
              f"Largest FiD-GP ECE {worst:.3f} (target <= 0.05 on each set -> "
              f"{'met' if worst <= 0.05 else 'NOT met'}).", ""]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
