"""``sample_weight``: a weighted likelihood equal to the repeated rows' (the GP engines, before
any merging of rows), integer weights equal to repeated rows and zero weights to dropped rows,
weighted calibration residuals, and duplicated rows in the Student-t classifier."""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.utils.validation import has_fit_parameter

from skbnngp import (
    MixedActivationGPRegressor,
    StudentTProcessClassifier,
    StudentTProcessRegressor,
)
from skbnngp._backend._calibration import student_t_calibration
from skbnngp._backend._gp import ExactGP, NystromGP, leave_group_out

from .conftest import FAST

#: The estimators whose fit takes sample_weight (the networks, DBK, Rich-BLL and FiD-GP,
#: do not yet).
WEIGHTED = [StudentTProcessRegressor, StudentTProcessClassifier, MixedActivationGPRegressor]
GP_REGRESSORS = [StudentTProcessRegressor(max_iter=30, device="cpu", random_state=0),
                 MixedActivationGPRegressor(approx="exact", max_iter=30, device="cpu",
                                            random_state=0),
                 MixedActivationGPRegressor(n_anchors=10, max_iter=30, device="cpu",
                                            random_state=0)]


def _rbf(p, X1, X2=None, diag=False):
    if diag:
        return p["amp"] * torch.ones(X1.shape[0], dtype=X1.dtype)
    X2 = X1 if X2 is None else X2
    return p["amp"] * torch.exp(-0.5 * torch.cdist(X1, X2).square() / p["ls"])


def _unpack(raw):
    return {"amp": raw[0].exp(), "ls": raw[1].exp(), "noise_variance": raw[2].exp()}


def _data(rng, n=12):
    X = rng.normal(size=(n, 2))
    Y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(n, 1))
    w = rng.integers(1, 4, size=n).astype(float)
    return X, Y, w


def _engines(kind, X, Y, w):
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)
    rep = np.repeat(np.arange(len(w)), w.astype(int))
    if kind == "exact":
        return (ExactGP(_rbf, _unpack, t(X), t(Y), weights=t(w)),
                ExactGP(_rbf, _unpack, t(X[rep]), t(Y[rep])), rep)
    Z = t(X[:5] + 0.1)
    return (NystromGP(_rbf, _unpack, t(X), t(Y), Z, weights=t(w)),
            NystromGP(_rbf, _unpack, t(X[rep]), t(Y[rep]), Z), rep)


@pytest.mark.parametrize("kind", ["exact", "nystrom"])
def test_weighted_likelihood_equals_repeated_rows(kind, rng):
    """The weighted likelihood (noise s / w_i and the weights' constant) is the repeated
    rows' likelihood, with its gradient; so are the leave-one-out residuals once a row is
    left out with its repeats (a weighted row's variance moved to one observation's)."""
    X, Y, w = _data(rng)
    weighted, repeated, rep = _engines(kind, X, Y, w)
    raw = torch.tensor([0.2, -0.3, math.log(0.05)], dtype=torch.float64)
    (nw, gw), (nr, gr) = weighted.value_and_grad(raw), repeated.value_and_grad(raw)
    np.testing.assert_allclose(float(nw), float(nr), rtol=1e-10)
    np.testing.assert_allclose(gw.numpy(), gr.numpy(), rtol=1e-8, atol=1e-10)
    sw, sr = weighted.state(raw), repeated.state(raw)
    np.testing.assert_allclose(float(sw["nll"]), float(sr["nll"]), rtol=1e-10)
    # leave-one-out of a weighted row = leaving all its repeats out
    r, v = weighted.loo(sw, _unpack(raw))
    groups = [np.flatnonzero(rep == i) for i in range(len(w)) if w[i] > 1]
    rr, vr = repeated.loo(sr, _unpack(raw))
    rr, vr = leave_group_out(repeated, sr, _unpack(raw), rr, vr, groups)
    first = np.searchsorted(rep, np.arange(len(w)))
    s = math.exp(float(raw[2]))
    np.testing.assert_allclose(r.numpy(), rr.numpy()[first], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(v.numpy() + s * (1 - 1 / w), vr.numpy()[first], rtol=1e-7)


@pytest.mark.parametrize("est", GP_REGRESSORS, ids=lambda e: repr(e)[:40])
def test_gp_integer_weights_equal_repeated_rows(est, rng):
    """Integer weights give the model of the shuffled repeated rows (hyperparameters, log
    evidence, predictive), zero weights that of the rows dropped."""
    X = rng.normal(size=(30, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)
    w = rng.integers(0, 4, size=30)
    perm = rng.permutation(int(w.sum()))
    Xr, yr = np.repeat(X, w, axis=0)[perm], np.repeat(y, w)[perm]
    Xt = rng.normal(size=(20, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = clone(est).fit(X, y, sample_weight=w)
        b = clone(est).fit(Xr, yr)
        c = clone(est).fit(X[w > 0], y[w > 0], sample_weight=w[w > 0])
    for other in (b, c):
        np.testing.assert_allclose(a.log_marginal_likelihood_value_,
                                   other.log_marginal_likelihood_value_, rtol=1e-8)
        for ua, ub in zip(a.predict(Xt, return_std=True), other.predict(Xt, return_std=True)):
            np.testing.assert_allclose(ua, ub, rtol=1e-8, atol=1e-10)
        assert a.calibration_factor_ == pytest.approx(other.calibration_factor_, rel=1e-8)


def test_weighted_calibration_equals_repeated_residuals(rng):
    z = rng.standard_t(4, size=40)
    w = rng.integers(1, 4, size=40)
    assert student_t_calibration(z, weights=w) == pytest.approx(
        student_t_calibration(np.repeat(z, w)), rel=1e-9)


@pytest.mark.parametrize("cls", WEIGHTED)
def test_has_sample_weight_and_rejects_negative(cls):
    assert has_fit_parameter(cls(), "sample_weight")
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(int) if "Classifier" in cls.__name__ else X[:, 0]
    w = np.ones(20)
    w[3] = -1
    with pytest.raises(ValueError, match="sample_weight"):
        cls(**FAST[cls.__name__]).fit(X, y, sample_weight=w)


def _classifier_data():
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=450, n_features=5, n_informative=3, random_state=1)
    return X[:150], y[:150], X[150:], y[150:]


def test_classifier_duplicated_rows_keep_log_loss():
    """Every row twice, or ~70% duplicated rows: the test log loss stays within 0.05 of the
    de-duplicated fit's (duplicates are merged into weighted rows before the evidence and
    leave-one-out noise search, which the weighted likelihood makes exact)."""
    from sklearn.metrics import log_loss

    X, y, Xt, yt = _classifier_data()
    idx = np.r_[np.arange(150), np.random.default_rng(0).choice(150, 350)]

    def loss(Xa, ya):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = StudentTProcessClassifier(random_state=0, device="cpu").fit(Xa, ya)
        return log_loss(yt, clf.predict_proba(Xt))

    base = loss(X, y)
    assert abs(loss(np.vstack([X, X]), np.r_[y, y]) - base) <= 0.05
    assert abs(loss(X[idx], y[idx]) - base) <= 0.05


def test_classifier_weights_equal_repeated_rows_and_class_weight():
    X, y, Xt, _ = _classifier_data()
    X, y = X[:60], y[:60]
    w = np.random.default_rng(1).integers(0, 3, size=60)
    perm = np.random.default_rng(2).permutation(int(w.sum()))
    est = StudentTProcessClassifier(**FAST["StudentTProcessClassifier"], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = clone(est).fit(X, y, sample_weight=w)
        b = clone(est).fit(np.repeat(X, w, axis=0)[perm], np.repeat(y, w)[perm])
        cw = {0: 2.0, 1: 1.0}
        c = clone(est).set_params(class_weight=cw).fit(X, y)
        d = clone(est).fit(X, y, sample_weight=np.where(y == 0, 2.0, 1.0))
    np.testing.assert_allclose(a.predict_proba(Xt), b.predict_proba(Xt), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(c.predict_proba(Xt), d.predict_proba(Xt), rtol=1e-8, atol=1e-12)
