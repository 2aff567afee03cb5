"""Shared pieces of the benchmark scripts: one scored fit, parallel runs with a record file,
run metadata, Gaussian scores, peak memory and the synthetic d = 8 problem. The peer models
are in ``baselines.py``.

The scoring reuses ``skbnngp.compare``'s (the same figures ``skbnngp compare`` reports):
regression through the model's predictive distribution (``predict_dist``, or a Gaussian from
``predict(return_std=True)``), classification through ``predict_proba``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))


# ============================================================================ metadata
def machine():
    return (f"{platform.machine()}, {os.cpu_count()} cores visible, "
            f"Python {platform.python_version()}")


def git_commit():
    """``<short sha>`` of the tree measured, with ``+dirty`` when it has local changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "skbnngp"], cwd=HERE,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except Exception:  # noqa: BLE001 - not a git checkout
        return "unknown"


def versions():
    out = {}
    for mod in ("numpy", "scipy", "sklearn", "torch", "gpytorch"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            out[mod] = None
    return out


# ============================================================================ one fit
def with_settings(cls, settings, module=None):
    """``cls`` whose ``fit`` runs with private module settings patched: the ablations and
    alternatives that left the estimators' signatures (upper-case names of ``module``,
    default ``cls``'s own module). A dict setting is merged into the module's dict. The
    fitted model keeps what it needs, so only the fit is patched."""
    import importlib
    from unittest import mock

    mod = importlib.import_module(module or cls.__module__)
    patch = {k: ({**getattr(mod, k), **v} if isinstance(v, dict) else v)
             for k, v in settings.items()}

    class Patched(cls):
        def fit(self, X, y, *args, **kwargs):
            with mock.patch.multiple(mod, **patch):
                return super().fit(X, y, *args, **kwargs)

    Patched.__name__ = Patched.__qualname__ = cls.__name__
    return Patched


def run_fit(key, make_model, X, y, train, test, task):
    """Fit ``make_model()`` on ``train`` rows, score it on ``test`` rows.

    ``key`` is a dict (data set, model, split, ...) copied into the record. Errors and warnings
    are recorded, never raised.
    """
    import torch
    from sklearn.metrics import brier_score_loss
    from threadpoolctl import threadpool_limits

    from skbnngp.compare._run import (
        _predictive,
        _score_classification,
        _score_regression,
    )

    torch.set_num_threads(1)
    rec = dict(key, n_train=int(len(train)), n_test=int(len(test)), metrics={}, error=None,
               warnings={})
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(1):
        warnings.simplefilter("always")
        try:
            model = make_model()
            start = time.perf_counter()
            model.fit(X[train], y[train])
            fit_s = time.perf_counter() - start
            start = time.perf_counter()
            if task == "regression":
                dist = _predictive(model, X[test])
                predict_s = time.perf_counter() - start
                scores, _ = _score_regression(y[test], dist)
            else:
                proba = np.asarray(model.predict_proba(X[test]), dtype=np.float64)
                predict_s = time.perf_counter() - start
                scores, _ = _score_classification(y[test], proba, model.classes_)
                p = np.clip(proba, 0.0, 1.0)
                p /= np.maximum(p.sum(axis=1, keepdims=True), np.finfo(float).tiny)
                # multi-class Brier score, mean_i sum_k (p_ik - 1{y_i = k})^2
                scores["brier"] = brier_score_loss(y[test], p, labels=model.classes_,
                                                   scale_by_half=False)
            rec["metrics"] = {k: float(v) for k, v in scores.items()}
            rec["metrics"].update(fit_s=fit_s, predict_s=predict_s)
        except Exception as exc:  # noqa: BLE001 - one failed fit is reported, the run goes on
            text = str(exc).strip().splitlines()
            rec["error"] = f"{type(exc).__name__}: {text[0][:300] if text else ''}"
    for w in caught:
        msg = f"{w.category.__name__}: {(str(w.message).strip().splitlines() or [''])[0][:200]}"
        rec["warnings"][msg] = rec["warnings"].get(msg, 0) + 1
    return rec


def task_id(key):
    return "|".join(f"{k}={key[k]}" for k in sorted(key))


def _run_keyed(fn, task):
    """``fn(task)`` with the task's own id: tasks of one run may have different keys (the
    seed sections add ``seed``), so the id cannot be taken from another task's key."""
    rec = fn(task)
    rec["task_id"] = task_id(task[0])
    return rec, list(task[0])


def run_all(tasks, fn, jobs, records_path=None, label="", run=True):
    """Run ``fn(task)`` for every task (joblib, ``jobs`` at a time), printing a line per fit.

    ``task`` is ``(key, ...)``. With ``records_path`` (JSON lines), records already there are
    reused (tasks whose key matches are skipped) and new records are appended as they come,
    so an interrupted run resumes where it stopped. With ``run=False`` only the reused records
    are returned (a report of a partial run).
    """
    from joblib import Parallel, delayed

    done = {}
    if records_path and Path(records_path).exists():
        for line in Path(records_path).read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                done[rec["task_id"]] = rec
    todo = [t for t in tasks if task_id(t[0]) not in done] if run else []
    records = [done[task_id(t[0])] for t in tasks if task_id(t[0]) in done]
    print(f"{label}{len(tasks)} fits, {len(records)} reused from {records_path}"
          if records else f"{label}{len(tasks)} fits", flush=True)
    start = time.perf_counter()
    sink = open(records_path, "a") if records_path else None
    try:
        for i, (rec, keys) in enumerate(Parallel(n_jobs=jobs, return_as="generator_unordered")(
                delayed(_run_keyed)(fn, t) for t in todo), 1):
            records.append(rec)
            if sink:
                sink.write(json.dumps(rec, default=float) + "\n")
                sink.flush()
            m = rec["metrics"]
            what = rec["error"] or " ".join(
                f"{k} {m[k]:.3f}" for k in ("nlpd", "coverage_95", "nll", "ece", "accuracy")
                if k in m) + f" fit {m.get('fit_s', float('nan')):.1f}s"
            where = " ".join(str(rec[k]) for k in keys)
            print(f"[{i}/{len(todo)} {time.perf_counter() - start:6.0f}s] {where}: {what}",
                  flush=True)
    finally:
        if sink:
            sink.close()
    return records


def warning_counts(records):
    """``{model: {warning: {set: count}}}``, with sklearn's per-dimension bound warnings
    ("dimension 3 of parameter ...") merged into one line."""
    import re

    out = {}
    for r in records:
        for w, n in r["warnings"].items():
            w = re.sub(r"dimension \d+", "dimension k", w)
            per = out.setdefault(r["model"], {}).setdefault(w, {})
            per[r["set"]] = per.get(r["set"], 0) + n
    return out


def write_results(stem, result, markdown_text):
    stem = str(stem)
    Path(stem).parent.mkdir(parents=True, exist_ok=True)
    Path(stem + ".json").write_text(json.dumps(result, indent=1, default=float))
    Path(stem + ".md").write_text(markdown_text)
    print(f"wrote {stem}.md and .json")


def mean_or_nan(values):
    values = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")


def fmt(value, spec=".3f"):
    return "—" if value is None or not np.isfinite(value) else format(value, spec)


# ============================================================================ one process
def peak_mb():
    """Peak resident memory of this process so far, in MB (Linux ``ru_maxrss``)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gaussian_scores(y, mean, std, what=("nlpd", "coverage_95", "rmse")):
    """The scores ``what`` of the Gaussian predictive ``N(mean, std**2)``: ``nlpd``
    (:func:`skbnngp.metrics.nlpd`), ``coverage_95`` (:func:`skbnngp.metrics.interval_coverage`
    of the central 95 % interval) and ``rmse`` of the mean."""
    from scipy import stats

    from skbnngp.metrics import interval_coverage, nlpd

    dist = stats.norm(np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64))
    score = {"nlpd": lambda: nlpd(y, dist), "coverage_95": lambda: interval_coverage(y, dist),
             "rmse": lambda: np.sqrt(np.mean((np.asarray(mean) - y) ** 2))}
    return {k: float(score[k]()) for k in what}


def make_d8(n, n_test, seed=0):
    """The d = 8 regression problem of ``bench_student_t.py``, ``bench_dbk.py`` and
    ``bench_gpu.py``: a smooth additive-plus-interaction signal, noise sd 0.2, inputs
    standardised by the training rows. Returns ``X, y, X_test, y_test``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + n_test, 8))
    f = (np.sin(1.5 * X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) + 0.5 * X[:, 2] * X[:, 3]
         + 0.3 * X[:, 4] ** 2 - 0.4 * np.abs(X[:, 5]) + 0.2 * X[:, 6])
    y = f + 0.2 * rng.normal(size=f.shape)
    X = (X - X[:n].mean(0)) / X[:n].std(0)
    return X[:n], y[:n], X[n:], y[n:]
