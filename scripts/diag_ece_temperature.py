"""Diagnostic: can a temperature bring the per-fold ECE of ``bench_classification.py`` under
0.05 on iris and overlap? Reads the stored test probabilities (no refit) of the three stored
fold seeds, applies one temperature ``T`` to every fold's log-probabilities (``p^(1/T)``,
renormalised; ``T > 1`` softer) and prints the mean per-fold ECE and test NLL for each ``T``.
An oracle: ``T`` is chosen here with the test labels, so it bounds what any calibration of
that one kind could reach::

    python scripts/diag_ece_temperature.py --sets iris overlap --models stpc fidgp
"""
import argparse
import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(HERE))
from bench_classification import ece_of, load

STORED = ["bench_classification", "bench_classification_fold_seed1",
          "bench_classification_fold_seed2"]
TEMPERATURES = (0.8, 0.9, 1.0, 1.1, 1.25, 1.5)


def tempered(P, T):
    L = np.log(np.maximum(P, 1e-12)) / T
    L -= L.max(axis=1, keepdims=True)
    Q = np.exp(L)
    return Q / Q.sum(axis=1, keepdims=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", nargs="+", default=["iris", "overlap"])
    ap.add_argument("--models", nargs="+", default=["stpc", "fidgp"])
    args = ap.parse_args()
    for stem in STORED:
        d = json.loads((HERE / "results" / f"{stem}.json").read_text())
        for name in args.sets:
            _, y = load(name)
            yi = np.searchsorted(np.unique(y), y)
            for model in args.models:
                recs = [r for r in d["records"] if r["set"] == name and r["model"] == model
                        and r.get("proba")]
                if len(recs) < d["folds"]:
                    continue
                cells = []
                for T in TEMPERATURES:
                    ece, nll = [], []
                    for r in recs:
                        Q, yt = tempered(np.array(r["proba"]), T), yi[r["test_rows"]]
                        ece.append(ece_of(yt, Q))
                        nll.append(-np.mean(np.log(Q[np.arange(len(yt)), yt])))
                    cells.append(f"T={T}: {np.mean(ece):.3f}/{np.mean(nll):.3f}")
                print(f"fold seed {d['fold_seed']} {name:8s} {model:6s} ECE/NLL  "
                      + "  ".join(cells))


if __name__ == "__main__":
    main()
