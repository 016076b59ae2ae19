"""Shared set-up for the teaching notebooks: small mode, run folders, a few read-outs.

``ADMM_SMALL=1`` (what CI sets) shrinks every experiment so a notebook runs top to bottom
in a couple of minutes on a laptop CPU; unset, the notebooks run the real experiments
(MNIST from ``ADMM_DATA``, default ``../shared/data``).

The notebooks import it as ``from admm_core import teaching``.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from .network import train
from .rundir import default_runs_dir, read_metrics

SMALL = os.environ.get("ADMM_SMALL", "").strip().lower() not in ("", "0", "false", "no")

if SMALL:
    # Small mode trains tiny networks: handing such small matrices to several threads costs more
    # than it saves, and on a busy 2-core machine (CI) extra threads spin and slow everything
    # down by up to 10× (measured). Full mode keeps PyTorch's default.
    torch.set_num_threads(1)


def pick(full, small):
    """``small`` in small mode, ``full`` otherwise."""
    return small if SMALL else full


def runs_root(notebook: str) -> Path:
    """Where a notebook's runs go: a fresh temporary folder in small mode; in full mode the
    engine's runs folder (``$ADMM_RUNS``, default ``runs/``), where the dashboard lists them
    beside runs started elsewhere. Notebooks prefix their run names with ``nbNN-``."""
    if SMALL:
        path = Path(tempfile.mkdtemp(prefix=f"admm-nb{notebook}-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)  # removed when the kernel exits
        return path
    path = default_runs_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(cfg, root: Path, name: str, time_budget_s: float | None = None, quiet: bool = False):
    """Train ``cfg`` into ``root/name`` and return (summary, metrics).

    With ``time_budget_s`` the run is stopped once that much wall time has passed since its
    first epoch began (loading data and building the network do not count; at least one epoch
    is finished). It keeps the evaluations made so far. A run that diverges ends with summary
    status "diverged" (the error in status.json names the epoch and quantity); its metrics
    stay on disk.
    """
    run_dir = Path(root) / name
    t0 = time.time()
    clock = {"start": None, "epochs": 0}

    def on_progress(epochs_done, metrics):
        if clock["start"] is None:  # first call: the initial evaluation, just before epoch 1
            clock["start"] = time.time()
        if metrics is not None:
            clock["epochs"] = metrics["epoch"]

    def should_stop():
        return clock["epochs"] >= 1 and time.time() - clock["start"] > time_budget_s

    summary = train(cfg, run_dir, on_progress=on_progress, should_stop=should_stop if time_budget_s else None)
    metrics = read_metrics(run_dir)
    if not quiet:
        acc = summary.get("test_accuracy")
        print(
            f"{name:>28}: {summary['epochs']:>3} epochs, test accuracy {acc:.3f}, "
            f"{summary['wall_time_s']:.1f} s training ({time.time() - t0:.1f} s with evaluation)"
        )
    return summary, metrics


def h_norm(residuals) -> float:
    """‖h‖: the constraint violation of all blocks together, √(Σ_t r_t²) with r_t the RMS
    per-sample residual ‖Z_t − block_t(Z_{t−1})‖ of block t."""
    return math.sqrt(sum(r * r for r in residuals))


def mib(n_bytes) -> float:
    return (n_bytes or 0) / 2**20
