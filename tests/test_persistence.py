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

import joblib
import numpy as np
import pytest

from skbnngp.utils import all_estimators

from ._promise import assert_same_predictions
from .conftest import (
    MODES,
    ROOT,
    TINY,
    assert_same_outputs,
    persistence_data,
    predictive_outputs,
)


def _cases(dtypes=("float64", "float32")):
    for name, Est in all_estimators():
        for mode in MODES.get(name, [{}]):
            for dtype in dtypes:
                yield pytest.param(name, Est, {**TINY.get(name, {}), **mode, "dtype": dtype},
                                   id=f"{name}-{'-'.join(map(str, mode.values()))}-{dtype}")


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
    X, y = persistence_data(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Est(device="cpu", random_state=0, **params).fit(X, y)
        before = predictive_outputs(est, X)
        if how == "pickle":
            clone = pickle.loads(pickle.dumps(est))
        elif how == "joblib":
            clone = _joblib_round_trip(est)
        else:
            clone = _skops_round_trip(est)
        after = predictive_outputs(clone, X)
    assert_same_outputs(after, before, params["dtype"])


@pytest.mark.parametrize("name,Est,params", list(_cases(("float64",))))
def test_memory_layout_changes_neither_fit_nor_predictions(name, Est, params):
    """fit and predict on a Fortran-ordered or non-contiguous copy of X give what they give on
    the C-ordered X (issue 18, item 5: 6.7e-10 apart for the Student-t process before)."""
    X, y = persistence_data(name, "bool")
    wide = np.zeros((X.shape[0], 2 * X.shape[1]))
    wide[:, ::2] = X
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Est(device="cpu", random_state=0, **params).fit(X, y)
        before = predictive_outputs(ref, X)
        for layout in (np.asfortranarray(X), wide[:, ::2]):
            est = Est(device="cpu", random_state=0, **params).fit(layout, y)
            assert_same_outputs(predictive_outputs(est, layout), before, "float64")
            assert_same_outputs(predictive_outputs(ref, layout), before, "float64")


# ---------------------------------------------------------------- another process and thread count
_WORKER = r"""
import json, pickle, sys, warnings
import numpy as np
import torch
sys.path.insert(0, sys.argv[4])
from tests.conftest import MODES, TINY, persistence_data, predictive_outputs
from skbnngp.utils import all_estimators

action, path, kinds = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
warnings.simplefilter("ignore")
if action == "fit":
    store = []
    for name, Est in all_estimators():
        for mode in MODES.get(name, [{}]):
            for kind in kinds:
                X, y = persistence_data(name, kind)
                est = Est(device="cpu", random_state=0, **TINY.get(name, {}), **mode).fit(X, y)
                store.append((name, mode, kind, pickle.dumps(est), predictive_outputs(est, X)))
else:
    store = [(name, mode, kind, None, predictive_outputs(pickle.loads(blob), persistence_data(name, kind)[0]))
             for name, mode, kind, blob, _ in pickle.load(open(path, "rb"))]
with open(path if action == "fit" else path + ".out", "wb") as fh:
    pickle.dump(store, fh)
print(json.dumps({"threads": torch.get_num_threads()}))
"""


def _in_process(action, path, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _WORKER, action, str(path), "iris,bool",
                           str(ROOT)], check=False, env=env,
                          capture_output=True, text=True, timeout=900)
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
            assert_same_outputs(after, before, "float64")
        except AssertionError as exc:
            raise AssertionError(f"{name} {mode} on {kind}: {exc}") from None


@pytest.mark.parametrize("name,Est,params", list(_cases(("float64",))))
def test_promise_catches_a_changed_model(name, Est, params):
    """The promise's tolerance is tight enough to tell apart two models whose training data
    differ by one part in 10^7: a changed hyperparameter, other jitter or a refit move the
    predictions by far more than it allows."""
    X, y = persistence_data(name)
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
        before, after = predictive_outputs(est, X), predictive_outputs(moved, X)
    keys = [k for k in before if k != "predict"]
    failures = 0
    for key in keys:
        try:
            assert_same_predictions(after[key], before[key], "float64")
        except AssertionError:
            failures += 1
    assert failures >= 1, f"{name}: a model fitted on perturbed data passed the promise"
