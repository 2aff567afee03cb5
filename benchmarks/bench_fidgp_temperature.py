"""Diagnostic (issue 52): FiD-GP's held-out temperature rule evaluated offline.

Capture: fit the default ``FiDGPClassifier`` (``device="cpu"``, ``random_state=0``) on each
fold of ``StratifiedKFold(3, shuffle=True, random_state=seed)``, after a ``StandardScaler``,
and store the held-out stage's validation logits and labels (what ``fit_temperature`` sees)
and the final network's test logits at ``T = 1``. The temperature enters nothing else (the
warm refit and the OoD set-up do not read it), so any rule's out-of-fold predictions follow
from the stored logits without refitting. ``--evaluate`` reports the pooled ECE (15 bins)
and NLL of: the symmetric ``N(0, 0.5^2)`` prior on ``log T`` (before), the current rule
(std 0.5 below 0, 1 above), ``T = 1``, and an oracle that fits ``T`` on each test fold.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_fidgp_temperature.py DIR digits6_214,mc6_300 0,1,2
    python benchmarks/bench_fidgp_temperature.py DIR --evaluate
"""

from __future__ import annotations

import glob
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_classification as B  # noqa: E402

import skbnngp  # noqa: E402
import skbnngp._fidgp as F  # noqa: E402
from skbnngp._backend._calibration import fit_temperature  # noqa: E402
from skbnngp.metrics import expected_calibration_error  # noqa: E402


def capture(out, sets, seeds):
    from sklearn.model_selection import StratifiedKFold
    from sklearn.preprocessing import StandardScaler

    cap, orig = {}, F.fit_temperature

    def spy(logits, y, *a, **k):
        cap["val_logits"], cap["val_y"] = np.asarray(logits), np.asarray(y)
        return orig(logits, y, *a, **k)

    F.fit_temperature = spy
    os.makedirs(out, exist_ok=True)
    for ds in sets:
        X, y = B.load(ds)
        for fs in seeds:
            cv = StratifiedKFold(3, shuffle=True, random_state=fs)
            for fold, (tr, te) in enumerate(cv.split(X, y)):
                path = f"{out}/{ds}_s{fs}_f{fold}.npz"
                if os.path.exists(path):
                    continue
                cap.clear()
                sc = StandardScaler().fit(X[tr])
                t0 = time.perf_counter()
                clf = skbnngp.FiDGPClassifier(device="cpu", random_state=0)
                clf.fit(sc.transform(X[tr]), y[tr])
                Xt = clf._input(sc.transform(X[te]))
                lt = F.to_numpy(clf._draw_logits(Xt, clf.n_predict_samples, clf._predict_seed))
                np.savez(path, val_logits=cap.get("val_logits", np.zeros(0)),
                         val_y=cap.get("val_y", np.zeros(0)), test_logits=lt,
                         test_y=np.searchsorted(clf.classes_, y[te]), T=clf.temperature_)
                print(ds, fs, fold, f"T={clf.temperature_:.3f}",
                      f"{time.perf_counter() - t0:.1f}s", flush=True)


def _proba(logits, t):
    z = logits / t
    z = z - z.max(2, keepdims=True)
    p = np.exp(z)
    return (p / p.sum(2, keepdims=True)).mean(0)


def evaluate(out):
    rules = {"before (sd 0.5 both sides)": lambda z: fit_temperature(
                 z["val_logits"], z["val_y"], 0.5, 0.5)[0],
             "after (sd 0.5 below, 1 above)": lambda z: fit_temperature(
                 z["val_logits"], z["val_y"])[0],
             "T = 1": lambda z: 1.0,
             "oracle (T fitted on the test fold)": lambda z: fit_temperature(
                 z["test_logits"], z["test_y"], None)[0]}
    groups = {}
    for f in sorted(glob.glob(f"{out}/*.npz")):
        ds, s = re.match(r".*/(\w+?)_s(\d+)_f\d\.npz", f).groups()
        groups.setdefault((ds, int(s)), []).append(np.load(f))
    print("| set | fold seed | rule | pooled ECE | NLL | mean T |\n|---|---:|---|---:|---:|---:|")
    for (ds, s), folds in sorted(groups.items()):
        if len(folds) < 3:
            continue
        for name, rule in rules.items():
            P, Y, T = [], [], []
            for z in folds:
                t = rule(z) if z["val_logits"].size or "oracle" in name else 1.0
                T.append(t)
                P.append(_proba(z["test_logits"], t))
                Y.append(z["test_y"])
            P, Y = np.concatenate(P), np.concatenate(Y)
            ece = expected_calibration_error(Y, P, n_bins=15)
            nll = -np.mean(np.log(np.maximum(P[np.arange(len(Y)), Y], 1e-300)))
            print(f"| {ds} | {s} | {name} | {ece:.3f} | {nll:.3f} | {np.mean(T):.2f} |")


if __name__ == "__main__":
    if "--evaluate" in sys.argv:
        evaluate(sys.argv[1])
    else:
        capture(sys.argv[1], sys.argv[2].split(","), [int(s) for s in sys.argv[3].split(",")])
