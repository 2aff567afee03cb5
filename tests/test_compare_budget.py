"""The time planner of ``skbnngp compare --time-budget`` (issue 20, item 5), on synthetic cost
functions: fake estimators whose ``fit`` advances a fake clock by ``a + c n^b`` seconds, so
that nothing here depends on how fast the machine is."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.model_selection import KFold, StratifiedKFold

from skbnngp.compare import _run as compare_run
from skbnngp.compare._budget import (
    CostCurve,
    fit_cost_curve,
    measure,
    pilot_sizes,
    plan_rows,
)

#: The fake clock: seconds "spent" by the fake estimators' fits.
NOW = [0.0]


def fake_clock():
    return NOW[0]


class CostlyFit(BaseEstimator):
    """``fit`` costs ``a + c n^b`` fake seconds, plus ``startup`` on the first fit of all."""

    started = False

    def __init__(self, a=0.0, c=1e-3, b=1.0, startup=0.0, fail=False):
        self.a, self.c, self.b, self.startup, self.fail = a, c, b, startup, fail

    def fit(self, X, y):
        if self.fail:
            raise RuntimeError("this model never fits")
        NOW[0] += self.a + self.c * len(X) ** self.b
        if not CostlyFit.started:
            CostlyFit.started = True
            NOW[0] += self.startup
        return self


@pytest.fixture(autouse=True)
def _fresh_clock():
    NOW[0] = 0.0
    CostlyFit.started = False


def _data(n=1800, task="regression", n_classes=10):
    X = np.zeros((n, 2))
    y = np.arange(n) % n_classes if task == "classification" else np.zeros(n)
    splitter = (KFold if task == "regression" else StratifiedKFold)(5, shuffle=True,
                                                                   random_state=0)
    return SimpleNamespace(X=X, y=y, task=task), list(splitter.split(X, y))


def _old_two_point_estimate(curve, n_train, n1=100, n2=200):
    """The planner before: ``t2 (n / n2)^b`` with ``b`` from two pilots, clipped to [1, 3]."""
    t1, t2 = curve(n1), curve(n2)
    b = float(np.clip(math.log(t2 / t1) / math.log(n2 / n1), 1, 3))
    return t2 * (n_train / n2) ** b


# --------------------------------------------------------------------------- the cost curve
@pytest.mark.parametrize("a,c,b", [(0.0, 1e-3, 1.0), (5.0, 0.03, 1.0), (2.0, 1e-6, 3.0),
                                   (0.5, 1e-4, 2.0), (3.0, 2e-3, 1.5)])
def test_cost_curve_recovers_fixed_and_per_row_cost(a, c, b):
    sizes = pilot_sizes(1437)
    assert sizes == [20, 179, 359, 718]
    curve = fit_cost_curve(sizes, [a + c * n ** b for n in sizes])
    assert curve.b == pytest.approx(b)
    assert curve.a == pytest.approx(a, abs=1e-9)
    assert curve.c == pytest.approx(c, rel=1e-6)
    assert curve(1437) == pytest.approx(a + c * 1437 ** b, rel=1e-6)


def test_cost_curve_is_cautious_with_one_timing_and_checks_its_input():
    assert fit_cost_curve([100], [2.0]) == CostCurve(0.0, 0.02, 1.0)
    for sizes, secs in [([], []), ([10, 20], [1.0]), ([10, 20], [1.0, -1.0]),
                        ([10, 20], [1.0, np.nan])]:
        with pytest.raises(ValueError):
            fit_cost_curve(sizes, secs)


def test_rows_within_inverts_the_curve():
    curve = CostCurve(2.0, 1e-3, 1.5)
    for seconds in (2.5, 10.0, 40.0):
        rows = curve.rows_within(seconds, 10**6)
        assert curve(rows) <= seconds < curve(rows + 1)
    assert curve.rows_within(1.0, 1000) == 0  # the fixed cost alone is over
    assert curve.rows_within(1e9, 1000) == 1000


def test_pilot_sizes_on_small_data():
    assert pilot_sizes(39) == []
    assert pilot_sizes(40) == [20]
    assert pilot_sizes(100) == [20, 25, 50]


# --------------------------------------------------------------------------- pilots
def test_measure_stops_before_the_pilot_limit_and_at_a_failure():
    cost = lambda n: 1.0 + 0.01 * n  # noqa: E731
    # After the first pilot (1.2 s) the next is predicted from it alone, linearly (6 s).
    # Two timings fit every exponent; the tie goes to the steepest (b = 3: 7.65 s for 200
    # rows). With three, b = 1 is found and the 400-row pilot predicted at 5 s.
    curve, timings = measure(cost, [20, 100, 200, 400], limit=11.0)
    assert [n for n, _ in timings] == [20, 100, 200]  # 6.2 s spent, 11.2 s with 400 rows
    assert [n for n, _ in measure(cost, [20, 100, 200, 400], limit=10.0)[1]] == [20, 100]
    assert [n for n, _ in measure(cost, [20, 100, 200, 400], limit=7.0)[1]] == [20]
    assert curve(1000) == pytest.approx(11.0)
    curve, timings = measure(lambda n: math.inf if n > 20 else 1.0, [20, 100, 200])
    assert timings == [(20, 1.0)] and curve == CostCurve(0.0, 0.05, 1.0)
    assert measure(lambda n: math.inf, [20, 100]) == (None, [])


# --------------------------------------------------------------------------- the plan
def test_plan_keeps_every_row_of_models_that_fit_and_water_fills_the_rest():
    curves = {"cheap": CostCurve(1.0, 1e-3, 1.0), "mid": CostCurve(5.0, 0.02, 1.0),
              "slow": CostCurve(0.0, 1e-7, 3.0), "unknown": None}
    n_train, folds, seconds = 1437, 5, 600.0
    plan = plan_rows(curves, n_train, folds, seconds, floor=50)
    assert plan["cheap"] is None and plan["mid"] is None and plan["unknown"] is None
    left = seconds - folds * (curves["cheap"](n_train) + curves["mid"](n_train))
    rows = plan["slow"]
    assert folds * curves["slow"](rows) <= left < folds * curves["slow"](rows + 1)
    # a budget too small for anyone: everybody shares equally, never below the floor
    plan = plan_rows(curves, n_train, folds, 1.0, floor=50)
    assert plan == {"cheap": 50, "mid": 50, "slow": curves["slow"].rows_within(1 / 15, n_train),
                    "unknown": None}
    assert plan["slow"] > 50


def test_plan_subsamples_only_what_does_not_fit_cheapest_first():
    curves = {"a": CostCurve(0.0, 0.01, 1.0), "b": CostCurve(0.0, 0.02, 1.0),
              "c": CostCurve(0.0, 0.04, 1.0)}
    # full folds: a 50 s, b 100 s, c 200 s; 300 s leaves c 150 s after a and b
    plan = plan_rows(curves, 1000, 5, 300.0)
    assert plan["a"] is None and plan["b"] is None and plan["c"] == 750


def test_plan_keeps_the_cheaper_models_whole_before_sharing_equally():
    """digits: the Student-t classifier (150 s for its folds) and FiD-GP (400 s) fit in 600 s
    when sklearn's GP classifier (hours) is cut to the floor; equal thirds (200 s each)
    would have cut FiD-GP too."""
    curves = {"stp": CostCurve(0.0, 30.0 / 1437, 1.0), "fidgp": CostCurve(0.0, 80.0 / 1437, 1.0),
              "gpc": CostCurve(0.0, 1e-5, 3.0)}
    plan = plan_rows(curves, 1437, 5, 600.0, floor=100)
    assert plan["stp"] is None and plan["fidgp"] is None
    rows = plan["gpc"]
    assert 100 <= rows and 5 * curves["gpc"](rows) <= 600.0 - 150.0 - 400.0
    assert 5 * curves["gpc"](rows + 1) > 50.0
    # when the floor of the costliest (105 s) does not fit beside them, the two share the
    # 450 s that the Student-t classifier leaves
    curves["gpc"] = CostCurve(11.0, 1e-5, 3.0)
    plan = plan_rows(curves, 1437, 5, 600.0, floor=100)
    assert plan["stp"] is None
    assert plan["fidgp"] == curves["fidgp"].rows_within(45.0, 1437) < 1437
    assert plan["gpc"] == curves["gpc"].rows_within(45.0, 1437) >= 100


# --------------------------------------------------------------------------- end to end
def test_a_model_with_a_large_start_up_cost_keeps_every_row():
    """Issue 20: FiD-GP (5 s to start, then linear) was cut to 574 of 1,437 rows on digits
    although its full folds fitted in its share; the old two-point extrapolation read the
    start-up as per-row cost."""
    data, folds = _data(1797, "classification")
    n_train = min(len(f[0]) for f in folds)
    pipes = {"fidgp": CostlyFit(a=5.0, c=0.02, b=1.0),
             "gp": CostlyFit(a=0.0, c=1e-6, b=3.0)}
    budget, n_jobs = 300.0, 2
    plan = compare_run._plan_budget(pipes, data, folds, n_jobs, budget, threads=1, seed=0,
                                    clock=fake_clock, pilot_jobs=1)
    c = compare_run.CONTENTION
    full = c * (5.0 + 0.02 * n_train)
    assert plan["fidgp"] == (None, pytest.approx(full))
    # the slow one gets what is left, and its folds fit in it
    rows, gp_full = plan["gp"]
    assert gp_full == pytest.approx(c * 1e-6 * n_train ** 3)
    left = budget * n_jobs - 5 * full
    assert 5 * c * 1e-6 * rows ** 3 <= left < 5 * c * 1e-6 * (rows + 2) ** 3
    # what the planner did before: nearly twice the full cost, beyond an equal share
    old = c * _old_two_point_estimate(CostCurve(5.0, 0.02, 1.0), n_train)
    assert old > 1.9 * full
    assert 5 * old > budget * n_jobs / 2 >= 5 * full


def test_one_time_start_up_is_not_read_as_fixed_cost():
    """The first fit of the process pays a start-up (imports, kernels); the smallest pilot is
    timed twice and the faster one kept."""
    data, folds = _data(1800)
    plan = compare_run._plan_budget({"m": CostlyFit(a=0.0, c=0.01, startup=30.0)}, data, folds,
                                    1, 300.0, threads=1, seed=0, clock=fake_clock)
    assert plan["m"] == (None, pytest.approx(0.01 * 1440))


def test_a_failing_model_and_small_data_keep_every_row():
    data, folds = _data(1800)
    plan = compare_run._plan_budget({"bad": CostlyFit(fail=True)}, data, folds, 1, 1.0,
                                    threads=1, seed=0, clock=fake_clock)
    assert plan == {"bad": (None, None)}
    data, folds = _data(45)
    plan = compare_run._plan_budget({"m": CostlyFit(c=100.0)}, data, folds, 1, 1.0,
                                    threads=1, seed=0, clock=fake_clock)
    assert plan == {"m": (None, None)}


def test_pilots_use_cpu_time_on_the_cpu_and_wall_time_on_a_gpu(monkeypatch):
    import time

    seen = []
    monkeypatch.setattr(compare_run, "_pilot_time",
                        lambda pipe, X, y, rows, threads, clock: seen.append(clock) or 1.0)
    data, folds = _data(400)
    compare_run._plan_budget({"m": CostlyFit()}, data, folds, 1, 100.0, 1, 0, device="cpu")
    assert set(seen) == {time.process_time}
    seen.clear()
    compare_run._plan_budget({"m": CostlyFit()}, data, folds, 1, 100.0, 1, 0, device="cuda:0")
    assert set(seen) == {time.perf_counter}


def test_pilots_in_parallel_plan_the_same():
    """Each pilot series runs in one worker and is timed by that worker's clock."""
    data, folds = _data(1797, "classification")
    pipes = {"fidgp": CostlyFit(a=5.0, c=0.02, b=1.0), "gp": CostlyFit(a=0.0, c=1e-6, b=3.0)}
    one = compare_run._plan_budget(pipes, data, folds, 2, 300.0, 1, 0, clock=fake_clock,
                                   pilot_jobs=1)
    two = compare_run._plan_budget(pipes, data, folds, 2, 300.0, 1, 0, clock=fake_clock,
                                   pilot_jobs=2)
    assert one["fidgp"][0] is None and two["fidgp"][0] is None
    assert two["fidgp"][1] == pytest.approx(one["fidgp"][1])
    # the same cut, less what starting the workers took off the budget (wall clock)
    assert 0 <= one["gp"][0] - two["gp"][0] <= 0.03 * one["gp"][0]
