"""Reliability of the Student-t process estimators (issue 18 items 3-4, issue 20 item 4)."""

import pickle
import warnings

import numpy as np
import pytest

from skbnngp import StudentTProcessClassifier, StudentTProcessRegressor


def _regression(n=30, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("change", [{"depth": 1}, {"activation": "erf"}, {"ard": False},
                                    {"alpha_mode": "relative"},
                                    {"predictive": "ntk_trained"}])
def test_regressor_set_params_after_fit_survives_a_round_trip(change):
    X, y = _regression()
    reg = StudentTProcessRegressor(device="cpu", random_state=0, max_iter=5).fit(X, y)
    before = reg.predict(X, return_std=True)
    reg.set_params(**change)
    back = pickle.loads(pickle.dumps(reg))
    for est in (reg, back):  # the fitted configuration is used in memory and after loading
        mean, std = est.predict(X, return_std=True)
        np.testing.assert_allclose(mean, before[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(std, before[1], rtol=1e-10, atol=1e-12)
    assert (back.depth_, back.activation_, back.ard_) == (3, "relu", True)


@pytest.mark.parametrize("bad", [0, 1, -3, 2.5])
def test_classifier_n_quadrature_is_checked_at_predict_time(bad):
    X, y = _regression(n=24)
    clf = StudentTProcessClassifier(device="cpu", random_state=0, max_iter=5)
    clf.fit(X, (y > 0).astype(int))
    clf.set_params(n_quadrature=bad)
    with pytest.raises((ValueError, TypeError), match="n_quadrature"):
        clf.predict_proba(X)


@pytest.mark.parametrize("param,bad", [("include_noise", "maybe"), ("batch_size", -4)])
def test_regressor_predict_time_parameters_are_checked(param, bad):
    X, y = _regression()
    reg = StudentTProcessRegressor(device="cpu", random_state=0, max_iter=5).fit(X, y)
    reg.set_params(**{param: bad})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((ValueError, TypeError), match=param):
            reg.predict(X)
