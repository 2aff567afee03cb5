"""The time planner of ``skbnngp compare --time-budget``: how many training rows each model
gets so that all its folds fit in its share of the budget.

A fit's cost is modelled as ``t(n) = a + c n^b``: a fixed start-up cost ``a`` (building the
model, compiling, a fixed number of optimiser steps) plus a per-row cost that grows as
``n^b``. Timing two small fits and extrapolating their ratio, as the planner did before,
reads the fixed cost as per-row cost and overstates a large fit by up to
``a (n / n_pilot - 1)``: it cut FiD-GP to 574 of 1,437 rows on ``digits`` although its full
fit fitted in its share. Here each model is timed on up to four growing subsets (20, n/8,
n/4 and n/2 rows), the curve is fitted by least squares on the logarithm of the times, and
the full fit is predicted from it. Only a model whose predicted folds do not fit in its
share is subsampled: cheapest first, models keep every row as long as the costlier ones
can still be fitted on their smallest subsets, and those that cannot all keep every row share
what is left.

The pilot fits are timed in CPU seconds of this process (:func:`time.process_time`), so that
other processes on the machine do not inflate them; a fit on a GPU is timed by the wall
clock, since its work is not CPU time of this process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Exponents tried for the per-row cost ``c n^b`` (a fit reads every row at least once, so
#: ``b >= 1``; dense Gaussian processes are ``b = 3``).
EXPONENTS = np.round(np.arange(1.0, 3.0 + 1e-9, 0.05), 2)
#: The smallest pilot fit, in rows.
SMALLEST_PILOT = 20


@dataclass(frozen=True)
class CostCurve:
    """``t(n) = a + c n^b`` seconds for a fit on ``n`` rows.

    Attributes
    ----------
    a : float
        Fixed cost in seconds (``>= 0``).
    c : float
        Per-row coefficient (``>= 0``).
    b : float
        Exponent of the per-row cost, in [1, 3].
    """

    a: float
    c: float
    b: float

    def __call__(self, n):
        return self.a + self.c * float(n) ** self.b

    def rows_within(self, seconds, n_max):
        """The largest ``n <= n_max`` with ``t(n) <= seconds`` (0 if even ``t(1)`` is over)."""
        if self(n_max) <= seconds:
            return int(n_max)
        if self.c <= 0 or seconds <= self.a:
            return 0
        n = int(min(n_max, ((seconds - self.a) / self.c) ** (1.0 / self.b)))
        while n < n_max and self(n + 1) <= seconds:  # round-off of the power
            n += 1
        while n > 0 and self(n) > seconds:
            n -= 1
        return n


def fit_cost_curve(sizes, seconds):
    """Least-squares fit of ``t(n) = a + c n^b`` to timed fits.

    For each exponent ``b`` of :data:`EXPONENTS`, ``a`` and ``c`` are the non-negative least
    squares solution with every residual divided by its time (relative errors, since the
    times span orders of magnitude); the ``b`` with the smallest residual wins, ties going to
    the larger ``b`` (the cautious extrapolation). With a single timing the cost is read as
    linear in ``n`` with no fixed part, which overstates rather than understates.

    Parameters
    ----------
    sizes : sequence of int
        Rows of each timed fit (at least one, positive).
    seconds : sequence of float
        Their times (finite, positive).

    Returns
    -------
    CostCurve
    """
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.ndim != 1 or n.shape != t.shape or n.size == 0:
        raise ValueError("sizes and seconds must be 1-D sequences of the same positive length.")
    if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(n > 0)):
        raise ValueError("sizes and seconds must be positive and finite.")
    if np.unique(n).size == 1:
        return CostCurve(0.0, float(t.max() / n[0]), 1.0)
    best = None
    for b in EXPONENTS:
        design = np.column_stack([np.ones_like(n), n ** b]) / t[:, None]
        coef = _nnls2(design, np.ones_like(t))
        resid = float(np.sum((design @ coef - 1.0) ** 2))
        if best is None or resid <= best[0] * (1 + 1e-9) + 1e-15:
            best = (resid, CostCurve(float(coef[0]), float(coef[1]), float(b)))
    return best[1]


def _nnls2(A, y):
    """Non-negative least squares with two unknowns, by checking the four active sets."""
    candidates = [np.zeros(2)]
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    if np.all(coef >= 0):
        candidates.append(coef)
    for j in range(2):
        col = A[:, j]
        denom = float(col @ col)
        if denom > 0:
            x = np.zeros(2)
            x[j] = max(0.0, float(col @ y) / denom)
            candidates.append(x)
    return min(candidates, key=lambda x: float(np.sum((A @ x - y) ** 2)))


def pilot_sizes(n_train, smallest=SMALLEST_PILOT):
    """Row counts of the pilot fits: 20, n/8, n/4 and n/2 (fewer on small data).

    Parameters
    ----------
    n_train : int
        Training rows of a fold.
    smallest : int, default=20

    Returns
    -------
    list of int, increasing, each at least ``smallest`` and at most ``n_train // 2``.
    """
    half = n_train // 2
    if half < smallest:
        return []
    sizes = {smallest, n_train // 8, n_train // 4, half}
    return sorted(s for s in sizes if smallest <= s <= half)


def measure(time_fit, sizes, *, limit=math.inf):
    """Time fits on growing ``sizes`` and fit the cost curve.

    A pilot is skipped, and so are the larger ones, when the curve of the fits so far
    predicts that it would bring the time spent on pilots above ``limit`` seconds; a failed
    pilot (a non-finite time) ends the series.

    Parameters
    ----------
    time_fit : callable
        ``time_fit(n)`` fits the model on ``n`` rows and returns the seconds it took
        (``inf`` when the fit failed).
    sizes : list of int
        Increasing row counts (:func:`pilot_sizes`).
    limit : float, default=inf
        Most seconds to spend on this model's pilots; the first pilot always runs.

    Returns
    -------
    curve : CostCurve or None
        None when no pilot succeeded.
    timings : list of (int, float)
        The timed fits.
    """
    timings, spent = [], 0.0
    for n in sizes:
        if timings and spent + fit_cost_curve(*zip(*timings))(n) > limit:
            break
        took = float(time_fit(n))
        if not math.isfinite(took):
            break
        took = max(took, 1e-6)
        spent += took
        timings.append((n, took))
    curve = fit_cost_curve(*zip(*timings)) if timings else None
    return curve, timings


def plan_rows(curves, n_train, n_folds, seconds, floor=1):
    """Training rows per model so that every model's folds fit in ``seconds`` together.

    Cheapest model first, a model keeps every row when its ``n_folds`` full-size fits still
    leave enough for every costlier model's folds at ``floor`` rows; what it does not use
    goes to the others. The models left, from the first that does not fit, share the rest
    by water-filling: one whose full folds fit in an equal share keeps every row, and the
    others each get the largest row count whose folds fit in their equal share of what is
    then left (at least ``floor``).

    Parameters
    ----------
    curves : dict
        ``{name: CostCurve or None}``: the predicted seconds of one fit on ``n`` rows; a
        model without a curve keeps every row and is not counted.
    n_train : int
        Training rows of a fold.
    n_folds : int
    seconds : float
        Fit time available to all models together (already net of the pilots and scaled by
        the number of parallel fits).
    floor : int, default=1
        Fewest rows a model is cut to.

    Returns
    -------
    dict
        ``{name: rows or None}``; None keeps every row.
    """
    plan = {name: None for name in curves}
    pending = sorted((name for name, curve in curves.items() if curve is not None),
                     key=lambda name: curves[name](n_train))
    full = {name: n_folds * curves[name](n_train) for name in pending}
    low = {name: n_folds * curves[name](min(floor, n_train)) for name in pending}
    left = float(seconds)
    while pending and full[pending[0]] + sum(low[m] for m in pending[1:]) <= left:
        left -= full[pending.pop(0)]
    while pending:  # water-filling among the models that do not all fit
        share = left / len(pending)
        fits = [name for name in pending if full[name] <= share]
        if not fits:
            break
        for name in fits:
            left -= full[name]
            pending.remove(name)
    for name in pending:
        rows = curves[name].rows_within(left / len(pending) / n_folds, n_train)
        if rows < n_train:
            plan[name] = int(min(n_train, max(floor, rows)))
    return plan
