"""FiDGPClassifier's fitted state is self-contained (issue 18, items 3 and 4)."""

import pickle

import numpy as np
import pytest
from sklearn.datasets import make_classification

from skbnngp import FiDGPClassifier


@pytest.fixture(scope="module")
def fitted():
    X, y = make_classification(n_samples=60, n_features=4, n_informative=3, n_redundant=0,
                               n_classes=3, random_state=0)
    est = FiDGPClassifier(hidden_layer_sizes=(8,), max_iter=3, ood_projector_steps=5,
                          device="cpu", dtype="float64", random_state=0).fit(X, y)
    return pickle.dumps(est), X


@pytest.mark.parametrize("param,value", [("n_predict_samples", 0), ("n_predict_samples", -1),
                                         ("n_predict_samples", 2.5)])
@pytest.mark.parametrize("method", ["predict", "predict_proba", "predict_log_proba",
                                    "decision_function", "predict_uncertainty",
                                    "sample_proba"])
def test_predict_time_parameter_checked_with_fit_constraints(fitted, method, param, value):
    blob, X = fitted
    est = pickle.loads(blob).set_params(**{param: value})
    with pytest.raises(ValueError, match=param):
        getattr(est, method)(X)


@pytest.mark.parametrize("param,value", [("sampling", "mean"), ("sampling", "reparam"),
                                         ("activation", "tanh"), ("dtype", "float32"),
                                         ("hidden_layer_sizes", (3,)),
                                         ("inducing_rows", 1), ("fid_layers", "last")])
def test_set_params_after_fit_changes_nothing_until_refit(fitted, param, value):
    # Everything predict and the round trip need is fitted state: a parameter changed after
    # fit acts at the next fit only, in memory and after pickling alike.
    blob, X = fitted
    ref = pickle.loads(blob)
    want_p, want_s = ref.predict_proba(X), ref.ood_score(X)
    est = pickle.loads(blob)
    est.predict_proba(X)
    est.set_params(**{param: value})
    back = pickle.loads(pickle.dumps(est))
    for model in (est, back):
        np.testing.assert_array_equal(model.predict_proba(X), want_p)
        np.testing.assert_array_equal(model.ood_score(X), want_s)
