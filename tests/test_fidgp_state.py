"""FiDGPClassifier's fitted state is self-contained and its predict-time parameters are
validated (issue 18, items 3 and 4)."""

import pickle

import pytest
from sklearn.datasets import load_iris

from skbnngp import FiDGPClassifier

from ._promise import assert_same_predictions

pytest.importorskip("zuko")
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture(scope="module")
def fitted():
    X, y = load_iris(return_X_y=True)
    clf = FiDGPClassifier(hidden_layer_sizes=(8,), max_iter=4, batch_size=50,
                          ood_projector_steps=5, random_state=0, device="cpu").fit(X, y)
    return pickle.dumps(clf), X


@pytest.mark.parametrize("param,value", [("activation", "tanh"), ("dtype", "float64"),
                                         ("hidden_layer_sizes", (3, 3)),
                                         ("inducing_rows", 2), ("max_sd_u", 1.0),
                                         ("calibration", "temperature"),
                                         ("validation_fraction", 0.5)])
def test_set_params_after_fit_changes_nothing_fitted(fitted, param, value):
    blob, X = fitted
    ref = pickle.loads(blob)
    est = pickle.loads(blob).set_params(**{param: value})
    back = pickle.loads(pickle.dumps(est))
    for method in ("predict_proba", "ood_score"):
        want = getattr(ref, method)(X)
        assert_same_predictions(getattr(est, method)(X), want, "float32")
        assert_same_predictions(getattr(back, method)(X), want, "float32")


@pytest.mark.parametrize("param,value,methods", [
    ("n_predict_samples", 0, ["predict", "predict_proba", "predict_uncertainty",
                              "sample_proba"]),
    ("n_predict_samples", 2.5, ["predict_proba"]),
    ("sampling", "bogus", ["predict_proba", "sample_proba", "decision_function"]),
])
def test_predict_time_parameters_are_checked_like_fit(fitted, param, value, methods):
    blob, X = fitted
    for method in methods:
        est = pickle.loads(blob).set_params(**{param: value})
        with pytest.raises((ValueError, TypeError), match=param):
            getattr(est, method)(X)
