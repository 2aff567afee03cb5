"""The time planner of ``skbnngp compare --time-budget`` (issue 20, item 5), on fake cost
functions and fake estimators that advance a fake clock: no real timing."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.model_selection import StratifiedKFold

from skbnngp.compare import _run as compare_run
from skbnngp.compare._budget import (
    MAX_EXPONENT,
    CostCurve,
    cost_curve,
    measure,
    pilot_sizes,
    plan_rows,
    step_curve,
)

# digits-like costs, in CPU seconds per fit on n rows (shapes as measured: FiD-GP flat at
# 3.7 s up to ~100 rows then linear, 65 s on 1,437; the Student-t classifier 0.25 s + linear,
# 9 s on 1,437; a dense GP classifier cubic, 40 s on its 100-row floor)
FIDGP = lambda n: max(3.7, 0.0455 * n)  # noqa: E731
STUDENT_T = lambda n: 0.25 + 0.006 * n  # noqa: E731
DENSE_GP = lambda n: 40.0 * (n / 100) ** 3  # noqa: E731


def test_pilot_sizes_double_up_to_a_quarter_of_the_fold():
    assert pilot_sizes(1437) == [50, 100, 200, 359]
    assert pilot_sizes(900) == [50, 100, 225]  # no 200 just below 225
    assert pilot_sizes(400) == [50, 100]
    assert pilot_sizes(399) == []  # small data: no pilots, every row kept


def test_flat_then_linear_cost_is_extrapolated_exactly():
    """Pilots beyond the flat region give the per-row cost, without the fixed cost."""
    curve, timings = measure(FIDGP, pilot_sizes(1437))
    assert [n for n, _ in timings] == [50, 100, 200, 359]
    assert curve(1437) == pytest.approx(FIDGP(1437), rel=1e-9)


def test_fixed_start_up_cost_is_not_read_as_per_row_cost():
    """5 s start-up + 0.01 s a row: the two-point ratio rule of the old planner
    (t2 (n/n2)^b, b >= 1) predicted 8.59 * 1437/359 = 34 s; the curve stays within 11% above
    the true 19.4 s (never below)."""
    cost = lambda n: 5.0 + 0.01 * n  # noqa: E731
    curve, _ = measure(cost, pilot_sizes(1437))
    assert cost(1437) <= curve(1437) <= 1.11 * cost(1437)
    assert curve(1437) < 0.7 * cost(359) * 1437 / 359


def test_linear_with_small_fixed_cost_is_exact():
    curve, _ = measure(STUDENT_T, pilot_sizes(1437))
    assert curve(1437) == pytest.approx(STUDENT_T(1437), rel=1e-9)


def test_superlinear_cost_keeps_its_exponent_capped_at_three():
    curve, _ = measure(lambda n: 1e-3 * n ** 2, pilot_sizes(1437))
    assert curve.b == pytest.approx(2.0) and curve(1437) == pytest.approx(1e-3 * 1437 ** 2)
    curve = cost_curve([(50, 1.0), (100, 16.0), (200, 256.0)])  # n^4 from noise: capped
    assert curve.b == MAX_EXPONENT and curve(400) == pytest.approx(256.0 * 8)


def test_a_flat_region_hiding_the_per_row_cost_is_not_read_as_free():
    """All pilots flat (e.g. one batch): half of the largest pilot's time counts per row."""
    curve = cost_curve([(50, 4.0), (100, 4.0), (200, 4.0)])
    assert curve(400) == pytest.approx(4.0 + 0.5 * 4.0)
    assert curve.a >= 0 and curve.c > 0


def test_single_pilot_is_read_as_quadratic():
    assert cost_curve([(100, 2.0)])(300) == pytest.approx(18.0)
    assert cost_curve([]) is None


def test_pilots_stop_before_exceeding_their_allowance_and_at_a_failure():
    calls = []

    def cubic(n):
        calls.append(n)
        return DENSE_GP(n)
    curve, timings = measure(cubic, pilot_sizes(1437), limit=60.0)
    # 50 rows: 5 s; 100 rows predicted 5 * 2^2 = 20 s -> runs (40 s); 200 predicted
    # 40 * 2^3 = 320 s -> skipped
    assert calls == [50, 100] and curve.b == pytest.approx(3.0)
    assert curve(1437) == pytest.approx(DENSE_GP(1437))
    curve, timings = measure(lambda n: math.inf if n > 100 else 1.0, [50, 100, 200])
    assert [n for n, _ in timings] == [50, 100]
    assert measure(lambda n: math.inf, [50, 100]) == (None, [])


def test_rows_within_is_the_largest_row_count_that_fits():
    curve = CostCurve(1.0, 0.01, 1.5)
    for seconds in (1.0, 3.0, 10.0, 50.0):
        n = curve.rows_within(seconds, 1000)
        assert curve(n) <= seconds < curve(n + 1) or n == 1000
    assert curve.rows_within(0.5, 1000) == 0 and curve.rows_within(1e6, 1000) == 1000


def test_plan_keeps_the_package_models_whole_and_gives_the_peer_the_rest():
    """Digits-like: FiD-GP and the Student-t classifier fit in 600 s of 2 cores together
    (327 + 45 s), so both keep every row, even though an equal three-way share (200 s) would
    cut FiD-GP; the dense GP gets the rest: the most rows whose 5 folds fit in it."""
    curves = {"fidgp": measure(FIDGP, pilot_sizes(1437))[0],
              "stp": measure(STUDENT_T, pilot_sizes(1437))[0],
              "gpc": measure(DENSE_GP, pilot_sizes(1437), limit=60.0)[0]}
    floors = dict.fromkeys(curves, 100)
    plan = plan_rows(curves, 1437, 5, 600.0, floors, first=["fidgp", "stp"])
    assert plan["fidgp"] is None and plan["stp"] is None
    left = 600.0 - 5 * (FIDGP(1437) + STUDENT_T(1437))
    rows = plan["gpc"]
    assert 5 * DENSE_GP(rows) <= left < 5 * DENSE_GP(rows + 1)
    # without priority, plain water-filling would have cut FiD-GP
    assert plan_rows(curves, 1437, 5, 600.0, floors)["fidgp"] is not None


def test_plan_cuts_a_package_model_that_does_not_fit_and_keeps_floors():
    curves = {"a": CostCurve(0.0, 0.1, 1.0), "b": CostCurve(0.0, 1.0, 1.0),
              "peer": CostCurve(0.0, 1.0, 1.0)}
    # 1000 rows, 2 folds, 1000 s: a needs 200 s, b 2000 s; b and peer share the rest
    plan = plan_rows(curves, 1000, 2, 1000.0, {"a": 10, "b": 10, "peer": 50}, first=["a", "b"])
    assert plan["a"] is None
    assert plan["b"] == plan["peer"] == 200  # (1000 - 200) / 2 / 2 folds / 1 s a row
    # the peer's floor is not reserved ahead of a package model that fits
    plan = plan_rows(curves, 1000, 2, 250.0, {"a": 10, "b": 10, "peer": 50}, first=["a", "b"])
    assert plan == {"a": None, "b": 12, "peer": 50}  # 50 s shared: 25 s, 2 folds
    # a budget below every floor: floors win, nothing is dropped
    plan = plan_rows(curves, 1000, 2, 1.0, {"a": 10, "b": 10, "peer": 50}, first=["a", "b"])
    assert plan == {"a": 10, "b": 10, "peer": 50}
    assert plan_rows({"x": None}, 1000, 2, 1.0) == {"x": None}


class _FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


CLOCK = _FakeClock()


class _Fake(BaseEstimator):
    """Advances the fake clock by ``cost(n)`` when fitted on ``n`` rows."""

    def __init__(self, kind="fidgp"):
        self.kind = kind

    def fit(self, X, y):
        CLOCK.now += {"fidgp": FIDGP, "stp": STUDENT_T, "gpc": DENSE_GP}[self.kind](len(X))
        return self


def test_plan_budget_on_fake_estimators_keeps_fidgp_and_student_t_whole():
    """The whole planner (pilots on a stratified fold, contention, deduction) on digits-like
    fake estimators and a fake clock: with the default budget (300 s, 2 fits at a time) the
    package's models keep every row and only the dense GP is subsampled."""
    rng = np.random.RandomState(0)
    X, y = rng.normal(size=(1797, 4)), np.arange(1797) % 10
    folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    data = SimpleNamespace(X=X, y=y, task="classification")
    pipes = {name: _Fake(name) for name in ("fidgp", "stp", "gpc")}
    plan = compare_run._plan_budget(pipes, data, folds, n_jobs=2, budget=300.0, threads=1,
                                    seed=0, clock=CLOCK, pilot_jobs=1, first=["fidgp", "stp"])
    c = compare_run.CONTENTION
    n_train = min(len(f[0]) for f in folds)
    assert plan["fidgp"] == (None, pytest.approx(c * FIDGP(n_train), rel=1e-6))
    assert plan["stp"] == (None, pytest.approx(c * STUDENT_T(n_train), rel=1e-6))
    rows, full = plan["gpc"]
    assert full == pytest.approx(c * DENSE_GP(n_train), rel=1e-6)
    # its floor (10 per class): 600 - 5 * 1.25 * (65 + 9) s leaves 137 s, less than its
    # folds take at the floor (250 s); the package's models are not cut to make room
    assert rows == 100


def test_plan_budget_deducts_the_pilots_own_seconds():
    """The pilots take 84 fake seconds (x 1.25 contention = 105): at a 260 s budget the
    520 - 105 = 415 s left no longer hold FiD-GP's and the Student-t's 464 s."""
    rng = np.random.RandomState(0)
    X, y = rng.normal(size=(1797, 4)), np.arange(1797) % 10
    folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    data = SimpleNamespace(X=X, y=y, task="classification")
    pipes = {name: _Fake(name) for name in ("fidgp", "stp", "gpc")}
    plan = compare_run._plan_budget(pipes, data, folds, n_jobs=2, budget=260.0, threads=1,
                                    seed=0, clock=CLOCK, pilot_jobs=1, first=["fidgp", "stp"])
    assert plan["stp"][0] is None and 100 <= plan["fidgp"][0] < 1437


def _fid_steps(n, max_iter=400):  # FiD-GP's batch_size="auto": at most 8 steps an epoch
    from skbnngp._fidgp import train_batch_size

    return -(-n // train_batch_size("auto", n)) * max_iter


def test_step_curve_scales_the_largest_pilot_by_its_steps():
    curve = step_curve([(100, 3.7), (200, 7.0), (359, 14.3)], _fid_steps)
    assert curve(359) == pytest.approx(14.3)
    assert curve(1437) == pytest.approx(28.6)  # 8 steps an epoch against 4
    assert curve(800) == curve(1437)  # no more steps past 800 rows
    assert curve.scaled(1.25)(1437) == pytest.approx(35.75)
    assert step_curve([], _fid_steps) is None
    for seconds in (0.5, 5.0, 17.9, 20.0, 28.6, 40.0):
        brute = max([n for n in range(1438) if n == 0 or curve(n) <= seconds])
        assert curve.rows_within(seconds, 1437) == brute


def test_fidgp_counts_its_optimiser_steps():
    from skbnngp import FiDGPClassifier

    plain = FiDGPClassifier(calibration=None)
    assert [plain._fit_cost_units(n) for n in (50, 200, 359, 1437)] == [400, 800, 1600, 3200]
    temp = FiDGPClassifier(calibration="temperature", refit=False, max_iter=10)
    assert temp._fit_cost_units(1000) == 10 * 8  # 900 rows after the held-out tenth
    assert temp.set_params(refit=True)._fit_cost_units(300) == 10 * (3 + 3)
    # the defaults (calibration="auto", refit="warm"): the held-out stage, then a tenth of
    # max_iter epochs on every row (1293 rows: 8 batches of 162; 1437: 8 of 180)
    est = FiDGPClassifier()
    assert est._fit_cost_units(1437) == 400 * 8 + 40 * 8
    assert est._fit_cost_units(50) == 400 * 1 + 40 * 1


class _Steps(BaseEstimator):
    """A fake mini-batch trainer: 9 ms a step, FiD-GP's steps; ``declare`` exposes them."""

    def __init__(self, declare=True):
        self.declare = declare

    def fit(self, X, y):
        CLOCK.now += 0.009 * _fid_steps(len(X))
        return self

    def __getattr__(self, name):
        if name == "_fit_cost_units" and self.__dict__.get("declare"):
            return _fid_steps
        raise AttributeError(name)


def test_plan_budget_reads_a_declared_step_cost():
    """The power law read from pilots up to a quarter of the fold (4 steps an epoch)
    overstates a fit of 8 steps an epoch; the declared step count predicts it exactly."""
    rng = np.random.RandomState(0)
    X, y = rng.normal(size=(1797, 4)), np.arange(1797) % 10
    folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    data = SimpleNamespace(X=X, y=y, task="classification")
    n_train = min(len(f[0]) for f in folds)
    true = compare_run.CONTENTION * 0.009 * _fid_steps(n_train)
    est = {}
    for declare in (True, False):
        plan = compare_run._plan_budget({"fid": _Steps(declare)}, data, folds, n_jobs=2,
                                        budget=300.0, threads=1, seed=0, clock=CLOCK,
                                        pilot_jobs=1, first=["fid"])
        est[declare] = plan["fid"][1]
    assert est[True] == pytest.approx(true, rel=1e-9)
    assert est[False] > 1.5 * true
