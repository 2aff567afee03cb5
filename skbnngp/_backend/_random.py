"""Seeding: every random torch call in the package takes a local generator made here."""

from __future__ import annotations

import torch


def make_generator(seed: int, device) -> torch.Generator:
    """A :class:`torch.Generator` on ``device`` seeded with ``seed``.

    The estimator draws ``seed`` once from ``check_random_state(random_state)``; no global
    seed is ever set.
    """
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen


def host_randn(shape, generator, device, dtype):
    """Standard normal draws from a CPU ``generator``, sent to ``device``.

    The same seed gives the same numbers on every device (a host-to-device copy, never a
    synchronising read back), so a model trained with noise, such as FiD-GP, is the same on
    the CPU and on CUDA up to floating-point rounding.
    """
    out = torch.randn(tuple(shape), generator=generator, dtype=dtype)
    return out if torch.device(device).type == "cpu" else out.to(device, non_blocking=True)


def host_rand(shape, generator, device, dtype):
    """Uniform [0, 1) draws from a CPU ``generator``, sent to ``device`` (as host_randn)."""
    out = torch.rand(tuple(shape), generator=generator, dtype=dtype)
    return out if torch.device(device).type == "cpu" else out.to(device, non_blocking=True)
