"""Shared settings and helpers of the test suite: the fast settings per estimator (sklearn's
checks, persistence, fitted state), the data and outputs the round-trip tests compare, and
fixtures."""

import signal
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_iris

from ._promise import assert_same_labels, assert_same_predictions

#: Small, fast settings per estimator (the checks fit dozens of tiny models).
FAST = {
    "StudentTProcessRegressor": dict(max_iter=15, device="cpu"),
    "StudentTProcessClassifier": dict(max_iter=15, device="cpu"),
    "MixedActivationGPRegressor": dict(n_anchors=20, max_iter=15, device="cpu"),
    "DBKRegressor": dict(n_basis=8, hidden_layer_sizes=(16,), max_iter=30, device="cpu"),
    "RichBLLRegressor": dict(hidden_layer_sizes=(16,), max_iter=30, device="cpu"),
    "FiDGPClassifier": dict(hidden_layer_sizes=(16,), max_iter=60, batch_size=256,
                            learning_rate_init=2e-2, device="cpu"),
}


#: Further configurations worth the whole check list (another inference mode ...).
EXTRA = {
    "DBKRegressor": [dict(FAST["DBKRegressor"], inference="svi", batch_size=16,
                          learning_rate_init=1e-2)],
}


#: Smaller settings for the persistence and fitted-state tests, and the modes (inference
#: variants) worth a round trip each.
TINY = {
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



def persistence_data(name, kind="iris"):
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


def noisy_binary(rng, n):
    """``(X, y)``: ``n`` rows of 4 Gaussian inputs and a noisy binary label (logit
    ``2 (x0 + x1 x2)``), the classifiers' duplicated-rows problem."""
    X = rng.normal(size=(n, 4))
    p = 1 / (1 + np.exp(-2 * (X[:, 0] + X[:, 1] * X[:, 2])))
    return X, (rng.uniform(size=n) < p).astype(int)


def predictive_outputs(est, X):
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


def assert_same_outputs(after, before, dtype):
    for key in before:
        if key == "predict":
            assert_same_labels(after[key], before[key], before["proba"], dtype, err_msg=key)
        else:
            assert_same_predictions(after[key], before[key], dtype, err_msg=key)




@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises ``KeyboardInterrupt`` in this process during the test, as in a terminal.

    A process started in the background by a non-interactive shell (``cmd &``, as some CI
    runners and ``nohup`` do) inherits SIGINT ignored, and Python then installs no handler:
    a test that sends itself SIGINT would see nothing happen."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)

#: Rich-BLL fits without held-out rows (no early stopping, a post-hoc head) warn that their
#: intervals may be far too narrow; tests that fit such models on purpose expect it
#: (tests/test_rich_bll_calibration.py checks the warning itself).
NO_HELD_OUT = pytest.mark.filterwarnings("ignore:.*may be far too narrow:UserWarning")
