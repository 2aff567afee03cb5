"""The deep basis kernel (DBK) numerics: training objectives, the variational state, the
exact posterior with the variance correction, the choice of noise and prior scale, and the
leave-one-out residuals (Zhu, Yuchi & Xie, arXiv:2505.18526, §3.2-3.3).

The features ``feat(X)`` (n x r) of a network define the kernel ``Phi Phi^T``; the variance
correction adds ``c_i = M - |phi_i|^2`` (``M`` the largest ``|phi_i|^2`` over the data) to the
diagonal (eq. 12). Every full pass over the data runs in row blocks of ``chunk`` rows, so no
n x r matrix is formed after training. The Bayesian-linear-regression algebra itself is
:mod:`._blr`.

Row weights ``w`` (``weights=``, frequency weights) make every quantity that of the rows
repeated ``w_i`` times: a row's noise and correction become ``(noise + c_i) / w_i``, with the
repeats' constant in the evidence, and sums over rows (the trace regulariser, the ELBO's data
term, the validation NLL) count a row ``w_i`` times.
"""

from __future__ import annotations

import copy
import math

import torch

from ._blr import (
    BLREvidence,
    BLRPosterior,
    DiagNoiseEvidence,
    blr_fit_scales,
    blr_log_evidence,
    blr_log_evidence_diag,
    blr_posterior,
    blr_stats,
    weighted_log_evidence_diag,
)
from ._chunks import chunked_apply, iter_slices
from ._device import to_float
from ._eager_optim import make_optimizer
from ._gp import leave_one_copy_out
from ._linalg import stable_cholesky

#: The re-chosen noise variance (held-out selection) is at least this fraction of the held-out
#: rows' mean squared error under the trained model: without it the held-out evidence can
#: send the noise to its lower bound, since the correction already acts as a noise on every
#: row but the one with the largest ``|phi|^2`` (User Guide of DBK, "Calibration").
HELDOUT_NOISE_FLOOR = 0.1
#: Rows with the largest recorded ``|phi|^2`` evaluated with every SVI batch, so that the
#: trace regulariser's ``M`` is the data maximum rather than the batch's (see :func:`svi_loss`).
N_CHAMPIONS = 8


def softplus_inv(v):
    return v + math.log(-math.expm1(-v))


# ============================================================================ objectives
def trace_penalty(Phi, noise, max_prior_var=None, weights=None):
    """``tr(C) / (2 noise)`` with ``c_i = M - |phi_i|^2`` over the rows of ``Phi`` (eq. 11).

    ``M`` is ``max_prior_var`` when given (the largest prior variance over the whole data,
    of which ``Phi`` is a mini-batch), else the largest over the rows of ``Phi``; the
    gradient flows through the max. ``weights``: row ``i`` counts ``w_i`` times."""
    kappa = Phi.square().sum(1)
    M = kappa.max() if max_prior_var is None else max_prior_var
    if weights is not None:
        return (weights * (M - kappa)).sum() / (2 * noise)
    return (Phi.shape[0] * M - kappa.sum()) / (2 * noise)


def exact_objective(Phi, Y, noise, correction=True, objective="bound", trace_weight=None,
                    weights=None):
    """The full-batch training objective, summed over targets.

    ``objective="bound"``: ``log p(Y)`` (eq. 5) minus ``trace_weight`` times the trace
    regulariser ``tr(C)/(2 noise)`` per target; with weight 1 the paper's lower bound
    (eq. 11) on the evidence of the corrected kernel. ``"evidence"``: that evidence itself,
    ``log N(Y; 0, Phi Phi^T + diag(M - |phi_i|^2) + noise I)`` (the kernel that predicts,
    eq. 12; its correction is a diagonal, so it costs O(n r^2) like eq. 5), minus
    ``trace_weight`` times the same regulariser. ``trace_weight=None``: 1 for the bound, 0
    for the evidence. Without ``correction`` both are eq. (5). ``weights``: frequency
    weights of the rows (the objective of the rows repeated ``w_i`` times)."""
    if trace_weight is None:
        trace_weight = 1.0 if objective == "bound" else 0.0
    if weights is not None:
        noise = torch.as_tensor(noise, dtype=Phi.dtype, device=Phi.device)
        kappa = Phi.square().sum(1)
        d = noise + (kappa.max() - kappa) if correction and objective == "evidence" else noise
        J = weighted_log_evidence_diag(Phi, Y, d, weights)
        if correction and trace_weight:
            J = J - trace_weight * Y.shape[1] * trace_penalty(Phi, noise, weights=weights)
        return J
    if not correction:
        return blr_log_evidence(Phi, Y, noise)
    if objective == "evidence":
        kappa = Phi.square().sum(1)
        J = blr_log_evidence_diag(Phi, Y, noise + (kappa.max() - kappa))
    else:
        J = blr_log_evidence(Phi, Y, noise)
    if trace_weight:
        J = J - trace_weight * Y.shape[1] * trace_penalty(Phi, noise)
    return J


def kl_to_prior(m, L):
    """``sum_c KL(N(m_c, L L^T) || N(0, I))`` for the columns of ``m`` (eq. 8)."""
    r, C = m.shape
    return 0.5 * (m.square().sum() + C * (L.square().sum()
                                         - 2 * torch.log(L.diagonal().abs()).sum() - r))


def svi_objective(Phi, Y, m, L, noise, n, correction=True, max_prior_var=None, weights=None):
    """Mini-batch ELBO of eq. (9) for a batch of ``b`` rows out of ``n``, minus the
    stochastic trace regulariser ``(n/b) sum_batch (M - |phi_i|^2) / (2 noise)``, an
    unbiased estimate of ``tr(C) / (2 noise)`` when ``max_prior_var`` is the data maximum
    ``M`` (``None``: the batch maximum, the paper's eq. 9 text, biased low); with ``b = n``
    and no correction it is the ELBO of eq. (8). ``weights``: the batch rows' weights
    (normalised to mean 1 over the ``n`` rows' count, or frequency weights with ``n = b``),
    each row's term counted ``w_i`` times."""
    b, C = Y.shape
    if weights is None:
        fit = (-0.5 * b * C * torch.log(2 * math.pi * noise)
               - ((Y - Phi @ m).square().sum() + C * (Phi @ L).square().sum()) / (2 * noise))
    else:
        per_row = (Y - Phi @ m).square().sum(1) + C * (Phi @ L).square().sum(1)
        fit = (-0.5 * weights.sum() * C * torch.log(2 * math.pi * noise)
               - (weights * per_row).sum() / (2 * noise))
    if correction:
        fit = fit - C * trace_penalty(Phi, noise, max_prior_var, weights)
    return (n / b) * fit - kl_to_prior(m, L)


class DBKState:
    """The trainable tensors of a DBK model besides the network.

    ``noise = lower + softplus(raw_noise)``; for SVI, the variational mean ``m`` (r x C) and
    ``L = tril(raw_L, -1) + diag(softplus(raw_diag))`` (shared by every target).
    """

    def __init__(self, r, C, noise_init, lower, svi, device, dtype):
        self.lower = float(lower)
        raw = softplus_inv(max(noise_init - lower, 1e-12))
        self.raw_noise = torch.tensor(raw, dtype=dtype, device=device, requires_grad=True)
        self.svi = svi
        if svi:
            self.m = torch.zeros(r, C, dtype=dtype, device=device, requires_grad=True)
            self.raw_L = torch.zeros(r, r, dtype=dtype, device=device, requires_grad=True)
            self.raw_diag = torch.full((r,), softplus_inv(1.0), dtype=dtype, device=device,
                                       requires_grad=True)

    @classmethod
    def from_posterior(cls, mean, factor, noise, lower):
        """SVI state with ``q(w) = N(mean, factor factor^T)`` and the given noise (a fitted
        model continued by ``partial_fit``)."""
        state = cls(mean.shape[0], mean.shape[1], max(2 * lower, noise), lower, True,
                    mean.device, mean.dtype)
        with torch.no_grad():
            state.raw_noise.fill_(softplus_inv(max(noise - lower, 1e-12)))
            state.m.copy_(mean)
            state.raw_L.copy_(torch.tril(factor, -1))
            d = factor.diagonal().clamp(min=1e-12)
            state.raw_diag.copy_(d + torch.log(-torch.expm1(-d)))
        return state

    def clone(self):
        """An independent copy (new leaf tensors with the same values)."""
        new = copy.copy(self)
        for key in ("raw_noise", "m", "raw_L", "raw_diag"):
            if hasattr(self, key):
                setattr(new, key, getattr(self, key).detach().clone().requires_grad_(True))
        return new

    def posterior(self):
        """The variational posterior ``q(w)`` (None without SVI) and the noise, detached."""
        with torch.no_grad():
            q = (BLRPosterior(self.m.detach().clone(), self.L().detach().clone())
                 if self.svi else None)
            return q, self.noise().detach()

    def params(self):
        return [self.raw_noise] + ([self.m, self.raw_L, self.raw_diag] if self.svi else [])

    def noise(self):
        return self.lower + torch.nn.functional.softplus(self.raw_noise)

    def L(self):
        return torch.tril(self.raw_L, -1) + torch.diag(torch.nn.functional.softplus(
            self.raw_diag))


def exact_loss(feat, state, X, Y, correction, objective, trace_weight, weights=None):
    """Negative per-datum full-batch objective (:func:`exact_objective`), as the trainer's
    ``loss(rows, epoch)``; with frequency ``weights``, per weighted datum (``n = sum w``)."""
    n, C = Y.shape
    if weights is not None:
        n = weights.sum()

    def loss(rows, epoch):
        J = exact_objective(feat(X), Y, state.noise(), correction, objective, trace_weight,
                            weights)
        return -J / (n * C)
    return loss


def svi_loss(feat, state, data, correction):
    """Negative per-datum mini-batch ELBO (eq. 9) minus the stochastic trace regulariser.

    With the correction, ``M`` of the regulariser estimates the maximum of ``|phi(x)|^2``
    over the training rows (eq. 11), not over the batch: ``data["kappa"]`` holds every row's
    ``|phi|^2`` as last measured (a full pass at the start, then the rows of each batch), and
    each step also evaluates the :data:`N_CHAMPIONS` rows with the largest recorded values.
    ``M`` is the largest *current* value among the batch and those rows, so the gradient of
    ``n M`` always reaches a row evaluated now (a stale record used as ``M`` would be a
    constant: no pressure on the maximum while every other norm is pushed up, and the norms
    ran away). The table is local to the call; nothing fitted changes. ``data["w"]``
    (optional): the rows' weights normalised to mean 1, with ``data["n"]`` their frequency
    sum, so that a batch estimates the ELBO of the rows repeated ``w_i`` times.
    """

    def loss(rows, epoch):
        n, C = data["n"], data["Y"].shape[1]
        if not correction:
            Phi, M = feat(data["X"][rows]), None
        else:
            table = data["kappa"]
            top = torch.topk(table, min(N_CHAMPIONS, table.shape[0])).indices
            idx = torch.cat([rows, top])
            Phi_all = feat(data["X"][idx])
            kappa = Phi_all.square().sum(1)
            Phi, M = Phi_all[:rows.shape[0]], kappa.max()
            with torch.no_grad():
                table[idx] = kappa.detach()
        w = data.get("w")
        J = svi_objective(Phi, data["Y"][rows], state.m, state.L(), state.noise(), n,
                          correction, max_prior_var=M, weights=None if w is None else w[rows])
        return -J / (n * C)
    return loss


# ============================================================================ full passes
def scaled_features(net, scale):
    """The feature map ``x -> scale * net(x)`` (``net`` itself for scale 1)."""
    if scale == 1.0:
        return net
    return lambda X: scale * net(X)


def features(feat, X, chunk):
    """``feat(X)`` in row blocks, without a graph."""
    with torch.no_grad():
        return chunked_apply(feat, X, chunk)


def prior_vars(feat, X, chunk):
    """``|phi(x_i)|^2`` for every row, in row blocks (no graph)."""
    with torch.no_grad():
        return torch.cat([feat(X[sl]).square().sum(1) for sl in iter_slices(X.shape[0], chunk)])


def max_prior_var(feat, X, chunk, at_least=None):
    """``max_i |phi(x_i)|^2`` in row blocks (never the n x r feature matrix), and at least
    ``at_least`` when given (the running maximum of ``partial_fit``)."""
    with torch.no_grad():
        M = None
        for sl in iter_slices(X.shape[0], chunk):
            m = feat(X[sl]).square().sum(1).max()
            M = m if M is None else torch.maximum(M, m)
        return M if at_least is None else torch.clamp(M, min=at_least)


def stats(feat, X, Y, chunk, M=None, s2=None, weights=None):
    """``(Phi^T W Phi, Phi^T W Y)`` in row blocks, with the weights ``s2 / (s2 + M -
    |phi_i|^2)`` of the correction (eq. 12) when ``M`` is given, times the frequency
    ``weights`` when given."""
    G = B = None
    with torch.no_grad():
        for sl in iter_slices(X.shape[0], chunk):
            Phi = feat(X[sl])
            w = None if M is None else s2 / (s2 + (M - Phi.square().sum(1)))
            if weights is not None:
                w = weights[sl] if w is None else w * weights[sl]
            g, b = blr_stats(Phi, Y[sl], w)
            G, B = (g, b) if G is None else (G + g, B + b)
    return G, B


def exact_posterior(feat, X, Y, s2, correction, chunk, *, warn=True, context="DBK",
                    weights=None):
    """Weight posterior (eq. 6, or eq. 12 with the correction) and ``M``, in row blocks."""
    M = max_prior_var(feat, X, chunk)
    G, B = stats(feat, X, Y, chunk, M if correction else None, s2, weights)
    post = blr_posterior(G, B, s2, warn=warn, context=f"{context}: Phi^T Phi + noise I")
    return post, M


def evidence(feat, X, Y, chunk, weights=None):
    """:class:`BLREvidence` of ``(X, Y)`` under the features ``feat`` (eq. 5, row blocks),
    of the rows repeated ``weights`` times when given."""
    G, B = stats(feat, X, Y, chunk, weights=weights)
    if weights is None:
        return BLREvidence(G, B, to_float(Y.square().sum()), X.shape[0])
    return BLREvidence(G, B, to_float((weights[:, None] * Y.square()).sum()),
                       to_float(weights.sum()))


def chunked_elbo(feat, X, Y, post, s2, chunk, weights=None):
    """The ELBO of eq. (8) on all of ``(X, Y)`` (rows repeated ``weights`` times), in row
    blocks."""
    total = 0.0
    with torch.no_grad():
        for sl in iter_slices(Y.shape[0], chunk):
            b = Y[sl].shape[0]
            total += to_float(svi_objective(feat(X[sl]), Y[sl], post.mean, post.factor, s2, b,
                                            correction=False,
                                            weights=None if weights is None else weights[sl])
                              + kl_to_prior(post.mean, post.factor))
        return total - to_float(kl_to_prior(post.mean, post.factor))


def correction_term(Phi, M, correction):
    """The variance correction ``max(M - |phi|^2, 0)`` of each row (0 without it)."""
    return torch.clamp(M - Phi.square().sum(1), min=0.0) if correction else 0.0


def moments(post, Phi, s2, M, correction, include_noise=True):
    """Normalised predictive mean (m x C) and variance (m,) at features ``Phi``."""
    mean, var = post.predict(Phi)
    var = var + correction_term(Phi, M, correction)
    return mean, var + s2 if include_noise else var


def predictive(feat, X, post, s2, M, correction, chunk, include_noise=True, full_cov=False,
               row_noise=None):
    """Normalised predictive mean (m x C) and variance (m,), or covariance (m x m) whose
    diagonal is that variance (the correction and the noise act on the diagonal only).
    ``row_noise``: a per-row noise (a :class:`NoiseHead`) in place of ``s2``."""
    Phi = features(feat, X, chunk)
    with torch.no_grad():
        if row_noise is not None:
            s2 = row_noise(X, Phi)
        mean, var = moments(post, Phi, s2, M, correction, include_noise=include_noise)
        if not full_cov:
            return mean, var
        V = post.covariance(Phi)
        V.diagonal().copy_(var)
        return mean, V


def validation_nll(post_fn, feat, Xv, Yv, state, correction, chunk, weights=None):
    """``score()``: the mean Gaussian predictive NLL of ``(Xv, Yv)`` under the posterior that
    ``post_fn()`` returns with ``M`` (the trainer's validation score); the ``weights``-weighted
    mean when given."""
    def score():
        post, M = post_fn()
        s2 = state.noise()
        total = 0.0
        for sl in iter_slices(Xv.shape[0], chunk):
            mean, var = moments(post, feat(Xv[sl]), s2, M, correction)
            nll = 0.5 * (torch.log(2 * math.pi * var).unsqueeze(1)
                         + (Yv[sl] - mean).square() / var.unsqueeze(1))
            if weights is not None:
                nll = weights[sl].unsqueeze(1) * nll
            total = total + nll.sum()
        if weights is not None:
            return to_float(total) / (to_float(weights.sum()) * Yv.shape[1])
        return to_float(total) / Yv.numel()
    return score


def loo_residuals(feat, X, Y, post, s2, M, correction, chunk, groups=(), weights=None,
                  row_noise=None, copies=False):
    """Standardised leave-one-out residuals (n x C) of the rows, in row blocks.

    With ``d_i = s2 + c_i`` the noise and correction of row ``i``, ``mu_i`` and ``s_i`` its
    posterior mean and latent variance given every row, the posterior without row ``i``
    predicts ``y_i`` with residual ``(y_i - mu_i) / (1 - s_i / d_i)`` and variance
    ``d_i^2 / (d_i - s_i)``; their ratio is ``(y_i - mu_i) / sqrt(d_i - s_i)``.

    The rows of each of ``groups`` (index arrays of rows that repeat one input) are left out
    together: with ``S`` their posterior latent covariance and ``D`` their noise, the
    block ``B = D^-1 - D^-1 S D^-1`` of the inverse kernel gives residuals
    ``B^-1 D^-1 (y - mu)`` and covariance ``B^-1`` (a twin left in would predict its row).
    With frequency ``weights`` a row (noise ``d_i / w_i``) is left out with all its
    repeats, and its residual is scaled by the variance of one new observation (noise
    ``d_i``): the leave-one-out predictive variance plus ``d_i (1 - 1/w_i)``; with
    ``copies`` (replicates of a design) it loses one copy instead
    (:func:`~skbnngp._backend._gp.leave_one_copy_out`).
    ``row_noise``: a per-row noise ``row_noise(X_rows, Phi_rows)`` (a
    :class:`NoiseHead`) in place of ``s2``.
    Returns ``z`` and the leave-one-out predictive variances (n,).
    """
    def noise(Xb, Phi):
        return s2 if row_noise is None else row_noise(Xb, Phi)

    z = torch.empty_like(Y)  # allocated once
    var = Y.new_empty(Y.shape[0])  # the leave-one-out predictive variances
    with torch.no_grad():
        for sl in iter_slices(X.shape[0], chunk):
            Phi = feat(X[sl])
            mean, var_f = post.predict(Phi)
            d = noise(X[sl], Phi) + correction_term(Phi, M, correction)
            if weights is not None:  # the merged row's noise d / w; a new row's is d
                one, d = d, d / weights[sl]
                gap = torch.clamp(d - var_f, min=torch.finfo(d.dtype).tiny)
                r = (Y[sl] - mean) * (d / gap).unsqueeze(1)
                if copies:
                    r, var[sl] = leave_one_copy_out(r, d * d / gap, weights[sl], one)
                else:
                    var[sl] = d * d / gap + (one - d)
                z[sl] = r / var[sl].sqrt().unsqueeze(1)
                continue
            gap = torch.clamp(d - var_f, min=torch.finfo(d.dtype).tiny)
            z[sl] = (Y[sl] - mean) / torch.sqrt(gap).unsqueeze(1)
            var[sl] = d * d / gap
        for g in groups:
            rows = torch.as_tensor(g, device=X.device)
            Phi = feat(X[rows])
            mean, _ = post.predict(Phi)
            one = noise(X[rows], Phi) + correction_term(Phi, M, correction)
            dinv = one.reciprocal() if weights is None else weights[rows] / one
            B = -(dinv[:, None] * post.covariance(Phi) * dinv[None, :])
            B.diagonal().add_(dinv)
            Binv = torch.cholesky_inverse(stable_cholesky(B, context="leave-group-out")[0])
            e = Binv @ (dinv[:, None] * (Y[rows] - mean))
            v = Binv.diagonal()
            if weights is not None:
                v = v + one - one / weights[rows]
            var[rows] = v.clamp_min(torch.finfo(e.dtype).tiny)
            z[rows] = e / var[rows].sqrt()[:, None]
    return z, var


# ============================================================================ scale choice
def heldout_mse(Phi, Y, k, noise, c=None, weights=None):
    """Mean squared error on rows ``k:`` of the posterior mean given rows ``:k`` of the
    Bayesian linear model ``Y = Phi w + e``, ``w ~ N(0, I)``, ``e_i ~ N(0, noise + c_i)``:
    the weighted statistics and posterior (weights ``1 / (noise + c_i)``, unit prior),
    O(n r^2). Frequency ``weights`` multiply the row weights and weight the mean."""
    d = torch.full((k,), noise, dtype=Phi.dtype, device=Phi.device)
    if c is not None:
        d = d + c[:k]
    rw = d.reciprocal() if weights is None else weights[:k] / d
    G, B = blr_stats(Phi[:k], Y[:k], rw)
    mean = blr_posterior(G, B, 1.0, context="held-out noise floor").mean
    err = (Y[k:] - Phi[k:] @ mean).square()
    if weights is None:
        return float(err.mean())
    return float((weights[k:, None] * err).sum() / (weights[k:].sum() * err.shape[1]))


def choose_scales(Phi, Y, c, noise, k, noise_lower_bound, weights=None):
    """``(prior_scale, noise)`` maximising the exact evidence of the kernel
    ``a (Phi Phi^T + diag(c)) + noise I``: of all rows, or with ``k`` the evidence of rows
    ``k:`` given rows ``:k`` (held out), the noise then floored at the larger of
    :data:`HELDOUT_NOISE_FLOOR` times their mean squared error under the trained model and
    the noise that the evidence of all rows chooses (a small validation split that misses
    the outliers of heavy-tailed noise would otherwise send the held-out choice far below
    it). ``weights``: frequency weights of the rows."""
    w = weights
    ev = DiagNoiseEvidence(Phi, Y, c, w)  # the O(n r^2) statistics, formed once
    cond, floor = None, noise_lower_bound
    if k is not None:
        cond = DiagNoiseEvidence(Phi[:k], Y[:k], None if c is None else c[:k],
                                 None if w is None else w[:k])
        floor = max(floor, HELDOUT_NOISE_FLOOR * heldout_mse(Phi, Y, k, noise, c, w))
        floor = max(floor, blr_fit_scales(ev, 1.0, noise,
                                          noise_lower_bound=noise_lower_bound)[1])
    return blr_fit_scales(ev, 1.0, max(noise, floor), condition=cond,
                          noise_lower_bound=floor)


def select_scales(feat, X, Y, s2, correction, k, noise_lower_bound, chunk, weights=None):
    """:func:`choose_scales` on the features of ``(X, Y)`` (in float64 always), with the
    kernel of the model that predicts: ``Phi Phi^T + diag(M - |phi_i|^2)`` with the
    correction (eq. 12). ``k``: the number of training rows (the rest held out), or None
    for the evidence of all rows."""
    Phi = features(feat, X, chunk).double()
    kappa = Phi.square().sum(1)
    c = (kappa.max() - kappa) if correction else None
    return choose_scales(Phi, Y.double(), c, s2, k, noise_lower_bound,
                         None if weights is None else weights.double())


def condition_exact(net, scale, X, Y, s2, correction, k, selection, noise_lower_bound, chunk,
                    context="DBK", weights=None):
    """The exact model after training, with the network fixed: the prior scale ``a`` and the
    noise chosen by ``selection`` (``"heldout"``: the evidence of rows ``k:`` given rows
    ``:k``, or of all rows when ``k`` is None; ``"evidence"``: of all rows; None: ``a = 1``
    and the trained noise ``s2``), then the posterior on every row of ``(X, Y)``.

    Returns ``(scale * sqrt(a), a, noise, posterior, M, log_evidence)``, the log evidence
    (eq. 5) of all rows at ``a`` and that noise; ``noise`` is a tensor like ``s2``.
    ``weights``: frequency weights of the rows (a row of weight ``w`` has noise
    ``noise / w``, as if repeated ``w`` times).
    """
    feat = scaled_features(net, scale)
    a, s2_new = 1.0, float(s2)
    if selection is not None:
        a, s2_new = select_scales(feat, X, Y, s2_new, correction,
                                  k if selection == "heldout" else None, noise_lower_bound,
                                  chunk, weights)
    log_ev = evidence(feat, X, Y, chunk, weights)(a, s2_new)
    scale = scale * math.sqrt(a)
    noise = torch.tensor(s2_new, dtype=X.dtype, device=X.device)
    post, M = exact_posterior(scaled_features(net, scale), X, Y, noise, correction, chunk,
                              context=context, weights=weights)
    return scale, a, noise, post, M, log_ev


# ============================================================================ input-dependent noise
class NoiseHead:
    """A per-row noise variance ``s(x) = exp(b0 + psi(x) beta)`` over the inputs.

    ``psi(x)`` is ``[x, phi(x)]`` (the scaled inputs beside the network's features, so that
    the noise may vary along inputs the mean ignores), standardised by the training rows'
    ``center`` and ``scale``. Called as ``head(X, Phi)`` on a block of rows and their
    features; all tensors, no graph."""

    def __init__(self, center, scale, coef, intercept, lower=1e-6):
        self.center, self.scale, self.coef, self.intercept = center, scale, coef, intercept
        self.lower = float(lower)

    def log_noise(self, X, Phi):
        psi = (torch.cat([X, Phi], 1) - self.center) / self.scale
        return torch.clamp(self.intercept + psi @ self.coef, math.log(self.lower), 30.0)

    def __call__(self, X, Phi):
        return torch.exp(self.log_noise(X, Phi))

    def to(self, device, dtype):
        return NoiseHead(*(torch.as_tensor(t).to(device=device, dtype=dtype)
                           for t in (self.center, self.scale, self.coef, self.intercept)),
                         self.lower)

    def numpy(self):
        out = {k: getattr(self, k).detach().cpu().numpy()
               for k in ("center", "scale", "coef", "intercept")}
        return dict(out, lower=self.lower)


def _inputs(X, Phi, weights):
    """``psi = [X, Phi]``, its (weighted) column means and standard deviations (floored at a
    thousandth of the largest, so a near-constant feature is not blown up)."""
    P = torch.cat([X, Phi], 1)
    w = torch.ones(P.shape[0], dtype=P.dtype, device=P.device) if weights is None else weights
    center = (w[:, None] * P).sum(0) / w.sum()
    sd = torch.sqrt((w[:, None] * (P - center).square()).sum(0) / w.sum())
    return P, center, torch.clamp(sd, min=1e-3 * float(sd.max()) + 1e-12)


def fit_noise(X, Phi, Y, c, noise, weights=None, *, heteroscedastic=True, prior_sd=1.0,
              max_iter=200, lower=1e-6):
    """Maximise the evidence ``log N(Y; 0, a (Phi Phi^T + diag(c)) + diag(s(x_i)))`` over the
    prior scale ``a`` and the noise: one level (``heteroscedastic=False``) or a
    :class:`NoiseHead` whose coefficients have the prior ``N(0, prior_sd^2 / q)`` over the
    ``q`` standardised columns of ``psi`` (a log-noise that varies by about ``prior_sd``
    over the rows a priori; the MAP). Full-batch L-BFGS, O(n r^2) per evaluation: the
    diagonal noise is absorbed by scaling the rows (:func:`blr_log_evidence_diag`).
    ``noise``: the starting level; ``weights``: frequency weights of the rows; ``lower``:
    the smallest noise variance of a row (the log-noise is clipped to ``[log lower, 30]``).

    Returns ``(a, head, log_evidence)`` (``head`` a :class:`NoiseHead`; a constant one
    without heteroscedasticity)."""
    P, center, scale = _inputs(X, Phi, weights)
    Ps = (P - center) / scale
    q = P.shape[1]
    log_a = torch.zeros((), dtype=Phi.dtype, device=Phi.device, requires_grad=True)
    b0 = torch.tensor(math.log(max(noise, 2 * lower)), dtype=Phi.dtype, device=Phi.device,
                      requires_grad=True)
    coef = torch.zeros(q, dtype=Phi.dtype, device=Phi.device,
                       requires_grad=bool(heteroscedastic))
    params = [log_a, b0] + ([coef] if heteroscedastic else [])
    cz = torch.zeros_like(Phi[:, 0]) if c is None else c

    def evidence():
        a = torch.exp(log_a)
        d = a * cz + torch.exp(torch.clamp(b0 + Ps @ coef, math.log(lower), 30.0))
        if weights is None:
            return blr_log_evidence_diag(torch.sqrt(a) * Phi, Y, d)
        return weighted_log_evidence_diag(torch.sqrt(a) * Phi, Y, d, weights)

    n = float(Y.shape[0] if weights is None else weights.sum())
    opt = make_optimizer(torch.optim.LBFGS, params, lr=1.0, max_iter=max_iter,
                         line_search_fn="strong_wolfe", tolerance_grad=1e-7,
                         tolerance_change=1e-10)

    def closure():
        opt.zero_grad()
        loss = -(evidence() - 0.5 * q * coef.square().sum() / prior_sd ** 2) / n
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        log_ev = to_float(evidence())
    if not (math.isfinite(log_ev) and bool(torch.isfinite(coef).all())):
        raise FloatingPointError("the heteroscedastic evidence is not finite")
    head = NoiseHead(center, scale, coef.detach().clone(), b0.detach().clone(), lower)
    return float(torch.exp(log_a.detach())), head, log_ev


def noise_posterior(X, Phi, Y, c, a, head, weights=None, context="DBK"):
    """Weight posterior of ``Y = sqrt(a) Phi w + e``, ``w ~ N(0, I)``, ``e_i ~ N(0, a c_i +
    s(x_i))`` (a per-row noise): the statistics weighted by ``1 / (a c_i + s(x_i))``."""
    d = head(X, Phi) + (0.0 if c is None else a * c)
    rw = d.reciprocal() if weights is None else weights / d
    G, B = blr_stats(math.sqrt(a) * Phi, Y, rw)
    return blr_posterior(G, B, 1.0, context=f"{context}: heteroscedastic noise")


def _log_density(X, Phi, Y, c, a, head, post):
    """Gaussian log predictive density of each row (summed over targets)."""
    mean, var = post.predict(math.sqrt(a) * Phi)
    var = var + head(X, Phi) + (0.0 if c is None else a * c)
    return -0.5 * (torch.log(2 * math.pi * var)[:, None]
                   + (Y - mean).square() / var[:, None]).sum(1)


def noise_gain(X, Phi, Y, c, noise, folds, weights=None, prior_sd=1.0, lower=1e-6):
    """Per-row gain in log predictive density of the input-dependent noise over the fitted
    model of one noise level ``noise`` (at prior scale 1), cross-fitted: for each fold (an
    index tensor), the heteroscedastic model is fitted by :func:`fit_noise` on the other
    rows, and the fold's rows are scored under both posteriors given the other rows. The
    features are held fixed. ``noise`` was chosen on every row, the fold's included, so the
    comparison leans towards one noise level. Returns (n,)."""
    gain = torch.empty(Y.shape[0], dtype=Y.dtype, device=Y.device)
    every = torch.arange(Y.shape[0], device=Y.device)
    for test in folds:
        mask = torch.ones(Y.shape[0], dtype=torch.bool, device=Y.device)
        mask[test] = False
        train = every[mask]
        w = None if weights is None else weights[train]
        cc = None if c is None else c[train]
        Xt, Pt, Yt = X[train], Phi[train], Y[train]
        dens = []
        for het in (False, True):
            if het:
                a, head, _ = fit_noise(Xt, Pt, Yt, cc, noise, w, prior_sd=prior_sd,
                                       lower=lower)
            else:
                a, head = 1.0, NoiseHead(0.0, 1.0, torch.zeros(Pt.shape[1] + Xt.shape[1],
                                                               dtype=Y.dtype, device=Y.device),
                                         torch.tensor(math.log(noise), dtype=Y.dtype,
                                                      device=Y.device))
            post = noise_posterior(Xt, Pt, Yt, cc, a, head, w)
            with torch.no_grad():
                dens.append(_log_density(X[test], Phi[test], Y[test],
                                         None if c is None else c[test], a, head, post))
        gain[test] = dens[1] - dens[0]
    return gain


__all__ = ["DBKState", "HELDOUT_NOISE_FLOOR", "N_CHAMPIONS", "NoiseHead", "choose_scales",
           "chunked_elbo", "condition_exact", "correction_term", "evidence",
           "exact_loss", "exact_objective", "exact_posterior", "features", "fit_noise",
           "heldout_mse", "kl_to_prior", "loo_residuals", "max_prior_var", "moments",
           "noise_gain", "noise_posterior", "predictive", "prior_vars",
           "scaled_features", "select_scales", "softplus_inv", "stats", "svi_loss",
           "svi_objective", "trace_penalty", "validation_nll"]
