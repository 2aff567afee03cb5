"""Shared pieces of the benchmark scripts: one scored fit, parallel runs with a record file,
run metadata, a Gaussian-mixture predictive and small torch MLP helpers for baselines.

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
from scipy import special, stats

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


def brier(y, proba, classes):
    """Multi-class Brier score, ``mean_i sum_k (p_ik - 1{y_i = k})^2``."""
    onehot = (np.asarray(y)[:, None] == np.asarray(classes)[None, :]).astype(np.float64)
    return float(np.mean(np.sum((proba - onehot) ** 2, axis=1)))


def run_fit(key, make_model, X, y, train, test, task):
    """Fit ``make_model()`` on ``train`` rows, score it on ``test`` rows.

    ``key`` is a dict (data set, model, split, ...) copied into the record. Errors and warnings
    are recorded, never raised.
    """
    import torch
    from threadpoolctl import threadpool_limits

    from skbnngp.compare._run import _predictive, _score_classification, _score_regression

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
                scores["brier"] = brier(y[test], p, model.classes_)
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


# ============================================================================ predictive
class GaussianMixture:
    """Equal-weight mixture of Gaussians per test point: ``loc``, ``scale`` of shape (k, n).

    Has the methods :mod:`skbnngp.metrics` reads (``logpdf``, ``cdf``, ``ppf``, ``interval``,
    ``median``, ``mean``, ``std``); ``cdf`` and ``logpdf`` broadcast leading axes of their
    argument against the batch shape ``(n,)``; ``ppf`` is found by bisection.
    """

    def __init__(self, loc, scale):
        self.loc = np.atleast_2d(np.asarray(loc, dtype=np.float64))
        self.scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), self.loc.shape)
        self.shape = self.loc.shape[1:]

    def _standardised(self, z):
        z = np.asarray(z, dtype=np.float64)
        z = np.broadcast_to(z, np.broadcast_shapes(z.shape, self.shape))
        extra = (1,) * (z.ndim - 1)
        loc = self.loc.reshape((self.loc.shape[0],) + extra + self.shape)
        scale = self.scale.reshape(loc.shape)
        return (z[None] - loc) / scale, scale

    def logpdf(self, z):
        u, scale = self._standardised(z)
        comp = -0.5 * u ** 2 - 0.5 * np.log(2 * np.pi) - np.log(scale)
        return special.logsumexp(comp, axis=0) - np.log(self.loc.shape[0])

    def pdf(self, z):
        return np.exp(self.logpdf(z))

    def cdf(self, z):
        u, _ = self._standardised(z)
        return np.mean(special.ndtr(u), axis=0)

    def ppf(self, q, n_iter=80):
        q = np.broadcast_to(np.asarray(q, dtype=np.float64), self.shape)
        lo = np.min(self.loc - 40 * self.scale, axis=0)
        hi = np.max(self.loc + 40 * self.scale, axis=0)
        for _ in range(n_iter):
            mid = 0.5 * (lo + hi)
            below = self.cdf(mid) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return 0.5 * (lo + hi)

    def interval(self, confidence):
        return self.ppf(0.5 * (1 - confidence)), self.ppf(0.5 * (1 + confidence))

    def median(self):
        return self.ppf(0.5)

    def mean(self):
        return self.loc.mean(axis=0)

    def var(self):
        return np.mean(self.scale ** 2 + self.loc ** 2, axis=0) - self.mean() ** 2

    def std(self):
        return np.sqrt(self.var())


def gaussian(mean, std):
    return stats.norm(np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64))


# ============================================================================ torch MLPs
def mlp(n_in, hidden, n_out, seed):
    import torch

    torch.manual_seed(seed)
    layers, width = [], n_in
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, n_out))
    return torch.nn.Sequential(*layers)


def train_early_stopping(net, loss_fn, X, y, *, seed, lr=3e-3, batch_size=64, max_epochs=1000,
                         patience=50, validation_fraction=0.1, weight_decay=0.0):
    """Adam on ``loss_fn(net(x), y)`` with early stopping on a random validation split.

    Returns ``net`` with the weights of the best validation loss and the number of epochs.
    ``X``, ``y`` are float tensors; with fewer than 20 rows no split is made (fixed epochs).
    """
    import copy

    import torch

    n = X.shape[0]
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    n_val = int(round(validation_fraction * n)) if n >= 20 else 0
    val, tr = perm[:n_val], perm[n_val:]
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, best_epoch, epoch = np.inf, copy.deepcopy(net.state_dict()), 0, 0
    for epoch in range(1, max_epochs + 1):
        net.train()
        order = tr[torch.randperm(tr.numel(), generator=gen)]
        for start in range(0, order.numel(), batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            loss_fn(net(X[idx]), y[idx]).backward()
            opt.step()
        if n_val:
            net.eval()
            with torch.no_grad():
                v = float(loss_fn(net(X[val]), y[val]))
            if v < best - 1e-6:
                best, best_state, best_epoch = v, copy.deepcopy(net.state_dict()), epoch
            elif epoch - best_epoch >= patience:
                break
    if n_val:
        net.load_state_dict(best_state)
    net.eval()
    return net, (best_epoch if n_val else epoch)
