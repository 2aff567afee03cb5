"""The cross-validation runner: one fit per (estimator, fold) in parallel, scored through the
predictive, then summarised and reported."""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.base import clone
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import KFold, StratifiedKFold

from ._common import N_BINS, N_LEVELS, PROG, UsageError, _metrics_for
from ._data import _load
from ._registry import (
    _alias_table,
    _build,
    _candidates,
    _resolve_estimators,
    _short_names,
)
from ._report import (
    _environment,
    _figure,
    _jsonable,
    _legend,
    _markdown,
    _warning_lines,
    format_table,
)


def _predictive(model, X):
    """Predictive distribution of y from a fitted pipeline (Gaussian from mean and std)."""
    final, Xt = model[-1], model[:-1].transform(X)
    if hasattr(final, "predict_dist"):
        return final.predict_dist(Xt)
    mean, std = final.predict(Xt, return_std=True)
    return stats.norm(mean, std)


def _root_mean_square(values):
    """sqrt(mean(values**2)) without overflow in the squares (targets beyond 1e154)."""
    values = np.asarray(values, dtype=np.float64)
    scale = float(np.max(np.abs(values))) if values.size else 0.0
    if scale == 0 or not math.isfinite(scale):
        return scale
    return scale * float(np.sqrt(np.mean((values / scale) ** 2)))


def _score_regression(y, dist):
    from .. import metrics

    nominal, observed = metrics.calibration_curve_regression(y, dist, n_levels=N_LEVELS)
    point = np.asarray(dist.median(), dtype=np.float64)
    return {
        "rmse": _root_mean_square(point - y),
        "mae": float(np.mean(np.abs(point - y))),
        "nlpd": metrics.nlpd(y, dist),
        "crps": metrics.crps(y, dist),
        "coverage_90": metrics.interval_coverage(y, dist, 0.90),
        "coverage_95": metrics.interval_coverage(y, dist, 0.95),
        "width_90": metrics.interval_width(dist, 0.90),
        "width_95": metrics.interval_width(dist, 0.95),
        "calibration_error": float(np.mean(np.abs(observed - nominal))),
    }, {"nominal": nominal.tolist(), "observed": observed.tolist()}


def _score_classification(y, proba, classes):
    from ..metrics import expected_calibration_error

    # some models return probabilities a round-off outside [0, 1] (sklearn's GP classifier:
    # 1 + 1e-13), which log_loss refuses: clip and renormalise
    proba = np.clip(proba, 0.0, 1.0)
    proba = proba / np.maximum(proba.sum(axis=1, keepdims=True), np.finfo(float).tiny)
    conf, pred = proba.max(axis=1), classes[proba.argmax(axis=1)]
    correct = (pred == y).astype(np.float64)
    bins = np.clip(np.ceil(conf * N_BINS).astype(int) - 1, 0, N_BINS - 1)
    return {
        "accuracy": accuracy_score(y, pred),
        "nll": log_loss(y, proba, labels=classes),
        "ece": expected_calibration_error(y, proba, labels=classes),
    }, {"count": np.bincount(bins, minlength=N_BINS).tolist(),
        "confidence_sum": np.bincount(bins, conf, N_BINS).tolist(),
        "correct_sum": np.bincount(bins, correct, N_BINS).tolist()}


def _pilot_time(pipe, X, y, rows, threads, clock=time.process_time):
    """Seconds of one fit on ``rows`` by ``clock`` (the estimate's sample); inf when it fails."""
    from threadpoolctl import threadpool_limits

    with warnings.catch_warnings(), threadpool_limits(threads):
        warnings.simplefilter("ignore")
        try:
            model = clone(pipe)
            start = clock()
            model.fit(X[rows], y[rows])
            return clock() - start
        except Exception:  # noqa: BLE001 - the real fit reports the error
            return math.inf


#: Fits run ``n_jobs`` at a time slow each other down (shared memory bandwidth and caches);
#: measured on 2 cores: 1.06-1.2x the time of the same fit alone.
CONTENTION = 1.25
#: Most of a model's equal share of the budget that its pilot fits may take.
PILOT_FRACTION = 0.25


def _pilot_curve(pipe, X, y, order, sizes, threads, clock, limit):
    """The cost curve of one model from pilot fits on ``order[:n]`` for ``n`` in ``sizes``
    (None when no pilot succeeded), and the seconds the pilots took by ``clock``."""
    from ._budget import measure, step_curve

    curve, timings = measure(lambda n: _pilot_time(pipe, X, y, order[:n], threads, clock),
                             sizes, limit=limit)
    # an estimator whose cost is its optimiser steps says how many a fit on n rows takes
    units = getattr(pipe.steps[-1][1] if hasattr(pipe, "steps") else pipe,
                    "_fit_cost_units", None)
    if units is not None and curve is not None:
        curve = step_curve(timings, units)
    return curve, sum(t for _, t in timings)


def _plan_budget(pipes, data, folds, n_jobs, budget, threads, seed, device="cpu", clock=None,
                 pilot_jobs=None, first=()):
    """Training rows per model so that all folds of all models fit in ``budget`` seconds.

    Each model is timed on random subsets of one training fold doubling from 50 rows up to
    a quarter of it (drawing from every class first for classification), in CPU seconds of
    the process that fits it (wall seconds on a GPU), stopping before a pilot that would take
    the model's pilots past :data:`PILOT_FRACTION` of its equal share; the pilots run
    ``pilot_jobs`` (default ``n_jobs``) models at a time. The cost curve read from them
    (:func:`._budget.cost_curve`: the fixed start-up cost apart, the exponent read only past
    the flat region), times :data:`CONTENTION` when fits run in parallel, predicts a full
    fold's fit. What the pilots took (by the same clock) is deducted from ``budget`` times
    ``n_jobs`` (at most 3/4 of it); the rest is shared out by :func:`._budget.plan_rows`: the
    models in ``first`` (the package's) are kept whole first, cheapest first, and the others
    share what is left, never below 50 rows (and 10 per class for a classifier). Returns
    ``{name: (rows or None, estimated seconds per fold at full size)}``; None keeps every row.
    """
    from joblib import Parallel, delayed

    from ._budget import pilot_sizes, plan_rows

    if clock is None:
        clock = time.process_time if str(device).startswith("cpu") else time.perf_counter
    n_train = min(len(train) for train, _ in folds)
    rng = np.random.RandomState(seed)
    slow = CONTENTION if n_jobs > 1 else 1.0
    # the fewest rows a model is cut to: 50, and 10 per class for a classifier
    floor = min(n_train, 50 if data.task == "regression" else max(50, 10 * np.unique(data.y).size))
    sizes = pilot_sizes(n_train)
    limit = PILOT_FRACTION * budget * n_jobs / max(len(pipes), 1)
    first_train = folds[0][0]
    plan = {name: (None, None) for name in pipes}
    curves = dict.fromkeys(pipes)
    if not sizes:
        return plan
    orders = {}
    for name in pipes:
        order = first_train[rng.permutation(first_train.size)]
        if data.task == "classification":  # keep every class in the pilot subsets
            classes = np.unique(data.y[order])
            heads = [order[data.y[order] == c][:2] for c in classes]
            rest = order[~np.isin(order, np.concatenate(heads))]
            order = np.concatenate(heads + [rest])
        orders[name] = order
    jobs = min(n_jobs if pilot_jobs is None else pilot_jobs, len(pipes))
    found = Parallel(n_jobs=jobs)(
        delayed(_pilot_curve)(pipe, data.X, data.y, orders[name], sizes, threads, clock, limit)
        for name, pipe in pipes.items())
    for name, (curve, _) in zip(pipes, found):
        if curve is not None:
            curves[name] = curve.scaled(slow)
            plan[name] = (None, curves[name](n_train))
    # the pilots' own seconds (CPU, as the estimates) are deducted, not the wall time they
    # took: on a machine that other processes load, the wall time would cut every model
    spent = sum(took for _, took in found) * slow
    left = max(budget * n_jobs - spent, budget * n_jobs / 4)
    rows = plan_rows(curves, n_train, len(folds), left, floors=dict.fromkeys(pipes, floor),
                     first=first)
    return {name: (rows[name], plan[name][1]) for name in pipes}


def _run_one(name, fold, pipe, X, y, train, test, task, threads, max_rows=None, seed=0):
    """Fit one pipeline on one fold and score it; errors and warnings are recorded.

    ``max_rows`` caps the training rows (a random subset, the time budget's)."""
    from threadpoolctl import threadpool_limits

    n_all = int(train.size)
    if max_rows is not None and train.size > max_rows:
        rng = np.random.RandomState(seed + fold)
        if task == "classification":  # every class keeps at least one row
            keep = np.concatenate([train[y[train] == c][:1] for c in np.unique(y[train])])
            others = np.setdiff1d(train, keep)
            pick = rng.choice(others, max_rows - keep.size, replace=False)
            train = np.sort(np.concatenate([keep, pick]))
        else:
            train = np.sort(rng.choice(train, max_rows, replace=False))

    record = {"estimator": name, "fold": fold, "n_train": int(train.size),
              "n_train_available": n_all, "n_test": int(test.size), "metrics": {},
              "curve": None, "error": None, "warnings": {}}
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(threads):
        warnings.simplefilter("always")
        try:
            model = clone(pipe)
            start = time.perf_counter()
            model.fit(X[train], y[train])
            fit_s = time.perf_counter() - start
            start = time.perf_counter()
            if task == "regression":
                out = _predictive(model, X[test])
                predict_s = time.perf_counter() - start
                scores, curve = _score_regression(y[test], out)
            else:
                out = np.asarray(model.predict_proba(X[test]), dtype=np.float64)
                predict_s = time.perf_counter() - start
                scores, curve = _score_classification(y[test], out, model.classes_)
            record["metrics"] = {k: float(v) for k, v in scores.items()}
            record["metrics"].update(fit_s=fit_s, predict_s=predict_s)
            record["curve"] = curve
        except Exception as exc:  # noqa: BLE001 - one failed fit is reported, the run goes on
            text = str(exc).strip().splitlines()
            record["error"] = f"{type(exc).__name__}: {text[0] if text else ''}"
    for w in caught:
        key = f"{w.category.__name__}: {(str(w.message).strip().splitlines() or [''])[0][:300]}"
        record["warnings"][key] = record["warnings"].get(key, 0) + 1
    return record


# ============================================================================ progress
class _Progress:
    """Progress per fit: a tqdm bar (with its time estimate) on a terminal when tqdm is
    installed, else a one-line bar, or a line per fit when the stream is not a terminal."""

    def __init__(self, total, stream, enabled, width=24):
        self.total, self.stream, self.enabled, self.width = total, stream, enabled, width
        self.done, self.start = 0, time.perf_counter()
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.bar = None
        if self.tty:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, file=stream, unit="fit", desc="compare",
                                dynamic_ncols=True)
        self._draw("starting")

    def _draw(self, label):
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.n = self.done
            self.bar.set_postfix_str(label)
            return
        filled = int(self.width * self.done / max(self.total, 1))
        secs = int(time.perf_counter() - self.start)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} fits "
                f"{secs // 60}:{secs % 60:02d}  {label}")
        if self.tty:
            cols = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + line[:cols].ljust(cols))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def step(self, label):
        self.done += 1
        self._draw(label)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            return
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ============================================================================ summary
def _incomplete(records, names, n_folds):
    """What an interrupted run finished: ``{"finished": {name: [folds, 1-based]},
    "not_finished": {name: [folds]}, "fits_done": int, "fits_planned": int}``."""
    done = {name: sorted(r["fold"] + 1 for r in records if r["estimator"] == name)
            for name in names}
    return {"finished": done,
            "not_finished": {name: [k for k in range(1, n_folds + 1) if k not in done[name]]
                             for name in names},
            "fits_done": len(records), "fits_planned": len(names) * n_folds}


def _folds_text(folds, n_folds):
    if not folds:
        return "none"
    if len(folds) == n_folds:
        return f"all {n_folds}"
    return ", ".join(map(str, folds))


def _incomplete_lines(report):
    """Markdown lines that say what an interrupted run finished."""
    inc, n_folds = report["incomplete"], report["folds"]
    lines = [f"**INCOMPLETE**: interrupted (Ctrl-C) after {inc['fits_done']} of "
             f"{inc['fits_planned']} fits; the table covers only the folds that finished "
             "(means over fewer folds are not comparable with a full run)."]
    for name, folds in inc["finished"].items():
        lines.append(f"- `{name}`: folds finished: {_folds_text(folds, n_folds)}; not run or "
                     f"not finished: {_folds_text(inc['not_finished'][name], n_folds)}")
    return lines


def _write_partial(report, summary, out_dir, err):
    """Write report.md/report.json of an interrupted run, say so in one line; exit 130."""
    table = format_table(summary, report["task"], markdown=True)
    text = _markdown(report, table).splitlines()
    text[0] += " — INCOMPLETE"
    at = text.index(table.splitlines()[0])
    text[at:at] = _incomplete_lines(report) + [""]
    _write_atomic(out_dir / "report.md", "\n".join(text))
    _write_atomic(out_dir / "report.json", json.dumps(_jsonable(report), indent=1) + "\n")
    inc = report["incomplete"]
    finished = "; ".join(f"{name} {len(folds)}/{report['folds']}"
                         for name, folds in inc["finished"].items())
    err.write(f"{PROG} compare: interrupted after {inc['fits_done']} of {inc['fits_planned']} "
              f"fits (folds done: {finished}); INCOMPLETE report: {out_dir / 'report.md'}\n")
    return 130


def _write_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file beside it, so that a failed write
    (a full disk) leaves the earlier file whole."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _summarise(records, names, task):
    summary = {}
    for name in names:
        rows = [r for r in records if r["estimator"] == name and r["error"] is None]
        entry = {"n_folds": len(rows), "n_failed": sum(
            r["error"] is not None for r in records if r["estimator"] == name)}
        for m in _metrics_for(task):
            vals = np.array([r["metrics"][m.key] for r in rows], dtype=np.float64)
            entry[m.key] = ({"mean": float(vals.mean()),
                             "std": _root_mean_square(vals - vals.mean())}
                            if vals.size else {"mean": None, "std": None})
        summary[name] = entry
    return summary




def _print_list(out):
    from ..datasets import list_datasets

    for task in ("regression", "classification"):
        candidates = _candidates(task)
        short = _short_names(candidates, _alias_table(candidates))
        out.write(f"{task} estimators (compare runs all of them by default):\n")
        for name, (source, _, _) in candidates.items():
            alias = f"  aliases: {', '.join(short[name])}" if short[name] else ""
            out.write(f"  {name:34s} {source}{alias}\n")
        out.write(f"{task} data sets: {', '.join(list_datasets(task))}\n")


def _check_device(device):
    from .._backend import resolve_device

    try:
        return str(resolve_device(device))
    except (ValueError, RuntimeError, TypeError) as exc:
        raise UsageError(f"--device {device!r}: {str(exc).splitlines()[0]}") from None




#: The files compare writes into its output directory.
OUTPUT_FILES = ("report.md", "report.json", "calibration.png")


def _check_output_dir(out_dir):
    """Refuse, before any fit, an output directory that cannot take the reports: one that is
    not writable, or where a report's name is taken by a directory."""
    import os
    import tempfile

    if not out_dir.is_dir():
        raise UsageError(f"output directory {str(out_dir)!r} is not a directory")
    for name in OUTPUT_FILES:
        path = out_dir / name
        if path.is_dir():
            raise UsageError(f"cannot write {str(path)!r}: it is a directory; remove it or "
                             "choose another -o DIR")
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"cannot write {str(path)!r}: permission denied")
    try:
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write into output directory {str(out_dir)!r}: "
                         f"{exc.strerror or exc}") from None


def _plan_time(args, pipes, data, folds, n_jobs, device, names, candidates, err, start):
    """Time the pilot fits and plan each model's rows (``--time-budget``); notes the
    subsampled models in ``data.notes``."""
    if not args.quiet:
        err.write(f"estimating each model's fit time (budget {args.time_budget:.0f} s) ...\n")
    plan = _plan_budget(pipes, data, folds, n_jobs, args.time_budget, args.threads,
                        args.random_state, device=device,
                        first=[n for n in names if candidates[n][0] == "skbnngp"])
    if not args.quiet:
        n_train = min(len(f[0]) for f in folds)
        err.write("plan: " + "; ".join(
            f"{name} {'every row' if rows is None else f'{rows} of {n_train} rows'}"
            + ("" if full is None else f" (est. {full:.0f} s a fold at full size)")
            for name, (rows, full) in plan.items())
            + f"; pilots took {time.perf_counter() - start:.0f} s\n")
    for name, (rows, full) in plan.items():
        if rows is not None:
            data.notes.append(
                f"{name}: trained on a random {rows} of the ~{min(len(f[0]) for f in folds)} "
                f"training rows of each fold, to keep within --time-budget "
                f"{args.time_budget:.0f} s (estimated {len(folds) * full:.0f} s for all "
                "folds at full size); its scores are for that subsample. Raise "
                "--time-budget (or 0: no budget) to fit it on every row.")
    return plan


def _compare(args, argv, out, err):
    """Run ``skbnngp compare``; returns the exit status."""
    from joblib import Parallel, delayed, effective_n_jobs

    if args.list:
        _print_list(out)
        return 0
    data = _load(args)
    names, candidates = _resolve_estimators(args.estimators, data.task)
    device = _check_device(args.device)
    if args.n_jobs == 0:
        raise UsageError("--n-jobs must not be 0 (1: one fit at a time, -1: every core)")
    out_dir = Path(args.output_dir or f"skbnngp-compare-{data.name}")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output directory {str(out_dir)!r}: {exc}") from None
    _check_output_dir(out_dir)

    d = data.X.shape[1]
    pipes = {name: _build(name, candidates, d, args) for name in names}
    splitter = (KFold if data.task == "regression" else StratifiedKFold)(
        n_splits=args.folds, shuffle=True, random_state=args.random_state)
    folds = list(splitter.split(data.X, data.y))
    tasks = [(name, k, train, test) for k, (train, test) in enumerate(folds) for name in names]
    n_jobs = min(effective_n_jobs(args.n_jobs), len(tasks))
    plan = {name: (None, None) for name in names}
    start = time.perf_counter()
    interrupted = False
    try:  # Ctrl-C while timing the pilots: no fold ran, the report says so
        if args.time_budget > 0:
            plan = _plan_time(args, pipes, data, folds, n_jobs, device, names, candidates,
                              err, start)
    except KeyboardInterrupt:
        interrupted = True

    bar = _Progress(len(tasks), err, enabled=not args.quiet and not interrupted)
    records = []
    results = Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
        delayed(_run_one)(name, k, pipes[name], data.X, data.y, train, test, data.task,
                          args.threads, plan[name][0], args.random_state)
        for name, k, train, test in ([] if interrupted else tasks))
    try:
        for record in results:
            records.append(record)
            status = "failed" if record["error"] else "done"
            bar.step(f"{record['estimator']} fold {record['fold'] + 1}/{args.folds} {status}")
    except KeyboardInterrupt:  # Ctrl-C: keep what finished, in a report marked incomplete
        interrupted = True
        try:
            results.close()  # stops the workers that still run
        except BaseException:  # noqa: BLE001 - a second Ctrl-C while stopping them
            pass
    bar.close()
    total = time.perf_counter() - start
    records.sort(key=lambda r: (names.index(r["estimator"]), r["fold"]))

    summary = _summarise(records, names, data.task)
    report = {
        "command": " ".join([PROG, "compare"] + list(argv)),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "environment": _environment(),
        "task": data.task,
        "data": {"name": data.name, "source": data.source, "n_samples": int(data.X.shape[0]),
                 "n_features": d, "target": data.target_name,
                 "feature_names": data.feature_names},
        "folds": args.folds, "cv": splitter.__class__.__name__,
        "random_state": args.random_state, "device": device, "n_jobs": n_jobs,
        "threads": args.threads, "scaling": "Pipeline([StandardScaler(), estimator])",
        "time_budget": args.time_budget,
        "subsampled": {n: plan[n][0] for n in names if plan[n][0] is not None},
        "estimated_full_seconds": {n: plan[n][1] for n in names},
        "estimators": {n: {"source": candidates[n][0],
                           "repr": " ".join(repr(pipes[n][-1]).split())} for n in names},
        "metrics": {m.key: {"header": m.header, "kind": m.kind}
                    for m in _metrics_for(data.task)},
        "summary": summary, "total_seconds": total, "notes": data.notes,
        "incomplete": _incomplete(records, names, args.folds) if interrupted else None,
        "problems": _warning_lines(records, names), "figure": None, "fold_results": records,
    }
    try:
        if interrupted:  # no figure: a stale one from an earlier run would mislead
            (out_dir / "calibration.png").unlink(missing_ok=True)
        elif _figure(out_dir / "calibration.png", report, records):
            report["figure"] = "calibration.png"
        else:
            report["notes"].append("calibration.png not written: install matplotlib "
                                   "(pip install 'skbnngp[examples]')")
    except Exception as exc:  # noqa: BLE001 - the table and reports still get written
        report["notes"].append(f"calibration.png not written: {type(exc).__name__}: {exc}")
    if interrupted:
        return _write_partial(report, summary, out_dir, err)
    table = format_table(summary, data.task)
    if args.time_budget > 0 and total > args.time_budget:
        report["budget_overrun_seconds"] = total - args.time_budget
        report["notes"].append(
            f"the run took {total:.0f} s, {total - args.time_budget:.0f} s over --time-budget "
            f"{args.time_budget:.0f} s" + ("" if any(v is not None for v in report[
                "estimated_full_seconds"].values()) else " (the data set is too small for the "
                "pilot fits to measure a cost curve, so nothing was subsampled)"))
    out.write(f"{data.name}: {data.X.shape[0]} samples x {d} features, {data.task}, "
              f"{args.folds}-fold CV, inputs standardised (StandardScaler in a Pipeline)\n\n")
    out.write(table + "\n\n" + _legend(data.task, args.folds) + "\n")
    for line in report["notes"] + report["problems"]:
        line = line.replace("`", "")
        out.write(f"note: {line[:157] + '...' if len(line) > 160 else line}\n")
    try:
        _write_atomic(out_dir / "report.md",
                      _markdown(report, format_table(summary, data.task, markdown=True)))
        _write_atomic(out_dir / "report.json", json.dumps(_jsonable(report), indent=1) + "\n")
    except OSError as exc:
        err.write(f"{PROG} compare: error: cannot write the report to {str(out_dir)!r}: "
                  f"{exc.strerror or exc}; earlier reports there are unchanged\n")
        return 2
    out.write(f"wall time {total:.0f} s; report: {out_dir / 'report.md'}\n")
    failed = sum(r["error"] is not None for r in records)
    if failed:
        err.write(f"{PROG} compare: {failed} of {len(records)} fits failed; see "
                  f"{out_dir / 'report.md'}\n")
        return 1
    return 0
