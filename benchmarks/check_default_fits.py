"""Check: a default fit of every public estimator on every embedded data set raises no warning.

Every estimator found by ``skbnngp.utils.all_estimators`` is fitted with its defaults (plus
``random_state=0`` and ``device="cpu"``) as ``Pipeline([StandardScaler(), estimator])`` on all
rows of every data set of ``skbnngp.datasets.list_datasets()`` of its task, with every warning
recorded. The table gives the warnings (none expected), the fit time and the training score
(R^2 or accuracy; a sanity check, not a benchmark).

Usage::

    python benchmarks/check_default_fits.py          # about 2 min on 2 cores

Writes ``benchmarks/results/check_default_fits.{json,md}`` and exits with status 1 when a fit
warned or failed.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))


def fit_one(name, cls, data_name):
    import numpy as np
    import torch
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    from skbnngp.datasets import load_dataset

    torch.set_num_threads(1)
    X, y = load_dataset(data_name, return_X_y=True)
    pipe = Pipeline([("scale", StandardScaler()),
                     ("model", cls(random_state=0, device="cpu"))])
    rec = {"estimator": name, "dataset": data_name, "n_samples": int(X.shape[0]),
           "warnings": [], "error": None}
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(1):
        warnings.simplefilter("always")
        start = time.perf_counter()
        try:
            pipe.fit(X, y)
            rec["fit_s"] = time.perf_counter() - start
            rec["train_score"] = float(pipe.score(X, y))
            if not np.isfinite(rec["train_score"]):
                rec["error"] = "non-finite training score"
        except Exception as exc:  # noqa: BLE001 - reported
            rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["warnings"] = sorted({f"{w.category.__name__}: {str(w.message).splitlines()[0][:200]}"
                              for w in caught})
    return rec


def main():
    from joblib import Parallel, delayed

    from skbnngp.datasets import list_datasets
    from skbnngp.utils import all_estimators

    tasks = [(name, cls, d) for kind, task in (("regressor", "regression"),
                                               ("classifier", "classification"))
             for name, cls in all_estimators(kind) for d in list_datasets(task)]
    start = time.perf_counter()
    records = Parallel(n_jobs=2)(delayed(fit_one)(*t) for t in tasks)
    wall = time.perf_counter() - start
    bad = [r for r in records if r["warnings"] or r["error"]]
    lines = ["# Default fits on the embedded data sets", "",
             "Every public estimator with its defaults (`random_state=0`, `device='cpu'`) in "
             "`Pipeline([StandardScaler(), estimator])` on all rows of each data set of its "
             f"task. {platform.machine()}, {os.cpu_count()} cores, two fits at a time; wall "
             f"time {wall:.0f} s.", "",
             "| estimator | data set | rows | fit s | training score | warnings |",
             "|---|---|---:|---:|---:|---|"]
    for r in records:
        warn = "; ".join(r["warnings"]) or (r["error"] and f"failed: {r['error']}") or "none"
        score = f"{r['train_score']:.3f}" if "train_score" in r else "-"
        lines.append(f"| `{r['estimator']}` | {r['dataset']} | {r['n_samples']} | "
                     f"{r.get('fit_s', float('nan')):.1f} | {score} | {warn} |")
    lines += ["", f"{len(bad)} of {len(records)} fits warned or failed."]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "check_default_fits.md").write_text("\n".join(lines) + "\n")
    (RESULTS / "check_default_fits.json").write_text(json.dumps(
        {"wall_s": wall, "records": records}, indent=1))
    print("\n".join(lines))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
