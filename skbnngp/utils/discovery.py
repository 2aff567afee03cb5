"""Discovery of the public estimators of skbnngp (used by the common tests and the CLI)."""

import inspect

from sklearn.base import BaseEstimator, MetaEstimatorMixin


def all_estimators(type_filter=None, *, include_meta=False):
    """List ``(name, class)`` of every public estimator exported by :mod:`skbnngp`.

    Parameters
    ----------
    type_filter : {"regressor", "classifier"} or None
        Keep only that kind.
    include_meta : bool, default=False
        Also list the meta-estimators (``ConformalRegressor``), which wrap the others and
        have no model of their own (no ``device``, no default fit worth comparing).

    Returns
    -------
    list of (str, type), sorted by name.
    """
    import skbnngp

    out = []
    for name in skbnngp.__all__:
        obj = getattr(skbnngp, name)
        if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
            if issubclass(obj, MetaEstimatorMixin) and not include_meta:
                continue
            kind = getattr(obj, "_estimator_type", None)
            if kind is None:
                tags = obj().__sklearn_tags__()
                kind = tags.estimator_type
            if type_filter is None or kind == type_filter:
                out.append((name, obj))
    return sorted(out, key=lambda item: item[0])
