"""Student-t processes from scale mixtures of NNGPs (Lee et al., ICLR 2022): the classifier."""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets

from . import _student_t as _regressor_module
from ._backend import iter_slices, to_numpy
from ._backend._onehot import argmax_proba, label_variance, loo_noise_search
from ._backend._student_t import HYPERPARAMETERS, paired_gain, unpack
from ._base import (
    TorchEstimatorMixin,
    check_class_labels,
    class_weight_vector,
    plain,
    transactional,
)
from ._predictive import ClassifierPredictiveMixin
from ._rows import check_weights, collapse_rows, duplicate_groups, rows_replicate
from ._student_t import StudentTProcessRegressor
from .utils._sklearn_compat import (
    StrOptions,
    _fit_context,
    check_is_fitted,
    validate_data,
)

#: Box of each hyperparameter of the one-hot regressor's evidence fit, or ``"fixed"``. Those
#: of :class:`StudentTProcessRegressor` except ``alpha``'s, which also spans the
#: leave-one-out grid and is wider: the kernel's amplitude is not identified apart from
#: ``s``, and on one-hot targets the fitted kernel diagonal reaches hundreds.
HYPERPARAMETER_BOUNDS = {**_regressor_module.HYPERPARAMETER_BOUNDS, "alpha": (1e-6, 1e3)}

#: ``ard="auto"`` takes the ARD kernel only when its mean paired leave-one-out gain is more
#: than ``ARD_Z`` standard errors above zero and at least ``ARD_MIN_GAIN`` nats a row.
ARD_Z, ARD_MIN_GAIN = 2.0, 1e-3

#: Lower value of the class targets: 0 (one-hot); -0.1 gives the centred coding
#: (one-hot minus 0.1).
TARGET_LOW = 0.0
#: Rows per block of the class-probability quadrature (its temporaries hold rows x nodes x
#: classes^2 values: 1,024 rows keep a prediction of 10^6 rows within ~100 MB).
QUADRATURE_BLOCK_ROWS = 1024

#: Gauss-Hermite nodes (and scale nodes) of ``predict_proba``; its cost grows as the square.
N_QUADRATURE = 16

#: How ``alpha`` is chosen: ``"loo"`` (closed-form leave-one-out class log loss on a grid,
#: with a label-noise weight) or ``"evidence"`` (with the other hyperparameters).
ALPHA_SELECTION = "loo"

#: Weight ``w`` of the one-hot targets' variance ``p (1 - p)`` in ``predict_proba``:
#: ``"auto"`` (chosen from ``LABEL_VARIANCE_GRID`` by leave-one-out) or a number >= 0.
LABEL_VARIANCE = "auto"
LABEL_VARIANCE_GRID = (0.0, 0.125, 0.25, 0.5, 1.0)

#: Most copies a replicated row counts (larger weights are scaled down to it): beyond, the
#: probabilities are the cells' frequencies to about three digits, and the noise search in
#: float64 loses the noise against the weights (measured in doc/whats_new.rst).
MAX_COPIES = 1e6

#: Leave-one-out grid: points per decade of ``alpha``, Gauss-Hermite and scale nodes that
#: score a point, and the stride of the coarse pass (1: every point).
LOO_PER_DECADE, LOO_NODES, LOO_COARSE = 4, 8, 4


class StudentTProcessClassifier(ClassifierPredictiveMixin, TorchEstimatorMixin, ClassifierMixin,
                                BaseEstimator):
    """Classification by Student-t process regression on one-hot targets.

    Classes are encoded as 0/1 one-hot targets and fitted by a multi-output
    :class:`StudentTProcessRegressor` whose outputs share one readout variance ``s``. The
    noise ratio ``alpha`` and a label-noise weight are then chosen by the closed-form
    leave-one-out class log loss on a grid (4 points a decade in ``[1e-6, 1e3]``; label
    noise in {0, 1e-4, ..., 0.2}), since the evidence of one-hot targets can run ``alpha``
    to its lower bound on small data and give confident mistakes. The predicted class is
    the most probable one; without label variance it is the argmax of the posterior mean,
    which does not depend on the scale prior (the paper's rule).

    ``predict_proba`` (not defined by the paper) is ``P(argmax_j f_j = c)`` under the
    predictive with shared ``s``, computed deterministically as
    ``E_s int phi(z) prod_{j != c} Phi((mu_c - mu_j)/sqrt(s v) + z) dz`` with 16
    Gauss-Hermite nodes in ``z`` and 16 quantile nodes of the mixing distribution of ``s``
    (the same quantity as Monte Carlo without its noise). Each class's variance also holds
    ``w p_j (1 - p_j)``, the variance of a one-hot target at its posterior mean, with the
    weight ``w`` chosen from {0, 1/8, 1/4, 1/2, 1} by the same leave-one-out loss (one noise
    level for all rows is too small where classes overlap and too large where they do
    not); the integral then conditions on ``y_c``. The label noise mixes the uniform
    distribution into the probabilities (a robust-max likelihood), so that a point the
    leave-one-out fit finds misclassified does not cost ``log(1e9)``. Probabilities are
    floored at 1e-9.

    Read more in the :ref:`User Guide <student_t>`.

    Parameters
    ----------
    depth, activation, weight_variance, bias_variance, alpha, prior, prior_shape, \
prior_scale, inference, optimizer, n_restarts_optimizer, max_iter, tol, device, dtype, \
random_state, verbose
        As for :class:`StudentTProcessRegressor` (``alpha`` is the initial value of the
        evidence fit, before its leave-one-out choice).
    ard : bool or "auto", default="auto"
        One first-layer weight variance per feature (see :class:`StudentTProcessRegressor`;
        here by maximum evidence, without the relevance hyperprior). ``"auto"`` fits the
        kernel with and without ARD and keeps ARD only when its per-row leave-one-out class
        log losses beat the shared kernel's by more than two standard errors of the paired
        differences (and 0.001 nats a row) and its evidence fit is not the degenerate one of
        small data (``alpha`` on its lower bound, the one-hot targets interpolated, with a
        kernel hyperparameter on a bound); otherwise the shared kernel. Only the kept fit's
        warnings are shown; with one feature, or ``optimizer=None``, it means ``False``.
        ``"auto"`` is the default because ARD alone over-fits the evidence on small sets
        while it helps where features differ in relevance.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, multiplying ``sample_weight`` in ``fit`` (as in
        :class:`FiDGPClassifier`): a dict ``{class: weight}`` (missing classes weigh 1; a
        key that is not a class of ``y``, or a negative weight, is an error) or
        ``"balanced"`` (``n_samples / (n_classes * count)``). None, since the probabilities
        are then those of the data's own class frequencies.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    regressor_ : StudentTProcessRegressor
        The fitted one-hot regressor.
    alpha_evidence_ : float
        The noise ratio that maximised the evidence (before the leave-one-out choice).
    loo_log_loss_ : float or None
        Mean leave-one-out class log loss at the chosen ``alpha`` and ``label_noise_``
        (``None`` when no leave-one-out choice was made).
    label_noise_ : float
        Weight of the uniform distribution mixed into ``predict_proba``.
    label_variance_ : float
        The weight of the one-hot targets' variance in ``predict_proba``.
    ard_ : bool
        Whether the fitted kernel has per-feature relevances.
    ard_loo_gain_ : tuple of (float, float) or None
        With ``ard="auto"``: the mean per-row leave-one-out log-loss gain of ARD over the
        shared kernel and its standard error (``None`` when no comparison was made).
    n_iter_ : int
    converged_ : bool
    device_ : torch.device
    n_features_in_ : int

    See Also
    --------
    StudentTProcessRegressor : The regressor fitted to the one-hot targets.

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
                    "prior", "prior_shape", "prior_scale", "inference", "optimizer",
                    "n_restarts_optimizer", "max_iter", "tol", "device", "dtype",
                    "random_state", "verbose")},
        "ard": ["boolean", StrOptions({"auto"})],
        "class_weight": [StrOptions({"balanced"}), dict, None],
    }

    def __init__(self, *, depth=3, activation="relu", weight_variance=2.0, bias_variance=0.1,
                 alpha=1e-2, prior="invgamma", prior_shape=2.0, prior_scale=2.0,
                 inference="auto", ard="auto", optimizer="lbfgs", n_restarts_optimizer=0,
                 max_iter=100, tol=1e-6, device="auto", dtype="float64", random_state=None,
                 verbose=0, class_weight=None):
        self.depth = depth
        self.activation = activation
        self.weight_variance = weight_variance
        self.bias_variance = bias_variance
        self.alpha = alpha
        self.prior = prior
        self.prior_shape = prior_shape
        self.prior_scale = prior_scale
        self.inference = inference
        self.ard = ard
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.class_weight = class_weight

    @_fit_context(prefer_skip_nested_validation=True)
    @transactional
    def fit(self, X, y, sample_weight=None):
        """Fit the one-hot Student-t process regressor.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
            Relative weights of the rows (times ``class_weight``): a row of weight ``w``
            has ``w`` times the precision of the mean weight in the one-hot regressor's
            likelihood, and counts ``w`` times in the leave-one-out noise search. Exact
            duplicate rows are merged into one row of summed weight, so integer weights
            and repeated rows give the same model; the weights are scaled to mean 1,
            because a repeated row of equal labels is not new evidence about the noise
            (counted as such, it drives the evidence's noise to 0). Where the rows are
            replicates of a design (categories: fewer than half of the distinct rows have
            an input of their own, or a few distinct rows of many copies each) every copy
            counts: the weights are kept as they are and the noise search leaves one copy
            out at a time. None: every row once.

        Returns
        -------
        self : object
        """
        X, y = validate_data(self, X, y, ensure_min_samples=2, dtype=np.float64)
        check_class_labels(y)
        check_classification_targets(y)
        sw = check_weights(X, sample_weight)
        if self.class_weight is not None:
            classes, yk = np.unique(y, return_inverse=True)
            cw = (compute_class_weight("balanced", classes=classes, y=y)
                  if self.class_weight == "balanced" else
                  class_weight_vector(self.class_weight, classes))
            sw = cw[yk.ravel()] * (1.0 if sw is None else sw)
            sw = check_weights(X, sw)
        self.classes_ = np.unique(y if sw is None else y[sw > 0])
        if self.classes_.size < 2:
            raise ValueError("StudentTProcessClassifier needs samples of at least 2 classes "
                             f"in the data; got 1 class ({plain(self.classes_[0])!r}).")
        low = float(TARGET_LOW)
        Y = (y[:, None] == self.classes_[None, :]).astype(float) + low
        yi = np.searchsorted(self.classes_, y)
        X, Y, w = collapse_rows(X, Y, sw)
        # replicates of a design (categories): each copy of a merged row counts
        copies = w is not None and rows_replicate(duplicate_groups(X), X.shape[0], w)
        if w is not None and not copies:  # a repeat sharpens a row, it adds no row
            w = w / w.mean()
        elif copies:  # past MAX_COPIES a row, float64 loses the noise against the weights
            w = w * min(1.0, MAX_COPIES / w.max())
        yi = np.argmax(Y, axis=1)
        bounds = HYPERPARAMETER_BOUNDS
        use_loo = (ALPHA_SELECTION == "loo" and self.optimizer is not None
                   and not isinstance(bounds["alpha"], str))
        if self.ard == "auto" and use_loo and X.shape[1] > 1:
            fits = [self._fit_one(X, Y, yi, False, use_loo, bounds, low, w, copies),
                    self._fit_one(X, Y, yi, True, use_loo, bounds, low, w, copies)]
            chosen, self.ard_loo_gain_ = fits[0], None
            if fits[0]["rows"] is not None and fits[1]["rows"] is not None:
                mean, se, pays = paired_gain(fits[0]["rows"] - fits[1]["rows"],
                                             ARD_Z, ARD_MIN_GAIN,
                                             weights=fits[0]["reg"].__dict__.get(
                                                 "_train_weight"))
                self.ard_loo_gain_ = (mean, se)
                if pays and not self._degenerate(fits[1], bounds):
                    chosen = fits[1]
        else:
            chosen = self._fit_one(X, Y, yi, self.ard != "auto" and bool(self.ard), use_loo,
                                   bounds, low, w, copies)
            self.ard_loo_gain_ = None
        for w in chosen["warnings"]:  # only the kept model's warnings reach the user
            warnings.warn(w.message, w.category, stacklevel=2)
        reg = chosen["reg"]
        self.alpha_evidence_ = chosen["alpha_evidence"]
        self.loo_log_loss_, self.label_noise_ = chosen["loo"], chosen["eps"]
        self.label_variance_ = chosen["w"]
        # what predict_proba reads, fixed at fit
        self._label_low, self._n_quadrature = low, N_QUADRATURE
        self.ard_ = bool(reg.ard_)
        self.regressor_ = reg
        if chosen["bounds"]:
            warnings.warn(
                f"{type(self).__name__}: hyperparameters ended on a bound: "
                f"{', '.join(chosen['bounds'])}. The probabilities may be over- or "
                "under-confident.", ConvergenceWarning, stacklevel=2)
        self.device_ = self.regressor_.device_
        self.n_iter_ = self.regressor_.n_iter_
        self.converged_ = self.regressor_.converged_
        return self

    @staticmethod
    def _degenerate(fit, bounds):
        """Whether a fit is the degenerate evidence optimum of small data: the evidence's
        noise on its lower bound (the one-hot targets interpolated) and a kernel
        hyperparameter on a bound (the amplitude ran away)."""
        at_floor = abs(math.log(fit["alpha_evidence"] / bounds["alpha"][0])) < 1e-3
        return at_floor and any(not b.startswith("alpha=") for b in fit["bounds"])

    def _fit_one(self, X, Y, yi, ard, use_loo, bounds, low, w=None, copies=False):
        """One regressor (``ard`` given) with its leave-one-out ``alpha`` and label noise.

        Returns a dict: ``reg``, ``alpha_evidence``, ``loo`` (mean LOO log loss or None),
        ``eps``, ``rows`` (per-row LOO log losses or None), ``bounds`` (names on a bound),
        ``warnings`` (those the regressor's fit raised, recorded for the caller).
        """
        params = {k: getattr(self, k) for k in self._parameter_constraints
                  if k not in ("ard", "class_weight")}
        # the classifier chooses its own sharpness by leave-one-out (alpha, label_noise_)
        # and between the kernels (ard="auto"), so the regressor's relevance hyperprior is off
        reg = StudentTProcessRegressor(normalize_y=False, calibration=None, ard=ard, **params)
        reg._settings_override = {"bounds": bounds, "relevance_prior": None}
        reg._progress_label = (f"{type(self).__name__} "
                               f"({'ARD' if ard else 'one length-scale'})")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reg.fit(X, Y, sample_weight=w)
        # the regressor's rows (distinct, possibly reordered when weighted)
        yi = np.argmax(reg.y_train_, axis=1)
        fixed_w = None if LABEL_VARIANCE == "auto" else float(LABEL_VARIANCE)
        out = {"reg": reg, "alpha_evidence": reg.hyperparameters_["alpha"], "loo": None,
               "eps": 0.0, "rows": None, "warnings": caught,
               "w": 0.0 if fixed_w is None else fixed_w}
        if use_loo:
            lo, hi = bounds["alpha"]
            n_grid = max(2, round(LOO_PER_DECADE * math.log10(hi / lo)) + 1)
            alpha_ev = out["alpha_evidence"]
            grid = np.unique(np.append(np.geomspace(lo, hi, n_grid), alpha_ev))
            eng = reg._engine
            p = unpack(reg._theta)
            N = eng.n_eff * eng.C

            def posterior(q, logdet):
                return reg._prior_obj.posterior(q, logdet, N, eng.C, p["prior_shape"],
                                                p["prior_scale"])

            found = loo_noise_search(
                eng.kernel(p, eng.X), eng.Y, yi, posterior, grid,
                int(np.searchsorted(grid, alpha_ev)), low=low, weights=LABEL_VARIANCE_GRID,
                fixed_weight=fixed_w, n_nodes=LOO_NODES, coarse=LOO_COARSE,
                groups=[] if copies else duplicate_groups(to_numpy(eng.X)),
                row_weights=eng.weights, copies=copies)
            if found is not None:
                i, out["loo"], out["eps"], out["rows"], out["w"] = found
                if grid[i] != alpha_ev:
                    reg._set_alpha(float(grid[i]))
        out["bounds"] = self._bounds_hit(reg, bounds)
        return out

    def _bounds_hit(self, reg, bounds):
        """``"name=value (side bound)"`` for each hyperparameter that ended on its bound."""
        hit = []
        if self.optimizer is None:
            return hit
        for name in HYPERPARAMETERS:
            if isinstance(bounds[name], str):
                continue
            value = reg.hyperparameters_[name]
            for side, b in zip(("lower", "upper"), bounds[name]):
                if abs(math.log(value / b)) < 1e-3:
                    hit.append(f"{name}={value:.3g} ({side} bound)")
        return hit

    def predict_margin(self, X):
        """Posterior mean of the one-hot outputs (binary: class-1 minus class-0 margin).

        This is the paper's score: it ignores the predictive variance, so its ranking can
        differ from :meth:`predict_proba`'s.

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

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        reg = self.regressor_
        mu, V = reg._latent(X)
        if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(V))):
            raise ValueError(
                f"{type(self).__name__}: the predictive at X is not finite (X may lie far "
                "outside the training range); rescale X.")
        n_q = self._n_quadrature
        nodes = reg._mixing().quantile_nodes(n_q)
        w = self.label_variance_
        # row blocks: the quadrature's (rows x nodes x classes) work stays one block's size
        P = np.concatenate([to_numpy(argmax_proba(
            mu[sl], V[sl], nodes, n_q, reg.device_, reg._dtype,
            extra=w * label_variance(mu[sl], self._label_low) if w > 0 else None)).copy()
            for sl in iter_slices(mu.shape[0], QUADRATURE_BLOCK_ROWS)])
        if not np.all(np.isfinite(P)):
            raise ValueError(f"{type(self).__name__}: the class probabilities at X are not "
                             "finite (X may lie far outside the training range); rescale X.")
        P = P / np.maximum(P.sum(axis=1, keepdims=True), 1e-300)
        eps = self.label_noise_
        P = (1 - eps) * P + eps / P.shape[1]
        P = np.maximum(P, 1e-9)
        return P / P.sum(axis=1, keepdims=True)
