"""Time the two classifiers' default fits on ``digits`` on CUDA (one 80/20 split), with
accuracy, NLL and ECE, for a lent GPU machine: ``python benchmarks/gpu/gpu_classifiers.py OUT``.
Writes ``OUT/gpu_classifiers.json``. The CPU figures to compare with are
``compare digits``' (a 2-core machine)."""
import json
import sys
import time
import warnings

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbnngp import FiDGPClassifier, StudentTProcessClassifier
from skbnngp.metrics import expected_calibration_error

out = sys.argv[1] if len(sys.argv) > 1 else "."
X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
torch.zeros(1, device="cuda")  # CUDA's start-up outside the clock
rows = []
for name, est in [("FiDGPClassifier", FiDGPClassifier(device="cuda", random_state=0)),
                  ("StudentTProcessClassifier",
                   StudentTProcessClassifier(device="cuda", random_state=0))]:
    m = make_pipeline(StandardScaler(), est)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        m.fit(Xtr, ytr)
        torch.cuda.synchronize()
        fit_s = time.perf_counter() - t0
    P = m.predict_proba(Xte)
    row = {"model": name, "n_train": len(ytr), "fit_s": round(fit_s, 2),
           "accuracy": float(np.mean(m.classes_[P.argmax(1)] == yte)),
           "nll": float(log_loss(yte, P, labels=m.classes_)),
           "ece": float(expected_calibration_error(yte, P, labels=m.classes_)),
           "warnings": sorted({str(w.message)[:120] for w in seen})}
    for k in ("temperature_", "calibration_", "label_variance_", "n_iter_"):
        if hasattr(m[-1], k):
            row[k] = getattr(m[-1], k) if not isinstance(getattr(m[-1], k), np.generic) \
                else getattr(m[-1], k).item()
    print(json.dumps(row), flush=True)
    rows.append(row)
meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
with open(f"{out}/gpu_classifiers.json", "w") as f:
    json.dump({"meta": meta, "rows": rows}, f, indent=1)
