"""Running trials: the Optuna objective (one run directory per trial, pruning through
``train``'s ``on_progress``), one worker pulling trials to the budget, and ``run_sweep`` starting
several."""

from __future__ import annotations

import errno
import fcntl
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..errors import check
from ..network import summarize, train
from ..rundir import DISK_FULL, read_json, read_metrics, unique_run_dir, write_json
from .space import apply_params, fmt_value
from .study import (
    SweepSpec,
    _retry,
    create_or_resume,
    default_storage,
    fail_dead_trials,
    load_study,
    open_storage,
    remaining,
    worker_study,
)


class Interrupted(Exception):
    """SIGTERM/SIGINT during a trial: the trial is failed (its settings queued again) and the sweep ends."""

    def __init__(self, number: int):
        super().__init__(f"trial {number} stopped by a signal")
        self.number = number


def make_objective(spec: SweepSpec, root: Path, should_stop=None, on_epoch=None):
    """The Optuna objective: one run directory per trial, pruning through ``on_progress``."""
    import optuna

    base = spec.base_config()
    dims = spec.dims
    maximize = spec.direction == "maximize"

    def objective(trial: optuna.Trial) -> float:
        params = {d.name: d.suggest(trial) for d in dims}
        cfg = apply_params(base, params)
        run_dir = unique_run_dir(f"{spec.name}-t{trial.number}", root)
        run_dir.mkdir(parents=True, exist_ok=True)  # unique_run_dir creates it (atomically)
        for k, v in (("run_dir", str(run_dir)), ("pid", os.getpid()), ("host", socket.gethostname())):
            trial.set_user_attr(k, v)
        tags = [f"study:{spec.name}", f"trial:{trial.number}", f"method:{spec.method}"]
        if trial.user_attrs.get("preset"):
            tags.append("preset-settings")
        note = ", ".join(f"{k}={fmt_value(v)}" for k, v in params.items())
        write_json(run_dir / "meta.json", {"name": f"{spec.name} · trial {trial.number}", "tags": tags, "note": note})
        pruned = {"epoch": None}

        def on_progress(epochs_done: float, m):
            if m is None or m["epoch"] < 1:  # epoch 0 is the initialisation
                return
            acc = m["test_accuracy"]
            trial.report(acc if maximize else 1.0 - acc, m["epoch"])
            if on_epoch:
                on_epoch(trial.number, m)
            if m["epoch"] < cfg.train.epochs and trial.should_prune():
                pruned["epoch"] = m["epoch"]

        def stop() -> bool:
            return pruned["epoch"] is not None or bool(should_stop and should_stop())

        diverged = None
        try:
            summary = train(cfg, run_dir, on_progress=on_progress, should_stop=stop)
        except FloatingPointError as e:  # a diverged trial is a result (a bad one), not an error
            diverged = str(e)
            summary = summarize(cfg, read_metrics(run_dir), "diverged")
        except OSError as e:  # a full disk: the worker stops; run_worker queues these settings again
            if e.errno in DISK_FULL:
                e.trial_number = trial.number
            raise
        if pruned["epoch"] is not None:
            summary["status"] = "pruned"
            st = read_json(run_dir / "status.json", {}) or {}
            write_json(run_dir / "status.json", {**st, "state": "pruned", "pruned_at_epoch": pruned["epoch"]})
        elif summary["status"] == "stopped":
            raise Interrupted(trial.number)
        value = summary.get(spec.objective)
        if value is None:
            value = 0.0 if maximize else math.inf  # never reached the target time / no evaluation
        summary["sweep"] = {"study": spec.name, "trial": trial.number, "objective": spec.objective, "value": value}
        summary["sweep"]["params"] = params
        if diverged:
            summary["sweep"]["diverged"] = diverged
            trial.set_user_attr("diverged", diverged)
        write_json(run_dir / "summary.json", summary)
        if pruned["epoch"] is not None:
            raise optuna.TrialPruned(f"pruned at epoch {pruned['epoch']}")
        return float(value)

    return objective


class BudgetClaim:
    """``flock`` on ``<runs root>/.sweep-<name>.lock``: held from a worker's budget check until its
    next trial exists in the study, so workers sharing a runs root never start one trial too many.
    Workers on other hosts (a PostgreSQL study) are not covered: each may overshoot by one."""

    def __init__(self, root: Path, name: str):
        self.path = Path(root) / f".sweep-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock"
        self.f = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.f is not None:
            self.f.close()  # closing releases the lock
            self.f = None


def ready_file(root: Path, name: str, worker: int) -> Path:
    """Where extra worker ``worker`` of study ``name`` says it is ready to run a trial."""
    return Path(root) / f".sweep-{name}-worker{worker}.ready"


def wait_for_workers(children: list, root: Path, name: str, should_stop=None, timeout_s: float = 180.0) -> None:
    """Wait until every extra worker is ready (or has exited, or a stop is asked, or ``timeout_s``
    passed). Without it the
    first worker, whose imports are done, could run a short study's whole budget while the others
    still import torch: ``--jobs N`` would be one worker."""
    deadline = time.monotonic() + timeout_s
    waiting = list(enumerate(children, start=1))
    while waiting and time.monotonic() < deadline and not (should_stop and should_stop()):
        waiting = [(i, c) for i, c in waiting if c.poll() is None and not ready_file(root, name, i).exists()]
        if waiting:
            time.sleep(0.2)
    for i, _ in enumerate(children, start=1):
        ready_file(root, name, i).unlink(missing_ok=True)


def run_worker(name: str, storage, root: Path, should_stop=None, log=print, worker: int = 0) -> None:
    """Pull trials of study ``name`` until its budget is met (one process; others may run beside it)."""
    import optuna

    create_or_resume(None, name, storage)  # refuses a study that does not exist
    study, spec = worker_study(name, storage, worker)
    if worker:  # an extra worker, its imports (torch) done: the first one may start
        Path(root).mkdir(parents=True, exist_ok=True)  # an RDB study's runs folder may not exist yet
        ready_file(root, name, worker).touch()
    failed = fail_dead_trials(study)
    if failed:
        log(f"study {name}: trial(s) {failed} of a dead worker marked failed; their settings are queued again")
    n = remaining(study, spec.trials)
    if n == 0:
        return

    def on_epoch(number, m):
        log(f"  trial {number} epoch {m['epoch']}: test {m['test_accuracy']:.4f} ({m['wall_time_s']:.1f} s)")

    def done(study, t):
        v = "—" if t.value is None else f"{t.value:.4f}"
        log(f"trial {t.number} {t.state.name.lower()}: {spec.objective} = {v} {t.params}")

    # our own log lines report every trial; Optuna's warning would repeat a stop as a traceback
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    objective = make_objective(spec, root, should_stop, on_epoch)
    claim = BudgetClaim(root, name)

    def claimed(trial):
        claim.release()  # the trial exists (RUNNING): the next worker counts it
        return objective(trial)

    try:
        # one trial per optimize call, the budget checked and the trial created under one lock: parallel
        # workers on this host never run past the budget (Optuna's MaxTrialsCallback let each of them
        # pass the check at once and start one trial too many)
        while True:
            claim.acquire()
            try:
                if remaining(study, spec.trials) == 0:
                    break
                study.optimize(claimed, n_trials=1, catch=(), callbacks=[done])
            finally:
                claim.release()
    except Interrupted as e:  # Optuna has marked the trial failed; keep its settings for the resume
        _retry()(study, study.trials[e.number])
        log(f"study {name}: stopped during trial {e.number} (failed, settings queued again); resume with --name {name}")
        raise
    except OSError as e:
        number = getattr(e, "trial_number", None)
        if number is None:
            raise
        try:  # the study database may sit on the full disk too: then the next worker's fail_dead_trials does it
            _retry()(study, study.trials[number])
        except Exception:  # noqa: BLE001 - sqlite "database or disk is full" and the like
            pass
        log(f"study {name}: trial {number} stopped (failed, settings queued again); resume with --name {name}")
        raise
    except Exception as e:  # the study database itself on a full disk: one line, not an SQL traceback
        if "disk is full" not in str(e):
            raise
        raise OSError(
            errno.ENOSPC,
            "No space left on device (the study database)",
            str(getattr(storage, "url", "the study database")),
        ) from None


def run_sweep(
    spec: SweepSpec | None,
    name: str,
    storage_url: str | None,
    root: Path,
    jobs: int = 1,
    budget=None,
    should_stop=None,
    log=print,
):
    """Create or resume study ``name`` and run it to its budget with ``jobs`` worker processes."""
    check(isinstance(jobs, int) and jobs >= 1, "--jobs", jobs, "must be a positive integer")
    root = Path(root)
    storage = open_storage(storage_url, root)
    study, spec = create_or_resume(spec, name, storage, budget)
    url = storage_url or default_storage(root)
    children = []
    for i in range(jobs - 1):  # extra workers: the same command on the same study
        cmd = [sys.executable, "-m", "admm_core", "sweep", "--name", name, "--storage", url, "--worker", str(i + 1)]
        env = {**os.environ, "ADMM_RUNS": str(root)}
        children.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
    try:
        wait_for_workers(children, root, name, should_stop)
        run_worker(name, storage, root, should_stop, log)
    finally:
        for c in children:
            c.wait()
    return load_study(name, storage), spec
