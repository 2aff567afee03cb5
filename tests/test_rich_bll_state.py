"""Rich-BLL's fitted state is self-contained (issue 18, items 3 and 4)."""

import pickle

import numpy as np
import pytest

from skbnngp import RichBLLRegressor


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(60, 2))
    y = np.sin(3 * X[:, 0]) + 0.1 * rng.standard_normal(60)
    est = RichBLLRegressor(hidden_layer_sizes=(6,), max_iter=20, device="cpu",
                           random_state=0).fit(X, y)
    return est, X


@pytest.mark.parametrize("change", [{"uncertainty": "bll"}, {"uncertainty": "ntk"},
                                    {"dtype": "float32"}, {"activation": "tanh"},
                                    {"prior_variance": 7.0}, {"projection_ridge": 0.5}])
def test_set_params_then_pickle_predicts_as_fitted(fitted, change):
    est, X = fitted
    est = pickle.loads(pickle.dumps(est))
    mean, std = est.predict(X, return_std=True)
    est.set_params(**change)
    back = pickle.loads(pickle.dumps(est))
    for model in (est, back):
        m2, s2 = model.predict(X, return_std=True)
        np.testing.assert_allclose(m2, mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(s2, std, rtol=0, atol=1e-12)


@pytest.mark.parametrize("param,bad", [("batch_size_predict", 0), ("include_noise", "yes")])
def test_predict_time_parameters_are_validated(fitted, param, bad):
    est = pickle.loads(pickle.dumps(fitted[0])).set_params(**{param: bad})
    with pytest.raises(ValueError, match=param):
        est.predict(fitted[1], return_std=True)
