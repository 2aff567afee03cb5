"""Post-hoc calibration of the predictive, one interface for every estimator.

Every estimator takes one parameter, ``calibration``, with the same values:

- ``"student_t"``: the predictive becomes a Student-t whose degrees of freedom
  (``predictive_df_``) and variance factor (``calibration_factor_``) are fitted to the
  standardised residuals of rows the predictive did not see: closed-form leave-one-out
  residuals for the Gaussian-process regressors, held-out rows for the network regressors.
- ``"gaussian"``: the predictive keeps its shape; its variance is multiplied by the smallest
  factor >= 1 under which the central 95 % interval holds 95 % of those residuals (their
  split-conformal quantile).
- ``"temperature"`` (classifiers): one temperature on the logits, fitted on held-out rows.
- ``"auto"``: the estimator's default rule (documented on each estimator).
- ``None``: the model's own predictive.

The numerics (the t fits, the conformal quantile, the temperature's optimisation) live in
:mod:`skbnngp._backend._calibration`; this module chooses among them.
"""

from __future__ import annotations

import math

import numpy as np

from ._backend._calibration import loo_variance_factor, student_t_calibration
from ._scale_mixture import Mixing
from .utils._sklearn_compat import StrOptions

#: Central interval whose held-out coverage the variance calibration matches.
CALIBRATION_LEVEL = 0.95

#: ``_parameter_constraints`` entry of a regressor's ``calibration``.
REGRESSOR_CALIBRATION = [StrOptions({"auto", "student_t", "gaussian"}), None]

#: ``_parameter_constraints`` entry of a classifier's ``calibration``.
CLASSIFIER_CALIBRATION = [StrOptions({"auto", "temperature"}), None]

_GAUSSIAN = Mixing("delta", value=1.0)


def fit_variance_calibration(method, z, *, reference=_GAUSSIAN, level=CALIBRATION_LEVEL,
                             max_test_df=math.inf):
    """``(calibration_factor, predictive_df)`` for the standardised residuals ``z``.

    Parameters
    ----------
    method : {"student_t", "gaussian"} or None
        None returns ``(1.0, inf)``: the model's own predictive.
    z : array-like
        Residuals divided by the predictive standard deviation of the model at unit
        amplitude (non-finite entries are ignored).
    reference : Mixing, default=a point mass at 1 (a Gaussian)
        The model's own amplitude. ``"student_t"`` reads ``z`` against it and never chooses
        lighter tails than its own; ``"gaussian"`` keeps its shape and takes the conformal
        quantile at its ``(1 + level) / 2`` quantile.
    level : float, default=0.95
    max_test_df : float, default=inf
        ``"student_t"`` trusts a scale narrower than the model's only when the t fitted with
        it has at most this many degrees of freedom (see
        :func:`~skbnngp._backend._calibration.student_t_calibration`).
    """
    if method is None:
        return 1.0, math.inf
    z = np.asarray(z, dtype=np.float64)
    if method == "student_t":
        s0, max_df = reference.t_reference()
        df, factor = student_t_calibration(z / math.sqrt(s0), level, max_df=max_df,
                                           max_test_df=max_test_df)
        return float(factor), float(df)
    if method == "gaussian":
        unit = reference.predictive(np.zeros(1), np.ones(1)).ppf(0.5 + level / 2)
        return loo_variance_factor(z, float(np.ravel(unit)[0]), level), math.inf
    raise ValueError(f"calibration must be 'student_t', 'gaussian' or None, got {method!r}.")
