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


class TapeMismatch(RuntimeError):
    """A captured step asked for other noise than the step the tape recorded."""


class NoiseTape:
    """The host-drawn noise of a training step that is replayed as a CUDA graph.

    A captured graph cannot copy fresh host draws itself, so the step's draws come from one
    device buffer that is refilled before every replay, from the same CPU generator and in
    the same order as an eager step would draw them: a replayed step gets the numbers the
    eager step would have had, and the CPU and CUDA fits stay the same.

    Modes: ``"eager"`` draws from :attr:`generator` (what :func:`host_randn` does);
    ``"record"`` does the same and remembers each draw's kind, shape and dtype;
    ``"capture"`` hands out views of the device buffer in the recorded order, drawing
    nothing. :meth:`refill` draws the recorded sequence and copies it to the buffer.
    """

    def __init__(self, generator):
        self.generator = generator
        self.mode = "eager"
        self.plan = []
        self._next = 0
        self._dev = None
        self._host = []
        self._events = []
        self._turn = 0

    def draw(self, kind, shape, device, dtype):
        shape = tuple(int(s) for s in shape)
        if self.mode == "capture":
            if self._next >= len(self.plan) or self.plan[self._next][:3] != (kind, shape,
                                                                              dtype):
                raise TapeMismatch("the captured step draws other noise than the recorded one")
            start, size = self.plan[self._next][3:]
            self._next += 1
            return self._dev[start:start + size].view(shape)
        fn = torch.randn if kind == "randn" else torch.rand
        out = fn(shape, generator=self.generator, dtype=dtype)
        if self.mode == "record":
            start = self.plan[-1][3] + self.plan[-1][4] if self.plan else 0
            self.plan.append((kind, shape, dtype, start, out.numel()))
        return _send(out, device)

    def start_record(self):
        self.mode, self.plan = "record", []

    def start_capture(self, device):
        """Allocate the buffers for the recorded plan and hand out its views from now on."""
        dtypes = {p[2] for p in self.plan}
        if len(dtypes) > 1:
            raise TapeMismatch("a step draws noise of more than one dtype")
        dtype = dtypes.pop() if dtypes else torch.float32
        total = self.plan[-1][3] + self.plan[-1][4] if self.plan else 0
        self._dev = torch.empty(total, dtype=dtype, device=device)
        # two host buffers in turn, so that filling one never waits for the last copy
        pin = torch.device(device).type == "cuda"
        self._host = [torch.empty(total, dtype=dtype, pin_memory=pin) for _ in range(2)]
        self._events = [None, None]
        self.mode, self._next = "capture", 0

    def end_capture(self):
        if self._next != len(self.plan):
            raise TapeMismatch("the captured step drew less noise than the recorded one")
        self.mode = "eager"

    def refill(self):
        """Draw the next step's noise, in the recorded order, into the device buffer."""
        k = self._turn
        self._turn = 1 - k
        if self._events[k] is not None:
            self._events[k].synchronize()  # the copy that last read this host buffer is done
        host = self._host[k]
        for kind, shape, dtype, start, size in self.plan:
            fn = torch.randn if kind == "randn" else torch.rand
            host[start:start + size].copy_(fn(shape, generator=self.generator,
                                              dtype=dtype).reshape(-1))
        if self._dev.device.type != "cuda":
            self._dev.copy_(host)
            return
        self._dev.copy_(host, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._events[k] = event
