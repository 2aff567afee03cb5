"""Discovery of the public estimators of skbnngp (used by the common tests and the CLI)."""

import inspect

from sklearn.base import BaseEstimator


def all_estimators(type_filter=None):
    """List ``(name, class)`` of every public estimator exported by :mod:`skbnngp`.

    Parameters
    ----------
    type_filter : {"regressor", "classifier"} or None
        Keep only that kind.

    Returns
    -------
    list of (str, type), sorted by name.
    """
    import skbnngp

    out = []
    for name in skbnngp.__all__:
        obj = getattr(skbnngp, name)
        if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
            kind = getattr(obj, "_estimator_type", None)
            if kind is None:
                tags = obj().__sklearn_tags__()
                kind = tags.estimator_type
            if type_filter is None or kind == type_filter:
                out.append((name, obj))
    return sorted(out, key=lambda item: item[0])
