"""TensorBoard event files beside ``metrics.jsonl``: the same numbers, readable by TensorBoard.

Each metrics line becomes one step (its ``epoch``; its ``time`` is the event's wall time):

- a number under its key (``train_loss``, ``test_accuracy``, ``wall_time_s``, ``state_bytes`` …);
- a per-block list under ``key/block1``, ``key/block2`` … (``residuals/block1`` is block 1's
  residual ‖Z_1 − block_1(Z_0)‖), so TensorBoard groups each quantity's blocks in one section.

``epoch`` and ``time`` are the step and wall time, not scalars; strings, booleans and nested lists
are left out. Values are written as float64 tensors (``new_style``, ``double_precision``): what
TensorBoard reads back equals ``metrics.jsonl`` exactly, not to float32.

The run loop writes them as it logs (:class:`EventLog`, on unless ``train.tensorboard`` is off);
``admm export tensorboard RUN…`` writes them for runs that have none (:func:`export`). The writer is
torch's public ``torch.utils.tensorboard.SummaryWriter``, imported only when a log is opened: this
module imports no torch (the command line's parser imports it).
"""

from __future__ import annotations

import math
import numbers
import threading
from pathlib import Path

from .rundir import read_metrics

EVENTS_GLOB = "events.out.tfevents.*"  # SummaryWriter's file names
NOT_SCALARS = ("epoch", "time")  # the step and the wall time


def scalars(m: dict) -> list[tuple[str, float]]:
    """The (tag, value) pairs of one metrics line, in the line's key order."""
    out = []
    for key, v in m.items():
        if key in NOT_SCALARS:
            continue
        if _number(v):
            out.append((key, float(v)))
        elif isinstance(v, (list, tuple)):
            out += [(f"{key}/block{t}", float(x)) for t, x in enumerate(v, 1) if _number(x)]
    return out


def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def event_files(run_dir: Path) -> list[Path]:
    return sorted(Path(run_dir).glob(EVENTS_GLOB))


def clear_events(run_dir: Path) -> None:
    """Remove the event files of an earlier life of the run (a fresh start, an export)."""
    for p in event_files(run_dir):
        p.unlink(missing_ok=True)


def _quiet_writer_thread(args) -> None:
    """``threading.excepthook`` (Python's public hook) for the writer's own thread: SummaryWriter
    writes from a thread of TensorBoard's that keeps a write error (a full disk) for the caller's next
    ``flush`` (where the run loop reports it in one line, as any write error) and then re-raises it,
    which Python's default hook prints as a traceback. Only that error of that thread is silenced;
    tests/test_reliability_load.py's full-disk sweep test fails if TensorBoard changes this."""
    if isinstance(args.exc_value, OSError) and type(args.thread).__module__.startswith("tensorboard."):
        return
    _default_hook(args)


_default_hook = threading.excepthook


class EventLog:
    """A run's event writer: :meth:`write` each metrics line as the loop appends it (flushed, so a
    TensorBoard watching the folder sees it at once, and a kill loses nothing written)."""

    def __init__(self, log_dir: Path):
        from .profile import phase  # imports torch

        self.phase = phase
        with phase("tensorboard"):  # the first one imports the writer
            from torch.utils.tensorboard import SummaryWriter  # torch's public writer

            self.writer = SummaryWriter(str(log_dir), flush_secs=3600)
        if threading.excepthook is not _quiet_writer_thread:
            global _default_hook
            _default_hook = threading.excepthook
            threading.excepthook = _quiet_writer_thread

    def write(self, m: dict) -> None:
        step, wall = int(m["epoch"]), m.get("time")
        wall = float(wall) if _number(wall) and math.isfinite(wall) else None
        with self.phase("tensorboard"):  # the profiled cost (experiments/tensorboard_cost.py)
            for tag, v in scalars(m):
                self.writer.add_scalar(tag, v, step, walltime=wall, new_style=True, double_precision=True)
            self.writer.flush()

    def close(self) -> None:
        try:
            self.writer.close()
        except OSError:  # a full disk at the very end: the run's own error (if any) is the one to report
            pass


def open_for_run(run_dir: Path, start: int) -> EventLog:
    """The run loop's log after a (re)start at epoch ``start`` (0: afresh): an earlier life's event
    files go, and a resume first writes the metrics lines it keeps (those up to its checkpoint).

    So the folder's events are always metrics.jsonl's, one value per step, for every reader: a
    resume's dropped lines are not left for the reader to purge (``SummaryWriter(purge_step=…)``
    relies on the reader honouring it; TensorBoard's legacy ``EventAccumulator`` does not for
    tensor summaries), and a run from before event files existed gets the whole run. It costs
    about a millisecond per kept line, once per resume.
    """
    run_dir = Path(run_dir)
    clear_events(run_dir)
    log = EventLog(run_dir)
    if start:
        for m in read_metrics(run_dir):
            log.write(m)
    return log


def export(run_dir: Path, out_dir: Path | None = None) -> tuple[int, int]:
    """Write ``run_dir``'s ``metrics.jsonl`` as event files into ``out_dir`` (default: the run
    directory itself), replacing the event files there; returns (lines, scalars) written."""
    out_dir = Path(out_dir or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clear_events(out_dir)
    lines = read_metrics(run_dir)
    log = EventLog(out_dir)
    try:
        for m in lines:
            log.write(m)
    finally:
        log.close()
    return len(lines), sum(len(scalars(m)) for m in lines)
