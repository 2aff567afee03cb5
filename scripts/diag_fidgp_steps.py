"""Diagnostic (issue 20): is FiDGPClassifier's under-confidence on the small sets a matter of
too few optimiser steps (2 steps an epoch on iris and wine at ``batch_size="auto"``) or of
the KL term?  Fits variants on ``bench_classification.py``'s folds (fold seed given), and
prints per set: test NLL, accuracy, mean top confidence, per-fold and pooled ECE, training
NLL, the test temperature that would minimise the pooled NLL (T < 1: too soft) and the
temperature each fold fitted (``temperature_``, 1 without calibration).

    python scripts/diag_fidgp_steps.py --sets iris wine --variants default bs32 ep800 kl0
"""
import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_classification import ece_of, load

VARIANTS = {
    "default": {},
    "bs32": {"batch_size": 32},
    "bs16": {"batch_size": 16},
    "ep800": {"max_iter": 800},
    "kl0": {"kl_weight": 0.0},
    "kl03": {"kl_weight": 0.03},
    "lr1e2": {"learning_rate_init": 1e-2},
    "ms75": {"LR_MILESTONES_FRAC": (0.75,)},  # upper case: a private setting of _fidgp
    # the KL of some layers only (a patch of FiDNetwork.kl for this diagnostic)
    "kl_hidden": {},
    "kl_output": {},
}


def _patch_kl(var):
    """``kl_hidden``: the KL of every FiD-GP layer but the output layer; ``kl_output``: of the
    output layer only."""
    from skbnngp._backend import _inducing

    net = _inducing.FiDNetwork
    if not hasattr(net, "_kl_all"):
        net._kl_all = net.kl
    net.kl = net._kl_all  # a worker process runs many tasks: undo an earlier task's patch
    if var not in ("kl_hidden", "kl_output"):
        return

    def kl(self):
        last = len(self.layers) - 1
        terms = [layer.kl() for i, layer in self.inducing_layers()
                 if (i == last) == (var == "kl_output")]
        return sum(terms[1:], terms[0])
    net.kl = kl


def one(task):
    import torch
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    from skbnngp import FiDGPClassifier

    torch.set_num_threads(1)
    ds, fold, var, fold_seed = task
    from sklearn.model_selection import StratifiedKFold
    X, y = load(ds)
    tr, te = list(StratifiedKFold(5, shuffle=True, random_state=fold_seed).split(X, y))[fold]
    kw = VARIANTS[var] if var in VARIANTS else json.loads(var)
    _patch_kl(var)
    private = {k: kw.pop(k) for k in list(kw) if k.startswith("_")}  # instance attributes
    settings = {k: kw.pop(k) for k in list(kw) if k.isupper()}  # patched in skbnngp._fidgp
    est = FiDGPClassifier(device="cpu", random_state=0, **kw)
    for k, v in private.items():
        setattr(est, k, v)
    m = Pipeline([("s", StandardScaler()), ("m", est)])
    t0 = time.perf_counter()
    from unittest.mock import patch

    import skbnngp._fidgp as module
    with patch.multiple(module, **settings) if settings else contextlib.nullcontext():
        m.fit(X[tr], y[tr])
    fit_s = time.perf_counter() - t0
    cls = list(m.classes_)
    ptr = m.predict_proba(X[tr])
    pte = m.predict_proba(X[te])
    ytr = np.array([cls.index(v) for v in y[tr]])
    yte = np.array([cls.index(v) for v in y[te]])
    return {"set": ds, "fold": fold, "var": var, "fit_s": fit_s, "test": te.tolist(),
            "y": yte.tolist(), "p": pte.tolist(),
            "T": float(getattr(m[-1], "temperature_", 1.0)),
            "train_nll": float(-np.mean(np.log(np.clip(ptr[np.arange(len(ytr)), ytr], 1e-12, 1))))}


def best_T(logp, y):
    from scipy.optimize import minimize_scalar

    def nll(lt):
        z = logp / np.exp(lt)
        z = z - z.max(1, keepdims=True)
        lse = np.log(np.exp(z).sum(1))
        return -np.mean(z[np.arange(len(y)), y] - lse)
    return float(np.exp(minimize_scalar(nll, bounds=(-3, 3), method="bounded").x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", nargs="+", default=["iris", "wine"])
    ap.add_argument("--variants", nargs="+", default=["default", "bs32", "ep800", "kl0"])
    ap.add_argument("--fold-seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from joblib import Parallel, delayed
    tasks = [(s, f, v, a.fold_seed) for s in a.sets for v in a.variants for f in range(5)]
    recs = Parallel(n_jobs=a.jobs, verbose=0)(delayed(one)(t) for t in tasks)
    if a.out:
        Path(a.out).write_text(json.dumps(recs))
    print(f"fold seed {a.fold_seed}")
    print(f"{'set':14s} {'variant':28s} {'NLL':>6s} {'acc':>6s} {'conf':>6s} {'ECEf':>6s} "
          f"{'ECEp':>6s} {'trNLL':>6s} {'T*':>5s} {'fit s':>6s} {'T fitted (per fold)'}")
    for s in a.sets:
        for v in a.variants:
            rs = [r for r in recs if r["set"] == s and r["var"] == v]
            p = np.concatenate([np.array(r["p"]) for r in rs])
            yy = np.concatenate([np.array(r["y"]) for r in rs])
            nll = -np.mean(np.log(np.clip(p[np.arange(len(yy)), yy], 1e-12, 1)))
            temps = " ".join(f"{r.get('T', 1.0):.2f}" for r in rs)
            ecef = np.mean([ece_of(np.array(r["y"]), np.array(r["p"])) for r in rs])
            print(f"{s:14s} {v:28s} {nll:6.3f} {np.mean(p.argmax(1) == yy):6.3f} "
                  f"{p.max(1).mean():6.3f} {ecef:6.3f} {ece_of(yy, p):6.3f} "
                  f"{np.mean([r['train_nll'] for r in rs]):6.3f} "
                  f"{best_T(np.log(np.clip(p, 1e-12, 1)), yy):5.2f} "
                  f"{np.mean([r['fit_s'] for r in rs]):6.1f} {temps}", flush=True)


if __name__ == "__main__":
    main()
