"""How many intra-op threads torch uses for one fit or prediction.

Torch's default (one thread per core) suits large tensor operations. The operations of a small
fit (a 200 x 200 Cholesky, a mini-batch step of a small network) take microseconds, and a
second thread only adds a barrier per operation; when another process is busy on the machine,
each barrier waits for a descheduled thread and a fit runs ten times slower or worse. So each
fit and each prediction runs under :func:`use_threads`, which picks the count from the size of
the operations (:func:`choose_threads`, a pure function) and restores torch's setting after.

The count never exceeds:

* the cores this process may use (CPU affinity, and a cgroup CPU quota where one is set);
* torch's current setting (``torch.get_num_threads()``), which carries the user's
  ``torch.set_num_threads``, ``OMP_NUM_THREADS``, threadpoolctl's ``threadpool_limits`` (it
  limits torch's OpenMP runtime) and the limit joblib/loky sets inside its workers;
* the cores not busy with other processes, when the process may use every core of the machine
  (read from the number of runnable tasks in ``/proc/loadavg``).

The environment variable ``SKBNNGP_NUM_THREADS`` fixes the count instead of the size rule and
the load reading (still within the first two limits).
"""

from __future__ import annotations

import itertools
import math
import os
from contextlib import contextmanager

import torch

#: Environment variable that fixes the number of threads (a positive integer).
ENV_VAR = "SKBNNGP_NUM_THREADS"

#: Floating-point operations each thread must get from the largest operation of a call before
#: that thread is worth its barrier: below ``2 *`` this, one thread is used. On a 2-core CPU a
#: second thread lost on Cholesky factors and MLP training steps below about this size (a
#: 700 x 700 Cholesky, a 2,000-row step of a 128-wide MLP) and lost up to a hundredfold
#: beside busy processes (the measurements are in doc/whats_new.rst).
MIN_WORK_PER_THREAD = 1e8


def requested_threads():
    """The count ``SKBNNGP_NUM_THREADS`` asks for, or None when it is unset or empty.

    Raises
    ------
    ValueError
        Naming ``SKBNNGP_NUM_THREADS`` when it is not a positive integer.
    """
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{ENV_VAR}={raw!r} must be a positive integer (a number of threads), "
                         "or unset to let skbnngp choose.")
    return value


def _cgroup_quota():
    """CPUs allowed by a cgroup (v2 ``cpu.max`` or v1 CFS quota), rounded up; None if none."""
    paths = (("/sys/fs/cgroup/cpu.max", None),
             ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    for quota_path, period_path in paths:
        try:
            with open(quota_path) as f:
                fields = f.read().split()
            if period_path is not None:
                with open(period_path) as f:
                    fields.append(f.read().strip())
            quota, period = fields[0], fields[1]
            if quota in ("max", "-1"):
                return None
            return max(1, math.ceil(int(quota) / int(period)))
        except (OSError, ValueError, IndexError):
            continue
    return None


def allowed_cores():
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, quota) if quota is not None else cores)


def busy_cores(cores):
    """Cores busy with other tasks, from the runnable count of ``/proc/loadavg``, or 0.

    Read only when the process may use every core of the machine (otherwise the machine-wide
    count says nothing about this process's cores); the smallest of three readings, less the
    reader itself.
    """
    if cores != (os.cpu_count() or 1) or _cgroup_quota() is not None:
        return 0
    readings = []
    for _ in range(3):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return 0
        readings.append(running - 1)
    return max(0, min(readings))


def choose_threads(work, *, cores, limit, busy=0, requested=None):
    """Number of intra-op threads for a call whose largest operation costs ``work`` flops.

    Parameters
    ----------
    work : float
        Floating-point operations of the call's largest repeated operation.
    cores : int
        Cores the process may use (:func:`allowed_cores`).
    limit : int
        The current thread limit (``torch.get_num_threads()``).
    busy : int, default=0
        Cores busy with other processes (:func:`busy_cores`).
    requested : int or None, default=None
        A fixed count (``SKBNNGP_NUM_THREADS``): replaces the size rule and ``busy``.

    Returns
    -------
    n_threads : int
        ``min(cores, limit)`` capped by ``requested``, or else by ``work //
        MIN_WORK_PER_THREAD`` and the idle cores ``cores - busy``; at least 1.
    """
    cap = max(1, min(int(cores), int(limit)))
    if requested is not None:
        return max(1, min(cap, int(requested)))
    by_size = int(work // MIN_WORK_PER_THREAD) if math.isfinite(work) else cap
    return max(1, min(cap, by_size, int(cores) - int(busy)))


def threads_for(work):
    """:func:`choose_threads` for ``work`` on this machine, now."""
    requested = requested_threads()
    if requested is None and work < 2 * MIN_WORK_PER_THREAD:
        return 1  # the size rule's answer whatever the limits: no reading of the machine
    cores = allowed_cores()
    return choose_threads(work, cores=cores, limit=torch.get_num_threads(),
                          busy=0 if requested is not None else busy_cores(cores),
                          requested=requested)


@contextmanager
def use_threads(work):
    """Run the block with :func:`threads_for(work) <threads_for>` intra-op threads, and
    restore torch's setting after (also on an exception). Yields the count."""
    before = torch.get_num_threads()
    n = threads_for(work)
    if n != before:
        torch.set_num_threads(n)
    try:
        yield n
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def dense_work(n):
    """Flops of a Cholesky factor of an ``n x n`` matrix (the largest step of an exact GP)."""
    return n ** 3 / 3.0


def low_rank_work(n, rank):
    """Flops of an ``n x rank`` low-rank solve (``n rank^2``; Nystrom, a feature GP)."""
    return float(n) * rank * rank


def network_work(rows, widths):
    """Flops of a forward and backward pass of an MLP with layer ``widths`` on ``rows`` rows
    (six per weight and row)."""
    return 6.0 * rows * sum(a * b for a, b in itertools.pairwise(widths))
