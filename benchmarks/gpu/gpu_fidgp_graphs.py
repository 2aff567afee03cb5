"""FiD-GP's training steps as CUDA graphs against eager CUDA steps, for a lent GPU machine:
``python benchmarks/gpu/gpu_fidgp_graphs.py OUT [--no-eager]``. Writes ``OUT/gpu_fidgp_graphs.json`` (and prints
each row as a JSON line as it comes).

1. Agreement, on iris: the same small fits (float64) on the CPU, on CUDA with graphs and on
   CUDA with eager steps; the largest probability and OOD-score differences, and how many
   steps each stage replayed (``_graph_report``). One configuration has equal batches, one
   a shorter last batch (two graphs), one the defaults in float32.
2. Time, on digits (one 80/20 split, the split of ``benchmarks/gpu/gpu_classifiers.py``): the
   default fit with graphs, then with eager steps (``FiDGPClassifier._cuda_graphs =
   False``), each with accuracy, NLL and ECE. The sixth loan measured the eager default at
   153.6 s on an H100 against 52.2 s on 2 CPU cores. ``--no-eager`` skips the eager fit
   (a short loan).
"""
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_digits, load_iris
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from skbnngp import FiDGPClassifier
from skbnngp.metrics import expected_calibration_error

args = [a for a in sys.argv[1:] if not a.startswith("--")]
out = args[0] if args else "."
rows = []


def emit(row):
    rows.append(row)
    print(json.dumps(row), flush=True)
    with open(os.path.join(out, "gpu_fidgp_graphs.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "rows": rows}, fh, indent=1)


def fit(device, graphs, X, y, **kw):
    FiDGPClassifier._cuda_graphs = graphs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        m = FiDGPClassifier(device=device, random_state=0, **kw).fit(X, y)
        if device == "cuda":
            torch.cuda.synchronize()
        return m, time.perf_counter() - t0


torch.zeros(1, device="cuda")  # CUDA's start-up outside the clock
Xi, yi = load_iris(return_X_y=True)
Xi = StandardScaler().fit_transform(Xi)
configs = {
    "equal_batches_f64": {"hidden_layer_sizes": (8,), "max_iter": 5, "batch_size": 50,
                          "dtype": "float64"},
    "short_last_batch_f64": {"hidden_layer_sizes": (16,), "max_iter": 12, "batch_size": 40,
                             "dtype": "float64"},
    "defaults_f32": {"max_iter": 40},
}
for name, kw in configs.items():
    try:
        cpu, t_cpu = fit("cpu", True, Xi, yi, **kw)
        eager, t_eager = fit("cuda", False, Xi, yi, **kw)
        graph, t_graph = fit("cuda", True, Xi, yi, **kw)
        P0, P1, P2 = (m.predict_proba(Xi) for m in (cpu, eager, graph))
        S0, S1, S2 = (m.ood_score(Xi) for m in (cpu, eager, graph))
        emit({"part": "agreement", "config": name,
              "max_dproba_graph_vs_cpu": float(np.abs(P2 - P0).max()),
              "max_dproba_graph_vs_eager": float(np.abs(P2 - P1).max()),
              "max_dproba_eager_vs_cpu": float(np.abs(P1 - P0).max()),
              "max_rel_dood_graph_vs_cpu": float(np.abs(S2 - S0).max() / np.abs(S0).max()),
              "graph_report": graph._graph_report, "eager_report": eager._graph_report,
              "fit_s": {"cpu": round(t_cpu, 2), "cuda_eager": round(t_eager, 2),
                        "cuda_graph": round(t_graph, 2)}})
    except Exception as exc:  # noqa: BLE001 - report it and go on to the timing
        emit({"part": "agreement", "config": name, "error": f"{type(exc).__name__}: {exc}"})

X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
scaler = StandardScaler().fit(Xtr)
Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
for graphs in (True,) if "--no-eager" in sys.argv else (True, False):
    try:
        m, t = fit("cuda", graphs, Xtr, ytr)
        P = m.predict_proba(Xte)
        emit({"part": "digits", "graphs": graphs, "fit_s": round(t, 2),
              "n_steps": sum(r[1] for r in m._graph_report),
              "graph_report": m._graph_report,
              "accuracy": float(np.mean(m.classes_[P.argmax(1)] == yte)),
              "nll": float(log_loss(yte, P, labels=m.classes_)),
              "ece": float(expected_calibration_error(yte, P, labels=m.classes_))})
    except Exception as exc:  # noqa: BLE001 - report it
        emit({"part": "digits", "graphs": graphs, "error": f"{type(exc).__name__}: {exc}"})
