"""Reliability over every public estimator (issue 12): an interrupted or failed fit leaves the
previous model (or none), and extreme target scales give finite predictions. The estimators
are discovered, so later ones are covered too.

The interruption is injected into ``torch.linalg.cholesky_ex``, which every estimator's fit
reaches (kernel factorisations, the low-rank evidence, the last-layer posterior).
"""

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError

from skbnngp.utils import all_estimators

from .conftest import FAST

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def persistence_data(kind, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 2)) * scale
    y = X[:, 0] - X[:, 1] ** 2 / scale
    if kind == "classifier":
        y = (y > np.median(y)).astype(int)
    return X, y


def predictive_outputs(est, X, kind):
    return est.predict_proba(X) if kind == "classifier" else est.predict(X, return_std=True)


def _interrupt_after(monkeypatch, calls):
    real, count = torch.linalg.cholesky_ex, {"n": 0}

    def flaky(*args, **kwargs):
        count["n"] += 1
        if count["n"] > calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.linalg, "cholesky_ex", flaky)


@pytest.mark.parametrize("name, Est", all_estimators())
def test_interrupted_refit_keeps_the_previous_model(monkeypatch, name, Est):
    kind = "classifier" if name.endswith("Classifier") else "regressor"
    X, y = persistence_data(kind)
    est = Est(**FAST.get(name, {}), random_state=0).fit(X, y)
    before = predictive_outputs(est, X, kind)
    X2, y2 = persistence_data(kind, scale=100.0, seed=1)
    for calls in (0, 1, 2):
        with monkeypatch.context() as m:
            _interrupt_after(m, calls)
            with pytest.raises(KeyboardInterrupt):
                est.fit(X2, y2)
        for a, b in zip(np.atleast_1d(before), np.atleast_1d(predictive_outputs(est, X, kind))):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, Est", all_estimators())
def test_interrupted_first_fit_leaves_an_unfitted_estimator(monkeypatch, name, Est):
    kind = "classifier" if name.endswith("Classifier") else "regressor"
    X, y = persistence_data(kind)
    est = Est(**FAST.get(name, {}), random_state=0)
    _interrupt_after(monkeypatch, 0)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    monkeypatch.undo()
    with pytest.raises(NotFittedError):
        est.predict(X)


@pytest.mark.parametrize("name, Est", all_estimators("regressor"))
@pytest.mark.parametrize("scale, dtype", [(1e155, np.float64), (1e30, np.float32)])
def test_targets_near_the_float_limit_give_finite_predictions(name, Est, scale, dtype):
    """Issue 12 reproducer: float64 y near 1e155 (and float32 y near 1e30) overflowed in
    y.std() or in var * y_std**2 and gave NaN means and infinite stds."""
    X, y = persistence_data("regressor")
    params = dict(FAST.get(name, {}), random_state=0)
    if "normalize_y" in Est().get_params():
        params["normalize_y"] = True
    ref = Est(**params).fit(X, y)
    big = Est(**params).fit(X, (y * scale).astype(dtype))
    mean, std = big.predict(X, return_std=True)
    if getattr(big, "predictive_df_", np.inf) <= 2:  # a Student-t without a variance:
        std = big.predict_dist(X).kwds["scale"]      # its scale must still be finite
        assert np.all(np.isinf(big.predict_std(X)))
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)
    if name == "StudentTProcessRegressor":  # deterministic: exactly equivariant
        np.testing.assert_allclose(mean / scale, ref.predict(X), rtol=1e-5, atol=1e-6)
