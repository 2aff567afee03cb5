"""The thread policy (skbnngp/_backend/_threads.py): a pure function of the work and the limits,
the environment variable, and the restoring context manager."""

import os

import pytest
import torch
from threadpoolctl import threadpool_limits

from skbnngp._backend import _threads
from skbnngp._backend._threads import (
    ENV_VAR,
    MIN_WORK_PER_THREAD,
    allowed_cores,
    busy_cores,
    choose_threads,
    dense_work,
    network_work,
    requested_threads,
    threads_for,
    use_threads,
)


def test_small_work_gets_one_thread():
    # a 200 x 200 Cholesky and a default Rich-BLL step (batch 32, 4-50-50-1) are far below
    for work in (0.0, dense_work(200), network_work(32, (4, 50, 50, 1)),
                 2 * MIN_WORK_PER_THREAD - 1):
        assert choose_threads(work, cores=16, limit=16) == 1


def test_threads_grow_with_work_up_to_the_limits():
    w = MIN_WORK_PER_THREAD
    assert choose_threads(3 * w, cores=16, limit=16) == 3
    assert choose_threads(1e6 * w, cores=16, limit=16) == 16
    assert choose_threads(1e6 * w, cores=16, limit=4) == 4  # torch / OpenMP / loky limit
    assert choose_threads(1e6 * w, cores=2, limit=16) == 2  # affinity / cgroup
    assert choose_threads(float("inf"), cores=8, limit=8) == 8


def test_busy_cores_are_left_alone():
    big = 1e6 * MIN_WORK_PER_THREAD
    assert choose_threads(big, cores=8, limit=8, busy=3) == 5
    assert choose_threads(big, cores=2, limit=2, busy=1) == 1
    assert choose_threads(big, cores=2, limit=2, busy=7) == 1


def test_requested_count_replaces_size_rule_within_limits():
    assert choose_threads(0.0, cores=8, limit=8, busy=7, requested=3) == 3
    assert choose_threads(0.0, cores=8, limit=2, requested=3) == 2
    assert choose_threads(0.0, cores=1, limit=8, requested=3) == 1


def test_environment_variable(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert requested_threads() is None
    monkeypatch.setenv(ENV_VAR, " 3 ")
    assert requested_threads() == 3
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv(ENV_VAR, bad)
        with pytest.raises(ValueError, match=ENV_VAR):
            requested_threads()


def test_machine_limits_are_sane():
    cores = allowed_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    assert busy_cores(cores) >= 0


def test_threadpoolctl_limit_is_respected(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with threadpool_limits(1):
        assert threads_for(float("inf")) == 1
        with use_threads(float("inf")) as n:
            assert n == 1 == torch.get_num_threads()


@pytest.mark.skipif(allowed_cores() < 2, reason="needs two cores")
def test_use_threads_sets_and_restores(monkeypatch):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(_threads, "busy_cores", lambda cores: 0)
        monkeypatch.delenv(ENV_VAR, raising=False)
        with use_threads(0.0) as n:
            assert n == 1 == torch.get_num_threads()
        assert torch.get_num_threads() == 2
        with use_threads(float("inf")) as n:
            assert n == 2 == torch.get_num_threads()
        with pytest.raises(RuntimeError), use_threads(0.0):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _worker_threads():
    return threads_for(float("inf")), torch.get_num_threads()


@pytest.mark.skipif(allowed_cores() < 2, reason="needs two cores")
def test_loky_workers_limit_is_respected(monkeypatch):
    """joblib's loky workers get ``cores // n_jobs`` threads (OMP_NUM_THREADS); the policy
    stays within it even for unbounded work."""
    from joblib import Parallel, delayed

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = allowed_cores()
    out = Parallel(n_jobs=2, backend="loky")(delayed(_worker_threads)() for _ in range(2))
    for n, limit in out:  # loky's limit reaches torch, and the policy stays within it
        assert 1 <= n <= limit <= max(1, cores // 2), (n, limit)
