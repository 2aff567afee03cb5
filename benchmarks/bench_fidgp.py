"""Benchmark: FiDGPClassifier on digits with held-out classes, against five baselines.

sklearn's digits (8x8 images, 64 features): classes 0-4 are in distribution (a stratified
70/30 train/test split), classes 5-9 are out of distribution (OoD). In one run, per seed:

* ``FiDGPClassifier`` (package defaults): accuracy, NLL of the averaged predictive, ECE
  (15 bins), OoD AUROC of ``ood_score`` and of its own max-softmax (``1 - max p``) and
  predictive entropy;
* sklearn's ``MLPClassifier`` (64, 64), its max-softmax AUROC;
* a deep ensemble of 5 such MLPs (seeds differ), averaged probabilities;
* MC dropout: the same MLP in torch with dropout 0.1 after each hidden layer, trained with
  Adam, 30 dropout draws averaged at test time;
* sklearn's ``GaussianProcessClassifier`` (RBF, one-vs-rest; seed-independent, run once);
* the compression claim: FiD-GP's trainable parameters against the deterministic network and
  against a mean-field Gaussian Bayesian network of the same shape (2 per weight);
* training seconds, and the same FiD-GP fit on CUDA when a GPU is present.

Usage::

    python benchmarks/bench_fidgp.py            # 3 seeds + a settings sweep, ~12 min
    python benchmarks/bench_fidgp.py --seeds 1 --no-sweep

Writes ``benchmarks/results/bench_fidgp.{json,md}``. Goals (issue 10): the OoD AUROC of
``ood_score`` above the max-softmax AUROC of the same network and above the deep ensemble's,
and FiD-GP's ECE no worse than the MLP's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))

HIDDEN = (64, 64)
#: FiD-GP settings tried besides the defaults (kl_weight=1, label_smoothing=0.05), seed 0.
SWEEP = [dict(label_smoothing=0.0), dict(kl_weight=0.1), dict(kl_weight=0.1, label_smoothing=0.0),
         dict(kl_weight=0.01, label_smoothing=0.0), dict(kl_weight=0.0, label_smoothing=0.0)]


def data():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    ind = y < 5
    Xtr, Xte, ytr, yte = train_test_split(X[ind], y[ind], test_size=0.3, random_state=0,
                                          stratify=y[ind])
    return Xtr, Xte, ytr, yte, X[~ind]


def scores(proba, y):
    from sklearn.metrics import accuracy_score, log_loss

    from skbnngp.metrics import expected_calibration_error
    return dict(accuracy=float(accuracy_score(y, proba.argmax(1))),
                nll=float(log_loss(y, np.clip(proba, 1e-12, 1), labels=np.arange(5))),
                ece=float(expected_calibration_error(y, proba, n_bins=15)))


def auroc(s_in, s_out):
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(np.r_[np.zeros(len(s_in)), np.ones(len(s_out))],
                               np.r_[s_in, s_out]))


def entropy(p):
    return -(p * np.log(np.clip(p, 1e-300, 1))).sum(1)


def run_fidgp(Xtr, ytr, Xte, yte, Xood, seed, device="cpu", **params):
    from skbnngp import FiDGPClassifier
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = FiDGPClassifier(random_state=seed, device=device, **params).fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    p_in, p_out = clf.predict_proba(Xte), clf.predict_proba(Xood)
    t1 = time.perf_counter()
    s_in, s_out = clf.ood_score(Xte), clf.ood_score(Xood)
    ood_s = time.perf_counter() - t1
    out = dict(scores(p_in, yte), fit_s=fit_s, ood_score_s=ood_s, epochs=clf.n_iter_,
               auroc_ood_score=auroc(s_in, s_out),
               auroc_max_softmax=auroc(1 - p_in.max(1), 1 - p_out.max(1)),
               auroc_entropy=auroc(entropy(p_in), entropy(p_out)),
               lambdas=clf.lambdas_, n_parameters=clf.n_parameters_,
               warnings=sorted({type(w.message).__name__ for w in caught}))
    return out, clf


def run_mlp(Xtr, ytr, Xte, yte, Xood, seeds):
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    t0 = time.perf_counter()
    models = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in seeds:
            models.append(make_pipeline(StandardScaler(), MLPClassifier(
                HIDDEN, max_iter=200, random_state=int(s))).fit(Xtr, ytr))
    fit_s = time.perf_counter() - t0
    p_in = np.mean([m.predict_proba(Xte) for m in models], axis=0)
    p_out = np.mean([m.predict_proba(Xood) for m in models], axis=0)
    return dict(scores(p_in, yte), fit_s=fit_s,
                auroc_max_softmax=auroc(1 - p_in.max(1), 1 - p_out.max(1)),
                auroc_entropy=auroc(entropy(p_in), entropy(p_out)))


def run_mc_dropout(Xtr, ytr, Xte, yte, Xood, seed, p=0.1, epochs=200, draws=30):
    import torch
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)

    def tens(A):
        return torch.as_tensor((A - mu) / sd, dtype=torch.float32)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = torch.nn.Sequential(
            torch.nn.Linear(64, HIDDEN[0]), torch.nn.ReLU(), torch.nn.Dropout(p),
            torch.nn.Linear(HIDDEN[0], HIDDEN[1]), torch.nn.ReLU(), torch.nn.Dropout(p),
            torch.nn.Linear(HIDDEN[1], 5))
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
        X, y = tens(Xtr), torch.as_tensor(ytr)
        t0 = time.perf_counter()
        rng = np.random.RandomState(seed)
        for _ in range(epochs):
            for b in np.array_split(rng.permutation(len(X)), max(1, len(X) // 100)):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(X[b]), y[b]).backward()
                opt.step()
        fit_s = time.perf_counter() - t0
        net.train()  # dropout stays on at test time
        with torch.no_grad():
            def proba(A):
                T = tens(A)
                return np.mean([torch.softmax(net(T), 1).numpy() for _ in range(draws)], 0)
            p_in, p_out = proba(Xte), proba(Xood)
    return dict(scores(p_in, yte), fit_s=fit_s,
                auroc_max_softmax=auroc(1 - p_in.max(1), 1 - p_out.max(1)),
                auroc_entropy=auroc(entropy(p_in), entropy(p_out)))


def run_gpc(Xtr, ytr, Xte, yte, Xood):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpc = make_pipeline(StandardScaler(), GaussianProcessClassifier(
            ConstantKernel(1.0) * RBF(8.0), random_state=0)).fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    p_in, p_out = gpc.predict_proba(Xte), gpc.predict_proba(Xood)
    return dict(scores(p_in, yte), fit_s=fit_s,
                auroc_max_softmax=auroc(1 - p_in.max(1), 1 - p_out.max(1)),
                auroc_entropy=auroc(entropy(p_in), entropy(p_out)))


def parameter_counts(n_in, n_classes, n_fid):
    widths = [n_in, *HIDDEN, n_classes]
    det = sum((a + 1) * b for a, b in zip(widths, widths[1:]))
    return dict(fidgp=n_fid, deterministic=det, mean_field_gaussian=2 * det,
                ratio_to_mean_field=n_fid / (2 * det), ratio_to_deterministic=n_fid / det)


def summarise(rows):
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float))]
    return {k: (float(np.mean([r[k] for r in rows])), float(np.std([r[k] for r in rows])))
            for k in keys}


def main():
    import torch
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--no-sweep", action="store_true",
                    help="skip the kl_weight / label_smoothing sweep (seed 0)")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    Xtr, Xte, ytr, yte, Xood = data()
    seeds = list(range(args.seeds))
    runs = {"FiDGPClassifier": [], "MLPClassifier": [], "deep ensemble (5 MLPs)": [],
            "MC dropout": []}
    clf = None
    for s in seeds:
        r, clf = run_fidgp(Xtr, ytr, Xte, yte, Xood, s)
        runs["FiDGPClassifier"].append(r)
        runs["MLPClassifier"].append(run_mlp(Xtr, ytr, Xte, yte, Xood, [s]))
        runs["deep ensemble (5 MLPs)"].append(
            run_mlp(Xtr, ytr, Xte, yte, Xood, [100 * s + k for k in range(5)]))
        runs["MC dropout"].append(run_mc_dropout(Xtr, ytr, Xte, yte, Xood, s))
        print(f"seed {s}: " + ", ".join(
            f"{k} AUROC {v[-1].get('auroc_ood_score', v[-1]['auroc_max_softmax']):.3f}"
            for k, v in runs.items()), flush=True)
    runs["GaussianProcessClassifier"] = [run_gpc(Xtr, ytr, Xte, yte, Xood)]
    sweep = []
    if not args.no_sweep:  # the KL weight and label smoothing trade calibration for OoD
        for kw in SWEEP:
            r, _ = run_fidgp(Xtr, ytr, Xte, yte, Xood, 0, **kw)
            sweep.append(dict(params=kw, **{k: r[k] for k in (
                "accuracy", "nll", "ece", "auroc_ood_score", "auroc_max_softmax", "fit_s")}))
            print("sweep", sweep[-1], flush=True)
    gpu = None
    if torch.cuda.is_available():
        r, _ = run_fidgp(Xtr, ytr, Xte, yte, Xood, 0, device="cuda")
        gpu = r
    result = dict(
        data=dict(n_train=len(Xtr), n_test=len(Xte), n_ood=len(Xood), features=64),
        seeds=seeds, runs=runs, summary={k: summarise(v) for k, v in runs.items()},
        parameters=parameter_counts(64, 5, clf.n_parameters_),
        fidgp_epochs=[r["epochs"] for r in runs["FiDGPClassifier"]],
        sweep=sweep, cuda=gpu, torch=torch.__version__, threads=torch.get_num_threads())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_fidgp.json").write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (RESULTS / "bench_fidgp.md").write_text(md)
    print(md)


def markdown(r):
    S = r["summary"]

    def cell(name, key):
        if key not in S[name]:
            return "-"
        m, s = S[name][key]
        return f"{m:.3f} ± {s:.3f}" if len(r["runs"][name]) > 1 else f"{m:.3f}"

    lines = [
        "# bench_fidgp: digits 0-4 in distribution, 5-9 out of distribution",
        "",
        f"{r['data']['n_train']} training rows, {r['data']['n_test']} in-distribution test rows, "
        f"{r['data']['n_ood']} OoD rows; mean ± std over seeds {r['seeds']} (the GP "
        f"classifier once); torch {r['torch']}, {r['threads']} CPU threads.",
        "",
        "| method | accuracy | NLL | ECE (15 bins) | AUROC max-softmax | AUROC entropy | "
        "AUROC ood_score | fit s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in S:
        lines.append(f"| {name} | " + " | ".join(
            cell(name, k) for k in ("accuracy", "nll", "ece", "auroc_max_softmax",
                                    "auroc_entropy", "auroc_ood_score", "fit_s")) + " |")
    P = r["parameters"]
    fid = S["FiDGPClassifier"]
    lines += [
        "",
        f"Parameters: FiD-GP {P['fidgp']:,}; deterministic MLP {P['deterministic']:,}; "
        f"mean-field Gaussian BNN {P['mean_field_gaussian']:,} (FiD-GP / mean-field = "
        f"{P['ratio_to_mean_field']:.2f}, FiD-GP / deterministic = "
        f"{P['ratio_to_deterministic']:.2f}).",
        f"FiD-GP epochs run: {r['fidgp_epochs']}.",
        "",
        "FiD-GP settings against the defaults (kl_weight=1, label_smoothing=0.05), seed 0:",
        "",
        "| settings | accuracy | NLL | ECE | AUROC ood_score | AUROC max-softmax | fit s |",
        "|---|---|---|---|---|---|---|",
    ] + [f"| {', '.join(f'{k}={v}' for k, v in w['params'].items())} | {w['accuracy']:.3f} | "
         f"{w['nll']:.3f} | {w['ece']:.3f} | {w['auroc_ood_score']:.3f} | "
         f"{w['auroc_max_softmax']:.3f} | {w['fit_s']:.1f} |" for w in r["sweep"]] + [
        "",
        "Goals (issue 10):",
        f"- ood_score AUROC above the same network's max-softmax: "
        f"{fid['auroc_ood_score'][0]:.3f} vs {fid['auroc_max_softmax'][0]:.3f} -> "
        f"{'met' if fid['auroc_ood_score'][0] > fid['auroc_max_softmax'][0] else 'NOT met'}",
        f"- ood_score AUROC above the deep ensemble's max-softmax: "
        f"{fid['auroc_ood_score'][0]:.3f} vs "
        f"{S['deep ensemble (5 MLPs)']['auroc_max_softmax'][0]:.3f} -> "
        f"{'met' if fid['auroc_ood_score'][0] > S['deep ensemble (5 MLPs)']['auroc_max_softmax'][0] else 'NOT met'}",
        f"- ECE no worse than the MLP's: {fid['ece'][0]:.3f} vs "
        f"{S['MLPClassifier']['ece'][0]:.3f} -> "
        f"{'met' if fid['ece'][0] <= S['MLPClassifier']['ece'][0] else 'NOT met'}",
        "",
        "CUDA: " + ("unmeasured (no GPU on this machine)" if r["cuda"] is None else
                    f"fit {r['cuda']['fit_s']:.1f} s, AUROC {r['cuda']['auroc_ood_score']:.3f}"),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
