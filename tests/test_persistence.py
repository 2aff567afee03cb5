"""Pickle, joblib and skops round trips of every public estimator give bit-identical
predictions, for both dtypes and every inference mode; skops needs to trust only the
package's own types."""

import io
import pickle
import warnings

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris

from skbnngp.utils import all_estimators

#: Small settings per estimator, and the modes worth a round trip each.
FAST = {
    "StudentTProcessRegressor": dict(max_iter=5),
    "StudentTProcessClassifier": dict(max_iter=5),
    "MixedActivationGPRegressor": dict(n_anchors=20, max_iter=5),
    "DBKRegressor": dict(n_basis=8, hidden_layer_sizes=(8,), max_iter=5),
    "RichBLLRegressor": dict(hidden_layer_sizes=(8,), max_iter=5),
    "FiDGPClassifier": dict(hidden_layer_sizes=(8,), max_iter=3, ood_projector_steps=5),
}
MODES = {
    "MixedActivationGPRegressor": [dict(approx="exact"), dict(approx="nystrom")],
    "DBKRegressor": [dict(inference="exact"), dict(inference="svi", batch_size=50)],
    "StudentTProcessRegressor": [dict(), dict(prior="burr12", n_samples=200)],
}


def _cases():
    for name, Est in all_estimators():
        for mode in MODES.get(name, [dict()]):
            for dtype in ("float64", "float32"):
                yield pytest.param(name, Est, {**FAST.get(name, {}), **mode, "dtype": dtype},
                                   id=f"{name}-{'-'.join(map(str, mode.values()))}-{dtype}")


def _outputs(est, X):
    out = {}
    if hasattr(est, "predict_proba"):
        out["proba"] = est.predict_proba(X)
        out["predict"] = est.predict(X)
        if hasattr(est, "ood_score"):
            out["ood"] = est.ood_score(X)
    else:
        out["mean"], out["std"] = est.predict(X, return_std=True)
        out["cov"] = est.predict(X[:5], return_cov=True)[1]
    return out


def _skops_round_trip(est):
    sio = pytest.importorskip("skops.io")
    data = sio.dumps(est)
    untrusted = sio.get_untrusted_types(data=data)
    assert all(t.startswith("skbnngp.") for t in untrusted), untrusted
    return sio.loads(data, trusted=untrusted)


def _joblib_round_trip(est):
    buf = io.BytesIO()
    joblib.dump(est, buf)
    buf.seek(0)
    return joblib.load(buf)


@pytest.mark.parametrize("name,Est,params", list(_cases()))
@pytest.mark.parametrize("how", ["pickle", "joblib", "skops"])
def test_round_trip_is_bit_identical(name, Est, params, how):
    X, y = load_iris(return_X_y=True)
    if "Regressor" in name:
        X, y = X[:, :3], X[:, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Est(device="cpu", random_state=0, **params).fit(X, y)
        before = _outputs(est, X)
        if how == "pickle":
            clone = pickle.loads(pickle.dumps(est))
        elif how == "joblib":
            clone = _joblib_round_trip(est)
        else:
            clone = _skops_round_trip(est)
        after = _outputs(clone, X)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
