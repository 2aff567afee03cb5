"""Rich-BLL's hyperparameters by the closed-form evidence, the noise without the selection
bias, the refit on all rows and a default fit without ConvergenceWarning (issue 19 item 3)."""

import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from skbnngp import RichBLLRegressor
from skbnngp._backend._blr import (blr_evidence_spectrum, blr_log_evidence_scaled,
                                   blr_maximise_evidence)
from skbnngp.datasets import make_step_1d


@pytest.mark.parametrize("n,r", [(40, 6), (5, 9)])
def test_spectral_evidence_is_the_gaussian_log_density(n, r):
    rng = np.random.default_rng(0)
    Phi, y = rng.standard_normal((n, r)), rng.standard_normal(n)
    lam, c2 = blr_evidence_spectrum(Phi.T @ Phi, Phi.T @ y)
    for s, v in [(0.7, 0.3), (3.0, 0.01)]:
        exact = multivariate_normal(np.zeros(n), s * Phi @ Phi.T + v * np.eye(n)).logpdf(y)
        assert blr_log_evidence_scaled(lam, c2, y @ y, n, s, v) == pytest.approx(exact,
                                                                                  rel=1e-9)


def test_maximised_evidence_is_a_maximum():
    rng = np.random.default_rng(1)
    Phi = rng.standard_normal((200, 5))
    y = Phi @ (0.5 * rng.standard_normal(5)) + 0.3 * rng.standard_normal(200)
    lam, c2 = blr_evidence_spectrum(Phi.T @ Phi, Phi.T @ y)
    s, v, ev = blr_maximise_evidence(lam, c2, y @ y, 200)
    for ds, dv in [(1.1, 1), (0.9, 1), (1, 1.1), (1, 0.9)]:
        assert blr_log_evidence_scaled(lam, c2, y @ y, 200, s * ds, v * dv) < ev
    assert v == pytest.approx(0.09, rel=0.3)  # the noise the data were drawn with
    s_fixed, v_fixed, _ = blr_maximise_evidence(lam, c2, y @ y, 200, noise=0.5)
    assert v_fixed == 0.5 and s_fixed > 0


@pytest.fixture(scope="module")
def step():
    X, y = make_step_1d(120, noise=0.1, random_state=0)
    return X, y


def test_auto_prior_variance_and_ridge_maximise_the_evidence(step):
    X, y = step
    reg = RichBLLRegressor(hidden_layer_sizes=(8,), max_iter=100, random_state=0,
                           prior_variance="auto", projection_ridge="auto",
                           device="cpu").fit(X, y)
    assert reg.projection_ridge_ in (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
    for factor in (0.5, 2.0):
        other = RichBLLRegressor(network=reg.network_, train_network=False,
                                 prior_variance=reg.prior_variance_ * factor,
                                 projection_ridge=reg.projection_ridge_,
                                 noise_variance=reg.noise_variance_, device="cpu").fit(X, y)
        assert other.log_evidence_ < reg.log_evidence_
    for ridge in (1e-4, 10.0):
        other = RichBLLRegressor(network=reg.network_, train_network=False,
                                 projection_ridge=ridge, noise_variance=reg.noise_variance_,
                                 prior_variance="auto", device="cpu").fit(X, y)
        assert other.log_evidence_ <= reg.log_evidence_ + 1e-9


def test_noise_options(step):
    X, y = step
    kw = dict(hidden_layer_sizes=(8,), max_iter=100, random_state=0, device="cpu")
    val = RichBLLRegressor(noise_variance="validation", **kw).fit(X, y)
    # the validation MSE at the chosen epoch (validation_scores_ are RMSEs)
    assert val.noise_variance_ == pytest.approx(min(val.validation_scores_) ** 2, rel=1e-12)
    ev = RichBLLRegressor(noise_variance="evidence", prior_variance="auto", **kw).fit(X, y)
    fixed = RichBLLRegressor(network=ev.network_, train_network=False, prior_variance="auto",
                             noise_variance=ev.noise_variance_ * 1.2, device="cpu").fit(X, y)
    assert fixed.log_evidence_ < ev.log_evidence_
    with pytest.raises(ValueError, match="noise_variance='validation'"):
        RichBLLRegressor(noise_variance="validation", early_stopping=False, **kw).fit(X, y)


def test_refit_trains_on_all_rows_for_best_iteration(step):
    X, y = step
    kw = dict(hidden_layer_sizes=(8,), max_iter=60, validation_interval=5, random_state=0,
              device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = RichBLLRegressor(**kw).fit(X, y)
        refit = RichBLLRegressor(refit=True, **kw).fit(X, y)
        no_split = RichBLLRegressor(refit=True, early_stopping=False, **kw).fit(X, y)
        same = RichBLLRegressor(early_stopping=False, **kw).fit(X, y)
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
