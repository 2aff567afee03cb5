"""Student-t processes from scale mixtures of NNGPs (Lee et al., ICLR 2022)."""

from __future__ import annotations

import math
from functools import partial
import numbers
import warnings

import numpy as np
import torch
from numpy.polynomial.hermite_e import hermegauss
from scipy import stats
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets

from ._backend import (DEFAULT_BLOCK_ELEMENTS, ExactGP, as_tensor, auto_batch_size, cho_solve, gp_predict,
                       iter_slices, make_generator, stable_cholesky, to_float,
                       to_numpy)
from ._base import (BATCH_SIZE_CONSTRAINT, BOUNDS_CONSTRAINT, DEVICE_CONSTRAINT,
                    DTYPE_CONSTRAINT, TorchEstimatorMixin, check_bounds, check_predict_params,
                    fit_hyperparameters, fit_input_scaling, plain, transactional)
from ._predictive import ClassifierPredictiveMixin, RegressorPredictiveMixin
from ._base import check_class_labels
from ._scale_mixture import DeltaPrior, InvGammaPrior, SampledPrior
from .kernels import get_activation, nngp_kernel
from .utils._sklearn_compat import (HasMethods, Interval, StrOptions, _fit_context,
                                    check_is_fitted, validate_data)

#: Order of the hyperparameter vector (optimised as logarithms; ARD relevances follow).
HYPERPARAMETERS = ("weight_variance", "bias_variance", "alpha", "prior_shape", "prior_scale")


def _unpack(raw):
    """Log-hyperparameters -> the parameter dict of the backend's :class:`ExactGP`."""
    p = torch.exp(raw)
    return {"weight_variance": p[0], "bias_variance": p[1], "noise_variance": p[2],
            "prior_shape": p[3], "prior_scale": p[4], "relevance": p[5:]}


def _nngp(depth, activation, ard, p, X1, X2=None, diag=False, ntk=False):
    """``kernel(params, X1, X2, diag)`` for the backend: the NNGP kernel, with ARD scaling."""
    if ard:  # first-layer weight variances sigma_w^2 r_i
        scale = torch.sqrt(p["relevance"])
        X1 = X1 * scale
        X2 = None if X2 is None else X2 * scale
    return nngp_kernel(X1, X2, depth=depth, weight_variance=p["weight_variance"],
                       bias_variance=p["bias_variance"], activation=activation, diag=diag,
                       return_ntk=ntk)


def _prior_marginal(prior, q, logdet, N, C, p):
    """The scale prior's log marginal likelihood (plugged into :class:`ExactGP`)."""
    return prior.log_marginal(q, logdet, N, C, p["prior_shape"], p["prior_scale"])


def _check_prior(prior):
    if isinstance(prior, str):
        return prior
    if hasattr(prior, "rvs") and hasattr(prior, "logpdf"):
        return "scipy"
    raise ValueError(
        "prior must be 'invgamma', 'gaussian', 'burr12' or a frozen scipy.stats distribution "
        f"on (0, inf); got {prior!r}.")


def _paired_gain(gain, z, min_gain):
    """``(mean, se, pays)`` of the paired per-row leave-one-out gains of ARD over the shared
    kernel: ``pays`` when the mean is more than ``z`` standard errors above zero and at
    least ``min_gain`` a row (the rule of ``ard="auto"``, regressor and classifier)."""
    se = float(np.std(gain, ddof=1) / math.sqrt(gain.size))
    mean = float(np.mean(gain))
    return mean, se, mean > max(z * se, min_gain)


def _argmax_proba(mu, V, nodes, n_quadrature, device, dtype, extra=None):
    """``P(argmax_j y_j = c)`` for ``y ~ N(mu, s V I + diag(extra))`` mixed over the scale
    nodes ``nodes``.

    ``mu`` is (m, C), ``V`` (m,) unit-amplitude variances and ``extra`` None or (m, C)
    variances added per output, not scaled by ``s`` (arrays, or tensors already on
    ``device``); Gauss-Hermite in ``z`` with ``n_quadrature`` nodes. With equal variances
    ``P_c = E_z prod_{j != c} Phi((mu_c - mu_j) / sigma + z)``; with ``extra``, conditioning
    on ``y_c = mu_c + sigma_c z``, ``P_c = E_z prod_{j != c} Phi((mu_c + sigma_c z - mu_j) /
    sigma_j)``. Returns an (m, C) tensor (not floored).
    """
    z, wz = hermegauss(n_quadrature)
    wz = wz / wz.sum()
    nodes = np.asarray(nodes, dtype=np.float64)
    mu_t, z_t, wz_t = (as_tensor(a, device, dtype) for a in (mu, z, wz))
    f64 = torch.float64  # the scales in float64 whatever the working dtype, then cast
    V64 = as_tensor(V, device, f64).clamp_min(1e-300)
    C = mu.shape[1]
    if extra is None:  # m x K
        sig = (V64.sqrt()[:, None] * as_tensor(np.sqrt(nodes), device, f64)[None, :]).to(dtype)
    else:  # m x C x K
        var = V64[:, None] * as_tensor(nodes, device, f64)[None, :]
        sig = (var[:, None, :] + as_tensor(extra, device, f64)[:, :, None]).sqrt().to(dtype)
    out = []
    eye = torch.eye(C, dtype=torch.bool, device=device)[None, :, :, None, None]
    for sl in iter_slices(mu.shape[0], max(1, 2**22 // (C * C * z.size * nodes.size))):
        diff = (mu_t[sl, :, None] - mu_t[sl, None, :])  # b x C x C: mu_c - mu_j
        if extra is None:
            arg = diff[..., None, None] / sig[sl, None, None, :, None] + z_t  # b C C K H
        else:
            s_c = sig[sl, :, None, :, None]  # b x C x 1 x K x 1
            s_j = sig[sl, None, :, :, None]  # b x 1 x C x K x 1
            arg = (diff[..., None, None] + s_c * z_t) / s_j
        logp = torch.special.log_ndtr(arg).masked_fill(eye, 0.0).sum(dim=2)  # b x C x K x H
        out.append((logp.exp() * wz_t).sum(-1).mean(-1))  # b x C
    return torch.cat(out) if out else torch.zeros((0, C), device=device, dtype=dtype)


def _target_low(target_coding):
    """The lower value of the class targets: 0 for ``"onehot"``, -0.1 for ``"centered"``
    (one-hot minus 0.1)."""
    return -0.1 if target_coding == "centered" else 0.0


def _label_variance(mu, low):
    """The variance ``p (1 - p)`` of a one-hot target whose mean is ``p = mu - low``
    (``low`` is the targets' lower value), with ``p`` clipped to [0, 1]."""
    p = (mu - low).clamp(0.0, 1.0) if torch.is_tensor(mu) else np.clip(mu - low, 0.0, 1.0)
    return p * (1.0 - p)


class StudentTProcessRegressor(RegressorPredictiveMixin, TorchEstimatorMixin, RegressorMixin,
                               BaseEstimator):
    """Student-t process regression with an NNGP kernel (scale mixture of NNGPs).

    An infinitely wide fully connected network whose readout variance ``s`` has a prior
    ``H``: conditioned on ``s`` the outputs are the NNGP ``GP(0, s K)``; with
    ``H = InvGamma(prior_shape, prior_scale)`` they form a Student-t process and inference
    is in closed form. Other priors (Burr XII, any positive scipy distribution) use
    self-normalised importance sampling or 1-D quadrature over ``s``.

    Read more in the :ref:`User Guide <student_t>`.

    Parameters
    ----------
    depth : int, default=3
        Number of hidden layers ``L`` of the network defining the NNGP kernel.
    activation : {"relu", "erf", "leaky_relu", "tanh", "sigmoid"} or callable, default="relu"
        Hidden-layer nonlinearity; a callable (torch -> torch) uses Gauss-Hermite quadrature.
    weight_variance : float, default=2.0
        Hidden-layer weight variance ``sigma_w^2`` (initial value when optimised).
    bias_variance : float, default=0.1
        Hidden-layer bias variance ``sigma_b^2``.
    alpha : float, default=1e-2
        Noise-to-signal ratio ``lambda`` added to the kernel diagonal inside the scaled
        covariance: ``y | s ~ N(0, s (K + lambda I))``.
    alpha_mode : {"absolute", "relative"}, default="absolute"
        ``"relative"`` adds ``alpha * mean(diag K)`` (neural-tangents' ``diag_reg``).
    prior : {"invgamma", "gaussian", "burr12"} or scipy.stats frozen distribution, \
default="invgamma"
        Prior of the readout variance ``s``. ``"gaussian"`` fixes ``s = prior_scale``
        (the plain NNGP regressor).
    prior_shape : float, default=2.0
        Inverse-gamma shape ``a`` (the prior df is ``2a``).
    prior_scale : float, default=2.0
        Inverse-gamma scale ``b``; the amplitude for ``"gaussian"``; the scale multiplying a
        Burr XII variate for ``"burr12"``.
    burr_c, burr_d : float, default=2.0, 1.0
        Burr XII shape parameters (scipy's ``c`` and ``d``).
    inference : {"auto", "exact", "snis", "quadrature"}, default="auto"
        ``"exact"`` for the closed-form priors; ``"snis"`` (importance sampling with the prior
        as proposal, the paper's algorithm) or ``"quadrature"`` for the others. ``"auto"``:
        exact when available, else SNIS. With a user scipy prior, quadrature evaluates its
        ``logpdf`` on the host on an 801-node grid at every optimiser step (cost independent
        of n).
    n_samples : int, default=1000
        Importance samples drawn from the prior.
    predictive : {"posterior", "readout_trained", "ntk_trained"}, default="posterior"
        Bayesian posterior, or the prior-mixed limits of gradient-descent
        training of the readout only (Thm 3.2) or of all layers (Thm 3.3, NTK).
    include_noise : bool, default=True
        Add ``s * lambda`` to the predictive variance, so that ``predict_dist``, ``predict``'s
        std and ``sample_y`` describe the noisy target ``y``. ``False`` gives the latent ``f``
        (what the paper evaluates, and what sklearn's ``GaussianProcessRegressor(alpha=...)``
        returns). A departure from the latent default one might expect (see the User Guide): the
        package's contract is that ``predict_dist`` is the distribution of ``y``, and a latent
        predictive covers noisy test targets far below its nominal level.
    variance_calibration : {"student_t", "loo"} or None, default="student_t"
        ``"loo"``: after the fit, the predictive variance is multiplied by the smallest
        factor ``calibration_factor_ >= 1`` under which the central 95 % interval holds 95 % of
        the closed-form leave-one-out residuals of the training rows (their finite-sample,
        split-conformal quantile). It is the same t-process with its amplitude ``s`` scaled,
        so the mean, the shape of the predictive and ``log_marginal_likelihood`` are
        unchanged; it costs one O(n^3) pass over the training Cholesky factor. It only ever
        widens. ``"student_t"``: the same residuals, read against the posterior's t (divided
        by its scale ``sqrt(posterior_scale_ / posterior_shape_)``; under a sampled prior,
        ``"burr12"`` or a scipy one, by the posterior's mean amplitude, and the fitted t
        then replaces the mixture in the predictive), also set the
        predictive's degrees of freedom ``predictive_df_`` by maximum likelihood, never
        above the posterior's ``df_``; the posterior's scale is kept unless a
        likelihood-ratio test at 1 % rejects it for the residuals' own; then the
        split-conformal factor at that t's quantile (below 1 only after the test), as in
        the mixed-activation GP and Rich-BLL. With ``df_ = 2a + n`` the evidence's t is
        nearly Gaussian beyond a few dozen rows whatever the prior's shape; this puts the
        tails the residuals show into the predictive (outliers in y). The mean and
        ``log_marginal_likelihood`` are unchanged. ``None``: the paper's predictive. Not
        applied with ``predictive="ntk_trained"``. ``"student_t"`` is the default since
        2026-11-26 (``"loo"`` before, which moved cpu_performance's 95 % coverage from
        0.871 to 0.924), chosen by ``benchmarks/bench_uncertainty.py``: mean test NLPD over
        its nine sets 1.825 / 1.826 / 1.821 at three fold seeds against 2.090 / 2.092 /
        2.109 with ``"loo"``, the same 95 % intervals where the test does not reject
        (User Guide, "Leave-one-out variance calibration").
    ard : bool or "auto", default=True
        Automatic relevance determination: the first hidden layer gets one weight variance
        per input feature, ``sigma_w^2 r_i`` (the NNGP of a network whose first-layer weights
        from input ``i`` have variance ``sigma_w^2 r_i / d``), so the input kernel becomes
        ``sigma_w^2 sum_i r_i x_i x'_i / d + sigma_b^2``. The relevances ``r_i`` are learned
        with the other hyperparameters. Not in the paper (which uses ``r_i = 1``; set
        ``ard=False`` for its model); it is the NNGP counterpart of an ARD lengthscale. The
        default by measurement: over eight data sets the two tie in mean test NLPD (2.045
        and 2.046) at the same cost, and ARD wins where features differ in relevance
        (concrete 2.91 against 3.00; see the user guide's "Defaults" page).
        ``"auto"`` fits the kernel with and without ARD and keeps ARD only when its per-row
        leave-one-out log predictive densities beat the shared kernel's by more than two
        standard errors of the paired differences (and by at least 0.001 nats a row), the
        rule of :class:`StudentTProcessClassifier`; with one feature it means ``False``.
        It costs a second fit (one n x n factor is held at a time; keeping the shared kernel
        costs one more factorisation). Not the default, by measurement
        (``bench_uncertainty.py``; User Guide, "ARD relevances under a hyperprior"): with
        ``relevance_prior`` it still gains on cpu_performance (test NLPD 4.736 / 4.781 /
        4.772 at fold seeds 0-2 against 4.780 / 4.792 / 4.770), but loses the auto_mpg
        extrapolation split (2.276 against 2.148), and the mean test NLPD over the nine
        interpolation sets moves by -0.005 to +0.001.
    relevance_bounds : pair of floats or "fixed", default=(1e-3, 1e3)
        Box for each relevance ``r_i`` when ``ard=True``.
    relevance_prior : float or None, default=1.5
        Standard deviation ``tau`` of a Gaussian hyperprior on how far each log relevance
        strays from their mean, ``log r_i - mean_j log r_j ~ N(0, tau^2)``: the
        relevances' common level stays free (it trades off against ``weight_variance``),
        only their spread is shrunk, towards the shared kernel. The ARD hyperparameters
        are then the maximum a posteriori ones; ``log_marginal_likelihood_value_`` remains
        the evidence. It matters with few rows per feature, where maximum evidence lets
        the relevances over-fit; with thousands of rows the evidence outweighs it. ``None``:
        maximum evidence (the default before 2026-11-27). No effect without ARD or with
        one feature. Not in the paper (neither is ARD). The default by measurement (User
        Guide, "ARD relevances under a hyperprior"; ``scripts/diag_relevance_prior.py``):
        on the four real sets of ``benchmarks/bench_uncertainty.py`` at fold seed 0 and
        their extrapolation splits, 1.5 gives the largest mean gain in test NLPD among the
        scales (1, 1.5, 2, 3) that lose no more than 0.01 nats on any of them; on the
        benchmark it lifts cpu_performance's 95 % coverage from 0.924 / 0.914 / 0.918 to
        0.943 / 0.928 / 0.933 at fold seeds 0-2, and the mean NLPD over the nine sets from
        1.825 / 1.826 / 1.821 to 1.816 / 1.823 / 1.816. It cost 0.025 / 0.027 nats with
        outliers in y at 50 / 100 rows (``bench_student_t.py --claim``). The classifier's
        internal regressor keeps it off.
    normalize_X : bool, default=True
        Standardise each feature with the training mean and standard deviation (the NNGP
        kernel has no lengthscale; every experiment of the paper standardises).
    normalize_y : bool, default=True
        Standardise each target; predictions are mapped back.
    weight_variance_bounds, bias_variance_bounds, alpha_bounds, prior_shape_bounds, \
prior_scale_bounds : pair of floats or "fixed"
        Box for each hyperparameter during marginal-likelihood maximisation, or ``"fixed"``.
        Defaults: ``(1e-2, 1e2)``, ``(1e-5, 1e1)``, ``(1e-6, 1e1)``, ``"fixed"``,
        ``(1e-3, 1e4)``. The shape is fixed by default rather than learned (see the User
        Guide): the marginal likelihood in ``a`` tends to push it to its upper bound, the
        Gaussian limit, which removes the heavy tails. On 10 draws of 15 training points with
        t(3) noise the test NLL was 1.27 with ``a = 2`` fixed against 2.16 with ``a`` learned
        (2.37 for the Gaussian NNGP). Pass ``prior_shape_bounds=(0.5, 1e4)`` to learn it.
    prior_shape_grid : array-like of positive floats or None, default=None
        Choose the inverse-gamma shape ``a`` among these values by the evidence: after the
        hyperparameter fit, each shape gets its best ``prior_scale`` (inside
        ``prior_scale_bounds``) with the kernel and noise kept, and the pair of largest log
        marginal likelihood is used (``prior_shape_scores_`` holds each shape's value).
        ``None`` keeps ``prior_shape`` (and ``prior_shape_bounds``). Needs
        ``prior="invgamma"`` with exact inference. Not the default, by measurement: on
        ``make_heavy_tailed`` (Cauchy noise, 4 draws of 100 training points) the evidence
        chose ``a = 1000`` every time, the Gaussian limit, and the test NLPD rose from 4.75
        (``a = 2``) to 9.89; with Gaussian noise it chose 1000 too and changed 1.571 to 1.575.
    optimizer : {"lbfgs", "adam"} or None, default="lbfgs"
        Maximise the log marginal likelihood over the non-fixed hyperparameters; ``None``
        keeps the given values.
    n_restarts_optimizer : int, default=0
        Extra starts drawn log-uniformly inside the bounds; the best result is kept.
    max_iter : int, default=100
        Iterations (L-BFGS) or steps (Adam) of each optimisation.
    tol : float, default=1e-6
        Tolerance on the change of the per-datum negative log marginal likelihood.
    learning_rate : float, default=0.05
        Adam step size.
    subset_size : int or None, default=500
        When ``n_samples > subset_size``, optimise first on a random subset of this many rows,
        then refine on all rows for ``refine_iter`` L-BFGS iterations. ``None`` always
        optimises on all rows.
    refine_iter : int, default=10
        Iterations on all rows after the subset stage.
    batch_size : int or None, default=None
        Rows per block when predicting (memory is O(batch_size x n_train)); ``None`` picks a
        block of about 128 MiB.
    device : {"auto", "cpu", "cuda", "cuda:N"} or torch.device, default="auto"
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds restarts, subsets and prior draws.
    verbose : int, default=0
        Print optimiser progress every ``verbose`` evaluations.

    Attributes
    ----------
    X_train_ : ndarray of shape (n_samples, n_features)
    y_train_ : ndarray of shape (n_samples, n_targets)
        Training targets after normalisation.
    relevance_ : ndarray of shape (n_features,)
        Fitted ARD relevances (ones without ARD).
    ard_loo_gain_ : tuple of (float, float) or None
        With ``ard="auto"``: the mean per-row leave-one-out log-density gain of ARD over the
        shared kernel and its standard error (``None`` when no comparison was made).
    prior_shape_scores_ : dict or None
        Log marginal likelihood of each shape of ``prior_shape_grid`` (``None`` without it).
    depth_, activation_, ard_, alpha_mode_, predictive_ : int, str or callable, bool, str, str
        The configuration the model was fitted with: ``predict`` and an unpickled model read
        these, so a ``set_params`` after ``fit`` changes nothing until the next ``fit``.
    hyperparameters_ : dict
        Fitted values of ``weight_variance``, ``bias_variance``, ``alpha``, ``prior_shape``,
        ``prior_scale``.
    L_ : ndarray of shape (n_samples, n_samples)
        Lower Cholesky factor of ``K + lambda I`` (plus any jitter added). Read from the
        factorisation on ``device_`` when first asked for (a host copy on a GPU, 20 GB at
        50,000 rows, so a fit does not pay for it unless it is used), read-only, and not
        pickled: a loaded model refactorises from ``X_train_`` and ``hyperparameters_``.
    dual_coef_ : ndarray of shape (n_samples, n_targets)
        ``(K + lambda I)^{-1} y``.
    q_ : float
        ``tr(Y^T (K + lambda I)^{-1} Y)``.
    df_ : float
        Degrees of freedom of the Student-t predictive (``inf`` when Gaussian, ``nan`` for a
        mixture).
    posterior_shape_, posterior_scale_ : float
        Inverse-gamma posterior of ``s`` (``nan`` for other priors).
    calibration_factor_ : float
        Factor on the predictive variance set by ``variance_calibration`` (1 without it;
        >= 1 except where the Student-t calibration's scale test narrowed the predictive).
        ``posterior_scale_`` and ``df_`` are those of the evidence, before it.
    predictive_df_ : float
        Degrees of freedom of the predictive t after ``variance_calibration="student_t"``
        (at most ``df_``); ``inf`` without it (the predictive is then the evidence's, of
        ``df_`` degrees of freedom).
    log_marginal_likelihood_value_ : float
    effective_sample_size_ : float or None
        Effective sample size of the importance weights (``None`` for exact inference).
    n_iter_ : int
    converged_ : bool
    loss_curve_ : list of float
        Per-datum negative log marginal likelihood at each optimiser evaluation.
    device_ : torch.device
    n_features_in_ : int

    See Also
    --------
    sklearn.gaussian_process.GaussianProcessRegressor : Gaussian process regression.

    Notes
    -----
    With ``q = y^T (K + lambda I)^{-1} y`` the posterior of ``s`` is
    ``InvGamma(a + n/2, b + q/2)`` and the predictive is Student-t with ``2a + n`` degrees of
    freedom, the NNGP posterior mean, and scale^2 ``(2b + q)/(2a + n) * v`` where ``v`` is the
    unit-amplitude NNGP posterior variance. The mean does not depend on the
    prior. Multi-output targets share one ``s``.

    Departure from the paper: hyperparameters are fitted by L-BFGS with a subset warm start
    rather than 30000 Adam steps, and ``sigma_v^2`` is fixed to 1 (only ``b sigma_v^2`` is
    identifiable).

    References
    ----------
    H. Lee, E. Yun, H. Yang, J. Lee. "Scale Mixtures of Neural Network Gaussian Processes".
    ICLR 2022.

    Examples
    --------
    >>> import numpy as np
    >>> from skbnngp import StudentTProcessRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(40, 3)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    >>> reg = StudentTProcessRegressor(random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:2], return_std=True)
    >>> reg.predict_dist(X[:2]).dist.name
    't'
    """

    _parameter_constraints: dict = {
        "depth": [Interval(numbers.Integral, 1, None, closed="left")],
        "activation": [StrOptions({"relu", "erf", "leaky_relu", "tanh", "sigmoid"}), callable],
        "weight_variance": [Interval(numbers.Real, 0, None, closed="neither")],
        "bias_variance": [Interval(numbers.Real, 0, None, closed="neither")],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "alpha_mode": [StrOptions({"absolute", "relative"})],
        "prior": [StrOptions({"invgamma", "gaussian", "burr12"}), HasMethods(["rvs", "logpdf"])],
        "prior_shape": [Interval(numbers.Real, 0, None, closed="neither")],
        "prior_scale": [Interval(numbers.Real, 0, None, closed="neither")],
        "burr_c": [Interval(numbers.Real, 0, None, closed="neither")],
        "burr_d": [Interval(numbers.Real, 0, None, closed="neither")],
        "inference": [StrOptions({"auto", "exact", "snis", "quadrature"})],
        "n_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "predictive": [StrOptions({"posterior", "readout_trained", "ntk_trained"})],
        "include_noise": ["boolean"],
        "variance_calibration": [StrOptions({"student_t", "loo"}), None],
        "ard": ["boolean", StrOptions({"auto"})],
        "relevance_bounds": BOUNDS_CONSTRAINT,
        "relevance_prior": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "normalize_X": ["boolean"],
        "normalize_y": ["boolean"],
        "weight_variance_bounds": BOUNDS_CONSTRAINT,
        "bias_variance_bounds": BOUNDS_CONSTRAINT,
        "alpha_bounds": BOUNDS_CONSTRAINT,
        "prior_shape_bounds": BOUNDS_CONSTRAINT,
        "prior_scale_bounds": BOUNDS_CONSTRAINT,
        "optimizer": [StrOptions({"lbfgs", "adam"}), None],
        "n_restarts_optimizer": [Interval(numbers.Integral, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "learning_rate": [Interval(numbers.Real, 0, None, closed="neither")],
        "subset_size": [Interval(numbers.Integral, 2, None, closed="left"), None],
        "refine_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "batch_size": BATCH_SIZE_CONSTRAINT,
        "device": DEVICE_CONSTRAINT,
        "dtype": DTYPE_CONSTRAINT,
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "prior_shape_grid": ["array-like", None],
    }

    def __init__(self, *, depth=3, activation="relu", weight_variance=2.0, bias_variance=0.1,
                 alpha=1e-2, alpha_mode="absolute", prior="invgamma", prior_shape=2.0,
                 prior_scale=2.0, burr_c=2.0, burr_d=1.0, inference="auto", n_samples=1000,
                 predictive="posterior", include_noise=True, variance_calibration="student_t",
                 ard=True, relevance_bounds=(1e-3, 1e3), relevance_prior=1.5,
                 normalize_X=True,
                 normalize_y=True, weight_variance_bounds=(1e-2, 1e2),
                 bias_variance_bounds=(1e-5, 1e1), alpha_bounds=(1e-6, 1e1),
                 prior_shape_bounds="fixed", prior_scale_bounds=(1e-3, 1e4),
                 optimizer="lbfgs", n_restarts_optimizer=0, max_iter=100, tol=1e-6,
                 learning_rate=0.05, subset_size=500, refine_iter=10, batch_size=None,
                 device="auto", dtype="float64", random_state=None, verbose=0,
                 prior_shape_grid=None):
        self.prior_shape_grid = prior_shape_grid
        self.depth = depth
        self.activation = activation
        self.weight_variance = weight_variance
        self.bias_variance = bias_variance
        self.alpha = alpha
        self.alpha_mode = alpha_mode
        self.prior = prior
        self.prior_shape = prior_shape
        self.prior_scale = prior_scale
        self.burr_c = burr_c
        self.burr_d = burr_d
        self.inference = inference
        self.n_samples = n_samples
        self.predictive = predictive
        self.include_noise = include_noise
        self.variance_calibration = variance_calibration
        self.ard = ard
        self.relevance_bounds = relevance_bounds
        self.relevance_prior = relevance_prior
        self.normalize_X = normalize_X
        self.normalize_y = normalize_y
        self.weight_variance_bounds = weight_variance_bounds
        self.bias_variance_bounds = bias_variance_bounds
        self.alpha_bounds = alpha_bounds
        self.prior_shape_bounds = prior_shape_bounds
        self.prior_scale_bounds = prior_scale_bounds
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate = learning_rate
        self.subset_size = subset_size
        self.refine_iter = refine_iter
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ set-up
    def _check_params(self):
        kind = _check_prior(self.prior)
        inference = self.inference
        if inference == "auto":
            inference = "exact" if kind in ("invgamma", "gaussian") else "snis"
        if inference == "exact" and kind not in ("invgamma", "gaussian"):
            raise ValueError(
                f"inference='exact' needs prior='invgamma' or 'gaussian', got prior={kind!r}; "
                "use inference='snis' or 'quadrature'.")
        self._activation = get_activation(self.activation)
        bounds = [check_bounds(name, getattr(self, f"{name}_bounds"), getattr(self, name),
                               enforce=self.optimizer is not None) for name in HYPERPARAMETERS]
        bounds.append(check_bounds("relevance", self.relevance_bounds, 1.0, enforce=False))
        return kind, inference, bounds

    def _make_prior(self, kind, inference, gen, rng, device, dtype):
        if inference == "exact":
            return InvGammaPrior() if kind == "invgamma" else DeltaPrior()
        if kind == "invgamma":
            dist = stats.invgamma(self.prior_shape, scale=self.prior_scale)
        elif kind == "gaussian":
            raise ValueError("prior='gaussian' is a point mass: use inference='exact'.")
        else:
            dist = self.prior if kind == "scipy" else None
        return SampledPrior("burr12" if kind == "burr12" else "scipy", inference,
                            c=self.burr_c, d=self.burr_d, dist=dist, n_samples=self.n_samples,
                            generator=gen, rng=rng, device=device, dtype=dtype)

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y):
        """Fit the Student-t process (and its hyperparameters) to ``(X, y)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)

        Returns
        -------
        self : object
        """
        kind, inference, bounds = self._check_params()
        grid = self._check_shape_grid(kind, inference)
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True,
                             ensure_min_samples=2, dtype=np.float64)
        if self.ard == "auto" and X.shape[1] > 1:
            return self._fit_auto_ard(X, y)
        self.ard_loo_gain_ = None
        return self._fit_kernel(X, y, kind, inference, bounds, grid,
                                not isinstance(self.ard, str) and bool(self.ard))

    def _fit_auto_ard(self, X, y):
        """``ard="auto"``: fit the shared and the ARD kernel (each a full fit, as
        ``ard=False`` and ``ard=True`` would be), keep ARD only when its per-row
        leave-one-out log predictive densities beat the shared kernel's by more than
        ``_ard_z`` standard errors of the paired differences (and ``_ard_min_gain`` nats a
        row), and adopt the kept fit's state and warnings."""
        fits = []
        for ard in (False, True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                reg = clone(self).set_params(ard=ard).fit(X, y)
            fits.append((reg, caught, reg._loo_log_density()))
            if not ard:
                # drop the shared fit's n x n factor before the ARD fit, so that only one is
                # held at a time; if the shared kernel is kept, _get_cache refactorises it
                # from its fitted attributes, as for a loaded model
                for key in ("_engine", "_theta", "_cache"):
                    reg.__dict__.pop(key, None)
        # paired per-row LOO gains of ARD
        mean, se, pays = _paired_gain(fits[1][2] - fits[0][2], self._ard_z, self._ard_min_gain)
        reg, caught, _ = fits[pays]
        for w in caught:  # only the kept model's warnings reach the user
            warnings.warn(w.message, w.category, stacklevel=3)
        params = self.get_params(deep=False)
        for key, value in vars(reg).items():
            if key not in params:
                setattr(self, key, value)
        self.ard_loo_gain_ = (mean, se)
        return self

    #: ``ard="auto"`` takes the ARD kernel only when its mean paired leave-one-out gain is
    #: more than ``_ard_z`` standard errors above zero and at least ``_ard_min_gain`` nats a
    #: row (the rule of :class:`StudentTProcessClassifier`).
    _ard_z, _ard_min_gain = 2.0, 1e-3

    def _loo_log_density(self):
        """Per-row leave-one-out log density of the training targets under the fitted
        predictive (calibrated where ``variance_calibration`` is on; normalised targets,
        summed over them), hyperparameters held at their fitted values."""
        cache = self._get_cache()
        r, v = self._engine.loo(cache["factor"], cache["p"])
        r = to_numpy(r)
        std = np.sqrt(to_numpy(v) * self.calibration_factor_)[:, None]
        return self._mixing().predictive(np.zeros_like(r), std=np.broadcast_to(
            std, r.shape)).logpdf(r).sum(axis=1)

    def _fit_kernel(self, X, y, kind, inference, bounds, grid, ard):
        """The fit with the ARD choice made (``ard``)."""
        self.y_train_ = self._normalise_targets(y)
        device, dtype = self._resolve_runtime()
        rng = check_random_state(self.random_state)
        gen = make_generator(rng.randint(np.iinfo(np.int32).max), device)

        self.X_train_ = X
        # the fitted configuration: everything predict and an unpickled model's cache read
        self.depth_, self.activation_, self.ard_ = self.depth, self.activation, ard
        self.alpha_mode_, self.predictive_ = self.alpha_mode, self.predictive
        Xt = as_tensor(fit_input_scaling(self, X, self.normalize_X), device, dtype)
        Yt = as_tensor(self.y_train_, device, dtype)
        self._prior_obj = self._make_prior(kind, inference, gen, rng, device, dtype)
        engine = self._make_gp(Xt, Yt)
        n_rel = X.shape[1] if self.ard_ else 0
        theta = torch.log(torch.tensor([float(getattr(self, h)) for h in HYPERPARAMETERS]
                                       + [1.0] * n_rel, device=device, dtype=dtype))
        free = [b != "fixed" and h in self._prior_obj.uses + HYPERPARAMETERS[:3]
                for h, b in zip(HYPERPARAMETERS, bounds)] + [bounds[5] != "fixed"] * n_rel
        bounds = bounds[:5] + [bounds[5]] * n_rel
        free_idx = [i for i, f in enumerate(free) if f]
        self.n_iter_, self.converged_, self.loss_curve_ = 0, True, []
        if self.optimizer is not None and free_idx:
            box = tuple(torch.log(torch.tensor([bounds[i][j] for i in free_idx], device=device,
                                               dtype=dtype)) for j in (0, 1))
            theta = fit_hyperparameters(
                self, engine, theta, free_idx, box, rng, method=self.optimizer,
                max_iter=self.max_iter, tol=self.tol, learning_rate=self.learning_rate,
                subset_size=self.subset_size, refine_iter=self.refine_iter,
                restarts=self.n_restarts_optimizer, penalty=self._relevance_penalty(n_rel))
        self.prior_shape_scores_ = None
        if grid is not None:
            theta = self._choose_shape(engine, theta, grid, bounds[4])
            free[3] = free[4] = True
        fitted = to_numpy(torch.exp(theta)).tolist()
        optimised = self.optimizer is not None or grid is not None
        self.hyperparameters_ = {
            h: (fitted[i] if optimised and free[i] else float(getattr(self, h)))
            for i, h in enumerate(HYPERPARAMETERS)}
        if grid is not None:  # the grid's value itself, not exp(log a)
            self.hyperparameters_["prior_shape"] = self._shape_choice
        self.relevance_ = np.asarray(fitted[5:]) if self.ard_ else np.ones(X.shape[1])
        self._publish(engine, theta)
        return self

    def _relevance_penalty(self, n_rel):
        """``penalty(raw) -> (value, grad)`` of ``relevance_prior`` (the negative log
        hyperprior up to a constant) for :func:`fit_hyperparameters`, or ``None``."""
        tau = self.relevance_prior
        if n_rel < 2 or tau is None:
            return None
        first = len(HYPERPARAMETERS)

        def penalty(raw):
            dev = raw[first:] - raw[first:].mean()  # deviations from the common level
            grad = torch.zeros_like(raw)
            grad[first:] = dev / tau ** 2  # the mean's own gradient sums to zero
            return 0.5 * torch.sum(dev * dev) / tau ** 2, grad
        return penalty

    def _publish(self, engine, theta):
        """Factorise at ``theta`` and set the fitted attributes that follow from it."""
        self._engine, self._theta = engine, theta
        cache = self._factorise()
        f = cache["factor"]
        self.dual_coef_ = to_numpy(f["dual"])
        self.q_ = to_float(f["q"])
        p = torch.exp(theta)
        self.log_marginal_likelihood_value_ = -to_float(f["nll"])
        N = engine.n * engine.C
        self._posterior = self._prior_obj.posterior(f["q"], f["logdet"], N, engine.C, p[3], p[4])
        self.effective_sample_size_ = self._prior_obj.effective_sample_size
        post = self._posterior
        self.posterior_shape_ = post.params["shape"] if post.kind == "invgamma" else math.nan
        self.posterior_scale_ = post.params["scale"] if post.kind == "invgamma" else math.nan
        self.predictive_df_ = math.inf  # the evidence's predictive until the calibration
        mix = self._model_mixing()
        self.df_ = (2 * mix.params["shape"] if mix.kind == "invgamma"
                    else (math.inf if mix.kind == "delta" else math.nan))
        self._cache = cache
        method = {"loo": "gaussian"}.get(self.variance_calibration, self.variance_calibration)
        self._calibrate_from_loo(None if self.predictive_ == "ntk_trained" else method,
                                 engine, f, cache["p"])

    @property
    def L_(self):
        """Lower Cholesky factor of ``K + lambda I`` (NumPy), read from ``device_`` on demand."""
        check_is_fitted(self)
        cache = self._get_cache()
        return self._host_copy(cache, "L_host", cache["factor"]["L"])

    def _set_alpha(self, alpha):
        """Refactorise with the noise ratio ``alpha``, the other hyperparameters kept."""
        self._get_cache()
        theta = self._theta.clone()
        theta[2] = math.log(alpha)
        self.hyperparameters_ = {**self.hyperparameters_, "alpha": float(alpha)}
        self._publish(self._engine, theta)

    def _check_shape_grid(self, kind, inference):
        if self.prior_shape_grid is None:
            return None
        grid = np.asarray(self.prior_shape_grid, dtype=float).ravel()
        if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
            raise ValueError("prior_shape_grid must hold at least one positive finite shape; "
                             f"got {self.prior_shape_grid!r}.")
        if kind != "invgamma" or inference != "exact":
            raise ValueError("prior_shape_grid needs prior='invgamma' with exact inference; "
                             f"got prior={kind!r}, inference={inference!r}.")
        return grid

    def _choose_shape(self, engine, theta, grid, scale_bounds):
        """The inverse-gamma shape on ``grid`` of largest evidence, each with its best scale.

        The kernel and the noise stay at ``theta``, so ``q`` and ``log|K_lambda|`` are fixed
        and each shape costs a 1-D maximisation over ``log b`` inside ``prior_scale_bounds``
        (``b`` kept when they are ``"fixed"``). Sets ``prior_shape_scores_``.
        """
        from scipy.optimize import minimize_scalar

        f = engine.state(theta)
        q, logdet = f["q"].detach(), f["logdet"].detach()
        N, C = engine.n * engine.C, engine.C
        prior = InvGammaPrior()

        def lml(a, log_b):
            t = theta.new_tensor
            return to_float(prior.log_marginal(q, logdet, N, C, t(a), t(math.exp(log_b))))

        scores, best = {}, (-math.inf, None, None)
        for a in grid:
            if scale_bounds == "fixed":
                log_b = float(theta[4])
            else:
                lo, hi = math.log(scale_bounds[0]), math.log(scale_bounds[1])
                log_b = minimize_scalar(lambda v, a=a: -lml(a, v), bounds=(lo, hi),
                                        method="bounded", options={"xatol": 1e-6}).x
            scores[float(a)] = value = lml(a, log_b)
            if value > best[0]:
                best = (value, float(a), float(log_b))
        self.prior_shape_scores_, self._shape_choice = scores, best[1]
        theta = theta.clone()
        theta[3], theta[4] = math.log(best[1]), best[2]
        return theta

    def _make_gp(self, Xt, Yt):
        kernel = partial(_nngp, self.depth_, get_activation(self.activation_), self.ard_)
        return ExactGP(kernel, _unpack, Xt, Yt,
                       marginal=partial(_prior_marginal, self._prior_obj),
                       relative_noise=self.alpha_mode_ == "relative",
                       context=type(self).__name__)

    def _factorise(self):
        """Final factorisation on the training set (and the NTK pieces for Thm 3.3)."""
        eng, theta = self._engine, self._theta
        f = eng.state(theta, warn=True, context=f"{type(self).__name__}: training kernel")
        cache = {"factor": f, "p": _unpack(theta)}
        if self.predictive_ == "ntk_trained":
            with torch.no_grad():
                K, T = eng.kernel(cache["p"], eng.X, ntk=True)
                T = T.clone()
                T.diagonal().add_(f["noise"])
                LT, _ = stable_cholesky(T, context=f"{type(self).__name__}: training NTK")
            cache.update(K=K, LT=LT, AT=cho_solve(LT, eng.Y))
        return cache

    def _build_cache(self):
        # after unpickling: rebuild the engine and the factorisation on device_ from the
        # fitted configuration (depth_, activation_, ard_, alpha_mode_, predictive_)
        device, dtype = self.device_, self._dtype
        Xt = as_tensor((self.X_train_ - self._X_offset) / self._X_scale, device, dtype)
        Yt = as_tensor(self.y_train_, device, dtype)
        self._engine = self._make_gp(Xt, Yt)
        self._theta = torch.log(torch.tensor(
            [self.hyperparameters_[h] for h in HYPERPARAMETERS]
            + (list(self.relevance_) if self.ard_ else []), device=device, dtype=dtype))
        return self._factorise()

    def __getstate__(self):
        state = super().__getstate__()
        for key in ("_engine", "_theta"):
            state.pop(key, None)
        return state  # a SampledPrior saves its draws as NumPy itself

    def __setstate__(self, state):
        state = dict(state)
        state.pop("L_", None)  # saved by versions before L_ was read on demand
        # saved before relevance_prior existed: those fits were maximum evidence (None), and
        # get_params / clone / repr need the attribute
        state.setdefault("relevance_prior", None)
        super().__setstate__(state)
        obj = self.__dict__.get("_prior_obj")
        if isinstance(obj, SampledPrior):
            obj.unit_draws = torch.as_tensor(obj.unit_draws, device=self.device_)
            obj.device = self.device_

    # ------------------------------------------------------------------ predict
    def _model_mixing(self):
        if self.predictive_ == "posterior":
            return self._posterior
        hp = self.hyperparameters_
        return self._prior_obj.prior(hp["prior_shape"], hp["prior_scale"])

    _predict_params = ("include_noise", "batch_size")

    def _latent_moments(self, Xq, full_cov):
        """Unit-amplitude predictive mean (m x C) and variance (m,) or covariance (m x m)."""
        cache = self._get_cache()
        eng, f, p = self._engine, cache["factor"], cache["p"]
        lam = f["noise"] if self.include_noise else 0.0
        if self.predictive_ != "ntk_trained":
            mean, V = gp_predict(eng.kernel, p, f, Xq, full_cov=full_cov, noise=lam,
                                 batch_size=self.batch_size)
            return to_numpy(mean), to_numpy(V)

        def block(Xb, cov):  # Thm 3.3: mean and Theta' from the NTK
            with torch.no_grad():
                Ks, Ts = eng.kernel(p, Xb, eng.X, ntk=True)
                mean = Ts @ cache["AT"]
                B = cho_solve(cache["LT"], Ts.T)  # Theta_lambda^{-1} Theta_tr,*
                cross = Ks @ B
                KB = cache["K"] @ B
                if cov:
                    V = eng.kernel(p, Xb) + B.T @ KB - cross - cross.T
                    V.diagonal().add_(lam)
                else:
                    V = (eng.kernel(p, Xb, diag=True) + (B * KB).sum(0)
                         - 2 * cross.diagonal() + lam)
                return mean, V

        if full_cov:
            mean, V = block(Xq, True)
        else:
            parts = [block(Xq[sl], False) for sl in iter_slices(
                Xq.shape[0], auto_batch_size(eng.n, self.batch_size,
                                             max(eng.block, DEFAULT_BLOCK_ELEMENTS)))]
            mean = torch.cat([m for m, _ in parts]) if parts else Xq.new_zeros((0, eng.C))
            V = torch.cat([v for _, v in parts]) if parts else Xq.new_zeros(0)
        return to_numpy(mean), to_numpy(V)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Log marginal likelihood of the (normalised) training targets.

        Parameters
        ----------
        theta : array-like of shape (5,) or (5 + n_features,), default=None
            Logarithms of ``weight_variance, bias_variance, alpha, prior_shape,
            prior_scale`` (then the relevances when ``ard=True``); ``None`` returns the fitted
            value.
        eval_gradient : bool, default=False
            Also return the gradient with respect to ``theta``.
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("eval_gradient=True requires theta.")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        size = len(HYPERPARAMETERS) + (self.n_features_in_ if self.ard_ else 0)
        if theta.shape != (size,) or not np.all(np.isfinite(theta)):
            raise ValueError(f"theta must be {size} finite log-values "
                             f"({', '.join(HYPERPARAMETERS)}{', relevances' if self.ard_ else ''}).")
        self._get_cache()
        th = as_tensor(theta, self.device_, self._dtype)
        nll, grad = self._engine.value_and_grad(th)
        if eval_gradient:
            return -to_float(nll), -to_numpy(grad)
        return -to_float(nll)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


class StudentTProcessClassifier(ClassifierPredictiveMixin, TorchEstimatorMixin, ClassifierMixin,
                                BaseEstimator):
    """Classification by Student-t process regression on one-hot targets.

    Classes are encoded as 0/1 one-hot targets (or ``-0.1/0.9`` with
    ``target_coding="centered"``) and fitted by a multi-output
    :class:`StudentTProcessRegressor` whose outputs share one readout variance ``s``.
    The predicted class is the argmax of the posterior mean, which does not depend on the
    scale prior (the paper's rule; with a positive ``label_variance_`` the most probable
    class, see :meth:`predict`).

    ``predict_proba`` (not defined by the paper) is ``P(argmax_j f_j = c)`` under the
    predictive with shared ``s``. Because the class outputs share one variance, it is computed
    deterministically as ``E_s int phi(z) prod_{j != c} Phi((mu_c - mu_j)/sqrt(s v) + z) dz``
    with Gauss-Hermite nodes in ``z`` and quantile nodes of the mixing distribution of ``s``,
    instead of Monte Carlo: the same quantity without sampling noise, and its
    argmax always agrees with ``predict``. With ``label_variance`` (chosen by leave-one-out)
    each class's variance also holds ``w p_j (1 - p_j)``, the variance of a one-hot target
    at its posterior mean, and the integral conditions on ``y_c`` instead. Probabilities are
    floored at 1e-9.

    Read more in the :ref:`User Guide <student_t>`.

    Parameters
    ----------
    target_coding : {"onehot", "centered"}, default="onehot"
    n_quadrature : int, default=16
        Gauss-Hermite nodes (and scale nodes) for ``predict_proba``; the cost grows as its
        square. Against 64 nodes, 16 changed no probability by more than 1.2e-4 on the six
        sets of ``benchmarks/bench_classification.py`` (one fold each; test NLL equal to
        four decimals); a digits fold (360 test rows) predicts in 0.26 s against 0.80 s
        with 32 nodes (3.1x; ``bench_classification``).
    alpha_selection : {"loo", "evidence"}, default="loo"
        How the noise ratio ``alpha`` is chosen. ``"evidence"``: with the other
        hyperparameters, by the marginal likelihood of the one-hot targets, which on small
        data can run to ``alpha``'s lower bound and give confident mistakes. ``"loo"``: the
        other hyperparameters by the evidence, then ``alpha`` and a label-noise weight
        ``label_noise_`` by the closed-form leave-one-out class log loss on a grid (4 points
        a decade inside ``alpha_bounds``; label noise in {0, 1e-4, ..., 0.2}); ``predict_proba``
        mixes ``label_noise_`` of the uniform distribution into the probabilities (a
        robust-max likelihood), so a point the leave-one-out fit finds misclassified does not
        make every mistake cost ``log(1e9)``. Measured in the User Guide.
    ard : bool or "auto", default="auto"
        One first-layer weight variance per feature (see :class:`StudentTProcessRegressor`).
        ``"auto"`` fits the kernel with and without ARD and keeps ARD only when its
        per-row leave-one-out class log losses beat the shared kernel's by more than two
        standard errors of the paired differences (and by at least 0.001 nats a row) and
        its evidence fit is not the degenerate one of small data (``alpha`` on its lower
        bound, the one-hot targets interpolated, with a kernel hyperparameter on a bound);
        otherwise the shared kernel. Only the kept fit's warnings are shown. ``"auto"``
        needs ``alpha_selection="loo"``; without it, and with one feature, it means
        ``False``. It costs a second fit. Measured in the User Guide: ARD alone overfits
        the evidence on small sets (wine and breast_cancer test NLL 0.160 and 0.132 against
        0.036 and 0.080 without it); the rule keeps the shared kernel there and takes ARD
        on ``overlap`` (NLL 0.368 -> 0.258).
    label_variance : "auto" or float >= 0, default="auto"
        Weight ``w`` of the variance of a one-hot target, ``p (1 - p)`` at the posterior
        mean ``p``, added per class to the predictive variance of ``predict_proba``. One
        noise level for all rows is too small where the classes overlap (a one-hot target
        there varies by up to 1/4) and too large where they do not, which made the
        probabilities over-confident near the class boundary. ``"auto"`` chooses ``w`` from
        {0, 1/8, 1/4, 1/2, 1} by the leave-one-out class log loss at the chosen ``alpha``
        (0 without ``alpha_selection="loo"``); a number fixes it (0: the probabilities of
        versions before this parameter). Not in the paper, which defines no probabilities.
        Measured in the User Guide.
    weight_variance_bounds, bias_variance_bounds, alpha_bounds, prior_shape_bounds, \
prior_scale_bounds : pair of floats or "fixed"
        Boxes of the hyperparameters, as for :class:`StudentTProcessRegressor` (same
        defaults except ``alpha_bounds=(1e-6, 1e3)``). A ``ConvergenceWarning`` names any
        that ends on its bound. ``alpha`` is absolute while the kernel's amplitude is not
        identified apart from the scale ``s`` (the evidence trades one for the other): on
        iris the fit reaches a mean kernel diagonal of about 470, where the regressor's
        upper bound 10 is a noise ratio of 0.02 and the leave-one-out choice ended on it
        in every fold (see the User Guide).
    depth, activation, weight_variance, bias_variance, alpha, prior, prior_shape, \
prior_scale, burr_c, burr_d, inference, n_samples, optimizer, n_restarts_optimizer, max_iter, \
tol, subset_size, refine_iter, batch_size, device, dtype, random_state, verbose
        As for :class:`StudentTProcessRegressor`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    regressor_ : StudentTProcessRegressor
        The fitted one-hot regressor.
    alpha_evidence_ : float
        The noise ratio that maximised the evidence (before the leave-one-out choice).
    loo_log_loss_ : float or None
        Mean leave-one-out class log loss at the chosen ``alpha`` and ``label_noise_``
        (``None`` with ``alpha_selection="evidence"``).
    label_noise_ : float
        Weight of the uniform distribution mixed into ``predict_proba`` (0 with
        ``alpha_selection="evidence"``).
    label_variance_ : float
        The weight of the one-hot targets' variance in ``predict_proba`` (see
        ``label_variance``).
    ard_ : bool
        Whether the fitted kernel has per-feature relevances.
    ard_loo_gain_ : tuple of (float, float) or None
        With ``ard="auto"``: the mean per-row leave-one-out log-loss gain of ARD over the
        shared kernel and its standard error (``None`` when no comparison was made).
    n_iter_ : int
    converged_ : bool
    device_ : torch.device
    n_features_in_ : int

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skbnngp import StudentTProcessClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = StudentTProcessClassifier(random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:1]).shape
    (1, 3)
    """

    _parameter_constraints: dict = {
        **{k: v for k, v in StudentTProcessRegressor._parameter_constraints.items()
           if k in ("depth", "activation", "weight_variance", "bias_variance", "alpha",
                    "prior", "prior_shape", "prior_scale", "burr_c", "burr_d", "inference",
                    "n_samples", "optimizer", "n_restarts_optimizer", "max_iter", "tol",
                    "subset_size", "refine_iter", "batch_size", "device", "dtype",
                    "random_state", "verbose", "ard", "weight_variance_bounds",
                    "bias_variance_bounds", "alpha_bounds", "prior_shape_bounds",
                    "prior_scale_bounds")},
        "target_coding": [StrOptions({"onehot", "centered"})],
        "n_quadrature": [Interval(numbers.Integral, 2, None, closed="left")],
        "alpha_selection": [StrOptions({"loo", "evidence"})],
        "ard": ["boolean", StrOptions({"auto"})],
        "label_variance": [StrOptions({"auto"}), Interval(numbers.Real, 0, None,
                                                          closed="left")],
    }

    #: Parameters that are the classifier's own (not passed to the regressor).
    _own = ("target_coding", "n_quadrature", "alpha_selection", "ard", "label_variance")

    def __init__(self, *, depth=3, activation="relu", weight_variance=2.0, bias_variance=0.1,
                 alpha=1e-2, prior="invgamma", prior_shape=2.0, prior_scale=2.0, burr_c=2.0,
                 burr_d=1.0, inference="auto", n_samples=1000, target_coding="onehot",
                 n_quadrature=16, alpha_selection="loo", ard="auto", label_variance="auto",
                 weight_variance_bounds=(1e-2, 1e2),
                 bias_variance_bounds=(1e-5, 1e1), alpha_bounds=(1e-6, 1e3),
                 prior_shape_bounds="fixed", prior_scale_bounds=(1e-3, 1e4),
                 optimizer="lbfgs", n_restarts_optimizer=0, max_iter=100,
                 tol=1e-6, subset_size=500, refine_iter=10, batch_size=None, device="auto",
                 dtype="float64", random_state=None, verbose=0):
        self.depth = depth
        self.activation = activation
        self.weight_variance = weight_variance
        self.bias_variance = bias_variance
        self.alpha = alpha
        self.prior = prior
        self.prior_shape = prior_shape
        self.prior_scale = prior_scale
        self.burr_c = burr_c
        self.burr_d = burr_d
        self.inference = inference
        self.n_samples = n_samples
        self.target_coding = target_coding
        self.n_quadrature = n_quadrature
        self.alpha_selection = alpha_selection
        self.ard = ard
        self.label_variance = label_variance
        self.weight_variance_bounds = weight_variance_bounds
        self.bias_variance_bounds = bias_variance_bounds
        self.alpha_bounds = alpha_bounds
        self.prior_shape_bounds = prior_shape_bounds
        self.prior_scale_bounds = prior_scale_bounds
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.subset_size = subset_size
        self.refine_iter = refine_iter
        self.batch_size = batch_size
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y):
        """Fit the one-hot Student-t process regressor.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)

        Returns
        -------
        self : object
        """
        X, y = validate_data(self, X, y, ensure_min_samples=2, dtype=np.float64)
        check_class_labels(y)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.size < 2:
            raise ValueError("StudentTProcessClassifier needs samples of at least 2 classes "
                             f"in the data; got 1 class ({plain(self.classes_[0])!r}).")
        Y = (y[:, None] == self.classes_[None, :]).astype(float) + _target_low(
            self.target_coding)
        yi = np.searchsorted(self.classes_, y)
        use_loo = (self.alpha_selection == "loo" and self.optimizer is not None
                   and not isinstance(self.alpha_bounds, str))
        if self.ard == "auto" and use_loo and X.shape[1] > 1:
            fits = [self._fit_one(X, Y, yi, False, use_loo),
                    self._fit_one(X, Y, yi, True, use_loo)]
            chosen, self.ard_loo_gain_ = fits[0], None
            if fits[0]["rows"] is not None and fits[1]["rows"] is not None:
                mean, se, pays = _paired_gain(fits[0]["rows"] - fits[1]["rows"],
                                              self._ard_z, self._ard_min_gain)
                self.ard_loo_gain_ = (mean, se)
                if pays and not self._degenerate(fits[1]):
                    chosen = fits[1]
        else:
            chosen = self._fit_one(X, Y, yi, self.ard != "auto" and bool(self.ard), use_loo)
            self.ard_loo_gain_ = None
        for w in chosen["warnings"]:  # only the kept model's warnings reach the user
            warnings.warn(w.message, w.category, stacklevel=2)
        reg = chosen["reg"]
        self.alpha_evidence_ = chosen["alpha_evidence"]
        self.loo_log_loss_, self.label_noise_ = chosen["loo"], chosen["eps"]
        self.label_variance_ = chosen["w"]
        self._label_low = _target_low(self.target_coding)
        self.ard_ = bool(reg.ard_)
        self.regressor_ = reg
        if chosen["bounds"]:
            warnings.warn(
                f"{type(self).__name__}: hyperparameters ended on a bound: "
                f"{', '.join(chosen['bounds'])}. The probabilities may be over- or "
                "under-confident; widen the *_bounds.", ConvergenceWarning, stacklevel=2)
        self.device_ = self.regressor_.device_
        self.n_iter_ = self.regressor_.n_iter_
        self.converged_ = self.regressor_.converged_
        return self

    #: Grid points per decade of ``alpha`` for the leave-one-out choice, and the number of
    #: Gauss-Hermite and scale nodes used to score it.
    _loo_per_decade, _loo_nodes = 4, 8

    #: Stride of the coarse pass of the leave-one-out grid search (1: every point).
    _loo_coarse = 4

    #: ``ard="auto"`` takes the ARD kernel only when its mean paired leave-one-out gain is
    #: more than ``_ard_z`` standard errors above zero and at least ``_ard_min_gain`` nats a
    #: row (where both kernels predict alike, the paired differences are tiny and so is
    #: their standard error), and its fit is not degenerate; the regressor's values.
    _ard_z = StudentTProcessRegressor._ard_z
    _ard_min_gain = StudentTProcessRegressor._ard_min_gain

    def __setstate__(self, state):
        state = dict(state)
        # saved before label_variance existed: those probabilities had no label variance
        state.setdefault("label_variance", 0.0)
        if "classes_" in state:
            state.setdefault("label_variance_", 0.0)
            state.setdefault("_label_low", _target_low(state.get("target_coding")))
        super().__setstate__(state)

    def _degenerate(self, fit):
        """Whether a fit is the degenerate evidence optimum of small data: the evidence's
        noise on its lower bound (the one-hot targets interpolated) and a kernel
        hyperparameter on a bound (the amplitude ran away)."""
        at_floor = abs(math.log(fit["alpha_evidence"] / self.alpha_bounds[0])) < 1e-3
        return at_floor and any(not b.startswith("alpha=") for b in fit["bounds"])

    def _fit_one(self, X, Y, yi, ard, use_loo):
        """One regressor (``ard`` given) with its leave-one-out ``alpha`` and label noise.

        Returns a dict: ``reg``, ``alpha_evidence``, ``loo`` (mean LOO log loss or None),
        ``eps``, ``rows`` (per-row LOO log losses or None), ``bounds`` (names on a bound),
        ``warnings`` (those the regressor's fit raised, recorded for the caller).
        """
        params = {k: getattr(self, k) for k in self._parameter_constraints
                  if k not in self._own}
        # the classifier chooses its own sharpness by leave-one-out (alpha, label_noise_)
        # and between the kernels (ard="auto"); the regressor's relevance hyperprior is
        # off: measured on bench_classification.py it cost 0.044 nats on wine (0.080
        # against 0.036) and 0.006 in the mean over the six sets
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reg = StudentTProcessRegressor(normalize_y=False, variance_calibration=None,
                                           ard=ard, relevance_prior=None, **params).fit(X, Y)
        fixed_w = None if self.label_variance == "auto" else float(self.label_variance)
        out = {"reg": reg, "alpha_evidence": reg.hyperparameters_["alpha"], "loo": None,
               "eps": 0.0, "rows": None, "warnings": caught,
               "w": 0.0 if fixed_w is None else fixed_w}
        if use_loo:
            alpha, out["loo"], out["eps"], out["rows"], out["w"] = self._loo_alpha(
                reg, yi, fixed_w)
            if alpha != out["alpha_evidence"]:
                reg._set_alpha(alpha)
        out["bounds"] = self._bounds_hit(reg)
        return out

    #: Weights of the label variance ``p (1 - p)`` that ``label_variance="auto"`` tries.
    _label_variance_grid = (0.0, 0.125, 0.25, 0.5, 1.0)

    def _loo_alpha(self, reg, yi, fixed_w=None):
        """The noise ratio of smallest leave-one-out log loss over a grid in ``alpha_bounds``.

        With ``K_a = K + a I = U diag(e + a) U^T``, the predictive of the one-hot row ``i``
        given the others is ``N(y_i - [K_a^-1 Y]_i / [K_a^-1]_ii, s / [K_a^-1]_ii)`` for
        every output, mixed over the posterior of ``s`` at ``a``: one eigendecomposition
        serves the whole grid. The grid is searched coarse to fine: every
        ``_loo_coarse``-th point (and the evidence's value), then every point between the
        best coarse point's neighbours, which finds the grid's minimum whenever the loss is
        unimodal in ``alpha`` at a third of the cost. The search scores the predictive with
        the label-variance weight ``fixed_w`` (``None``: 0); with ``None`` the weight is then
        chosen from ``_label_variance_grid`` at the chosen ``alpha`` (0 is in the grid, so the
        loss never rises). Returns ``(alpha, mean LOO log loss, label noise, per-row LOO log
        losses, label-variance weight)``.
        """
        eng, theta = reg._engine, reg._theta
        lo, hi = self.alpha_bounds
        n_grid = max(2, int(round(self._loo_per_decade * math.log10(hi / lo))) + 1)
        alpha_ev = reg.hyperparameters_["alpha"]
        grid = np.unique(np.append(np.geomspace(lo, hi, n_grid), alpha_ev))
        p = _unpack(theta)
        eps_grid = np.array([0.0, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.2])
        low = _target_low(self.target_coding)
        w0 = 0.0 if fixed_w is None else fixed_w
        scored = {}  # (grid index, w) -> (mean loss, label noise, per-row losses on device)
        with torch.no_grad():
            eps_t = as_tensor(eps_grid, reg.device_, reg._dtype)
            yi_t = torch.as_tensor(yi, device=reg.device_).long()
            rows = torch.arange(eng.n, device=reg.device_)
            K = eng.kernel(p, eng.X)
            e, U = torch.linalg.eigh(K)
            e = e.clamp_min(0.0)
            UtY, U2 = U.T @ eng.Y, U * U
            N = eng.n * eng.C

            def score(i, w=w0):
                a = grid[i]
                d = 1.0 / (e + a)
                diag_inv = U2 @ d
                dual = U @ (UtY * d[:, None])
                q, logdet = (eng.Y * dual).sum(), torch.log(e + a).sum()
                mu = eng.Y - dual / diag_inv[:, None]
                mix = reg._prior_obj.posterior(q, logdet, N, eng.C, p["prior_shape"],
                                               p["prior_scale"])
                P = _argmax_proba(mu, 1.0 / diag_inv, mix.quantile_nodes(self._loo_nodes),
                                  self._loo_nodes, reg.device_, reg._dtype,
                                  extra=w * _label_variance(mu, low) if w > 0 else None)
                P = P / P.sum(dim=1, keepdim=True).clamp_min(1e-300)
                pt = P[rows, yi_t][:, None] * (1 - eps_t) + eps_t / eng.C
                row_losses = -torch.log(pt.clamp_min(1e-9))
                losses = to_numpy(row_losses.mean(dim=0))  # one copy of 8 numbers a point
                j = int(np.argmin(losses))
                loss = float(losses[j]) if np.isfinite(losses[j]) else math.inf
                scored[i, w] = (loss, float(eps_grid[j]), row_losses[:, j])

            coarse = sorted(set(range(0, grid.size, self._loo_coarse)) | {grid.size - 1}
                            | {int(np.searchsorted(grid, alpha_ev))})
            for i in coarse:
                score(i)
            k = min(range(len(coarse)), key=lambda c: scored[coarse[c], w0][0])
            for i in range(coarse[max(k - 1, 0)], coarse[min(k + 1, len(coarse) - 1)] + 1):
                if (i, w0) not in scored:
                    score(i)
            best = min(sorted(scored), key=lambda key: scored[key][0])
            if fixed_w is None and math.isfinite(scored[best][0]):
                for w in self._label_variance_grid[1:]:
                    score(best[0], w)
                # ties keep the smaller weight (the grid is increasing)
                best = min(((best[0], w) for w in self._label_variance_grid),
                           key=lambda key: scored[key][0])
        if not math.isfinite(scored[best][0]):
            return alpha_ev, None, 0.0, None, w0
        return (float(grid[best[0]]), scored[best][0], scored[best][1],
                to_numpy(scored[best][2]), float(best[1]))

    def _bounds_hit(self, reg):
        """``"name=value (side bound)"`` for each hyperparameter that ended on its bound."""
        hit = []
        if self.optimizer is None:
            return hit
        for name in HYPERPARAMETERS:
            bounds = getattr(self, f"{name}_bounds")
            if isinstance(bounds, str):
                continue
            value = reg.hyperparameters_[name]
            for side, b in zip(("lower", "upper"), bounds):
                if abs(math.log(value / b)) < 1e-3:
                    hit.append(f"{name}={value:.3g} ({side} bound)")
        return hit

    def predict_margin(self, X):
        """Posterior mean of the one-hot outputs (binary: class-1 minus class-0 margin).

        This is the paper's score: it ignores the predictive variance, so its
        ranking can differ from :meth:`predict_proba`'s. Until version 0.1 it was
        ``decision_function``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        margin : ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean = self.regressor_._check_finite(self.regressor_.predict(X), "mean")
        return mean[:, 1] - mean[:, 0] if self.classes_.size == 2 else mean

    def predict_proba(self, X):
        """``P(argmax_j f_j = c)`` under the Student-t (or mixture) predictive.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        return self._proba_and_mean(X)[0]

    def _proba_and_mean(self, X):
        check_is_fitted(self)
        check_predict_params(self, "n_quadrature")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        reg = self.regressor_
        mu, V = reg._latent(X)
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(V))):
            raise ValueError(
                f"{type(self).__name__}: the predictive at X is not finite (X may lie far "
                "outside the training range); rescale X.")
        nodes = reg._mixing().quantile_nodes(self.n_quadrature)
        w = self.label_variance_
        low = self._label_low  # the targets' lower value, fixed at fit
        P = to_numpy(_argmax_proba(mu, V, nodes, self.n_quadrature, reg.device_, reg._dtype,
                                   extra=w * _label_variance(mu, low) if w > 0 else None))
        if not np.all(np.isfinite(P)):
            raise ValueError(f"{type(self).__name__}: the class probabilities at X are not "
                             "finite (X may lie far outside the training range); rescale X.")
        P = P / np.maximum(P.sum(axis=1, keepdims=True), 1e-300)
        eps = self.label_noise_
        P = (1 - eps) * P + eps / P.shape[1]
        P = np.maximum(P, 1e-9)
        return P / P.sum(axis=1, keepdims=True), mu
