"""Benchmark: FiD-GP's near-OOD score over many random class partitions (issue 52).

``bench_fidgp.py`` chose ``ood_score`` on one near-OOD split (digits 0-4 in, 5-9 out). Here
each set's classes are split into an in half (trained on) and an out half (the OoD rows),
many times, each partition with its own seed (the 70/30 stratified split of the in-class rows,
the subsample of training rows, the sample of out rows and every model's ``random_state``).

Sets (offline: scikit-learn's embedded sets; only digits has 6+ classes):

* ``digits`` (10 classes): random 5 / 5 partitions;
* ``synthetic`` (8 classes): ``make_classification`` (1,600 rows, 20 features, 8 informative,
  4 redundant, one cluster per class), random 4 / 4 partitions;
* ``wine``, ``iris`` (3 classes): every 2-in / 1-out partition, each with several seeds.

Per run: in-distribution test rows (the in classes' 30 %) against as many out rows (a sample
of the out classes' rows), AUROC of FiD-GP's ``ood_score``, its own max-softmax (``1 - max
predict_proba``), its predictive entropy, and the entropy of a 5-MLP ensemble (sklearn
``MLPClassifier`` (64, 64), standardised inputs, as in ``bench_fidgp.py``); accuracy of
FiD-GP and of the ensemble on the in-distribution test rows. FiD-GP runs at its defaults on
at most ``--max-train`` training rows (the same rows for the ensemble): a full digits fit is
minutes on one core.

Candidates (computed from the same fit, no refit): ``ood_score``'s parts (the principal
subspace of each key layer: the inputs, each hidden layer's features), the previous default
(``"combined"``: the principal and the inducing subspaces of the hidden FiD-GP
layers, under the same weight draw) and its parts, and sums of z-scores (mean and std over
the training rows) or of ranks (the training rows' empirical CDF) of ``ood_score`` with the
predictive entropy. The first runs of each set are flagged ``tuning`` (the first 3
partitions; for the 3-class sets every seed of the partition whose out class is the first
class); a candidate is chosen on those alone (highest mean over the sets of the tuning
runs' mean AUROC) and reported on the ``held out`` runs. Runs beyond the first 12 partitions (3-class sets:
beyond seed 3) are flagged ``new``: they were added after the default was chosen. The far-OOD tasks of ``bench_fidgp.py`` (digits against
inverted / pixel-shuffled / noise images, breast_cancer against shifted rows and digits
columns) are scored with every candidate too (``--far-seeds``, same ``--max-train``).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_ood_partitions.py          # ~17 min, one core
    python benchmarks/bench_ood_partitions.py --quick --out /tmp/q       # a smoke run

Writes ``benchmarks/results/bench_ood_partitions.{md,json}``; the per-run records go to
``bench_ood_partitions.records.jsonl`` next to them (a stopped run resumes from it).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _harness import (
    RESULTS,
    git_commit,
    machine,
    run_all,
    versions,
    write_results,
)
from baselines import MLPEnsembleClassifier

SETS = ("digits", "synthetic", "wine", "iris")
HIDDEN = (64, 64)
#: Candidate scores besides the four of the main table; a z-sum ``z(a)+z(b)`` z-scores each
#: score by its mean and std over the training rows, a rank sum by their empirical CDF.
MAIN = ("ood_score", "max_softmax", "entropy", "ensemble_entropy")
#: Partitions (3-class sets: seeds) of the runs the default was chosen on; later ones: "new".
FIRST_PARTITIONS, FIRST_SEEDS_3 = 12, 4


# ============================================================================ data
def load(name):
    from sklearn import datasets
    if name == "synthetic":
        return datasets.make_classification(
            n_samples=1600, n_features=20, n_informative=8, n_redundant=4, n_classes=8,
            n_clusters_per_class=1, class_sep=1.5, random_state=0)
    return getattr(datasets, f"load_{name}")(return_X_y=True)


def partitions(name, classes, n_parts, n_seeds_3):
    """``(in classes, seed, role)`` runs of set ``name``: random halves for 6+ classes
    (distinct, seed = partition index), every 2-in / 1-out partition x ``n_seeds_3`` seeds
    for 3 classes."""
    K = len(classes)
    if K <= 3:
        return [(tuple(int(c) for c in classes if c != out), seed,
                 "new" if seed >= FIRST_SEEDS_3 else
                 "tuning" if out == classes[0] else "held out")
                for out in classes for seed in range(n_seeds_3)]
    rng = np.random.RandomState(1000 + SETS.index(name))
    runs, seen = [], set()
    while len(runs) < n_parts:
        ins = tuple(sorted(int(c) for c in rng.permutation(classes)[:K // 2]))
        if ins in seen:
            continue
        seen.add(ins)
        runs.append((ins, len(runs), "tuning" if len(runs) < 3 else
                     "held out" if len(runs) < FIRST_PARTITIONS else "new"))
    return runs


def split(X, y, ins, seed, max_train):
    from sklearn.model_selection import train_test_split
    rng = np.random.RandomState(seed)
    inside = np.isin(y, ins)
    Xtr, Xte, ytr, yte = train_test_split(X[inside], y[inside], test_size=0.3,
                                          random_state=seed, stratify=y[inside])
    if len(ytr) > max_train:
        Xtr, _, ytr, _ = train_test_split(Xtr, ytr, train_size=max_train, random_state=seed,
                                          stratify=ytr)
    out = np.flatnonzero(~inside)
    Xout = X[rng.choice(out, min(len(out), len(yte)), replace=False)]
    return Xtr, ytr, Xte, yte, Xout


# ============================================================================ scores
def entropy(p):
    return -(p * np.log(np.clip(p, 1e-300, 1))).sum(1)


def previous_default(clf, Xtr):
    """The ``"combined"`` subspaces of the hidden FiD-GP layers (the previous default)
    under ``clf``'s own weight draw: their bases, in ``subspace_bases``' order."""
    import torch

    from skbnngp._backend._ood import subspace_bases
    from skbnngp._fidgp import OOD_ENERGY
    keys = [i for i in clf.ood_layers_ if i < len(clf.model_.layers) - 1
            and clf.inducing_matrices_[clf.ood_layers_.index(i)] is not None]
    inputs = clf._layer_inputs(clf._input(Xtr))
    inputs = [inputs[clf.ood_layers_.index(i)] for i in keys]
    us = {i: torch.as_tensor(clf.inducing_matrices_[clf.ood_layers_.index(i)],
                             dtype=inputs[0].dtype) for i in keys}
    colmaps = {i: clf.model_.layers[i].prior_factors()[3].detach().to(inputs[0].dtype)
               for i in keys}
    return keys, subspace_bases(inputs, us, colmaps, keys, "combined", OOD_ENERGY)


def fidgp_scores(clf, prev, X):
    """FiD-GP's raw scores of ``X``: ``ood_score``, max-softmax, entropy, each key layer's
    principal residual (``ood_score`` averages them), and the previous default's parts."""
    from skbnngp._backend import to_numpy
    from skbnngp._backend._ood import residual_score
    p = clf.predict_proba(X)
    out = {"ood_score": clf.ood_score(X), "max_softmax": 1 - p.max(1), "entropy": entropy(p)}
    inputs = clf._layer_inputs(clf._input(X))
    for k, (i, B) in enumerate(zip(clf.ood_layers_, clf._ood["bases"])):
        out[f"principal L{i}"] = to_numpy(residual_score([inputs[k]], [B]))
    keys, bases = prev
    hidden = [inputs[clf.ood_layers_.index(i)] for i in keys]
    nk = len(keys)
    out["principal (hidden layers)"] = to_numpy(residual_score(hidden, bases[:nk]))
    out["inducing (hidden layers)"] = to_numpy(residual_score(hidden, bases[nk:]))
    out["combined (hidden layers)"] = to_numpy(residual_score(hidden, bases))
    return out


#: Combinations: (name, kind, parts).
COMBOS = [("z(ood)+z(entropy)", "z", ("ood_score", "entropy")),
          ("rank(ood)+rank(entropy)", "rank", ("ood_score", "entropy"))]


def combine(ref, s, kind, parts):
    total = 0.0
    for part in parts:
        r, v = ref[part], s[part]
        if kind == "z":
            total = total + (v - r.mean()) / max(r.std(), 1e-12)
        else:  # the training rows' empirical CDF at v
            total = total + np.searchsorted(np.sort(r), v, side="right") / len(r)
    return total


def all_scores(clf, prev, Xtr, X):
    ref = fidgp_scores(clf, prev, Xtr)
    s = fidgp_scores(clf, prev, X)
    for name, kind, parts in COMBOS:
        s[name] = combine(ref, s, kind, parts)
    return s


def fit_models(Xtr, ytr, seed, quick):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from skbnngp import FiDGPClassifier
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        clf = FiDGPClassifier(device="cpu", random_state=seed,
                              **({"max_iter": 10} if quick else {})).fit(Xtr, ytr)
        fit_s = time.perf_counter() - t0
        ens = make_pipeline(StandardScaler(), MLPEnsembleClassifier(
            5, HIDDEN, max_iter=50 if quick else 300, random_state=10 * seed + 1)).fit(Xtr, ytr)
    return clf, previous_default(clf, Xtr), ens, fit_s


def run_partition(task):
    from skbnngp.metrics import ood_auroc
    key, ins, quick, max_train = task
    X, y = load(key["set"])
    Xtr, ytr, Xte, yte, Xout = split(X, y, list(ins), key["seed"], max_train)
    rec = dict(key, role=key["role"], n_train=len(ytr), n_in=len(yte), n_out=len(Xout),
               metrics={}, error=None, auroc={})
    clf, prev, ens, fit_s = fit_models(Xtr, ytr, key["seed"], quick)
    s_in, s_out = all_scores(clf, prev, Xtr, Xte), all_scores(clf, prev, Xtr, Xout)
    e_in, e_out = ens.predict_proba(Xte), ens.predict_proba(Xout)
    rec["auroc"] = {k: float(ood_auroc(s_in[k], s_out[k])) for k in s_in}
    rec["auroc"]["ensemble_entropy"] = float(ood_auroc(entropy(e_in), entropy(e_out)))
    rec["metrics"] = {"accuracy": float(np.mean(clf.predict(Xte) == yte)),
                      "ensemble_accuracy": float(np.mean(ens.predict(Xte) == yte)),
                      "fit_s": fit_s}
    return rec


def far_tasks(seed, max_train):
    """``bench_fidgp.py``'s far-OOD tasks (digits vs corrupted, breast_cancer vs shifted /
    other), training rows subsampled to ``max_train``."""
    from bench_fidgp import ood_tasks
    from sklearn.model_selection import train_test_split
    for task, Xtr, ytr, Xte, yte, oods in itertools.islice(ood_tasks(seed), 1, None):
        if len(ytr) > max_train:
            Xtr, _, ytr, _ = train_test_split(Xtr, ytr, train_size=max_train,
                                              random_state=seed, stratify=ytr)
        yield task, Xtr, ytr, Xte, yte, oods


def run_far(task):
    from skbnngp.metrics import ood_auroc
    key, quick, max_train = task
    _name, Xtr, ytr, Xte, yte, oods = next(t for t in far_tasks(key["seed"], max_train)
                                         if t[0] == key["task"])
    clf, prev, ens, fit_s = fit_models(Xtr, ytr, key["seed"], quick)
    s_in, e_in = all_scores(clf, prev, Xtr, Xte), entropy(ens.predict_proba(Xte))
    rec = dict(key, metrics={"accuracy": float(np.mean(clf.predict(Xte) == yte)),
                             "fit_s": fit_s}, error=None, auroc={})
    for oname, Xo in oods.items():
        s_out = all_scores(clf, prev, Xtr, Xo)
        a = {k: float(ood_auroc(s_in[k], s_out[k])) for k in s_in}
        a["ensemble_entropy"] = float(ood_auroc(e_in, entropy(ens.predict_proba(Xo))))
        rec["auroc"][oname] = a
    return rec


# ============================================================================ report
def summarise(records):
    """``{set: {role: {...}}}``: runs, accuracies, mean AUROC of every score and the wins of
    every FiD-GP score against max-softmax, entropy and the ensemble's entropy."""
    out = {}
    for (s, role) in dict.fromkeys((r["set"], r["role"]) for r in records):
        rs = [r for r in records if r["set"] == s and r["role"] == role]
        names = list(rs[0]["auroc"])
        out.setdefault(s, {})[role] = {
            "runs": len(rs),
            "accuracy": float(np.mean([r["metrics"]["accuracy"] for r in rs])),
            "ensemble_accuracy": float(np.mean([r["metrics"]["ensemble_accuracy"]
                                                for r in rs])),
            "auroc": {k: float(np.mean([r["auroc"][k] for r in rs])) for k in names},
            "wins": {k: {peer: int(sum(r["auroc"][k] > r["auroc"][peer] for r in rs))
                         for peer in MAIN[1:]} for k in names}}
    return out


def choose(summary):
    """The FiD-GP score with the highest mean over the sets of the tuning runs' mean AUROC."""
    sets = [s for s in summary if "tuning" in summary[s]]
    names = [k for k in summary[sets[0]]["tuning"]["auroc"] if k != "ensemble_entropy"]
    mean = {k: float(np.mean([summary[s]["tuning"]["auroc"][k] for s in sets]))
            for k in names}
    return max(mean, key=mean.get), mean


def choose_far_safe(tuning_means, far, slack=0.005):
    """The tuning choice among the candidates whose mean far-OOD AUROC is within ``slack``
    of ``ood_score``'s on every far-OOD set (None without far-OOD records)."""
    if not far:
        return None
    sets = list(dict.fromkeys(o for r in far for o in r["auroc"]))

    def mean(k, o):
        return np.mean([r["auroc"][o][k] for r in far if o in r["auroc"]])
    safe = [k for k in tuning_means
            if all(mean(k, o) >= mean("ood_score", o) - slack for o in sets)]
    return max(safe, key=tuning_means.get)


def held_out_lines(result, name):
    """Markdown lines: ``name`` against ``ood_score`` and the peers on the held-out runs."""
    summ, recs = result["summary"], result["records"]
    L = [(f"| set | held-out runs | {name} | ood_score | max-softmax | 5-MLP ens. entropy | "
         "wins vs ood_score | vs max-softmax | vs entropy | vs ensemble |"),
         "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summ:
        rs = [r for r in recs if r["set"] == s and r["role"] == "held out"]
        if not rs:
            continue
        a = {k: np.mean([r["auroc"][k] for r in rs]) for k in (name, *MAIN)}
        wins = [sum(r["auroc"][name] > r["auroc"][p] for r in rs)
                for p in ("ood_score", *MAIN[1:])]
        L.append(f"| {s} | {len(rs)} | {a[name]:.3f} | {a['ood_score']:.3f} | "
                 f"{a['max_softmax']:.3f} | {a['ensemble_entropy']:.3f} | "
                 + " | ".join(f"{w}/{len(rs)}" for w in wins) + " |")
    return L + [""]


def markdown(result, quick):
    summ, recs = result["summary"], result["records"]
    L = ["# bench_ood_partitions: near-OOD over random class partitions", "",
         f"{result['machine']}; commit {result['commit']}; torch {result['versions']['torch']}, "
         "one thread. " + ("**--quick run (FiD-GP max_iter=10): not a measurement.**"
                           if quick else ""), "",
         ("In-distribution: a random half of each set's classes (2 of 3 for wine and iris), "
         "70/30 stratified split of their rows; OoD: as many rows of the other classes as "
         "in-distribution test rows. FiD-GP at its defaults, trained on at most "
         f"{result['max_train']} rows (stratified subsample; the ensemble the same rows). Only "
         "digits has 6+ classes among the offline sets: `synthetic` is `make_classification` "
         "(8 classes), wine and iris are 3-class sets with every 2-in / 1-out partition x "
         f"{result['seeds_3']} seeds. `tuning` runs: the first 3 partitions (wine, iris: the "
         "partition whose out class is class 0, every seed); `held out`: the others (for "
         "wine and iris the held-out runs are the two other partitions); `new`: partitions "
         f"beyond the first {FIRST_PARTITIONS} (wine, iris: seeds from {FIRST_SEEDS_3}), "
         "added after the default was chosen."), "",
         "## AUROC (in vs out) and wins of `ood_score`", "",
         ("| set | runs | role | FiD-GP acc | ensemble acc | ood_score | max-softmax | entropy | "
         "5-MLP ens. entropy | wins vs max-softmax | wins vs entropy | wins vs ensemble |"),
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s, roles in summ.items():
        for role in ("tuning", "held out", "new"):
            if role not in roles:
                continue
            v = roles[role]
            a, w, n = v["auroc"], v["wins"]["ood_score"], v["runs"]
            L.append(f"| {s} | {n} | {role} | {v['accuracy']:.3f} | "
                     f"{v['ensemble_accuracy']:.3f} | "
                     + " | ".join(f"{a[k]:.3f}" for k in MAIN) + " | "
                     + " | ".join(f"{w[p]}/{n}" for p in MAIN[1:]) + " |")
    later = [r for r in recs if r["role"] != "tuning"]
    if later:
        L += ["", "Held-out and new runs together: `ood_score` above the 5-MLP ensemble's "
              f"entropy on {sum(r['auroc']['ood_score'] > r['auroc']['ensemble_entropy'] for r in later)}"
              f"/{len(later)}, above its own max-softmax on "
              f"{sum(r['auroc']['ood_score'] > r['auroc']['max_softmax'] for r in later)}"
              f"/{len(later)}."]
    best, tuned = result["chosen"], result["tuning_means"]
    L += ["", "## Candidates", "",
          ("Mean AUROC per set (tuning / held out); the last columns: held-out runs (all sets) "
          "where the candidate is above FiD-GP's max-softmax, its entropy and the ensemble's "
          "entropy. Chosen on the tuning runs (mean over the sets of the tuning means): "
          f"**{best}** ({tuned[best]:.3f}; `ood_score` {tuned['ood_score']:.3f})."), "",
          "| score | " + " | ".join(summ) + " | tuning mean | held-out mean | held-out wins vs "
          "max-softmax | vs entropy | vs ensemble |",
          "|---|" + "---|" * len(summ) + "---|---|---|---|---|"]
    held = [r for r in recs if r["role"] == "held out"]
    for k in tuned:
        cells = [f"{summ[s]['tuning']['auroc'][k]:.3f} / "
                 f"{summ[s]['held out']['auroc'][k]:.3f}" if "held out" in summ[s] else "-"
                 for s in summ]
        hm = np.mean([np.mean([r["auroc"][k] for r in held if r["set"] == s])
                      for s in summ if "held out" in summ[s]]) if held else float("nan")
        wins = [f"{sum(r['auroc'][k] > r['auroc'][p] for r in held)}/{len(held)}"
                for p in MAIN[1:]]
        L.append(f"| {k} | " + " | ".join(cells) + f" | {tuned[k]:.3f} | {hm:.3f} | "
                 + " | ".join(wins) + " |")
    if result.get("far"):
        L += ["", "## Far-OOD tasks of bench_fidgp.py (same training-row cap)", "",
              "Mean AUROC over the seeds " + ", ".join(map(str, result["far_seeds"])) + ".", "",
              "| score | " + " | ".join(result["far_sets"]) + " |",
              "|---|" + "---|" * len(result["far_sets"])]
        for k in list(tuned) + ["ensemble_entropy"]:
            L.append(f"| {k} | " + " | ".join(
                f"{np.mean([r['auroc'][o][k] for r in result['far'] if o in r['auroc']]):.3f}"
                for o in result["far_sets"]) + " |")
    safe = result.get("chosen_far_safe")
    L += ["", "## The tuning choices on the held-out runs", "",
          f"Chosen on the tuning runs: **{best}**.", "", *held_out_lines(result, best)]
    if safe and safe != best and safe == "ood_score":
        L += ["Among the candidates whose far-OOD AUROC above is within 0.005 of "
              "`ood_score`'s on every far-OOD set, the tuning choice is `ood_score` itself.",
              ""]
    elif safe and safe != best:
        L += [(f"Chosen on the tuning runs among the candidates whose far-OOD AUROC above is "
              f"within 0.005 of `ood_score`'s on every far-OOD set: **{safe}**."), "",
              *held_out_lines(result, safe)]
    L += ["## Per run", "",
          "| set | role | in classes | seed | n train | acc | ood_score | max-softmax | entropy "
          "| ens. entropy | " + f"{best} | fit s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        a = r["auroc"]
        L.append(f"| {r['set']} | {r['role']} | {r['classes']} | {r['seed']} | {r['n_train']} "
                 f"| {r['metrics']['accuracy']:.3f} | "
                 + " | ".join(f"{a[k]:.3f}" for k in (*MAIN, best))
                 + f" | {r['metrics']['fit_s']:.0f} |")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    ap.add_argument("--partitions", type=int, default=12,
                    help="random partitions of each set with 6+ classes")
    ap.add_argument("--seeds-3", type=int, default=4,
                    help="seeds of each partition of a 3-class set")
    ap.add_argument("--max-train", type=int, default=200, help="training rows at most")
    ap.add_argument("--jobs", type=int, default=1, help="fits at a time (one thread each)")
    ap.add_argument("--far-seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--quick", action="store_true",
                    help="2 partitions (1 seed for 3-class sets), FiD-GP max_iter=10, "
                         "no far-OOD tasks")
    ap.add_argument("--out", default=str(RESULTS / "bench_ood_partitions"))
    args = ap.parse_args(argv)
    if args.quick:
        args.partitions, args.seeds_3, args.far_seeds = 4, 1, []
    records_path = None if args.quick else args.out + ".records.jsonl"
    tasks = []
    for s in args.sets:
        _, y = load(s)
        for ins, seed, role in partitions(s, np.unique(y), args.partitions, args.seeds_3):
            key = {"set": s, "classes": "".join(map(str, ins)), "seed": seed, "role": role}
            tasks.append((key, ins, args.quick, args.max_train))
    records = run_all(tasks, run_partition, args.jobs, records_path, "partitions: ")
    far = [({"task": t, "seed": seed}, args.quick, args.max_train)
           for seed in args.far_seeds
           for t in ("digits vs corrupted", "breast_cancer vs shifted / other")]
    far_records = run_all(far, run_far, args.jobs, records_path and args.out + ".far.jsonl",
                          "far-OOD: ") if far else []
    summary = summarise(records)
    chosen, tuning_means = choose(summary)
    result = {"machine": machine(), "commit": git_commit(), "versions": versions(),
              "max_train": args.max_train, "seeds_3": args.seeds_3, "quick": args.quick,
              "summary": summary, "chosen": chosen, "tuning_means": tuning_means,
              "chosen_far_safe": choose_far_safe(tuning_means, far_records),
              "records": records, "far": far_records, "far_seeds": args.far_seeds,
              "far_sets": list(dict.fromkeys(o for r in far_records for o in r["auroc"]))}
    write_results(args.out, result, markdown(result, args.quick))
    return result


if __name__ == "__main__":
    main()
