"""Where an epoch's seconds go: named, nestable phases timed by the wall clock.

The training code marks its phases (``with phase("z_sweep"):``); they cost one attribute test
each while profiling is off. :func:`profiling` turns it on for a block of code and returns a
:class:`PhaseTimes` whose ``exclusive`` seconds add up to the time spent inside phases (a phase
nested in another is subtracted from its parent), so a table of them says where every second
went. On a GPU each phase boundary synchronises the device, so kernels are charged to the phase
that launched them (which slows a profiled run a little; timings elsewhere are unaffected).

    with profiling() as times:
        network.train(cfg, run_dir)
    times.exclusive  # {"z_sweep": 41.2, "z_sweep.block3": 2.1, "theta": 30.5, "eval": 3.3, ...}
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext

import torch


class PhaseTimes:
    """Inclusive and exclusive seconds per phase name, and how often each was entered."""

    def __init__(self, sync_cuda: bool = False):
        self.inclusive: dict[str, float] = defaultdict(float)
        self.exclusive: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        # exclusive seconds by the outermost phase they ran under: {"epoch": {"z_sweep": …}, "eval": {…}}
        # (a phase also entered inside a per-call one, e.g. a Z-update of the evaluation's diagnostics,
        # is then not charged to the epoch)
        self.within: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._stack: list[list] = []  # [name, start, seconds spent in children]
        self.sync_cuda = sync_cuda

    def _sync(self) -> None:
        if self.sync_cuda:
            torch.cuda.synchronize()

    @contextmanager
    def enter(self, name: str):
        self._sync()
        frame = [name, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._sync()
            top = self._stack[0][0]
            self._stack.pop()
            spent = time.perf_counter() - frame[1]
            self.inclusive[name] += spent
            self.exclusive[name] += spent - frame[2]
            self.within[top][name] += spent - frame[2]
            self.calls[name] += 1
            if self._stack:
                self._stack[-1][2] += spent


_ACTIVE: PhaseTimes | None = None


def phase(name: str):
    """A context that charges its wall time to ``name`` while profiling is on (else a no-op)."""
    return _ACTIVE.enter(name) if _ACTIVE is not None else nullcontext()


def active() -> bool:
    return _ACTIVE is not None


@contextmanager
def profiling(sync_cuda: bool | None = None):
    """Profile the enclosed code; yields the :class:`PhaseTimes` being filled."""
    global _ACTIVE
    saved = _ACTIVE
    _ACTIVE = PhaseTimes(torch.cuda.is_available() if sync_cuda is None else sync_cuda)
    try:
        yield _ACTIVE
    finally:
        _ACTIVE = saved
