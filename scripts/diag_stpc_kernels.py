"""Diagnostic: does another NNGP kernel make the Student-t classifier sharper on
``bench_classification.py``'s sets? Fits ``StudentTProcessClassifier`` (defaults but
``depth`` and ``activation``) on the benchmark's stratified 5-fold split of one set and
prints, per kernel, the mean test accuracy, NLL, per-fold ECE and the leave-one-out log loss
that the fit chose its noise by::

    python scripts/diag_stpc_kernels.py overlap 0 3:relu 1:relu 2:relu 3:erf 1:erf

Arguments: the set, the fold seed, then ``depth:activation`` pairs.
"""
import pathlib
import sys
import time
import warnings

import numpy as np
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_classification import ece_of, load

from skbnngp import StudentTProcessClassifier


def main(name, seed, kernels):
    X, y = load(name)
    for kernel in kernels:
        depth, activation = kernel.split(":")
        acc, nll, ece, loo, t0 = [], [], [], [], time.perf_counter()
        for tr, te in StratifiedKFold(5, shuffle=True, random_state=seed).split(X, y):
            scaler = StandardScaler().fit(X[tr])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = StudentTProcessClassifier(depth=int(depth), activation=activation,
                                              device="cpu", random_state=0)
                m.fit(scaler.transform(X[tr]), y[tr])
            P = m.predict_proba(scaler.transform(X[te]))
            yi = np.searchsorted(m.classes_, y[te])
            acc.append(np.mean(P.argmax(1) == yi))
            nll.append(-np.mean(np.log(P[np.arange(len(yi)), yi])))
            ece.append(ece_of(yi, P))
            loo.append(m.loo_log_loss_)
        print(f"{name} fold seed {seed} {kernel:8s} accuracy {np.mean(acc):.3f}  NLL "
              f"{np.mean(nll):.3f}  ECE {np.mean(ece):.3f}  LOO {np.mean(loo):.3f}  "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] or ["3:relu"])
