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


def _send(out, device):
    device = torch.device(device)
    if device.type == "cpu":
        return out
    if device.type == "cuda":
        # from pageable memory the copy would first wait for the whole stream to finish
        out = out.pin_memory()
    return out.to(device, non_blocking=True)


def host_randn(shape, generator, device, dtype):
    """Standard normal draws from a CPU ``generator``, sent to ``device``.

    The same seed gives the same numbers on every device (a host-to-device copy, never a
    synchronising read back), so a model trained with noise, such as FiD-GP, is the same on
    the CPU and on CUDA up to floating-point rounding. ``generator`` may be a
    :class:`NoiseTape` (a captured training step's noise).
    """
    if isinstance(generator, NoiseTape):
        return generator.draw("randn", shape, device, dtype)
    return _send(torch.randn(tuple(shape), generator=generator, dtype=dtype), device)


def host_rand(shape, generator, device, dtype):
    """Uniform [0, 1) draws from a CPU ``generator``, sent to ``device`` (as host_randn)."""
    if isinstance(generator, NoiseTape):
        return generator.draw("rand", shape, device, dtype)
    return _send(torch.rand(tuple(shape), generator=generator, dtype=dtype), device)


#: The host draws a :class:`NoiseTape` records, by kind.
_DRAWS = {"randn": torch.randn, "rand": torch.rand}


class TapeMismatch(RuntimeError):
    """A captured step asked for other noise than the step the tape recorded."""


class NoiseTape:
    """The host-drawn noise of training steps that are replayed as CUDA graphs.

    A captured graph cannot copy fresh host draws itself, so a step's draws come from a
    device buffer that is refilled before every replay, from the same CPU generator and in
    the same order as an eager step would draw them: a replayed step gets the numbers the
    eager step would have had, and the CPU and CUDA fits stay the same.

    Modes: ``"eager"`` draws from :attr:`generator` (what :func:`host_randn` does);
    ``"record"`` does the same and remembers each draw's kind, shape and dtype;
    ``"capture"`` hands out views of a slot's device buffer in the recorded order, drawing
    nothing. Each captured graph has its own :class:`NoiseSlot` (its plan and buffers: a
    graph reads the addresses it was captured with), which :meth:`refill` fills before that
    graph's replay.
    """

    def __init__(self, generator):
        self.generator = generator
        self.mode = "eager"
        self.plan = []
        self._slot = None

    def draw(self, kind, shape, device, dtype):
        shape = tuple(int(s) for s in shape)
        if self.mode == "capture":
            return self._slot.view(kind, shape, dtype)
        out = _DRAWS[kind](shape, generator=self.generator, dtype=dtype)
        if self.mode == "record":
            start = self.plan[-1][3] + self.plan[-1][4] if self.plan else 0
            self.plan.append((kind, shape, dtype, start, out.numel()))
        return _send(out, device)

    def start_record(self):
        self.mode, self.plan = "record", []

    def start_capture(self, device):
        """A new slot for the recorded plan; its views are handed out until
        :meth:`end_capture`, which returns it."""
        self._slot = NoiseSlot(self.plan, device)
        self.mode = "capture"
        return self._slot

    def end_capture(self):
        slot, self._slot, self.mode = self._slot, None, "eager"
        if slot is not None and slot.next != len(slot.plan):
            raise TapeMismatch("the captured step drew less noise than the recorded one")
        return slot

    def refill(self, slot):
        """Draw the next step's noise, in ``slot``'s recorded order, into its buffer."""
        host = slot.host_buffer()
        for kind, shape, dtype, start, size in slot.plan:
            host[start:start + size].copy_(
                _DRAWS[kind](shape, generator=self.generator, dtype=dtype).reshape(-1))
        slot.send(host)


class NoiseSlot:
    """One captured graph's noise: its recorded plan, device buffer and two pinned host
    buffers used in turn (filling one never waits for the copy of the other)."""

    def __init__(self, plan, device):
        self.plan = list(plan)
        dtypes = {p[2] for p in self.plan}
        if len(dtypes) > 1:
            raise TapeMismatch("a step draws noise of more than one dtype")
        dtype = dtypes.pop() if dtypes else torch.float32
        total = self.plan[-1][3] + self.plan[-1][4] if self.plan else 0
        self.dev = torch.empty(total, dtype=dtype, device=device)
        self.cuda = torch.device(device).type == "cuda"
        self.host = [torch.empty(total, dtype=dtype, pin_memory=self.cuda) for _ in range(2)]
        self.events = [None, None]
        self.turn = 0
        self.next = 0

    def view(self, kind, shape, dtype):
        if self.next >= len(self.plan) or self.plan[self.next][:3] != (kind, shape, dtype):
            raise TapeMismatch("the captured step draws other noise than the recorded one")
        start, size = self.plan[self.next][3:]
        self.next += 1
        return self.dev[start:start + size].view(shape)

    def host_buffer(self):
        k = self.turn
        if self.events[k] is not None:
            self.events[k].synchronize()  # the copy that last read this buffer is done
        return self.host[k]

    def send(self, host):
        k = self.turn
        self.turn = 1 - k
        if not self.cuda:
            self.dev.copy_(host)
            return
        self.dev.copy_(host, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.events[k] = event
