"""Loading the data: an embedded data set by name, or a CSV file read by pandas (delimiter
and decimal-comma detection, missing values) with text columns one-hot encoded by
scikit-learn's ``OneHotEncoder`` inside a ``ColumnTransformer``."""

from __future__ import annotations

import csv
import gzip
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._common import DEFAULT_DATASET, UsageError

#: Read as missing besides pandas' own spellings ("?" marks missing values in UCI files).
EXTRA_NA = ["?"]
#: A number written with a decimal comma (``3,5``, ``-0,25``, ``2,5e-3``).
_DECIMAL_COMMA = re.compile(r"[-+]?\d*,\d+([eE][-+]?\d+)?")
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


def _pandas():
    try:
        import pandas as pd
    except ImportError:
        raise UsageError("--csv needs pandas to read the file: pip install pandas") from None
    return pd


def _head(p, size=8192):
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8-sig", newline="") as fh:
            return fh.read(size)
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise UsageError(f"cannot read CSV file {str(p)!r}: {exc}") from None


def _sniff_delimiter(text):
    try:
        return csv.Sniffer().sniff(text, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def _is_text(series):
    """Not parsed as numbers (object or pandas' string dtype)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype
    return not (is_numeric_dtype(series.dtype) or is_bool_dtype(series.dtype))


def _text_columns(frame):
    return [c for c in frame.columns if _is_text(frame[c])]


def _looks_decimal_comma(frame):
    """True when some text column holds only numbers written with a decimal comma."""
    for col in _text_columns(frame):
        values = frame[col].dropna().astype(str).str.strip()
        if len(values) and values.map(lambda v: bool(_DECIMAL_COMMA.fullmatch(v))).all():
            return True
    return False


def _read_csv(path, sep):
    """The file as a pandas DataFrame (header row, numbers parsed, missing values NaN) and
    notes on how it was read."""
    pd = _pandas()
    p = Path(path)
    if not p.exists():
        raise UsageError(f"CSV file {path!r} not found")
    if not p.is_file():
        raise UsageError(f"{path!r} is not a file")
    head = _head(p)
    if not head.strip():
        raise UsageError(f"CSV file {path!r} is empty")
    sep = sep or _sniff_delimiter(head)
    _check_row_widths(p, sep, path)
    kw = dict(sep=sep, na_values=EXTRA_NA, skipinitialspace=True, encoding="utf-8-sig",
              skip_blank_lines=True)
    try:
        header = pd.read_csv(p, header=None, nrows=1, dtype=str, **kw).iloc[0]
        # index_col=False: data rows with one field more than the header are an error below,
        # never a silent shift of every column (pandas' default makes the first an index)
        frame = pd.read_csv(p, index_col=False, **kw)
        notes = []
        if sep != "," and _looks_decimal_comma(frame):
            comma = pd.read_csv(p, decimal=",", index_col=False, **kw)
            # kept only if no column read as numbers before turns into text (a column of
            # dot decimals beside a code column such as "1,5" keeps the first reading)
            if set(_text_columns(comma)) <= set(_text_columns(frame)):
                frame = comma
                notes.append("numbers with a decimal comma were read as decimals")
    except pd.errors.ParserError as exc:
        msg = str(exc).strip().splitlines()[-1]
        found = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", msg)
        if found:
            want, line, saw = found.groups()
            msg = f"line {line}: {saw} fields, expected {want} as in the header"
        raise UsageError(f"CSV file {path!r}, {msg}") from None
    except (OSError, UnicodeDecodeError, EOFError, ValueError) as exc:
        raise UsageError(f"cannot read CSV file {path!r}: {exc}") from None
    names = [str(h).strip() for h in header]
    dup = sorted({h for h in names if names.count(h) > 1})
    if dup:
        raise UsageError(f"CSV file {path!r} has duplicate column names: {', '.join(dup)}")
    frame.columns = names
    if frame.shape[0] == 0:
        raise UsageError(f"CSV file {path!r} has a header but no data rows")
    for col in _text_columns(frame):  # strip padding so that " red" and "red" are one value
        frame[col] = frame[col].map(lambda v: v.strip() if isinstance(v, str) else v)
    return frame, notes


def _first_text(series):
    """``(row, value)`` of the first value that is not a number (the first value at all
    when each one parses alone, e.g. a mix of decimal points and commas)."""
    pd = _pandas()
    numeric = pd.to_numeric(series, errors="coerce")
    bad = np.flatnonzero(numeric.isna().to_numpy() & series.notna().to_numpy())
    if bad.size == 0:
        bad = np.flatnonzero(series.notna().to_numpy())
    return int(bad[0]), series.iloc[int(bad[0])]


def _check_row_widths(p, sep, path):
    """Refuse data rows with more fields than the header (pandas would read the extra
    leading field as an index and shift every column by one)."""
    opener = gzip.open if p.suffix == ".gz" else open
    width, line, row = None, 0, []
    try:
        with opener(p, "rt", encoding="utf-8-sig", newline="") as fh:
            for line, row in enumerate(csv.reader(fh, delimiter=sep, skipinitialspace=True), 1):
                if width is None:
                    width = len(row) if row else None
                elif len(row) > width and any(v.strip() for v in row[width:]):
                    break
            else:
                return
    except (csv.Error, OSError, UnicodeDecodeError, EOFError):
        return  # pandas' own reading reports it
    raise UsageError(f"CSV file {path!r}, line {line}: {len(row)} fields, expected {width} "
                     "as in the header")


#: At most this many distinct integer values make a numeric target classes (unless
#: --task regression); two (0/1, 1/2) always do.
MAX_INTEGER_CLASSES = 10


def _numeric_task(target, notes):
    """``"classification"`` for a numeric target of a few integer levels (two, or at most
    :data:`MAX_INTEGER_CLASSES` with at least 5 rows each), as sklearn's
    ``type_of_target`` reads it; otherwise ``"regression"``."""
    values = target.dropna().to_numpy(dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0 or np.any(np.mod(values, 1) != 0):
        return "regression"
    levels, counts = np.unique(values, return_counts=True)
    if levels.size == 2 or (levels.size <= MAX_INTEGER_CLASSES and counts.min() >= 5):
        notes.append(f"target has {levels.size} integer values: read as class labels "
                     "(pass --task regression to fit it as a number)")
        return "classification"
    return "regression"


def _category_name(column, category):
    return f"{column}={category}"


def _encoder(text_cols, numeric_cols):
    """Numeric columns as they are, text columns one-hot (sklearn's encoders)."""
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder

    return ColumnTransformer(
        [("numeric", "passthrough", numeric_cols),
         ("one_hot", OneHotEncoder(sparse_output=False, dtype=np.float64,
                                   feature_name_combiner=_category_name), text_cols)],
        verbose_feature_names_out=False)


def _load_csv(args):
    frame, notes = _read_csv(args.csv, args.sep)
    header = list(frame.columns)
    if args.target is None:
        raise UsageError(f"--csv needs --target COLUMN; columns: {_list(header)}")
    if args.target not in header:
        raise UsageError(f"target column {args.target!r} is not in {args.csv!r}; "
                         f"columns: {_list(header)}")
    unknown = [c for c in args.drop if c not in header]
    if unknown:
        raise UsageError(f"--drop: no column {unknown[0]!r} in {args.csv!r}; "
                         f"columns: {_list(header)}")
    features = [h for h in header if h != args.target and h not in args.drop]
    if not features:
        raise UsageError(f"{args.csv!r} has no feature column besides the target")

    text_cols = [c for c in features if _is_text(frame[c])]
    if text_cols and not args.one_hot:
        col = text_cols[0]
        i, v = _first_text(frame[col])
        more = f" (and {len(text_cols) - 1} more)" if len(text_cols) > 1 else ""
        raise UsageError(f"feature column {col!r}{more} is not numeric ({v!r} on line {i + 2}); "
                         "pass --one-hot to encode non-numeric columns or --drop them")
    for col in text_cols:
        n_cat = frame[col].nunique(dropna=True)
        if n_cat > MAX_CATEGORIES:
            raise UsageError(f"column {col!r} has {n_cat} distinct non-numeric values, too "
                             f"many to one-hot encode; drop it with --drop {col!r}")

    target = frame[args.target]
    y_is_text = _is_text(target)
    task = args.task or ("classification" if y_is_text else _numeric_task(target, notes))
    if task == "regression" and y_is_text:
        i, v = _first_text(target)
        raise UsageError(f"target column {args.target!r} is not numeric ({v!r} on line "
                         f"{i + 2}); use --task classification for class labels")
    numeric_cols = [c for c in features if c not in text_cols]
    values = frame[numeric_cols].to_numpy(dtype=np.float64)
    bad_rows = (~np.all(np.isfinite(values), axis=1) | frame[text_cols].isna().any(axis=1)
                .to_numpy() | target.isna().to_numpy())
    if task == "regression":
        bad_rows |= ~np.isfinite(target.to_numpy(dtype=np.float64))
    n_rows, n_bad = len(frame), int(bad_rows.sum())
    if n_bad:
        first = int(np.flatnonzero(bad_rows)[0]) + 2
        if not args.dropna:
            raise UsageError(f"{n_bad} of {n_rows} rows of {args.csv!r} have missing or "
                             f"non-finite values (first on line {first}); pass --dropna to "
                             "drop them")
        if n_bad == n_rows:
            raise UsageError(f"every row of {args.csv!r} has a missing value; nothing left "
                             "after --dropna")
        frame, target = frame[~bad_rows], target[~bad_rows]
        notes.append(f"--dropna dropped {n_bad} of {n_rows} rows with missing values")

    encoder = _encoder(text_cols, numeric_cols).fit(frame[features])
    X = np.asarray(encoder.transform(frame[features]), dtype=np.float64)
    names = [str(n) for n in encoder.get_feature_names_out()]
    for col in text_cols:
        notes.append(f"column `{col}` one-hot encoded into "
                     f"{frame[col].nunique(dropna=True)} columns")
    if task == "classification":
        y = target.astype(str).to_numpy() if y_is_text else target.to_numpy()
    else:
        y = target.to_numpy(dtype=np.float64)
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
    distinct = np.unique(data.y)
    if distinct.size == 1:
        only = distinct[0].item() if isinstance(distinct[0], np.generic) else distinct[0]
        raise UsageError(f"target {data.target_name!r} is constant (every row is {only!r}): "
                         "there is nothing to predict or compare")
    if n < 2 * args.folds:
        raise UsageError(f"{n} rows are too few for {args.folds}-fold cross-validation "
                         f"(need at least {2 * args.folds})")
    if data.task == "classification":
        labels, counts = np.unique(data.y, return_counts=True)
        if counts.min() < args.folds:
            rare = labels[counts.argmin()]
            rare = rare.item() if isinstance(rare, np.generic) else rare
            raise UsageError(f"class {rare!r} has only {int(counts.min())} rows, fewer than "
                             f"--folds {args.folds}")
    return data


def _list(names, limit=20):
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


# ============================================================================ one fit
