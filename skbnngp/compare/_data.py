"""Loading the data: an embedded data set by name or a CSV file (delimiter sniffing, missing
values, optional one-hot encoding)."""

from __future__ import annotations

import csv
import gzip
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._common import DEFAULT_DATASET, UsageError

NA_STRINGS = frozenset(s.lower() for s in (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null", "?"))
_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?")
MAX_CATEGORIES = 100  # --one-hot refuses columns with more distinct values (IDs, free text)


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
    from ..datasets import list_datasets, load_dataset

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
