"""The models compared: every discovered skbnngp estimator of the task (new estimators join
by being public estimators), plus scikit-learn's Gaussian process."""

from __future__ import annotations

import numpy as np
from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from ._common import UsageError


def _sklearn_gpr(n_features):
    """scikit-learn's GP regressor: amplitude x ARD RBF + WhiteKernel, normalised targets."""
    kernel = (ConstantKernel(1.0) * RBF(length_scale=np.ones(n_features))
              + WhiteKernel(noise_level=1.0))
    return GaussianProcessRegressor(kernel=kernel, normalize_y=True)


#: Above this many features the GP classifier gets one length scale instead of one per
#: feature: with one-vs-rest over ten classes an ARD kernel on digits' 64 pixels is 65
#: hyperparameters per class, and its fit time outgrew what the pilots of ``compare`` predict
#: (about 3 min a fold on 323 rows against a 300 s budget for the whole run).
GPC_ARD_MAX_FEATURES = 20


def _sklearn_gpc(n_features):
    """scikit-learn's GP classifier (Laplace, one-vs-rest): amplitude x RBF, with one length
    scale per feature up to :data:`GPC_ARD_MAX_FEATURES` features and one shared above."""
    scale = np.ones(n_features) if n_features <= GPC_ARD_MAX_FEATURES else 1.0
    return GaussianProcessClassifier(kernel=ConstantKernel(1.0) * RBF(length_scale=scale))


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
    from ..utils.discovery import all_estimators

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
