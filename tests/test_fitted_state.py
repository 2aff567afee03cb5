"""Fitted state is self-contained (issue 18, items 3 and 4), for every public estimator and
inference mode, discovered automatically.

* After ``set_params`` without a refit, the model in memory and its pickle round trip predict
  the same, under the repeatability promise: a cache is rebuilt from fitted attributes, never
  from a parameter changed since ``fit``.
* Every constructor parameter that a predict-time method reads (while it rebuilds the cache
  of an unpickled model too) is validated there: an invalid value raises a ``ValueError`` or
  ``TypeError`` that names it. The parameters read are found by watching the attribute
  reads of each method, so a parameter that later becomes predict-time is covered.
* ``partial_fit`` after ``set_params`` continues from the fitted configuration, or refuses
  the change with an error naming the parameter.
"""

import pickle

import numpy as np
import pytest

from skbnngp.utils import all_estimators

from ._params import SKIP, alternatives, invalid_value, watching
from ._promise import assert_same_predictions
from .conftest import MODES, TINY, persistence_data

pytestmark = pytest.mark.filterwarnings("ignore")

#: The predict-time methods, with the arguments they are called with (whichever exist).
CALLS = [
    ("predict", {}), ("predict", {"return_std": True}), ("predict", {"return_cov": True}),
    ("predict_std", {}), ("predict_dist", {}), ("predict_interval", {}),
    ("sample_y", {"n_samples": 2}),
    ("log_marginal_likelihood", {}), ("predict_proba", {}), ("predict_log_proba", {}),
    ("decision_function", {}), ("predict_margin", {}), ("predict_uncertainty", {}),
    ("sample_proba", {}), ("ood_score", {}),

]


def _cases(test):
    for name, Est in all_estimators():
        for mode in MODES.get(name, [{}]):
            yield pytest.param(name, Est, {**TINY.get(name, {}), **mode},
                               id="-".join([name, *map(str, mode.values())]))


def _fitted(name, Est, params):
    X, y = persistence_data(name)
    est = Est(device="cpu", random_state=0, **params).fit(X, y)
    return pickle.dumps(est), X, y


def _call(est, method, kwargs, X):
    if method == "predict" and kwargs.get("return_cov"):
        X = X[:5]
    if method == "log_marginal_likelihood":
        return est.log_marginal_likelihood()
    if method == "sample_y":
        return est.sample_y(X, random_state=0, **kwargs)
    return getattr(est, method)(X, **kwargs)


def _arrays(out):
    """The numbers of a method's output: arrays, tuples, dicts, frozen distributions."""
    if isinstance(out, dict):
        return [a for key in sorted(out) for a in _arrays(out[key])]
    if isinstance(out, (tuple, list)):
        return [a for item in out for a in _arrays(item)]
    if hasattr(out, "mean") and hasattr(out, "std") and callable(out.std):  # a distribution
        return [np.asarray(out.mean()), np.asarray(out.std())]
    return [np.asarray(out)]


def _outcome(est, method, kwargs, X):
    """``("ok", arrays)`` or ``("error", exception type)``."""
    try:
        return "ok", _arrays(_call(est, method, kwargs, X))
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as exc:
        return "error", type(exc)


def _methods(est):
    return [(m, kw) for m, kw in CALLS if hasattr(est, m)
            and not (m == "predict" and kw and not hasattr(est, "predict_std"))]


@pytest.mark.parametrize("name,Est,params", list(_cases("validated")))
def test_predict_time_parameters_are_validated(name, Est, params):
    blob, X, _ = _fitted(name, Est, params)
    problems = []
    for method, kwargs in _methods(pickle.loads(blob)):
        fresh = pickle.loads(blob)  # its cache is rebuilt inside the method: watched too
        with watching(fresh) as read:
            _call(fresh, method, kwargs, X)
        for param in sorted(read):
            bad = invalid_value(Est, param)
            if bad is None:
                continue
            est = pickle.loads(blob)
            est.set_params(**{param: bad})
            try:
                _call(est, method, kwargs, X)
                problems.append(f"{method}{kwargs or ''} reads {param}={bad!r} unchecked")
            except (ValueError, TypeError) as exc:
                if param not in str(exc):
                    problems.append(f"{method}: {param}={bad!r} gave {exc!r}")
            except Exception as exc:  # noqa: BLE001 - any other error is a finding
                problems.append(f"{method}: {param}={bad!r} gave {exc!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name,Est,params", list(_cases("round_trip")))
def test_set_params_after_fit_round_trips(name, Est, params):
    blob, X, _ = _fitted(name, Est, params)
    base = pickle.loads(blob)
    methods, problems = _methods(base), []
    for param, current in sorted(base.get_params(deep=False).items()):
        if param in SKIP:
            continue
        for value in alternatives(Est, param, current):
            est = pickle.loads(blob)
            for method, kwargs in methods:  # build the caches before the change
                _outcome(est, method, kwargs, X)
            est.set_params(**{param: value})
            back = pickle.loads(pickle.dumps(est))
            for method, kwargs in methods:
                here, there = _outcome(est, method, kwargs, X), _outcome(back, method, kwargs, X)
                what = f"set_params({param}={value!r}), then {method}{kwargs or ''}"
                try:
                    assert here[0] == there[0] and (here[0] == "ok" or here[1] == there[1]), \
                        f"in memory {here}, after a round trip {there}"
                    for a, b in zip(there[1] if here[0] == "ok" else [],
                                    here[1] if here[0] == "ok" else []):
                        if np.asarray(b).dtype.kind in "fc":
                            assert_same_predictions(a, b, params.get("dtype", "float64"))
                        else:
                            np.testing.assert_array_equal(a, b)
                except AssertionError as exc:
                    problems.append(f"{what}: {str(exc).strip().splitlines()[0][:160]}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name,Est,params",
                         [c for c in _cases("partial_fit") if hasattr(c.values[1], "partial_fit")])
def test_partial_fit_after_set_params_keeps_the_fitted_configuration(name, Est, params):
    blob, X, y = _fitted(name, Est, params)
    rng = np.random.default_rng(5)
    X2, y2 = X + 0.01 * rng.standard_normal(X.shape), y + 0.01 * rng.standard_normal(y.shape)
    try:
        pickle.loads(blob).partial_fit(X2, y2)
    except ValueError:
        pytest.skip(f"{name} {params}: no partial_fit in this mode")
    base, problems = pickle.loads(blob), []
    for param, current in sorted(base.get_params(deep=False).items()):
        if param in SKIP:
            continue
        for value in alternatives(Est, param, current):
            changed = pickle.loads(blob).set_params(**{param: value})
            try:
                changed.partial_fit(X2, y2)
            except (ValueError, TypeError) as exc:
                if param not in str(exc):
                    problems.append(f"{param}={value!r}: partial_fit raised {exc!r}")
                continue
            ref = pickle.loads(blob).partial_fit(X2, y2).set_params(**{param: value})
            for method, kwargs in _methods(ref):
                here, there = (_outcome(changed, method, kwargs, X),
                               _outcome(ref, method, kwargs, X))
                what = f"set_params({param}={value!r}), partial_fit, {method}{kwargs or ''}"
                try:
                    assert here[0] == there[0], f"{here} against {there}"
                    for a, b in zip(here[1] if here[0] == "ok" else [],
                                    there[1] if here[0] == "ok" else []):
                        assert_same_predictions(a, b, params.get("dtype", "float64"))
                except AssertionError as exc:
                    problems.append(f"{what}: {str(exc).strip().splitlines()[0][:160]}")
    assert not problems, "\n".join(problems)
