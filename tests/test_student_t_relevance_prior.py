"""StudentTProcessRegressor's ``relevance_prior``: a Gaussian hyperprior on the spread of the
ARD log relevances around their mean, which makes the ARD hyperparameters maximum a
posteriori (issue 19: maximum-evidence relevances over-fit 167 rows of cpu_performance)."""

import numpy as np
import pytest
import torch
from sklearn.base import clone

from skbnngp import StudentTProcessClassifier, StudentTProcessRegressor
from skbnngp._student_t import HYPERPARAMETERS
from tests._promise import assert_same_predictions


def _fit(X, y, **kw):
    return StudentTProcessRegressor(device="cpu", random_state=0, **kw).fit(X, y)


@pytest.fixture(scope="module")
def few_rows():
    # 40 rows, six features, two of them relevant: maximum evidence spreads the relevances
    # of the four noise features over the whole box
    rng = np.random.RandomState(3)
    X = rng.randn(40, 6)
    return X, np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.randn(40)


def _spread(reg):
    return float(np.std(np.log(reg.relevance_)))


def _log_theta(reg):
    return np.log([reg.hyperparameters_[h] for h in HYPERPARAMETERS] + list(reg.relevance_))


def test_penalty_is_the_centred_gaussian_log_prior():
    tau = 0.7
    pen = StudentTProcessRegressor(relevance_prior=tau)._relevance_penalty(4)
    raw = torch.tensor([0.3, -1.0, 0.2, 0.7, 0.1, 1.0, -2.0, 0.5, 3.0], dtype=torch.float64,
                       requires_grad=True)
    value, grad = pen(raw.detach())
    dev = raw[5:] - raw[5:].mean()
    ref = 0.5 * torch.sum(dev ** 2) / tau ** 2
    (ref_grad,) = torch.autograd.grad(ref, raw)
    assert float(value) == pytest.approx(float(ref.detach()), rel=1e-12)
    torch.testing.assert_close(grad, ref_grad)
    assert torch.all(grad[:5] == 0)
    # the common level of the relevances is free: a shift costs nothing
    shifted = raw.detach().clone()
    shifted[5:] += 2.5
    assert float(pen(shifted)[0]) == pytest.approx(float(value), rel=1e-12)
    # nothing to shrink with fewer than two relevances, or without the prior
    assert StudentTProcessRegressor()._relevance_penalty(1) is None
    assert StudentTProcessRegressor(relevance_prior=None)._relevance_penalty(4) is None


def test_the_fit_is_a_stationary_point_of_the_map_objective(few_rows):
    X, y = few_rows
    tau = 1.5
    reg = _fit(X, y, relevance_prior=tau)
    theta = _log_theta(reg)
    _, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    rel = theta[5:]
    free = (np.abs(rel - np.log(1e-3)) > 1e-3) & (np.abs(rel - np.log(1e3)) > 1e-3)
    g_map = -grad[5:] + (rel - rel.mean()) / tau ** 2
    # the evidence alone is far from stationary there (the prior pulls), the MAP objective
    # is stationary in every relevance inside the box
    assert np.max(np.abs(grad[5:][free])) > 0.5
    assert np.max(np.abs(g_map[free])) < 0.05 * np.max(np.abs(grad[5:][free]))


def test_the_prior_shrinks_the_spread_towards_the_shared_kernel(few_rows):
    X, y = few_rows
    free = _fit(X, y, relevance_prior=None)
    spreads = [_spread(_fit(X, y, relevance_prior=tau)) for tau in (3.0, 1.0, 1e-3)]
    assert spreads[0] < _spread(free)
    assert spreads[1] < spreads[0]
    assert spreads[2] < 1e-2  # the limit: one relevance shared by every feature
    # the relevant features stay the most relevant
    reg = _fit(X, y)
    assert set(np.argsort(reg.relevance_)[-2:]) == {0, 1}


def test_a_wide_prior_is_the_maximum_evidence_fit(few_rows):
    X, y = few_rows
    wide, free = _fit(X, y, relevance_prior=1e4), _fit(X, y, relevance_prior=None)
    np.testing.assert_allclose(np.log(wide.relevance_), np.log(free.relevance_), atol=1e-3)
    np.testing.assert_allclose(wide.predict(X[:10]), free.predict(X[:10]), rtol=1e-4,
                               atol=1e-6)


def test_no_effect_with_one_feature_or_without_ard():
    rng = np.random.RandomState(4)
    X = rng.randn(50, 1)
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.randn(50)
    a, b = _fit(X, y), _fit(X, y, relevance_prior=None)
    assert_same_predictions(a.predict(X), b.predict(X))
    X4 = rng.randn(50, 4)
    a, b = _fit(X4, y, ard=False), _fit(X4, y, ard=False, relevance_prior=None)
    assert_same_predictions(a.predict(X4), b.predict(X4))


def test_the_classifier_keeps_maximum_evidence_relevances():
    rng = np.random.RandomState(5)
    X = rng.randn(60, 3)
    y = (X[:, 0] > 0).astype(int)
    clf = StudentTProcessClassifier(ard=True, device="cpu", random_state=0).fit(X, y)
    assert clf.regressor_.relevance_prior is None


@pytest.mark.parametrize("bad", [0.0, -1.0, "wide"])
def test_bad_relevance_prior_is_refused(few_rows, bad):
    X, y = few_rows
    with pytest.raises((ValueError, TypeError), match="relevance_prior"):
        _fit(X, y, relevance_prior=bad)


def test_a_model_saved_before_the_prior_existed_loads_as_maximum_evidence(few_rows):
    X, y = few_rows
    reg = _fit(X, y, relevance_prior=None)
    state = reg.__getstate__()
    del state["relevance_prior"]  # what a pickle of an earlier version holds
    old = StudentTProcessRegressor.__new__(StudentTProcessRegressor)
    old.__setstate__(state)
    assert old.get_params()["relevance_prior"] is None
    assert_same_predictions(old.predict(X[:10]), reg.predict(X[:10]))
    refit = clone(old).fit(X, y)  # two fits in one process: equal within rounding
    np.testing.assert_allclose(np.log(refit.relevance_), np.log(reg.relevance_), atol=1e-6)
    assert_same_predictions(refit.predict(X[:10]), reg.predict(X[:10]))
