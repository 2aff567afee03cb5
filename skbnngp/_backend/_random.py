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
