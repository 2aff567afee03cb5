"""DBKRegressor reliability regressions (issue 18, items 2, 3, 4 and 9)."""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import skbnngp._dbk as dbk_module
from skbnngp import DBKRegressor

from ._promise import assert_same_predictions

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
ROOT = Path(__file__).resolve().parent.parent
SMALL = {"n_basis": 8, "hidden_layer_sizes": (8,), "max_iter": 5, "device": "cpu",
         "random_state": 0}


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, 3))
    return X, np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.standard_normal(n)


def _outputs(est, X):
    return est.predict(X, return_std=True)


def test_interrupted_partial_fit_after_predict_leaks_nothing(monkeypatch, sigint_raises):
    """Issue 18 item 2: pickle a fitted SVI model, load it, predict (which builds the cache),
    interrupt a 20,000-row ``partial_fit`` with a real SIGINT from a timer thread, then
    ``partial_fit`` again: the model equals the uninterrupted run (``n_samples_seen_`` was
    21,375 instead of 1,375 because the predict cache was updated in place)."""
    X, y = _data(1_250)
    blob = pickle.dumps(DBKRegressor(**SMALL, inference="svi", batch_size=50,
                                     early_stopping=False).fit(X, y))
    X2, y2 = _data(125, seed=1)
    Xbig, ybig = _data(20_000, seed=2)
    ref = pickle.loads(blob)
    _outputs(ref, X2)
    ref.partial_fit(X2, y2)

    started, real = threading.Event(), dbk_module.svi_objective

    def watched(*args, **kwargs):
        started.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(dbk_module, "svi_objective", watched)

    def interrupt():
        started.wait(30)
        threading.Event().wait(0.05)  # well inside the 400 steps of the call
        os.kill(os.getpid(), signal.SIGINT)

    # When no signal arrives (the call finished and the 30 s wait after it passed) the attempt
    # is repeated on a fresh model, up to three times; that never counts as a pass. Misses in
    # every attempt were a test run started in the background with SIGINT ignored, which
    # the sigint_raises fixture rules out.
    for _ in range(3):
        est = pickle.loads(blob)
        before = _outputs(est, X2)
        started.clear()
        timer = threading.Thread(target=interrupt, daemon=True)
        timer.start()
        try:
            est.partial_fit(Xbig, ybig)
            threading.Event().wait(30)  # not reached when the signal lands in the call
        except KeyboardInterrupt:
            timer.join()
            break
        timer.join()
    else:
        pytest.fail("the SIGINT never interrupted partial_fit (three tries)")
    assert est.n_samples_seen_ == 1_250
    for a, b in zip(_outputs(est, X2), before):
        np.testing.assert_array_equal(a, b)
    est.partial_fit(X2, y2)
    assert est.n_samples_seen_ == ref.n_samples_seen_ == 1_375
    for a, b in zip(_outputs(est, X2), _outputs(ref, X2)):
        assert_same_predictions(a, b)


@pytest.mark.parametrize("inference", ["exact", "svi"])
def test_caches_are_rebuilt_from_fitted_attributes(inference):
    """Issue 18 item 3: after set_params without a refit, the model in memory and its
    pickle round trip predict the same (the cache was rebuilt from n_basis, feature_scale,
    preset, variance_correction, inference and dtype)."""
    X, y = _data(100)
    blob = pickle.dumps(DBKRegressor(**SMALL, inference=inference).fit(X, y))
    for change in [{"n_basis": 32}, {"feature_scale": 3.0}, {"preset": "paper"},
                   {"variance_correction": inference == "svi"}, {"dtype": "float32"},
                   {"inference": "svi" if inference == "exact" else "exact"},
                   {"hidden_layer_sizes": (64, 64)}]:
        est = pickle.loads(blob)
        here = _outputs(est, X)
        est.set_params(**change)
        back = pickle.loads(pickle.dumps(est))
        for a, b in zip(_outputs(back, X), here):
            assert_same_predictions(a, b, err_msg=str(change))
        for a, b in zip(_outputs(est, X), here):
            assert_same_predictions(a, b, err_msg=str(change))


def test_partial_fit_continues_the_fitted_configuration():
    """Issue 18 item 3: after set_params(n_basis=16), partial_fit kept training the 8-output
    network but set n_basis_=16; now the structure comes from the fitted model, and a
    changed training setting is refused naming the parameter."""
    X, y = _data(200)
    blob = pickle.dumps(DBKRegressor(**SMALL, inference="svi", batch_size=50).fit(X, y))
    ref = pickle.loads(blob).partial_fit(X, y)
    est = pickle.loads(blob).set_params(n_basis=16, feature_scale=2.0, dtype="float32",
                                        hidden_layer_sizes=(4,))
    est.partial_fit(X, y)
    assert est.n_basis_ == 8 and est.weight_mean_.shape == (8, 1)
    with torch.no_grad():
        out = est.network_(torch.zeros(1, 3, dtype=torch.float64))
    assert out.shape == (1, 8)
    for a, b in zip(_outputs(est, X), _outputs(ref, X)):
        assert_same_predictions(a, b)
    for param, value in [("learning_rate", 0.5), ("batch_size", 7), ("weight_decay", 0.1),
                         ("variance_correction", True), ("preset", "paper")]:
        est = pickle.loads(blob).set_params(**{param: value})
        with pytest.raises(ValueError, match=param):
            est.partial_fit(X, y)
        assert est.n_samples_seen_ == pickle.loads(blob).n_samples_seen_
    est = pickle.loads(blob).set_params(inference="exact")
    with pytest.raises(ValueError, match="inference"):
        est.partial_fit(X, y)
    exact = DBKRegressor(**SMALL).fit(X, y).set_params(inference="svi")
    with pytest.raises(ValueError, match="inference"):
        exact.partial_fit(X, y)


@pytest.mark.parametrize("bad", ["maybe", 2, None])
def test_predict_time_parameter_is_validated(bad):
    """Issue 18 item 4: include_noise (the one parameter a predict-time method reads) is
    checked there with the constraint of fit."""
    X, y = _data(60)
    est = DBKRegressor(**SMALL).fit(X, y).set_params(include_noise=bad)
    for call in (lambda: est.predict(X, return_std=True), lambda: est.predict(X),
                 lambda: est.predict_dist(X), lambda: est.sample_y(X[:3])):
        with pytest.raises(ValueError, match="include_noise"):
            call()


_MEMORY = textwrap.dedent("""
    import resource, sys, warnings
    import numpy as np
    warnings.simplefilter("ignore")
    from skbnngp import DBKRegressor
    n = int(sys.argv[1])
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(n, 8)); y = np.sin(X.sum(1))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    DBKRegressor(inference="svi", max_iter=1, n_basis=128, hidden_layer_sizes=(32,),
                 batch_size=2048, device="cpu", random_state=0).fit(X, y)
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB (Linux)")
def test_svi_fit_memory_does_not_grow_with_rows_beyond_the_data():
    """Issue 18 item 9: the SVI fit formed the n x r feature matrix (and its square) after
    training and at each validation, so its peak memory grew by about 2 r floats per row
    (3.3 GB at 10^6 x 8 against 0.57 GB for partial_fit). The peak of a fit on 200,000 rows
    minus that on 50,000 must stay within ten times the extra data (X is 64 bytes per row;
    the fit holds a few copies of it). Before the fix the difference was 440 MB, about 45
    times the extra data; now it is about 50 MB."""
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    peak = {}
    for n in (50_000, 200_000):
        out = subprocess.run([sys.executable, "-c", _MEMORY, str(n)], env=env, check=True,
                             capture_output=True, text=True, timeout=120)
        peak[n] = int(out.stdout.split()[-1])
    extra_data = (200_000 - 50_000) * 8 * 8
    assert peak[200_000] - peak[50_000] < 10 * extra_data, peak
