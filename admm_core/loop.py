"""The one run loop: every run, of every kind (:mod:`admm_core.spec.kinds`), lives through :func:`run_loop`.

The loop owns the run's life: the claim and ``status.json`` (:class:`~admm_core.status.RunStatus`:
running → finished / stopped / diverged / crashed), ``config.json`` and ``metrics.jsonl``, the stop
poll, the divergence test's verdict, the checkpoint cadence, resume, the summary and the crash
record. What is trained is a :class:`Task`:

    point = task.resume_point(run_dir)        # resume: what to continue from (None: start afresh)
    wall  = task.setup(run_dir, status, resumed)   # data, network / trainer (may take long)
    epoch, wall = task.load(run_dir, point)   # resume: the state the checkpoint holds
    task.evaluate(epoch)                      # the metrics line (epoch 0 first, then every eval_every)
    task.run_epoch(epoch, progress)           # one epoch (DeepFacto: one iteration)
    task.diverged(m)                          # why this line says the run diverged, or None
    task.save(run_dir, epoch, wall)           # every checkpoint_every epochs and at the end
    task.finish(run_dir, status, metrics, wall)   # the end-of-run evaluation hook -> summary

Each metrics line also goes to TensorBoard event files beside ``metrics.jsonl`` (:mod:`admm_core.tboard`)
unless the task's ``tensorboard`` is off.

:class:`admm_core.network.NetworkTask` trains a split network by a method (the engine's runs);
:class:`admm_core.deepfacto.run.DeepFactoTask` trains DeepFacto and runs its attribute SVMs and
face verification as its end-of-run hook.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from . import tboard
from .profile import phase
from .rundir import append_metrics, read_metrics, reset_metrics, write_text_atomic
from .status import RunStatus

STALE = ("summary.json", "error.txt")  # files of an earlier end of the run, removed when it (re)starts


class StopRun(Exception):
    """Raised inside the loop when a stop was requested (SIGTERM / SIGINT / should_stop)."""


class Diverged(Exception):
    """Raised inside the loop when the run diverged; the message names the epoch and quantity."""


class Task:
    """What a run trains; the defaults are those of a task with nothing to add at that step."""

    kind = "network"  # admm_core.spec.kinds.KINDS: recorded in status.json
    unit = "epoch"  # what one step of the loop is called in messages
    epochs = 1  # steps in all
    eval_every = 1  # a metrics line every this many steps (and after the last)
    checkpoint_every = 1  # a checkpoint every this many steps (and after the last)
    lead = True  # writes config, metrics, status and summary (False: a rank other than 0)
    error_file = "error.txt"  # where a crash's traceback goes
    tensorboard = True  # TensorBoard event files beside metrics.jsonl (admm_core.tboard)
    stale: tuple = STALE
    should_stop: Callable[[], bool] | None = None  # set by the loop: for tasks that poll inside long work

    def status_fields(self) -> dict:
        """Fields of status.json from the start (besides kind)."""
        return {}

    def resume_point(self, run_dir: Path):
        """Before the run is claimed: what a resume continues from (checked), None to start afresh."""
        return None

    def config_text(self, resumed: bool) -> str | None:
        """config.json's text (None: leave the file as it is)."""
        return None

    def setup(self, run_dir: Path, status: RunStatus, resumed: bool) -> float:
        """Build what trains; returns the training seconds it already counts (0 for most)."""
        return 0.0

    def load(self, run_dir: Path, point) -> tuple[int, float]:
        """The checkpointed state (after :meth:`setup`): (epochs done, training seconds)."""
        raise NotImplementedError

    def observe(self, lines: list[dict]) -> None:
        """The metrics lines the run has before its first new step (the divergence test's history)."""

    def before_epoch(self, epoch: int) -> dict:
        """Status fields for the step about to run (written at once when not empty)."""
        return {}

    def run_epoch(self, epoch: int, progress: Callable[[float], None]) -> None:
        raise NotImplementedError

    def evaluate(self, epoch: int) -> dict:
        """The measured part of the metrics line after ``epoch`` steps."""
        raise NotImplementedError

    def diverged(self, m: dict) -> str | None:
        return None

    def report(self, m: dict) -> None:
        """A metrics line was written (a log line, for tasks that print one)."""

    def save(self, run_dir: Path, epoch: int, wall: float) -> None:
        raise NotImplementedError

    def finish(self, run_dir: Path, status: RunStatus, metrics: list[dict], wall: float) -> tuple[dict, dict]:
        """The end-of-run hook: (summary, extra status fields)."""
        raise NotImplementedError

    def finished(self, run_dir: Path) -> None:
        """After the finished status is on disk (e.g. drop a resume file no longer needed)."""

    def summary(self, metrics: list[dict], state: str) -> dict:
        """The summary of a run that ended early (stopped, diverged)."""
        return {"status": state}


def run_loop(
    task: Task,
    run_dir: str | Path,
    *,
    resume: bool = False,
    should_stop: Callable[[], bool] | None = None,
    on_progress: Callable[[float, dict | None], None] | None = None,
) -> dict:
    """Run ``task`` into ``run_dir`` (resuming from its checkpoint if asked); returns the summary.

    ``on_progress(epochs_done_as_float, metrics_or_None)`` is called during steps (when the task
    reports progress) and after each metrics line. ``should_stop()`` is polled before each step
    and by the task inside long work; when true the run ends as 'stopped' (its last checkpoint
    remains, so it can be resumed). Under torchrun every rank runs this loop (the task's ``lead``
    writes the files), and ``should_stop`` must then be a poll all ranks agree on.
    """
    run_dir = Path(run_dir)
    point = task.resume_point(run_dir) if resume else None  # a refused resume changes nothing
    task.should_stop = should_stop
    lead, epochs = task.lead, task.epochs
    status = RunStatus(run_dir, epochs, write=lead, kind=task.kind, **task.status_fields())
    events = None  # the TensorBoard log, once the start epoch is known
    try:  # from here every failure, a write on a full disk included, ends the run's status
        text = task.config_text(point is not None)
        if lead and text is not None:
            write_text_atomic(run_dir / "config.json", text)
        if lead and point is None:
            reset_metrics(run_dir, None, task.stale)
        wall = task.setup(run_dir, status, point is not None)
        start = 0
        if point is not None:
            start, wall = task.load(run_dir, point)
            if lead:  # the lines logged after the checkpoint go
                reset_metrics(run_dir, keep_through=start, stale=task.stale)
        if lead and task.tensorboard:
            events = tboard.open_for_run(run_dir, start)
        t_start = time.time()

        def log(epoch: int) -> dict:
            with phase("eval"):
                m = {"epoch": epoch, "wall_time_s": wall, **task.evaluate(epoch), "time": time.time()}
            if lead:
                with phase("metrics"):
                    append_metrics(run_dir, m)
                if events is not None:
                    events.write(m)
            if on_progress:
                on_progress(float(epoch), m)
            return m

        if start == 0:
            m0 = log(0)
            task.observe([m0])
            task.report(m0)
        else:
            task.observe(read_metrics(run_dir))
        for epoch in range(start + 1, epochs + 1):
            if should_stop and should_stop():
                raise StopRun()

            def progress(frac, epoch=epoch):
                if should_stop and should_stop():
                    raise StopRun()
                status.update(progress=(epoch - 1 + frac) / epochs, epoch=epoch - 1)
                if on_progress:
                    on_progress(epoch - 1 + frac, None)

            extra = task.before_epoch(epoch)
            status.update(force=bool(extra), epoch=epoch - 1, progress=(epoch - 1) / max(epochs, 1), **extra)
            t0 = time.perf_counter()
            with phase("epoch"):
                task.run_epoch(epoch, progress)
            wall += time.perf_counter() - t0
            if epoch % task.eval_every == 0 or epoch == epochs:
                m = log(epoch)
                why = task.diverged(m)
                if why:
                    raise Diverged(f"{task.unit} {epoch}: {why}")
                task.report(m)
            if epoch % task.checkpoint_every == 0 or epoch == epochs:
                with phase("checkpoint"):
                    task.save(run_dir, epoch, wall)
            with phase("status"):
                status.update(force=True, epoch=epoch, progress=epoch / max(epochs, 1))
        if should_stop and should_stop():
            raise StopRun()
        summary, fields = task.finish(run_dir, status, read_metrics(run_dir), wall)
        done = status.finish(summary, **{"elapsed_s": time.time() - t_start, **fields})
        task.finished(run_dir)  # only now: a summary that could not be written leaves the resume point
        return done
    except StopRun:
        return status.stop(task.summary(read_metrics(run_dir), "stopped"))
    except Diverged as e:
        return status.end(task.summary(read_metrics(run_dir), "diverged"), state="diverged", error=str(e))
    except BaseException as e:
        status.crash(e, error_file=task.error_file)
        raise
    finally:
        if events is not None:
            events.close()
