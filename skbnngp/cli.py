"""Command-line interface: ``skbnngp compare``.

``skbnngp compare`` cross-validates every estimator of the package (found by
:func:`skbnngp.utils.all_estimators`, so new estimators join automatically) against
scikit-learn's Gaussian process on an embedded data set or the user's CSV file, and reports
accuracy, calibrated uncertainty and time as a table (stdout, ``report.md``, ``report.json``)
and a figure (``calibration.png``)::

    skbnngp compare                                   # concrete, 5 folds, every regressor
    skbnngp compare diabetes -e stp gpr --folds 3
    skbnngp compare --csv data.csv --target price --dropna --one-hot
    skbnngp compare iris                              # classification: accuracy, NLL, ECE
    skbnngp compare --list                            # estimator and data set names

Every estimator is fitted as ``Pipeline([StandardScaler(), estimator])`` on the training
folds. Regressors are scored through their predictive distribution (``predict_dist``; for
estimators without one, ``predict(X, return_std=True)`` read as a Gaussian), classifiers
through ``predict_proba``. Bad input (a missing file or column, non-numeric or missing
values, an unknown name) ends with one line ``skbnngp compare: error: ...`` and exit
status 2.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gzip
import io
import json
import math
import os
import platform
import re
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
from scipy import stats
from sklearn.base import clone
from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

PROG = "skbnngp"
DEFAULT_DATASET = "concrete"
DEFAULT_FOLDS = 5
N_LEVELS = 19  # nominal levels 0.05, ..., 0.95 of the calibration curve
N_BINS = 10  # confidence bins of the classification reliability diagram
# Spellings read as a missing value (pandas' defaults, plus "?" as in UCI files).
NA_STRINGS = frozenset(s.lower() for s in (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null", "?"))
_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?")
MAX_CATEGORIES = 100  # --one-hot refuses columns with more distinct values (IDs, free text)


class UsageError(Exception):
    """Bad command-line input: printed as one line ``<prog>: error: <msg>``, exit status 2."""

    def __init__(self, message, prog=f"{PROG} compare"):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage block) and never exit by itself."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)", prog=self.prog)


# ============================================================================ metrics table
@dataclass(frozen=True)
class _Metric:
    key: str
    header: str
    kind: str  # "loss"/"time": lower is better; "score": higher; "coverage": near nominal;
    # "width": narrower is better at the nominal coverage
    in_table: bool = True


REGRESSION_METRICS = (
    _Metric("rmse", "RMSE", "loss"),
    _Metric("mae", "MAE", "loss", in_table=False),
    _Metric("nlpd", "NLPD", "loss"),
    _Metric("crps", "CRPS", "loss"),
    _Metric("coverage_90", "cov 90%", "coverage"),
    _Metric("coverage_95", "cov 95%", "coverage"),
    _Metric("width_90", "width 90%", "width", in_table=False),
    _Metric("width_95", "width 95%", "width"),
    _Metric("calibration_error", "cal. err", "loss"),
    _Metric("fit_s", "fit s", "time"),
    _Metric("predict_s", "predict s", "time"),
)
CLASSIFICATION_METRICS = (
    _Metric("accuracy", "accuracy", "score"),
    _Metric("nll", "NLL", "loss"),
    _Metric("ece", "ECE", "loss"),
    _Metric("fit_s", "fit s", "time"),
    _Metric("predict_s", "predict s", "time"),
)
METRIC_DOCS = {
    "regression": [
        "RMSE, MAE: error of the predictive median (the mean for the symmetric predictives "
        "here), in the units of y.",
        "NLPD: mean negative log predictive density of the test targets, in nats "
        "(`skbnngp.metrics.nlpd`; rescaling y by a shifts it by log a).",
        "CRPS: continuous ranked probability score, in the units of y "
        "(`skbnngp.metrics.crps`, closed forms for Gaussian, Student-t and scale mixtures).",
        "cov 90% / 95%: fraction of test targets inside the central 90 % / 95 % predictive "
        "interval (should be close to 0.90 / 0.95); width: its mean width.",
        f"cal. err: mean |observed - nominal| coverage over the central intervals at "
        f"{N_LEVELS} levels 0.05 ... 0.95 (`skbnngp.metrics.regression_calibration_error`).",
        "fit s / predict s: wall-clock seconds of `fit` and of the predictive on the test fold.",
    ],
    "classification": [
        "accuracy: fraction of correct labels.",
        "NLL: log loss of `predict_proba` (`sklearn.metrics.log_loss`).",
        "ECE: top-label expected calibration error with 15 equal-width bins "
        "(`skbnngp.metrics.expected_calibration_error`).",
        "fit s / predict s: wall-clock seconds of `fit` and of `predict_proba` on the test fold.",
    ],
}


def _metrics_for(task):
    return REGRESSION_METRICS if task == "regression" else CLASSIFICATION_METRICS


# ============================================================================ estimators
def _sklearn_gpr(n_features):
    """scikit-learn's GP regressor: amplitude x ARD RBF + WhiteKernel, normalised targets."""
    kernel = (ConstantKernel(1.0) * RBF(length_scale=np.ones(n_features))
              + WhiteKernel(noise_level=1.0))
    return GaussianProcessRegressor(kernel=kernel, normalize_y=True)


def _sklearn_gpc(n_features):
    """scikit-learn's GP classifier (Laplace, one-vs-rest): amplitude x ARD RBF."""
    return GaussianProcessClassifier(kernel=ConstantKernel(1.0)
                                     * RBF(length_scale=np.ones(n_features)))


#: scikit-learn baselines per task: (class name, short aliases, factory(n_features)).
SKLEARN_BASELINES = {
    "regression": ("GaussianProcessRegressor", ("gpr", "sklearn-gpr"), _sklearn_gpr),
    "classification": ("GaussianProcessClassifier", ("gpc", "sklearn-gpc"), _sklearn_gpc),
}


def _initials(name):
    """``StudentTProcessRegressor`` -> ``"stp"``; ``DBKRegressor`` -> ``"dbk"``."""
    stem = _stem(name)
    return "".join(ch for ch in stem if ch.isupper()).lower()


def _stem(name):
    for suffix in ("Regressor", "Classifier"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _candidates(task):
    """Estimators available for ``task``: ``{class name: (source, factory, aliases)}``.

    The package's estimators are discovered, never listed by hand; the scikit-learn Gaussian
    process of the task comes last.
    """
    from .utils.discovery import all_estimators

    kind = "regressor" if task == "regression" else "classifier"
    out = {name: ("skbnngp", (lambda n_features, cls=cls: cls()),
                  (name.lower(), _stem(name).lower(), _initials(name)))
           for name, cls in all_estimators(kind)}
    name, aliases, factory = SKLEARN_BASELINES[task]
    out[name] = ("scikit-learn", factory, (name.lower(),) + aliases)
    return out


def _alias_table(candidates):
    """Lower-case spelling -> class name; a short alias claimed twice is dropped."""
    table, clashes = {}, set()
    for name, (_, _, aliases) in candidates.items():
        for alias in dict.fromkeys(aliases):
            if alias in table and table[alias] != name:
                clashes.add(alias)
            table.setdefault(alias, name)
    for alias in clashes - {name.lower() for name in candidates}:
        del table[alias]
    return table


def _short_names(candidates, table):
    return {name: sorted((a for a, n in table.items() if n == name and a != name.lower()),
                         key=len) for name in candidates}


def _resolve_estimators(requested, task):
    """Class names for the ``--estimators`` values (default: all of the task)."""
    candidates = _candidates(task)
    if not requested:
        return list(candidates), candidates
    table = _alias_table(candidates)
    names = []
    for item in requested:
        for token in filter(None, (t.strip() for t in item.split(","))):
            name = table.get(token.lower())
            if name is None:
                other = _candidates("classification" if task == "regression" else "regression")
                hint = (f" ({_alias_table(other)[token.lower()]} is a "
                        f"{'classifier' if task == 'regression' else 'regressor'}; "
                        f"this is a {task} data set)"
                        if token.lower() in _alias_table(other) else "")
                valid = ", ".join(
                    f"{n} ({'/'.join(s)})" if s else n
                    for n, s in _short_names(candidates, table).items())
                raise UsageError(f"unknown estimator {token!r} for {task}{hint}; "
                                 f"valid names (case-insensitive): {valid}")
            if name not in names:
                names.append(name)
    if not names:
        raise UsageError("--estimators got no name")
    return names, candidates


def _build(name, candidates, n_features, args):
    """Unfitted ``Pipeline([StandardScaler(), estimator])`` with the run's settings."""
    _, factory, _ = candidates[name]
    est = factory(n_features)
    params = est.get_params(deep=False)
    wanted = {"device": args.device, "random_state": args.random_state,
              "max_iter": args.max_iter}
    est.set_params(**{k: v for k, v in wanted.items() if k in params and v is not None})
    return Pipeline([("scale", StandardScaler()), ("model", est)])


# ============================================================================ data
@dataclass
class _Data:
    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: list
    target_name: str
    task: str
    source: str
    notes: list = field(default_factory=list)


def _sniff_delimiter(text):
    try:
        return csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def _read_csv(path, sep):
    """Columns of a CSV file with a header row: ``(header, {name: list of str}, n_rows)``."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"CSV file {path!r} not found")
    if not p.is_file():
        raise UsageError(f"{path!r} is not a file")
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise UsageError(f"cannot read CSV file {path!r}: {exc}") from None
    rows = [row for row in csv.reader(io.StringIO(text), delimiter=sep or _sniff_delimiter(text))
            if any(cell.strip() for cell in row)]
    if not rows:
        raise UsageError(f"CSV file {path!r} is empty")
    header = [h.strip() for h in rows[0]]
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise UsageError(f"CSV file {path!r} has duplicate column names: {', '.join(dup)}")
    body = rows[1:]
    if not body:
        raise UsageError(f"CSV file {path!r} has a header but no data rows")
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise UsageError(f"CSV file {path!r}, line {i + 2}: {len(row)} fields, expected "
                             f"{len(header)} as in the header")
    return header, {h: [row[j].strip() for row in body] for j, h in enumerate(header)}, len(body)


def _parse_column(values):
    """``(float array with NaN for missing, None)`` or ``(None, first non-numeric value)``."""
    out = np.empty(len(values))
    for i, v in enumerate(values):
        if v.lower() in NA_STRINGS:
            out[i] = np.nan
            continue
        try:
            out[i] = float(v)
        except ValueError:
            return None, (i, v)
    return out, None


def _one_hot(name, values):
    cats = sorted({v for v in values if v.lower() not in NA_STRINGS})
    if len(cats) > MAX_CATEGORIES:
        raise UsageError(f"column {name!r} has {len(cats)} distinct non-numeric values, too "
                         f"many to one-hot encode; drop it with --drop {name!r}")
    missing = np.array([v.lower() in NA_STRINGS for v in values])
    block = np.array([[v == c for c in cats] for v in values], dtype=np.float64)
    block = block.reshape(len(values), len(cats))
    block[missing] = np.nan
    return block, [f"{name}={c}" for c in cats]


def _load_csv(args):
    header, columns, n_rows = _read_csv(args.csv, args.sep)
    if args.target is None:
        raise UsageError(f"--csv needs --target COLUMN; columns: {_list(header)}")
    if args.target not in columns:
        raise UsageError(f"target column {args.target!r} is not in {args.csv!r}; "
                         f"columns: {_list(header)}")
    unknown = [c for c in args.drop if c not in columns]
    if unknown:
        raise UsageError(f"--drop: no column {unknown[0]!r} in {args.csv!r}; "
                         f"columns: {_list(header)}")
    features = [h for h in header if h != args.target and h not in args.drop]
    if not features:
        raise UsageError(f"{args.csv!r} has no feature column besides the target")

    blocks, names, text_cols, notes = [], [], [], []
    for col in features:
        values, bad = _parse_column(columns[col])
        if values is not None:
            blocks.append(values[:, None])
            names.append(col)
        else:
            text_cols.append((col, bad))
    if text_cols and not args.one_hot:
        col, (i, v) = text_cols[0]
        more = f" (and {len(text_cols) - 1} more)" if len(text_cols) > 1 else ""
        raise UsageError(f"feature column {col!r}{more} is not numeric ({v!r} on line {i + 2}); "
                         "pass --one-hot to encode non-numeric columns or --drop them")
    for col, _ in text_cols:
        block, cat_names = _one_hot(col, columns[col])
        blocks.append(block)
        names.extend(cat_names)
        notes.append(f"column `{col}` one-hot encoded into {len(cat_names)} columns")
    X = np.hstack(blocks)

    y_num, bad = _parse_column(columns[args.target])
    task = args.task or ("regression" if y_num is not None else "classification")
    if task == "regression":
        if y_num is None:
            i, v = bad
            raise UsageError(f"target column {args.target!r} is not numeric ({v!r} on line "
                             f"{i + 2}); use --task classification for class labels")
        y, y_missing = y_num, np.isnan(y_num)
    else:
        raw = np.array(columns[args.target], dtype=object)
        y_missing = np.array([v.lower() in NA_STRINGS for v in raw])
        y = y_num if y_num is not None else raw
    bad_rows = ~np.all(np.isfinite(X), axis=1) | y_missing
    if task == "regression":
        bad_rows |= ~np.isfinite(y)
    n_bad = int(bad_rows.sum())
    if n_bad:
        first = int(np.flatnonzero(bad_rows)[0]) + 2
        if not args.dropna:
            raise UsageError(f"{n_bad} of {n_rows} rows of {args.csv!r} have missing or "
                             f"non-finite values (first on line {first}); pass --dropna to "
                             "drop them")
        if n_bad == n_rows:
            raise UsageError(f"every row of {args.csv!r} has a missing value; nothing left "
                             "after --dropna")
        X, y = X[~bad_rows], y[~bad_rows]
        notes.append(f"--dropna dropped {n_bad} of {n_rows} rows with missing values")
    if task == "classification" and y.dtype == object:
        y = y.astype(str)
    stem = Path(args.csv).name
    for suffix in (".gz", ".csv", ".txt"):
        stem = stem.removesuffix(suffix)
    return _Data(stem, X, y, names, args.target, task,
                 f"CSV file `{args.csv}`", notes)


def _load_named(args):
    from .datasets import list_datasets, load_dataset

    name = args.dataset or DEFAULT_DATASET
    if name not in list_datasets():
        raise UsageError(f"unknown data set {name!r}; choose one of {_list(list_datasets())} "
                         "or pass --csv FILE --target COLUMN")
    bunch = load_dataset(name)
    X = np.asarray(bunch.data, dtype=np.float64)
    y = np.asarray(bunch.target)
    return _Data(name, X, y, [str(f) for f in bunch.feature_names], str(bunch.target_names[0])
                 if bunch.task == "regression" else "class", args.task or bunch.task,
                 f"embedded data set `{name}` (skbnngp.datasets.load_dataset)")


def _load(args):
    """Read the data set chosen on the command line and check it against the protocol."""
    if args.csv and args.dataset:
        raise UsageError("give either a data set name or --csv FILE, not both")
    if args.csv is None and (args.target or args.drop or args.one_hot or args.sep):
        raise UsageError("--target, --drop, --one-hot and --sep apply to --csv only")
    data = _load_csv(args) if args.csv else _load_named(args)
    if data.task == "regression":
        data.y = np.asarray(data.y, dtype=np.float64)
    elif data.y.dtype.kind == "f" and np.any(np.mod(data.y, 1) != 0):
        raise UsageError(f"target {data.target_name!r} is continuous; classification needs "
                         "class labels (use --task regression)")
    if args.max_samples is not None and len(data.y) > args.max_samples:
        rng = np.random.RandomState(args.random_state)
        keep = np.sort(rng.choice(len(data.y), args.max_samples, replace=False))
        data.notes.append(f"--max-samples kept a random {args.max_samples} of "
                          f"{len(data.y)} rows")
        data.X, data.y = data.X[keep], data.y[keep]
    n = len(data.y)
    if n < 2 * args.folds:
        raise UsageError(f"{n} rows are too few for {args.folds}-fold cross-validation "
                         f"(need at least {2 * args.folds})")
    if data.task == "classification":
        labels, counts = np.unique(data.y, return_counts=True)
        if labels.size < 2:
            raise UsageError(f"target {data.target_name!r} has a single class")
        if counts.min() < args.folds:
            rare = labels[counts.argmin()].item()
            raise UsageError(f"class {rare!r} has only {int(counts.min())} rows, fewer than "
                             f"--folds {args.folds}")
    return data


def _list(names, limit=20):
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


# ============================================================================ one fit
def _predictive(model, X):
    """Predictive distribution of y from a fitted pipeline (Gaussian from mean and std)."""
    final, Xt = model[-1], model[:-1].transform(X)
    if hasattr(final, "predict_dist"):
        return final.predict_dist(Xt)
    mean, std = final.predict(Xt, return_std=True)
    return stats.norm(mean, std)


def _score_regression(y, dist):
    from . import metrics

    nominal, observed = metrics.calibration_curve_regression(y, dist, n_levels=N_LEVELS)
    point = np.asarray(dist.median(), dtype=np.float64)
    return {
        "rmse": float(np.sqrt(np.mean((point - y) ** 2))),
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
    from .metrics import expected_calibration_error

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


def _run_one(name, fold, pipe, X, y, train, test, task, threads):
    """Fit one pipeline on one fold and score it; errors and warnings are recorded."""
    from threadpoolctl import threadpool_limits

    record = {"estimator": name, "fold": fold, "n_train": int(train.size),
              "n_test": int(test.size), "metrics": {}, "curve": None, "error": None,
              "warnings": {}}
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
    """A one-line progress bar on a stream (a line per step when it is not a terminal)."""

    def __init__(self, total, stream, enabled, width=24):
        self.total, self.stream, self.enabled, self.width = total, stream, enabled, width
        self.done, self.start = 0, time.perf_counter()
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self._draw("starting")

    def _draw(self, label):
        if not self.enabled:
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
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ============================================================================ summary
def _summarise(records, names, task):
    summary = {}
    for name in names:
        rows = [r for r in records if r["estimator"] == name and r["error"] is None]
        entry = {"n_folds": len(rows)}
        for m in _metrics_for(task):
            vals = np.array([r["metrics"][m.key] for r in rows], dtype=np.float64)
            entry[m.key] = ({"mean": float(vals.mean()), "std": float(vals.std())}
                            if vals.size else {"mean": None, "std": None})
        summary[name] = entry
    return summary


def _decimals(metric, value):
    if metric.kind == "coverage" or metric.key in ("accuracy", "ece", "calibration_error"):
        return 3
    magnitude = abs(value) if value is not None and math.isfinite(value) else 1.0
    return 0 if magnitude >= 1000 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3


def _cell(metric, stat, sep):
    mean, std = stat["mean"], stat["std"]
    if mean is None:
        return "failed"
    d = _decimals(metric, mean)
    return f"{mean:.{d}f}{sep}{std:.{d}f}"


def format_table(summary, task, markdown=False):
    """The comparison table: one row per estimator, ``mean ± std`` over the folds.

    Parameters
    ----------
    summary : dict
        ``{estimator: {metric: {"mean": float, "std": float}, "n_folds": int}}`` as in
        ``report.json``.
    task : {"regression", "classification"}
        Selects the metric columns.
    markdown : bool, default=False
        A Markdown table instead of aligned plain text.

    Returns
    -------
    table : str
    """
    cols = [m for m in _metrics_for(task) if m.in_table]
    sep = " ± " if markdown else "±"
    rows = [[name] + [_cell(m, entry[m.key], sep) for m in cols]
            for name, entry in summary.items()]
    header = ["estimator"] + [m.header for m in cols]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(
            ["---"] + ["---:"] * len(cols)) + "|"]
        lines += ["| " + " | ".join([f"`{r[0]}`"] + r[1:]) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = [str.ljust] + [str.rjust] * len(cols)
    lines = ["  ".join(f(c, w) for f, c, w in zip(fmt, line, widths))
             for line in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _legend(task, folds):
    if task == "regression":
        return (f"mean ± std over {folds} folds. Lower is better for RMSE, NLPD, CRPS and "
                "cal. err; coverage should be close to 0.90 / 0.95, with the narrowest width.")
    return (f"mean ± std over {folds} folds. Higher accuracy, lower NLL and ECE are better.")


# ============================================================================ report
def _environment():
    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    from . import __version__

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"machine": f"{platform.system()} {platform.machine()}, {cpu}",
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "versions": {"skbnngp": __version__, "scikit-learn": version("scikit-learn"),
                         "torch": version("torch"), "numpy": version("numpy"),
                         "scipy": version("scipy")}}


def _warning_lines(records, names):
    lines = []
    for name in names:
        rows = [r for r in records if r["estimator"] == name]
        errors = [f"fold {r['fold']}: {r['error']}" for r in rows if r["error"]]
        if errors:
            lines.append(f"`{name}` failed on {len(errors)} of {len(rows)} folds: "
                         + "; ".join(errors[:3]))
        seen = {}  # pattern (numbers blanked) -> (folds where it was raised, first message)
        for r in rows:
            for message in r["warnings"]:
                folds, example = seen.setdefault(_NUMBER.sub("#", message), (set(), message))
                folds.add(r["fold"])
        for folds, example in sorted(seen.values(), key=lambda v: -len(v[0]))[:5]:
            lines.append(f"`{name}` warned on {len(folds)} of {len(rows)} folds, e.g. {example}")
    return lines


def _markdown(report, table_md):
    env, data = report["environment"], report["data"]
    lines = [
        f"# skbnngp compare: {data['name']} ({report['task']})", "",
        f"{report['date']} · {env['machine']}, {env['cpu_count']} CPUs · Python "
        f"{env['python']}, " + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v),
        "",
        f"**Data**: {data['source']}: {data['n_samples']} samples × {data['n_features']} "
        f"features, target `{data['target']}`.",
        "",
        f"**Protocol**: {report['folds']}-fold cross-validation ({report['cv']}, shuffled, "
        f"random_state={report['random_state']}). Every estimator is a "
        "`Pipeline([StandardScaler(), estimator])`: inputs are standardised with the "
        "training-fold statistics; targets are left as they are. Device "
        f"`{report['device']}`; {report['n_jobs']} fit(s) at a time (n_jobs), "
        f"{report['threads']} thread(s) per fit; fit and predict times are wall-clock "
        "seconds" + (", measured while other fits ran" if report["n_jobs"] > 1 else "")
        + f". Wall time {report['total_seconds']:.0f} s.",
        "", table_md, "", _legend(report["task"], report["folds"]), "", "## Estimators", ""]
    lines += [f"- `{name}` ({e['source']}): `{e['repr']}`" for name, e in
              report["estimators"].items()]
    lines += ["", "## Metrics", ""] + [f"- {doc}" for doc in METRIC_DOCS[report["task"]]]
    notes = report["notes"] + report["problems"]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in notes]
    if report["figure"]:
        lines += ["", f"![calibration]({report['figure']})"]
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    return obj


def _figure(path, report, records):
    """Calibration curves and interval coverage (regression) or a reliability diagram."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [n for n, e in report["summary"].items() if e["n_folds"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    left.plot([0, 1], [0, 1], "k--", lw=1, label="ideal")
    x = np.arange(len(names))
    if report["task"] == "regression":
        for name in names:
            curves = [r["curve"] for r in records if r["estimator"] == name and r["curve"]]
            nominal = np.array(curves[0]["nominal"])
            left.plot(nominal, np.mean([c["observed"] for c in curves], axis=0), marker="o",
                      ms=3, label=name)
        left.set(xlabel="nominal coverage of the central interval", ylabel="observed coverage",
                 title="calibration (mean over folds)")
        for j, (level, key) in enumerate(((0.90, "coverage_90"), (0.95, "coverage_95"))):
            stat = [report["summary"][n][key] for n in names]
            right.bar(x + (j - 0.5) * 0.38, [s["mean"] for s in stat], 0.38,
                      yerr=[s["std"] for s in stat], capsize=3, label=f"{level:.0%} interval")
            right.axhline(level, color=f"C{j}", ls="--", lw=1)
        low = min([0.8] + [report["summary"][n]["coverage_90"]["mean"]
                           - report["summary"][n]["coverage_90"]["std"] - 0.05 for n in names])
        right.set(ylim=(low, 1.0), ylabel="observed coverage", title="interval coverage")
    else:
        for name in names:
            bins = [r["curve"] for r in records if r["estimator"] == name and r["curve"]]
            count = np.sum([b["count"] for b in bins], axis=0)
            ok = count > 0
            conf = np.sum([b["confidence_sum"] for b in bins], axis=0)[ok] / count[ok]
            acc = np.sum([b["correct_sum"] for b in bins], axis=0)[ok] / count[ok]
            left.plot(conf, acc, marker="o", ms=3, label=name)
        left.set(xlabel="confidence (top-label probability)", ylabel="accuracy",
                 title="reliability (pooled over folds)")
        for j, key in enumerate(("accuracy", "ece")):
            stat = [report["summary"][n][key] for n in names]
            right.bar(x + (j - 0.5) * 0.38, [s["mean"] for s in stat], 0.38,
                      yerr=[s["std"] for s in stat], capsize=3, label=key.upper()
                      if key == "ece" else key)
        right.set(ylim=(0, 1), title="accuracy and ECE")
    right.set_xticks(x, names, rotation=15, ha="right", fontsize=8)
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle(f"{report['data']['name']}: {report['folds']}-fold cross-validation",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ============================================================================ command
def _compare_parser(subparsers):
    p = subparsers.add_parser(
        "compare", help="cross-validate the estimators against scikit-learn's GP",
        description="Cross-validate skbnngp's estimators and scikit-learn's Gaussian process "
        "on a data set; print a table of accuracy, uncertainty and time, and write "
        "report.md, report.json and calibration.png. Put the data set name before "
        "options that take several values (-e, --drop).")
    p.add_argument("dataset", nargs="?", default=None,
                   help=f"embedded data set (default: {DEFAULT_DATASET}; see --list)")
    p.add_argument("--csv", metavar="FILE", help="your own CSV file with a header row "
                   "(.csv or .csv.gz)")
    p.add_argument("--target", metavar="COLUMN", help="target column of --csv")
    p.add_argument("--drop", metavar="COLUMN", nargs="+", default=[],
                   help="columns of --csv to ignore (e.g. IDs)")
    p.add_argument("--one-hot", action="store_true",
                   help="one-hot encode non-numeric feature columns instead of rejecting them")
    p.add_argument("--dropna", action="store_true",
                   help="drop rows with missing values instead of rejecting them")
    p.add_argument("--sep", default=None, help="CSV delimiter (default: detected)")
    p.add_argument("--task", choices=("regression", "classification"), default=None,
                   help="default: the data set's; for --csv, classification when the "
                   "target is not numeric")
    p.add_argument("-e", "--estimators", nargs="+", metavar="NAME", default=None,
                   help="class names or short aliases (e.g. stp gpr), case-insensitive; "
                   "default: every estimator of the task plus scikit-learn's GP")
    p.add_argument("--folds", type=_int_at_least(2), default=DEFAULT_FOLDS,
                   help=f"K of K-fold cross-validation (default: {DEFAULT_FOLDS})")
    p.add_argument("--max-samples", type=_int_at_least(4), default=None, metavar="N",
                   help="use a random subset of N rows")
    p.add_argument("--max-iter", type=_int_at_least(1), default=None, metavar="N",
                   help="max_iter of every estimator that has one (default: its own)")
    p.add_argument("--device", default="auto",
                   help="device of the skbnngp estimators: auto (default), cpu, cuda, cuda:N")
    p.add_argument("--random-state", type=int, default=0, metavar="SEED",
                   help="seed of the folds and of every estimator with random_state (default: 0)")
    p.add_argument("--n-jobs", type=int, default=-1, metavar="N",
                   help="fits run at a time (joblib over folds x estimators); -1, the default, "
                   "uses every core; 1 gives the cleanest timings")
    p.add_argument("--threads", type=_int_at_least(1), default=1, metavar="N",
                   help="BLAS/OpenMP threads inside each fit (default: 1: on a few cores, parallel "
                   "fits beat threaded linear algebra)")
    p.add_argument("-o", "--output-dir", metavar="DIR", default=None,
                   help="where report.md, report.json and calibration.png go (default: "
                   "skbnngp-compare-<dataset>)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true",
                   help="list the estimator and data set names, then exit")
    p.set_defaults(func=_compare)
    return p


def _int_at_least(low):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _print_list(out):
    from .datasets import list_datasets

    for task in ("regression", "classification"):
        candidates = _candidates(task)
        short = _short_names(candidates, _alias_table(candidates))
        out.write(f"{task} estimators (compare runs all of them by default):\n")
        for name, (source, _, _) in candidates.items():
            alias = f"  aliases: {', '.join(short[name])}" if short[name] else ""
            out.write(f"  {name:34s} {source}{alias}\n")
        out.write(f"{task} data sets: {', '.join(list_datasets(task))}\n")


def _check_device(device):
    from ._backend import resolve_device

    try:
        return str(resolve_device(device))
    except (ValueError, RuntimeError, TypeError) as exc:
        raise UsageError(f"--device {device!r}: {str(exc).splitlines()[0]}") from None


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

    d = data.X.shape[1]
    pipes = {name: _build(name, candidates, d, args) for name in names}
    splitter = (KFold if data.task == "regression" else StratifiedKFold)(
        n_splits=args.folds, shuffle=True, random_state=args.random_state)
    folds = list(splitter.split(data.X, data.y))
    tasks = [(name, k, train, test) for k, (train, test) in enumerate(folds) for name in names]
    n_jobs = min(effective_n_jobs(args.n_jobs), len(tasks))

    start = time.perf_counter()
    bar = _Progress(len(tasks), err, enabled=not args.quiet)
    records = []
    results = Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
        delayed(_run_one)(name, k, pipes[name], data.X, data.y, train, test, data.task,
                          args.threads) for name, k, train, test in tasks)
    for record in results:
        records.append(record)
        status = "failed" if record["error"] else "done"
        bar.step(f"{record['estimator']} fold {record['fold'] + 1}/{args.folds} {status}")
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
        "estimators": {n: {"source": candidates[n][0],
                           "repr": " ".join(repr(pipes[n][-1]).split())} for n in names},
        "metrics": {m.key: {"header": m.header, "kind": m.kind}
                    for m in _metrics_for(data.task)},
        "summary": summary, "total_seconds": total, "notes": data.notes,
        "problems": _warning_lines(records, names), "figure": None, "fold_results": records,
    }
    try:
        if _figure(out_dir / "calibration.png", report, records):
            report["figure"] = "calibration.png"
        else:
            report["notes"].append("calibration.png not written: install matplotlib "
                                   "(pip install 'skbnngp[examples]')")
    except Exception as exc:  # noqa: BLE001 - the table and reports still get written
        report["notes"].append(f"calibration.png not written: {type(exc).__name__}: {exc}")
    table = format_table(summary, data.task)
    (out_dir / "report.md").write_text(
        _markdown(report, format_table(summary, data.task, markdown=True)), encoding="utf-8")
    (out_dir / "report.json").write_text(
        json.dumps(_jsonable(report), indent=1) + "\n", encoding="utf-8")

    out.write(f"{data.name}: {data.X.shape[0]} samples x {d} features, {data.task}, "
              f"{args.folds}-fold CV, inputs standardised (StandardScaler in a Pipeline)\n\n")
    out.write(table + "\n\n" + _legend(data.task, args.folds) + "\n")
    for line in report["notes"] + report["problems"]:
        line = line.replace("`", "")
        out.write(f"note: {line[:157] + '...' if len(line) > 160 else line}\n")
    out.write(f"wall time {total:.0f} s; report: {out_dir / 'report.md'}\n")
    failed = sum(r["error"] is not None for r in records)
    if failed:
        err.write(f"{PROG} compare: {failed} of {len(records)} fits failed; see "
                  f"{out_dir / 'report.md'}\n")
        return 1
    return 0


def build_parser():
    """The ``skbnngp`` argument parser (sub-command ``compare``).

    Returns
    -------
    parser : argparse.ArgumentParser
    """
    from . import __version__

    parser = _Parser(prog=PROG, description="scikit-learn compatible Bayesian neural-network "
                     "/ Gaussian-process estimators.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _compare_parser(subparsers)
    return parser


def main(argv=None, *, stdout=None, stderr=None):
    """Entry point of the ``skbnngp`` console script and of ``python -m skbnngp``.

    Parameters
    ----------
    argv : list of str, default=None
        Arguments after the program name; None reads ``sys.argv[1:]``.
    stdout, stderr : file-like, default=None
        Streams for the table and for progress and errors (``sys.stdout``/``sys.stderr``).

    Returns
    -------
    status : int
        0 on success, 1 when some fits failed, 2 on bad input (after one line on stderr).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        args, extra = build_parser().parse_known_args(argv)
        if extra:
            prog = PROG if args.command is None else f"{PROG} {args.command}"
            raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see {prog} --help)",
                             prog=prog)
        if args.command is None:
            raise UsageError(f"a command is required: compare (see {PROG} --help)", prog=PROG)
        return args.func(args, argv[1:], out, err)
    except UsageError as exc:
        err.write(f"{exc.prog}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        err.write(f"{PROG}: interrupted\n")
        return 130
