"""Student-t estimators: fitted state is self-contained and predict-time parameters are
checked (issue 18, items 3 and 4)."""

import pickle

import numpy as np
import pytest

from skbnngp import StudentTProcessClassifier, StudentTProcessRegressor


def _reg_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)


@pytest.mark.parametrize("change", [{"depth": 1}, {"activation": "erf"}, {"ard": False},
                                    {"alpha_mode": "relative"}, {"dtype": "float32"},
                                    {"prior_shape": 50.0}])
def test_set_params_after_fit_changes_nothing_until_refit(change):
    X, y = _reg_data()
    reg = StudentTProcessRegressor(max_iter=5, device="cpu", random_state=0).fit(X, y)
    mean, std = reg.predict(X, return_std=True)
    reg.set_params(**change)
    back = pickle.loads(pickle.dumps(reg))
    for est in (reg, back):
        m, s = est.predict(X, return_std=True)
        np.testing.assert_allclose(m, mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(s, std, rtol=1e-10, atol=1e-12)
    assert back.depth_ == 3 and back.activation_ == "relu" and back.ard_


@pytest.mark.parametrize("param,value", [("batch_size", -4),
                                         ("include_noise", "maybe")])
def test_regressor_predict_time_parameters_are_validated(param, value):
    X, y = _reg_data()
    reg = StudentTProcessRegressor(max_iter=5, device="cpu", random_state=0).fit(X, y)
    reg.set_params(**{param: value})
    with pytest.raises(ValueError, match=param):
        reg.predict(X, return_std=True)


@pytest.mark.parametrize("value", [0, 1, -3, 2.5])
def test_classifier_n_quadrature_is_validated_at_predict(value):
    X, y = _reg_data()
    clf = StudentTProcessClassifier(max_iter=5, device="cpu", random_state=0).fit(X, y > 0)
    clf.set_params(n_quadrature=value)
    with pytest.raises(ValueError, match="n_quadrature"):
        clf.predict_proba(X)
