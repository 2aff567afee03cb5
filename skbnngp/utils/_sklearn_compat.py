"""The only place where scikit-learn private helpers are imported (pinned: scikit-learn>=1.6)."""

from sklearn.base import _fit_context  # noqa: F401
from sklearn.utils._param_validation import (  # noqa: F401
    HasMethods, Interval, Options, StrOptions, validate_parameter_constraints, validate_params,
)
from sklearn.utils.validation import _check_method_params, check_is_fitted  # noqa: F401
from sklearn.utils.validation import validate_data as _sklearn_validate_data

_NOT_NUMERIC = ("could not convert", "Unable to convert", "invalid literal")


def _first_non_numeric(values):
    """The first entry of ``values`` that is not a number (None if all are)."""
    import numpy as np

    arr = np.asarray(values, dtype=object).ravel()
    for v in arr:
        try:
            float(v)
        except (TypeError, ValueError):
            return v.item() if hasattr(v, "item") else v
    return None


def _date_like(X, y):
    """``(argument, description)`` of the first of X, y (arrays, Series, DataFrames) that
    holds datetime or timedelta values (a column's name where it has one), or None."""
    for arg, values in (("X", X), ("y", y)):
        dtypes = getattr(values, "dtypes", None)  # a DataFrame: one dtype per column
        if dtypes is not None and hasattr(dtypes, "items"):
            for col, dt in dtypes.items():
                if getattr(dt, "kind", "") in ("m", "M"):
                    return arg, f"{dt} values (column {col!r})"
            continue
        dt = getattr(values, "dtype", None)  # an array or a Series (lists are not read)
        if getattr(dt, "kind", "") in ("m", "M"):
            return arg, f"{dt} values"
    return None


def validate_data(estimator, X="no_validation", y="no_validation", **kwargs):
    """sklearn's ``validate_data``, whose "could not convert string to float" names the
    argument (X or y) and the offending value, with a hint for string targets.

    Dense arrays come back C-contiguous (``order="C"`` unless the caller says otherwise), so
    that a fit or a prediction does not depend on the memory layout of the input: NumPy's
    reductions sum a Fortran-ordered column in another order than a C-ordered one.
    """
    kwargs.setdefault("order", "C")
    # NumPy casts dates to floats silently, or fails to promote them beside numbers; class
    # labels may be anything hashable
    where = _date_like(X, y if kwargs.get("y_numeric") else None)
    if where is not None:
        raise TypeError(f"{type(estimator).__name__}: {where[0]} must be numeric, but it "
                        f"holds {where[1]}. Convert dates and durations to numbers first "
                        "(e.g. days since a reference date).")
    try:
        out = _sklearn_validate_data(estimator, X, y, **kwargs)
        if kwargs.get("y_numeric") and isinstance(out, tuple):
            kind = getattr(getattr(out[1], "dtype", None), "kind", "f")
            if kind in "USO":  # sklearn converts only object arrays
                bad = _first_non_numeric(out[1])
                raise ValueError(
                    f"{type(estimator).__name__}: y must be numeric, but it holds "
                    + (f"{bad!r}. For class labels use a classifier." if bad is not None
                       else f"text (dtype {out[1].dtype}); convert it with y.astype(float)."))
        return out
    except ValueError as exc:
        if not any(m in str(exc) for m in _NOT_NUMERIC):
            raise
        name = type(estimator).__name__
        for arg, values in (("X", X), ("y", y)):
            if isinstance(values, str) or values is None:
                continue
            try:
                bad = _first_non_numeric(values)
            except Exception:  # an exotic container: keep sklearn's message
                continue
            if bad is not None:
                hint = (" For class labels use a classifier." if arg == "y"
                        and kwargs.get("y_numeric") else
                        " Encode text columns first (e.g. sklearn's OneHotEncoder)."
                        if arg == "X" else "")
                raise ValueError(f"{name}: {arg} must be numeric, but it holds {bad!r}."
                                 f"{hint}") from exc
        raise
