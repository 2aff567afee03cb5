"""The time planner of ``skbnngp compare --time-budget``: how many training rows each model
gets so that all its folds fit in the budget.

A fit's cost is modelled as ``t(n) = a + c n^b``: a fixed start-up cost ``a`` (building the
model, a fixed number of optimiser steps, full-batch steps while ``n`` is below the batch
size) plus a per-row cost. Small fits are often all fixed cost (FiD-GP on ``digits``: 3.8 s
on 50 rows, 3.7 s on 100, 7.0 s on 200, 14.3 s on 359), so the exponent is read only from
pilots that have left that flat region, and extrapolation never follows a curve fitted
through it:

- pilots double from :data:`SMALLEST_PILOT` rows up to a quarter of the training fold
  (:func:`pilot_sizes`), each skipped when it would take the model's pilots over their
  allowance (:func:`measure`);
- the growth exponent ``r`` is the least-squares slope of log time against log rows over the
  last three pilots (:func:`cost_curve`). ``r >= 1``: the pilots are past the fixed cost and
  the full fit is ``t_k (n / n_k)^min(r, 3)`` from the largest pilot ``(n_k, t_k)``;
  ``r < 1``: a fixed cost plus a linear per-row cost, the slope of the last two pilots, but
  at least half the largest pilot's time per row (a flat region that hides the per-row cost
  is not read as free rows).

:func:`plan_rows` then keeps the package's own models whole first (cheapest first, as long as
every package model after it can still get its smallest subset), and the others (the
scikit-learn peer) share what is left by water-filling, never below their floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The smallest pilot fit, in rows.
SMALLEST_PILOT = 50
#: Largest exponent used to extrapolate beyond the largest pilot (a dense GP is cubic).
MAX_EXPONENT = 3.0
#: Least share of the largest pilot's time counted as per-row cost when the pilots grow
#: less than linearly (their slope is then also read, whichever is larger).
MIN_ELASTICITY = 0.5


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
        Exponent of the per-row cost, in [1, :data:`MAX_EXPONENT`].
    """

    a: float
    c: float
    b: float

    def __call__(self, n):
        return self.a + self.c * float(n) ** self.b

    def scaled(self, factor):
        """The same curve times ``factor`` (parallel fits slow each other down)."""
        return CostCurve(self.a * factor, self.c * factor, self.b)

    def rows_within(self, seconds, n_max):
        """The largest ``n <= n_max`` with ``t(n) <= seconds`` (0 if none)."""
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


@dataclass(frozen=True)
class StepCurve:
    """``t(n) = per_unit * units(n)`` seconds: a fit whose cost is its number of optimiser
    steps (``units``, from the estimator's ``_fit_cost_units``), each about as dear whatever
    the rows in it. A mini-batch trainer with a fixed number of epochs and a batch size that
    grows with ``n`` (FiD-GP's ``batch_size="auto"``: at most 8 steps an epoch) costs the
    same from 800 rows on, which no power of the rows extrapolates: on ``digits`` the
    power law read from pilots up to 359 rows (4 steps an epoch) predicted 66-118 s a fold
    for the 8 steps of 1,437 rows, which take 29-48 s.

    Attributes
    ----------
    per_unit : float
        Seconds per unit, from the largest pilot.
    units : callable
        ``units(n)``, non-decreasing in ``n``.
    """

    per_unit: float
    units: object

    def __call__(self, n):
        return self.per_unit * float(self.units(int(n)))

    def scaled(self, factor):
        """The same curve times ``factor`` (parallel fits slow each other down)."""
        return StepCurve(self.per_unit * factor, self.units)

    def rows_within(self, seconds, n_max):
        """The largest ``n <= n_max`` with ``t(n) <= seconds`` (0 if none)."""
        lo, hi = 0, int(n_max)
        if self(hi) <= seconds:
            return hi
        while hi - lo > 1:  # t(lo) <= seconds < t(hi), lo = 0 meaning none
            mid = (lo + hi) // 2
            if self(mid) <= seconds:
                lo = mid
            else:
                hi = mid
        return lo if lo == 0 or self(lo) <= seconds else 0


def step_curve(timings, units):
    """The :class:`StepCurve` of pilot ``timings`` ``[(rows, seconds), ...]`` (rows
    increasing) for a cost in ``units(n)``: the largest pilot's seconds per unit (None
    without timings)."""
    if not timings:
        return None
    n_k, t_k = timings[-1]
    return StepCurve(t_k / max(float(units(int(n_k))), 1e-12), units)


def pilot_sizes(n_train, smallest=SMALLEST_PILOT):
    """Row counts of the pilot fits: doubling from ``smallest`` up to ``n_train // 4``.

    Parameters
    ----------
    n_train : int
        Training rows of a fold.
    smallest : int, default=50

    Returns
    -------
    list of int
        Increasing; the last is ``n_train // 4``. Empty when ``n_train // 4 < 2 smallest``
        (small data: every model keeps every row).
    """
    top = n_train // 4
    if top < 2 * smallest:
        return []
    sizes = [smallest]
    while 2 * sizes[-1] < top:
        sizes.append(2 * sizes[-1])
    if top - sizes[-1] < sizes[-1] // 2:  # no pilot barely larger than the one before
        sizes.pop()
    return sizes + [top]


def cost_curve(timings):
    """The cost curve read from pilot timings (see the module docstring).

    Parameters
    ----------
    timings : list of (int, float)
        ``(rows, seconds)`` of the pilots, rows increasing, seconds positive and finite.

    Returns
    -------
    CostCurve or None
        None without timings. With a single pilot the cost is read as growing with the
        square of the rows from it (cautious).
    """
    if not timings:
        return None
    n_k, t_k = timings[-1]
    if len(timings) == 1:
        return CostCurve(0.0, t_k / n_k ** 2, 2.0)
    last = np.log(np.asarray(timings[-3:], dtype=np.float64))
    r = float(np.polyfit(last[:, 0], last[:, 1], 1)[0])
    if r >= 1.0:
        b = min(r, MAX_EXPONENT)
        return CostCurve(0.0, t_k / n_k ** b, b)
    n_p, t_p = timings[-2]
    # a fixed cost plus a linear per-row cost; the slope of the last two pilots, but at least
    # MIN_ELASTICITY of the largest pilot's time per row (a per-row cost hidden by a flat
    # region is not read as zero) and at most all of it (no negative fixed cost)
    c = min(max((t_k - t_p) / (n_k - n_p), MIN_ELASTICITY * t_k / n_k), t_k / n_k)
    return CostCurve(t_k - c * n_k, c, 1.0)


def measure(time_fit, sizes, *, limit=math.inf):
    """Time pilot fits on growing ``sizes`` and read the cost curve from them.

    Before each pilot after the first, its time is predicted from the last one as growing
    with ``max(2, r)`` powers of the rows (``r``: the growth seen between the last two); the
    series stops when that would take the time spent above ``limit`` seconds, and at a
    failed pilot (a non-finite time).

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
    """
    timings, spent = [], 0.0
    for n in sizes:
        if timings:
            n_k, t_k = timings[-1]
            power = 2.0
            if len(timings) > 1:
                n_p, t_p = timings[-2]
                power = max(power, math.log(t_k / t_p) / math.log(n_k / n_p))
            if spent + t_k * (n / n_k) ** power > limit:
                break
        took = float(time_fit(n))
        if not math.isfinite(took):
            break
        took = max(took, 1e-6)
        spent += took
        timings.append((n, took))
    return cost_curve(timings), timings


def plan_rows(curves, n_train, n_folds, seconds, floors=None, first=()):
    """Training rows per model so that every model's folds fit in ``seconds`` together.

    The models named in ``first`` (the package's own), cheapest first, keep every row as
    long as their ``n_folds`` full-size fits still leave enough for the other ``first``
    models at their floors (the others' floors are not reserved: a peer cut to its floor
    may take the run over ``seconds``). The rest (the others, and a ``first`` model that did not fit) share what is
    left by water-filling: one whose full folds fit in an equal share keeps every row, and
    the others each get the largest row count whose folds fit in their equal share of what
    is then left (never below their floor).

    Parameters
    ----------
    curves : dict
        ``{name: CostCurve or None}``: predicted seconds of one fit on ``n`` rows; a model
        without a curve keeps every row and is not counted.
    n_train : int
        Training rows of a fold.
    n_folds : int
    seconds : float
        Fit time available to all models together (net of the pilots, times the number of
        parallel fits).
    floors : dict, default=None
        ``{name: fewest rows}`` (default 1).
    first : sequence of str, default=()
        Models kept whole first.

    Returns
    -------
    dict
        ``{name: rows or None}``; None keeps every row.
    """
    floors = floors or {}
    plan = dict.fromkeys(curves)
    known = [name for name, curve in curves.items() if curve is not None]
    full = {name: n_folds * curves[name](n_train) for name in known}
    low = {name: n_folds * curves[name](min(floors.get(name, 1), n_train)) for name in known}
    ahead = sorted((name for name in known if name in first), key=full.get)
    pending = [name for name in known if name not in ahead]
    left = float(seconds)
    while ahead and full[ahead[0]] + sum(low[m] for m in ahead[1:]) <= left:
        left -= full[ahead.pop(0)]
    pending = ahead + pending
    while pending:  # water-filling among the models that do not all fit
        share = left / len(pending)
        fits = [name for name in pending if full[name] <= share]
        if not fits:
            break
        for name in fits:
            left -= full[name]
            pending.remove(name)
    for name in pending:
        rows = curves[name].rows_within(max(left, 0.0) / len(pending) / n_folds, n_train)
        if rows < n_train:
            plan[name] = int(min(n_train, max(floors.get(name, 1), rows)))
    return plan
