"""Central predictive intervals at one or several levels, from any predictive distribution.

Shared by every regressor's ``predict_interval`` (:class:`RegressorPredictiveMixin`) and by
:class:`~skbnngp.ConformalRegressor`, so that the levels are validated, and the bounds
shaped, in one place.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._base import plain
from .metrics import _point_mass  # the metrics' own reading of a zero-scale predictive


def check_confidence(confidence):
    """``(levels, scalar)``: the levels as a 1-D float array, and whether one was given.

    Raises
    ------
    ValueError
        Naming ``confidence`` when it is not a float in (0, 1) or a non-empty 1-D sequence
        of them.
    """
    message = ("confidence must be a float in (0, 1) or a non-empty 1-D sequence of floats "
               f"in (0, 1), got {plain(confidence)!r}.")
    if isinstance(confidence, (bool, np.bool_, str, bytes)):
        raise ValueError(message)  # noqa: TRY004 - one error type for every bad level
    scalar = isinstance(confidence, numbers.Real) or np.ndim(confidence) == 0
    try:
        levels = np.atleast_1d(np.asarray(confidence, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(message) from None
    if levels.ndim != 1 or levels.size == 0 or not np.all((levels > 0) & (levels < 1)):
        raise ValueError(message)
    return levels, scalar


def central_intervals(dist, confidence):
    """Bounds of the central ``confidence`` intervals of ``dist`` (``dist.interval``).

    Returns ``(lower, upper)`` of the distribution's batch shape for one level, with a
    trailing axis of one entry per level for a sequence of levels. A zero-scale predictive
    (a point mass) gives ``[loc, loc]`` rather than scipy's NaN.
    """
    levels, scalar = check_confidence(confidence)
    lows, highs = [], []
    for level in levels:
        with np.errstate(invalid="ignore"):
            lo, hi = dist.interval(float(level))
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        point = _point_mass(dist, lo.shape)
        if point is not None:
            lo, hi = np.where(point[0], point[1], lo), np.where(point[0], point[1], hi)
        lows.append(lo)
        highs.append(hi)
    if scalar:
        return lows[0], highs[0]
    return np.stack(lows, axis=-1), np.stack(highs, axis=-1)
