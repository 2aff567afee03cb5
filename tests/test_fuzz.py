"""Property-based fuzzing of every public estimator (discovered, so later ones are covered).

Each generated case builds a data set of random shape (1 to 300 rows, 1 to 20 features, some
rows duplicated, some columns constant), dtype (float32, float64, int, bool), memory order,
container (ndarray, pandas frame, scipy sparse), magnitude (1e-300 to 1e300), with NaN/inf,
string, object or complex entries placed at random, 1 to 3 targets, and sometimes a fit
interrupted at a random factorisation or gradient step. The estimator must then either

* fit, and predict finite values of the right shape (``predict`` agreeing with
  ``predict_proba`` for classifiers), the same after a pickle round trip under the
  repeatability promise of ``tests/_promise.py``; or
* raise ``ValueError``/``TypeError`` whose message names the offending argument.

A quarter of the fitted cases then set one parameter that the predict methods read (found by
watching them) to a valid or an invalid value: an invalid one must be refused, naming it, and a
valid one must give finite predictions or be refused, naming it (issue 18, item 4).

An interrupted fit must leave an unfitted estimator. Any other exception type, a NaN/inf
output for finite input, or a half-fitted estimator fails the case.

Profiles: the default (CI) runs a fixed set of ``FUZZ_FAST`` cases per estimator;
``SKBNNGP_FUZZ=long`` runs ``FUZZ_LONG`` (>= 1000) random cases per estimator and prints the
outcome counts (``pytest -s``).
"""

import collections
import os
import pickle
import re
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from skbnngp.utils import all_estimators

from ._params import SKIP, alternatives, invalid_value, watching
from ._promise import assert_same_labels, assert_same_predictions

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

LONG = os.environ.get("SKBNNGP_FUZZ", "") == "long"
FUZZ_FAST, FUZZ_LONG = 25, 1000

#: Tiny settings: the fuzz checks behaviour, not accuracy.
SETTINGS = {
    "StudentTProcessRegressor": dict(max_iter=3),
    "StudentTProcessClassifier": dict(max_iter=3),
    "MixedActivationGPRegressor": dict(n_anchors=10, max_iter=3),
    "DBKRegressor": dict(n_basis=4, hidden_layer_sizes=(4,), max_iter=3),
    "RichBLLRegressor": dict(hidden_layer_sizes=(4,), max_iter=3, batch_size=64),
    "FiDGPClassifier": dict(hidden_layer_sizes=(4,), max_iter=2, batch_size=128,
                            n_predict_samples=2),
}
#: A ValueError/TypeError must name the argument at fault: these words do.
NAMES = re.compile(r"\bX\b|\by\b|sample|feature|class|target|label|sparse|dtype|complex|"
                   r"string|NaN|infinit|numeric|finite|scale|range|rows|n_|shape|dimension",
                   re.IGNORECASE)

COUNTS = collections.defaultdict(collections.Counter)


@st.composite
def cases(draw, classifier, multi_output):
    n = draw(st.integers(1, 300))
    d = draw(st.integers(1, 20))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if n > 2 and draw(st.booleans()):  # duplicated rows
        k = draw(st.integers(1, n - 1))
        X[rng.choice(n, k)] = X[rng.choice(n, 1)]
    if draw(st.booleans()):  # constant columns
        X[:, rng.choice(d, draw(st.integers(1, d)))] = draw(
            st.sampled_from([0.0, 1.0, -3.5, 1e10]))
    X = X * 10.0 ** draw(st.one_of(st.just(0), st.integers(-6, 6), st.integers(-300, 300)))
    kind = draw(st.sampled_from(["float64", "float32", "int", "bool"]))
    with np.errstate(over="ignore"):
        X32 = X.astype(np.float32)
    X = {"float64": X, "float32": X32,
         "int": np.clip(np.nan_to_num(X), -1e6, 1e6).astype(np.int64),
         "bool": X > 0}[kind]
    bad = draw(st.sampled_from(["none"] * 10 + ["nan", "inf", "string", "object", "complex"]))
    if bad in ("nan", "inf"):
        X = X.astype(np.float64)
        X[rng.integers(n), rng.integers(d)] = np.nan if bad == "nan" else -np.inf
    elif bad == "string":
        X = X.astype(str)
        X[rng.integers(n), rng.integers(d)] = "a"
    elif bad == "object":
        X = X.astype(object)
    elif bad == "complex":
        X = X + 1j
    n_targets = draw(st.integers(1, 3)) if multi_output else 1
    if classifier:
        k = draw(st.one_of(st.integers(2, 4), st.just(1)))
        y = rng.integers(k, size=n)
        if draw(st.booleans()):
            y = np.array(["a", "b", "c", "d"])[y]
    else:
        y = X[:, 0].astype(np.float64) if bad == "none" and kind != "bool" else \
            rng.normal(size=n)
        y = np.nan_to_num(y.astype(np.float64), nan=0.0, posinf=1.0, neginf=-1.0)
        y = y * 10.0 ** draw(st.one_of(st.just(0), st.integers(-6, 6), st.integers(-300, 300))) \
            + rng.normal(size=n)
        if n_targets > 1:
            y = np.column_stack([y] + [rng.normal(size=n) for _ in range(n_targets - 1)])
        if draw(st.booleans()):
            with np.errstate(over="ignore"):
                y = y.astype(np.float32)
    container = draw(st.sampled_from(["ndarray"] * 4 + ["fortran", "pandas", "sparse"]))
    if container == "fortran":
        X = np.asfortranarray(X)
    elif container == "pandas":
        import pandas as pd
        X = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
    elif container == "sparse" and bad == "none":
        import scipy.sparse as sp
        X = sp.csr_matrix(np.asarray(X, dtype=np.float64))
    interrupt = draw(st.sampled_from([0] * 4 + [1, 2, 5]))
    tweak = (draw(st.sampled_from([None, None, "valid", "invalid"])),
             draw(st.integers(0, 10**6)))
    return dict(X=X, y=y, interrupt=interrupt, tweak=tweak,
                label=f"n={n} d={d} {kind} {bad} {container} targets={n_targets}"
                      + (f" then one predict-time parameter made {tweak[0]}" if tweak[0] else ""))


def _interrupting(monkeypatch, after):
    """Raise KeyboardInterrupt at the ``after``-th factorisation or backward pass."""
    count = {"n": 0}
    real_chol, real_backward = torch.linalg.cholesky_ex, torch.Tensor.backward

    def tick():
        count["n"] += 1
        if count["n"] >= after:
            raise KeyboardInterrupt

    def chol(*a, **k):
        tick()
        return real_chol(*a, **k)

    def backward(self, *a, **k):
        tick()
        return real_backward(self, *a, **k)

    monkeypatch.setattr(torch.linalg, "cholesky_ex", chol)
    monkeypatch.setattr(torch.Tensor, "backward", backward)


def predictive_outputs(est, X, classifier):
    if classifier:
        P = est.predict_proba(X)
        pred = est.predict(X)
        return {"proba": P, "pred": pred}
    mean, std = est.predict(X, return_std=True)
    return {"mean": mean, "std": std}


def _check_outputs(out, n, classifier, est, y):
    if classifier:
        P = out["proba"]
        assert P.shape == (n, len(est.classes_))
        assert np.all(np.isfinite(P)), "non-finite probabilities"
        np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-5)
        np.testing.assert_array_equal(out["pred"], est.classes_[P.argmax(1)])
    else:
        shape = (n,) if np.ndim(y) == 1 else (n, y.shape[1])
        for key in ("mean", "std"):
            assert out[key].shape == shape, key
            if key == "std":
                # a Student-t calibration with df <= 2 has no variance: inf is the answer
                # (per target: predictive_df_ is an array for a multi-output y)
                heavy = np.broadcast_to(np.asarray(getattr(est, "predictive_df_", np.inf))
                                        <= 2, shape[1:]).ravel()
                col = out[key].reshape(n, -1)
                assert np.all(np.isposinf(col[:, heavy])), "a t without a variance: inf std"
                assert np.all(np.isfinite(col[:, ~heavy])), "non-finite std"
                continue
            assert np.all(np.isfinite(out[key])), f"non-finite {key}"


REASONS = collections.Counter()


def _rejected(exc):
    msg = str(exc)
    assert NAMES.search(msg), f"message names no argument: {type(exc).__name__}: {msg}"
    REASONS[f"{type(exc).__name__}: {msg[:90]}"] += 1
    return "rejected"


def _run(Est, name, case, monkeypatch):
    classifier = name.endswith("Classifier")
    est = Est(**SETTINGS.get(name, {}), device="cpu", random_state=0)
    X, y = case["X"], case["y"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if case["interrupt"]:
            with monkeypatch.context() as m:
                _interrupting(m, case["interrupt"])
                try:
                    est.fit(X, y)
                except KeyboardInterrupt:
                    with pytest.raises(NotFittedError):
                        check_is_fitted(est)
                    return "interrupted"
                except (ValueError, TypeError) as exc:
                    return _rejected(exc)
        else:
            try:
                est.fit(X, y)
            except (ValueError, TypeError) as exc:
                return _rejected(exc)
        try:
            out = predictive_outputs(est, X, classifier)
        except ValueError as exc:  # e.g. a predictive that does not exist in float64
            return "predict " + _rejected(exc)
        _check_outputs(out, len(y), classifier, est, y)
        again = predictive_outputs(pickle.loads(pickle.dumps(est)), X, classifier)
    for key in out:  # the repeatability promise, not bit-identity (issue 22)
        if key == "pred":
            assert_same_labels(again[key], out[key], out["proba"], err_msg=key)
        else:
            assert_same_predictions(again[key], out[key], err_msg=key)
    if case["tweak"][0]:
        return _tweak_predict_time_parameter(est, X, y, classifier, *case["tweak"])
    return "fitted"


def _tweak_predict_time_parameter(est, X, y, classifier, kind, pick):
    """Set one parameter that the predict methods read (found by watching them) to a valid
    or an invalid value, after fit: the prediction must then be finite and of the right
    shape, or be refused with an error naming the parameter; an invalid value is refused."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with watching(est) as read:
            predictive_outputs(est, X, classifier)
        names = sorted(read - SKIP)
        if not names:
            return "fitted"
        param = names[pick % len(names)]
        if kind == "invalid":
            value = invalid_value(type(est), param)
        else:
            options = alternatives(type(est), param, getattr(est, param))
            value = options[pick % len(options)] if options else None
        if value is None:
            return "fitted"
        est.set_params(**{param: value})
        try:
            out = predictive_outputs(est, X, classifier)
        except (ValueError, TypeError) as exc:
            assert param in str(exc), f"{param}={value!r} refused without naming it: {exc!r}"
            return f"{kind} predict-time parameter refused"
    assert kind == "valid", f"{param}={value!r} was accepted at predict time"
    _check_outputs(out, len(y), classifier, est, y)
    return f"{kind} predict-time parameter used"


def _test_for(name, Est):
    classifier = name.endswith("Classifier")
    multi = (not classifier) and Est().__sklearn_tags__().target_tags.multi_output
    n = FUZZ_LONG if LONG else FUZZ_FAST

    # no shrinking: a failing case is reported as drawn (shrinking fits hundreds of models)
    @settings(max_examples=n, deadline=None, derandomize=not LONG, database=None,
              suppress_health_check=list(HealthCheck), print_blob=True,
              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    @given(case=cases(classifier, multi))
    def run(case, monkeypatch):
        COUNTS[name][_run(Est, name, case, monkeypatch)] += 1

    return run


@pytest.mark.parametrize("name, Est", all_estimators())
def test_fuzz(name, Est, monkeypatch):
    _test_for(name, Est)(monkeypatch=monkeypatch)
    counts = dict(COUNTS[name])
    print(f"\nfuzz {name}: {sum(counts.values())} cases {counts}")
    if LONG:
        for reason, k in REASONS.most_common(12):
            print(f"    {k:5d}  {reason}")
        REASONS.clear()
    assert sum(counts.values()) > 0
