"""Pickle, joblib and skops round trips of every public estimator, for both dtypes and every
inference mode, keep the predictions under the package's repeatability promise
(``tests/_promise.py``): to 1e-10 (float64) or 1e-4 (float32) of each output's scale, also in
another process with another thread count, and whatever the memory layout of the input.
skops loads them with the package's recipe, ``trusted=skops_trusted_types()``."""

import io
import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris

from skbnngp.utils import all_estimators

from ._promise import assert_same_labels, assert_same_predictions

#: Small settings per estimator, and the modes worth a round trip each.
FAST = {
    "StudentTProcessRegressor": dict(max_iter=5),
    "StudentTProcessClassifier": dict(max_iter=5),
    "MixedActivationGPRegressor": dict(n_anchors=20, max_iter=5),
    "DBKRegressor": dict(n_basis=8, hidden_layer_sizes=(8,), max_iter=5),
    "RichBLLRegressor": dict(hidden_layer_sizes=(8,), max_iter=5),
    "FiDGPClassifier": dict(hidden_layer_sizes=(8,), max_iter=3),
}
MODES = {
    "MixedActivationGPRegressor": [dict(approx="exact"), dict(approx="nystrom")],
    "DBKRegressor": [dict(inference="exact"), dict(inference="svi", batch_size=50)],
    "StudentTProcessRegressor": [dict(), dict(prior="gaussian")],
}
ROOT = Path(__file__).resolve().parent.parent


def _cases(dtypes=("float64", "float32")):
    for name, Est in all_estimators():
        for mode in MODES.get(name, [dict()]):
            for dtype in dtypes:
                yield pytest.param(name, Est, {**FAST.get(name, {}), **mode, "dtype": dtype},
                                   id=f"{name}-{'-'.join(map(str, mode.values()))}-{dtype}")


def _data(name, kind="iris"):
    """Iris, or 178 x 11 binary rows with many duplicates (the shape of the fuzz case that
    failed on an Intel CPU: an ill-conditioned kernel matrix)."""
    if kind == "iris":
        X, y = load_iris(return_X_y=True)
        if "Regressor" in name:
            X, y = X[:, :3], X[:, 3]
        return X, y
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(178, 11)) > 0).astype(np.float64)
    y = X[:, 0] + 0.1 * rng.normal(size=178) if "Regressor" in name else X[:, 0].astype(int)
    return X, y


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


def _assert_same_outputs(after, before, dtype):
    for key in before:
        if key == "predict":
            assert_same_labels(after[key], before[key], before["proba"], dtype, err_msg=key)
        else:
            assert_same_predictions(after[key], before[key], dtype, err_msg=key)


def _skops_round_trip(est):
    sio = pytest.importorskip("skops.io")
    from skbnngp.utils import skops_trusted_types

    return sio.loads(sio.dumps(est), trusted=skops_trusted_types())


def _joblib_round_trip(est):
    buf = io.BytesIO()
    joblib.dump(est, buf)
    buf.seek(0)
    return joblib.load(buf)


@pytest.mark.parametrize("name,Est,params", list(_cases()))
@pytest.mark.parametrize("how", ["pickle", "joblib", "skops"])
def test_round_trip_keeps_predictions(name, Est, params, how):
    X, y = _data(name)
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
    _assert_same_outputs(after, before, params["dtype"])


@pytest.mark.parametrize("name,Est,params", list(_cases(("float64",))))
def test_memory_layout_changes_neither_fit_nor_predictions(name, Est, params):
    """fit and predict on a Fortran-ordered or non-contiguous copy of X give what they give on
    the C-ordered X (issue 18, item 5: 6.7e-10 apart for the Student-t process before)."""
    X, y = _data(name, "bool")
    wide = np.zeros((X.shape[0], 2 * X.shape[1]))
    wide[:, ::2] = X
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Est(device="cpu", random_state=0, **params).fit(X, y)
        before = _outputs(ref, X)
        for layout in (np.asfortranarray(X), wide[:, ::2]):
            est = Est(device="cpu", random_state=0, **params).fit(layout, y)
            _assert_same_outputs(_outputs(est, layout), before, "float64")
            _assert_same_outputs(_outputs(ref, layout), before, "float64")


# ---------------------------------------------------------------- another process and thread count
_WORKER = r"""
import json, pickle, sys, warnings
import numpy as np
import torch
sys.path.insert(0, sys.argv[4])
from tests.test_persistence import FAST, MODES, _data, _outputs
from skbnngp.utils import all_estimators

action, path, kinds = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
warnings.simplefilter("ignore")
if action == "fit":
    store = []
    for name, Est in all_estimators():
        for mode in MODES.get(name, [dict()]):
            for kind in kinds:
                X, y = _data(name, kind)
                est = Est(device="cpu", random_state=0, **FAST.get(name, {}), **mode).fit(X, y)
                store.append((name, mode, kind, pickle.dumps(est), _outputs(est, X)))
else:
    store = [(name, mode, kind, None, _outputs(pickle.loads(blob), _data(name, kind)[0]))
             for name, mode, kind, blob, _ in pickle.load(open(path, "rb"))]
with open(path if action == "fit" else path + ".out", "wb") as fh:
    pickle.dump(store, fh)
print(json.dumps({"threads": torch.get_num_threads()}))
"""


def _in_process(action, path, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _WORKER, action, str(path), "iris,bool",
                           str(ROOT)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["threads"] == threads


@pytest.mark.slow
@pytest.mark.parametrize("fit_threads,load_threads", [(1, 2), (2, 1)])
def test_round_trip_into_another_process_and_thread_count(tmp_path, fit_threads, load_threads):
    """Every estimator (each inference mode) fitted and pickled in a process with one thread
    count predicts, unpickled in a process with another, what it predicted when fitted (the
    class of failure that turned CI red on an Intel CPU, where MKL's threaded AVX-512 kernels
    round by memory alignment)."""
    path = tmp_path / "models.pkl"
    _in_process("fit", path, fit_threads)
    _in_process("load", path, load_threads)
    fitted = pickle.loads(path.read_bytes())
    loaded = pickle.loads((tmp_path / "models.pkl.out").read_bytes())
    assert len(fitted) == len(loaded) > 0
    for (name, mode, kind, _, before), (_, _, _, _, after) in zip(fitted, loaded):
        try:
            _assert_same_outputs(after, before, "float64")
        except AssertionError as exc:
            raise AssertionError(f"{name} {mode} on {kind}: {exc}") from None


@pytest.mark.parametrize("name,Est,params", list(_cases(("float64",))))
def test_promise_catches_a_changed_model(name, Est, params):
    """The promise's tolerance is tight enough to tell apart two models whose training data
    differ by one part in 10^7: a changed hyperparameter, other jitter or a refit move the
    predictions by far more than it allows."""
    X, y = _data(name)
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Est(device="cpu", random_state=0, **params).fit(X, y)
        if "Regressor" in name:
            moved = Est(device="cpu", random_state=0, **params).fit(
                X, y + 1e-7 * y.std() * rng.standard_normal(y.shape))
        else:
            moved = Est(device="cpu", random_state=0, **params).fit(
                X * (1 + 1e-7 * rng.standard_normal(X.shape)), y)
        before, after = _outputs(est, X), _outputs(moved, X)
    keys = [k for k in before if k != "predict"]
    failures = 0
    for key in keys:
        try:
            assert_same_predictions(after[key], before[key], "float64")
        except AssertionError:
            failures += 1
    assert failures >= 1, f"{name}: a model fitted on perturbed data passed the promise"
