"""The one spectral evidence of a Bayesian linear model (``BLREvidence``) and its maximiser
(``blr_fit_scales``), which DBK and Rich-BLL share: equal to the dense Gaussian log density,
and a maximum of it over the scales that are free."""

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from skbnngp._backend import BLREvidence, blr_fit_scales

DT = torch.float64


def _problem(n, r, C, seed):
    g = torch.Generator().manual_seed(seed)
    Phi = torch.randn(n, r, generator=g, dtype=DT)
    W = 0.5 * torch.randn(r, C, generator=g, dtype=DT)
    Y = Phi @ W + 0.3 * torch.randn(n, C, generator=g, dtype=DT)
    return Phi, Y, BLREvidence(Phi.T @ Phi, Phi.T @ Y, float(Y.square().sum()), n)


def _dense(Phi, Y, a, s):
    """``sum_c log N(Y[:, c]; 0, a Phi Phi^T + s I)`` with an n x n covariance."""
    P, Yn = Phi.numpy(), Y.numpy()
    cov = a * P @ P.T + s * np.eye(P.shape[0])
    return sum(multivariate_normal(np.zeros(P.shape[0]), cov).logpdf(Yn[:, c])
               for c in range(Yn.shape[1]))


@pytest.mark.parametrize("n, r, C", [(40, 6, 1), (5, 9, 1), (30, 4, 3)])
def test_spectral_evidence_equals_the_dense_gaussian_log_density(n, r, C):
    Phi, Y, ev = _problem(n, r, C, seed=n + r)
    for a, s in [(0.7, 0.3), (3.0, 0.01), (1e-3, 2.0)]:
        assert ev(a, s) == pytest.approx(_dense(Phi, Y, a, s), rel=1e-9)


def test_spectral_evidence_with_a_rank_deficient_gram_matrix():
    Phi, Y, _ = _problem(20, 3, 1, seed=3)
    Phi = torch.cat([Phi, Phi[:, :1], torch.zeros(20, 1, dtype=DT)], dim=1)  # rank 3 of 5
    ev = BLREvidence(Phi.T @ Phi, Phi.T @ Y, float(Y.square().sum()), 20)
    assert ev(2.0, 0.1) == pytest.approx(_dense(Phi, Y, 2.0, 0.1), rel=1e-9)


@pytest.mark.parametrize("fix", [None, "prior_var", "noise"])
def test_fit_scales_maximises_the_dense_evidence_over_the_free_scales(fix):
    Phi, Y, ev = _problem(200, 5, 1, seed=1)
    a, s = blr_fit_scales(ev, 2.0, 0.5, fix_prior_var=fix == "prior_var",
                          fix_noise=fix == "noise", prior_var_starts=(1e-2, 1e2))
    if fix == "prior_var":
        assert a == 2.0
    if fix == "noise":
        assert s == 0.5
    if fix is None:
        assert s == pytest.approx(0.09, rel=0.3)  # the noise the data were drawn with
    best = _dense(Phi, Y, a, s)
    for da, ds in [(1.05, 1), (0.95, 1), (1, 1.05), (1, 0.95)]:
        if (fix == "prior_var" and da != 1) or (fix == "noise" and ds != 1):
            continue
        assert _dense(Phi, Y, a * da, s * ds) < best


def test_fit_scales_with_both_fixed_returns_them():
    _, _, ev = _problem(30, 4, 1, seed=2)
    assert blr_fit_scales(ev, 3.0, 0.2, fix_prior_var=True, fix_noise=True) == (3.0, 0.2)


def test_more_prior_variance_starts_never_end_lower():
    _, _, ev = _problem(50, 8, 2, seed=4)
    one = blr_fit_scales(ev, 1e-6, 1.0)
    many = blr_fit_scales(ev, 1e-6, 1.0, prior_var_starts=(1.0, 1e2))
    assert ev(*many) >= ev(*one) - 1e-9


def test_rounding_in_the_null_space_does_not_send_the_noise_to_zero():
    """Regression (Rich-BLL on the 1-D gap set, noise_variance="evidence"): with more
    features than their rank, ``Phi^T Y`` computed in floating point is not exactly in the
    range of ``Phi^T Phi``; its rounding in the null space, divided by ``prior_var * 0 +
    noise``, made the evidence grow like ``1/noise^2`` as the noise fell, and the fit ended on
    the noise's lower bound (1e-8) and the prior variance's upper bound with a log evidence of
    +1e9 (test NLPD 1.4e6 averaged over five folds)."""
    g = torch.Generator().manual_seed(5)
    A = torch.randn(200, 3, generator=g, dtype=DT)
    Phi = A @ torch.randn(3, 40, generator=g, dtype=DT)  # rank 3 of 40
    Y = A @ torch.ones(3, 1, dtype=DT) + 0.2 * torch.randn(200, 1, generator=g, dtype=DT)
    B = Phi.T @ Y
    B = B * (1 + 1e-9 * torch.randn(B.shape, generator=g, dtype=DT))  # rounding of the sums
    ev = BLREvidence(Phi.T @ Phi, B, float(Y.square().sum()), 200)
    a, s = blr_fit_scales(ev, 1.0, 0.1, noise_lower_bound=1e-8, prior_var_starts=(1e-2, 1e2))
    assert s == pytest.approx(0.04, rel=0.3)
    assert ev(a, s) == pytest.approx(_dense(Phi, Y, a, s), rel=1e-6)
    assert ev(np.exp(20.0), 1e-8) < ev(a, s)  # the corner the fit ran to
