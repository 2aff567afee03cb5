"""Rich-BLL's hyperparameters and training: the prior variance and the noise by the
closed-form evidence, the noise without the selection bias, the training schedule, the refit
on all rows (the private ``REFIT`` setting) and a default fit without ConvergenceWarning
(issue 19 item 3)."""

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from skbnngp import RichBLLRegressor, _rich_bll
from skbnngp._backend._jacobian import head_features, split_parameters
from skbnngp.datasets import make_step_1d

from .conftest import NO_HELD_OUT

pytestmark = NO_HELD_OUT


@pytest.fixture(scope="module")
def step():
    X, y = make_step_1d(120, noise=0.1, random_state=0)
    return X, y


def test_auto_prior_variance_maximises_the_evidence(step):
    X, y = step
    reg = RichBLLRegressor(hidden_layer_sizes=(8,), max_iter=100, random_state=0,
                           prior_variance="auto", device="cpu").fit(X, y)
    assert reg.projection_ridge_ == 1e-4
    for factor in (0.5, 2.0):
        other = RichBLLRegressor(network=reg.network_, train_network=False,
                                 prior_variance=reg.prior_variance_ * factor,
                                 noise_variance=reg.noise_variance_, device="cpu").fit(X, y)
        assert other.log_evidence_ < reg.log_evidence_


def test_noise_options(step):
    X, y = step
    kw = {"hidden_layer_sizes": (8,), "max_iter": 100, "random_state": 0, "device": "cpu"}
    val = RichBLLRegressor(noise_variance="validation", **kw).fit(X, y)
    # the validation MSE at the chosen epoch (validation_scores_ are RMSEs)
    assert val.noise_variance_ == pytest.approx(min(val.validation_scores_) ** 2, rel=1e-12)
    ev = RichBLLRegressor(noise_variance="evidence", prior_variance="auto", **kw).fit(X, y)
    fixed = RichBLLRegressor(network=ev.network_, train_network=False, prior_variance="auto",
                             noise_variance=ev.noise_variance_ * 1.2, device="cpu").fit(X, y)
    assert fixed.log_evidence_ < ev.log_evidence_
    with pytest.raises(ValueError, match="noise_variance='validation'"):
        RichBLLRegressor(noise_variance="validation", early_stopping=False, **kw).fit(X, y)


def test_refit_trains_on_all_rows_for_best_iteration(step, monkeypatch):
    X, y = step
    monkeypatch.setattr(_rich_bll, "VALIDATION_INTERVAL", 5)
    # one noise level in both stages (the refit has no held-out rows to test another on)
    monkeypatch.setattr(_rich_bll, "NOISE_MIN_ROWS", 10**9)
    kw = {"hidden_layer_sizes": (8,), "max_iter": 60, "random_state": 0, "device": "cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = RichBLLRegressor(**kw).fit(X, y)
        same = RichBLLRegressor(early_stopping=False, **kw).fit(X, y)
        monkeypatch.setattr(_rich_bll, "REFIT", True)
        refit = RichBLLRegressor(**kw).fit(X, y)
        no_split = RichBLLRegressor(early_stopping=False, **kw).fit(X, y)
    assert refit.best_iteration_ == plain.best_iteration_
    assert refit.noise_variance_ == plain.noise_variance_  # the first stage's validation MSE
    assert not np.allclose(refit.predict(X), plain.predict(X))
    np.testing.assert_array_equal(no_split.predict(X), same.predict(X))  # nothing to refit


def test_default_fit_on_the_step_set_converges():
    """The benchmark's step set (300 rows) ended at max_iter=500 before the stopping rule
    fired; the default budget lets it fire."""
    from sklearn.model_selection import KFold

    X, y = make_step_1d(300, noise=0.1, random_state=0)
    n_iter = []
    for train, _ in list(KFold(5, shuffle=True, random_state=0).split(X))[:2]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            reg = RichBLLRegressor(device="cpu", random_state=0).fit(X[train], y[train])
        assert reg.converged_
        n_iter.append(reg.n_iter_)
    assert max(n_iter) > 500  # the old budget would have cut this fit short


def test_plateau_schedule_goes_on_from_where_the_constant_rate_stops(step, monkeypatch):
    """The plateau schedule (``PLATEAU_DROPS=2``) runs the constant schedule's epochs
    (``PLATEAU_DROPS=0``) unchanged up to its first plateau, then goes on from the best
    network at a lower rate: the same validation scores up to there, more epochs, and a best
    validation RMSE that is no worse (the kept network is the best over a superset of
    states)."""
    X, y = step
    kw = {"hidden_layer_sizes": (16,), "max_iter": 3000, "n_iter_no_change": 30,
          "random_state": 0, "device": "cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plateau = RichBLLRegressor(**kw).fit(X, y)
        monkeypatch.setattr(_rich_bll, "REFIT", True)
        refit = RichBLLRegressor(**kw).fit(X, y)
        monkeypatch.setattr(_rich_bll, "REFIT", False)
        monkeypatch.setattr(_rich_bll, "PLATEAU_DROPS", 0)
        const = RichBLLRegressor(**kw).fit(X, y)
    k = len(const.validation_scores_)
    # the same trajectory up to the first plateau; a tolerance, not bitwise equality,
    # because threaded BLAS may round two fits differently (a different trajectory
    # differs in the second or third digit)
    np.testing.assert_allclose(plateau.validation_scores_[:k], const.validation_scores_,
                               rtol=1e-6)
    assert plateau.n_iter_ > const.n_iter_
    assert min(plateau.validation_scores_) <= min(const.validation_scores_)
    assert refit.best_iteration_ == plateau.best_iteration_


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_bll_log_evidence_is_the_dense_gaussian_density_at_its_maximum(step):
    """The last layer's evidence (the shared ``BLREvidence``) equals ``log N(y - mean(y); 0,
    s Phi Phi^T + v I)`` built densely from the fitted network's last-layer features, and
    the chosen ``(s, v)`` maximise it."""
    X, y = step
    reg = RichBLLRegressor(hidden_layer_sizes=(8,), max_iter=100, random_state=0,
                           uncertainty="bll", prior_variance="auto", noise_variance="evidence",
                           normalize_y=False, normalize_X=False, device="cpu").fit(X, y)
    head, _, _ = split_parameters(reg.network_)
    _, Phi = head_features(reg.network_, head, torch.as_tensor(X), 1000)
    Phi = Phi.double().numpy()
    yc = y - y.mean()

    def dense(s, v):
        return multivariate_normal(np.zeros(len(y)), s * Phi @ Phi.T
                                   + v * np.eye(len(y))).logpdf(yc)

    s, v = reg.prior_variance_, reg.noise_variance_
    assert reg.log_evidence_ == pytest.approx(dense(s, v), rel=1e-6)
    for ds, dv in [(1.1, 1), (0.9, 1), (1, 1.1), (1, 0.9)]:
        assert dense(s * ds, v * dv) < dense(s, v)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_noise_is_the_evidence_noise_floored_at_the_validation_mse():
    """noise_variance="auto" (issue 19 item 3, the noise without the selection bias): the
    evidence's noise on all rows, constrained to be at least the validation MSE, i.e. the
    larger of the two. On heavy-tailed data the validation split can miss the outliers:
    the validation MSE is then the smaller one, and the evidence's noise is used."""
    from skbnngp.datasets import make_heavy_tailed

    X, y = make_heavy_tailed(240, 1, random_state=0)
    kw = {"hidden_layer_sizes": (8,), "max_iter": 100, "random_state": 0, "device": "cpu"}
    seen = set()
    for Xs, ys in [(X, y), (X[:120], y[:120]), step_data()]:
        auto = RichBLLRegressor(**kw).fit(Xs, ys)
        val_mse = min(auto.validation_scores_) ** 2
        ev = RichBLLRegressor(network=auto.network_, train_network=False,
                              noise_variance="evidence", device="cpu").fit(Xs, ys)
        assert auto.prior_variance_ == 1.0
        assert auto.noise_variance_ == pytest.approx(max(val_mse, ev.noise_variance_),
                                                     rel=1e-5)
        seen.add(ev.noise_variance_ > val_mse)
    assert seen == {True, False}  # both branches of the max are exercised
    no_split = RichBLLRegressor(early_stopping=False, **kw).fit(X, y)
    train = RichBLLRegressor(noise_variance="train", early_stopping=False, **kw).fit(X, y)
    assert no_split.noise_variance_ == train.noise_variance_


def step_data():
    return make_step_1d(120, noise=0.1, random_state=0)
