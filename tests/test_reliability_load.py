"""Reliability under load and faults (issue #36): a full disk, a dashboard killed under live runs,
two dashboards on one runs folder, parallel sweep workers.

Each case is made for real where the machine allows it (a size-limited tmpfs mounted by the
test, SIGKILL of a real Streamlit server, four sweep processes on one SQLite file) and every
test ends by reading the finished runs back: metrics, summary and checkpoint intact.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import cli_run

from admm_core import runs
from admm_core.config import RunConfig
from admm_core.runs import read_json, read_metrics, train, verify_checkpoint

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("ADMM_DATA", "")) / "lfw"
HAVE_LFW = (DATA / "lfw-deepfunneled-160").is_dir() and (DATA / "lfwa_att_40.csv").is_file()


def tiny(method="block-admm", epochs=2, **kw) -> RunConfig:
    return RunConfig(method=method).replace(
        data__train_limit=200, data__test_limit=100, model__hidden=(32, 16), train__epochs=epochs, **kw
    )


def _wait(pred, timeout=60.0, every=0.1):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return pred()


def assert_intact(run_dir: Path, epochs: int, state: str = "finished") -> None:
    """Nothing lost: one metrics line per epoch 0..epochs, the summary and a loadable checkpoint of the last epoch."""
    ms = read_metrics(run_dir)
    assert [m["epoch"] for m in ms] == list(range(epochs + 1)), [m["epoch"] for m in ms]
    summary = read_json(run_dir / "summary.json")
    assert summary and summary["status"] == state and summary["epochs"] == epochs
    assert summary["test_accuracy"] == ms[-1]["test_accuracy"]
    assert verify_checkpoint(run_dir / "checkpoint.pt")["epoch"] == epochs
    assert read_json(run_dir / "status.json")["state"] == state
    assert not list(run_dir.glob("*.tmp"))


# --- a full disk -------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs mounted here and removed afterwards (skipped where mounting is not allowed:
    :func:`test_enospc_during_a_checkpoint_keeps_the_last_good_one` covers the protection there)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a size-limited tmpfs needs root (the ENOSPC simulation test covers the protection)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount -t tmpfs not permitted here ({r.stderr.strip()}); the ENOSPC simulation test covers it")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` to the last byte, then free ``leave`` bytes; returns the filler (delete it = space back)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        block = b"\0" * (1 << 16)
        while True:
            try:
                if f.write(block) < len(block):
                    break
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def test_run_on_a_full_disk_stops_with_one_line_and_resumes_when_space_is_back(small_disk):
    """Resumed from epoch 2 to 4 with 64 KiB free (a checkpoint is 140 KiB): one line naming the
    disk, status crashed with the same line, the epoch-2 checkpoint byte-identical; space back,
    the same resume finishes 4 epochs with nothing lost."""
    run = small_disk / "runs" / "r"
    train(tiny(epochs=2), run)
    good = (run / "checkpoint.pt").read_bytes()
    filler = fill(small_disk, leave=64 << 10)
    rc, err = cli_run(["train", "--resume", str(run), "--epochs", "4", "--quiet"])
    assert rc == 1 and "Traceback" not in err, err
    (line,) = [ln for ln in err.strip().splitlines() if not ln.startswith("run dir:")]
    assert line.startswith("error: disk full: No space left on device writing ") and "resume" in line, line
    assert (run / "checkpoint.pt").read_bytes() == good and verify_checkpoint(run / "checkpoint.pt")["epoch"] == 2
    st = read_json(run / "status.json")
    assert st["state"] == "crashed" and st["error"].startswith("disk full:"), st
    assert not list(run.glob("*.tmp"))
    assert runs.run_status(run)["state"] == "crashed"  # not 'running' for ever: the claim was released

    filler.unlink()  # space is back
    rc, err = cli_run(["train", "--resume", str(run), "--epochs", "4", "--quiet"])
    assert rc == 0, err
    assert_intact(run, 4)


def test_sweep_trial_on_a_full_disk_stops_and_the_study_resumes_to_its_budget(small_disk, tmp_path):
    """A sweep process (the CLI) whose runs folder fills up during trial 0: one line, the trial
    failed with its settings queued again and its run keeping its last good checkpoint; space
    back, the same command completes the budget and every finished trial's run is intact."""
    import optuna
    from optuna.trial import TrialState

    root = small_disk / "runs"
    root.mkdir()
    storage = f"sqlite:///{tmp_path / 'sweeps.db'}"  # the study database on another disk
    args = ["--preset", "digits-mlp", "--method", "block-admm", "--trials", "2", "--epochs", "20", "--name", "full"]
    args += ["--space", "beta=log:0.5:2", "--pruner", "none", "--train-limit", "200", "--test-limit", "100"]
    args += ["--storage", storage]
    env = {**os.environ, "ADMM_RUNS": str(root), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "admm_core", "sweep", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    victim = _wait(lambda: next((d for d in root.glob("*-full-t0") if len(read_metrics(d)) >= 3), None), 240, 0.05)
    assert victim is not None, proc.communicate(timeout=5)
    filler = fill(small_disk)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: disk full: No space left on device"), err
    assert "trial 0 stopped (failed, settings queued again)" in err
    st = read_json(victim / "status.json")
    assert st["state"] == "crashed" and st["error"].startswith("disk full:"), st
    ck = verify_checkpoint(victim / "checkpoint.pt")  # the last good one, whichever epoch it was
    assert 1 <= ck["epoch"] < 20 and all(m["epoch"] <= ck["epoch"] + 1 for m in read_metrics(victim))

    filler.unlink()
    done = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr
    study = optuna.load_study(study_name="full", storage=storage)
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == 2 and states.count(TrialState.FAIL) == 1, states
    failed = next(t for t in study.trials if t.state == TrialState.FAIL)
    again = [t for t in study.trials if t.state == TrialState.COMPLETE and t.params == failed.params]
    assert again, "the failed trial's settings were not run again"
    for t in study.trials:
        if t.state == TrialState.COMPLETE:
            assert_intact(Path(t.user_attrs["run_dir"]), 20)


@pytest.mark.skipif(not HAVE_LFW, reason=f"LFW/LFWA not found under {DATA}")
def test_deepfacto_evaluation_on_a_full_disk_changes_nothing_and_reruns(small_disk, tmp_path, monkeypatch):
    """`admm deepfacto evaluate` of a finished run whose disk is full: one line, attributes.json,
    summary.json, config.json and checkpoint.pt byte-identical (written as one set); space back,
    the same command rewrites them."""
    from admm_core.cli import main

    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "cache"))
    run = small_disk / "df"
    argv = ["train", "--preset", "lfwa-deepfacto", "--rank", "4", "--epochs", "2", "--out", str(run), "--device", "cpu"]
    for s in ("data_limit=160", "image_size=32", "backbone_epochs=1", "finetune_iters=1", "train_limit=48"):
        argv += ["--set", s]
    for s in ("eval_images=30", "svm_train_limit=80", "batch_size=32"):
        argv += ["--set", s]
    assert main(argv) == 0
    names = ("attributes.json", "summary.json", "config.json", "checkpoint.pt", "metrics.jsonl")
    before = {n: (run / n).read_bytes() for n in names}
    # room for the largest of the three new files (attributes.json) and one page more, not for all
    # three at once: written one after the other (each replacing its old one) they would fit
    page = 4096
    leave = (-(-len(before["attributes.json"]) // page) + 1) * page
    filler = fill(small_disk, leave=leave)
    rc, err = cli_run(["deepfacto", "evaluate", "--run", str(run), "--set", "svm_c=0.05"])
    assert rc == 1 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith("error: disk full:"), err
    assert {n: (run / n).read_bytes() for n in names} == before
    assert not list(run.glob("*.tmp"))
    filler.unlink()
    rc, err = cli_run(["deepfacto", "evaluate", "--run", str(run), "--set", "svm_c=0.05"])
    assert rc == 0, err
    summary = read_json(run / "summary.json")
    assert summary["status"] == "finished" and summary["svm_c"] == [0.05] and "evaluated" in summary
    assert read_json(run / "config.json")["deepfacto"]["svm_c"] == [0.05]
    assert (run / "checkpoint.pt").read_bytes() == before["checkpoint.pt"]
    assert (run / "metrics.jsonl").read_bytes() == before["metrics.jsonl"]


def test_enospc_during_a_checkpoint_keeps_the_last_good_one(tmp_path, monkeypatch):
    """No mount needed (CI anywhere): the checkpoint's write fails with ENOSPC half-way. One
    line, status crashed, the previous checkpoint byte-identical; the resume then finishes."""
    run = tmp_path / "r"
    train(tiny(epochs=2), run)
    good = (run / "checkpoint.pt").read_bytes()
    real_write = runs._KeepWriteError.write

    def full_after_half(self, b):
        self.n = getattr(self, "n", 0) + len(b)
        if self.n > len(good) // 2:
            self.error = OSError(errno.ENOSPC, "No space left on device")
            raise self.error
        return real_write(self, b)

    monkeypatch.setattr(runs._KeepWriteError, "write", full_after_half)
    rc, err = cli_run(["train", "--resume", str(run), "--epochs", "3", "--quiet"])
    assert rc == 1 and "Traceback" not in err
    (line,) = [ln for ln in err.strip().splitlines() if not ln.startswith("run dir:")]
    assert line.startswith("error: disk full: No space left on device writing ") and "checkpoint.pt" in line, line
    assert (run / "checkpoint.pt").read_bytes() == good and verify_checkpoint(run / "checkpoint.pt")["epoch"] == 2
    st = read_json(run / "status.json")
    assert st["state"] == "crashed" and st["error"].startswith("disk full:")
    assert not list(run.glob("*.tmp"))
    monkeypatch.setattr(runs._KeepWriteError, "write", real_write)
    rc, err = cli_run(["train", "--resume", str(run), "--epochs", "3", "--quiet"])
    assert rc == 0, err
    assert_intact(run, 3)


def test_a_set_of_files_is_replaced_together_or_not_at_all(tmp_path, monkeypatch):
    """write_files_atomic: ENOSPC on the second file leaves the first one unchanged too."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("old a")
    b.write_text("old b")
    real_fsync = os.fsync
    calls = []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError) as e:
        runs.write_files_atomic({a: "new a", b: "new b"})
    assert e.value.filename == str(b)
    assert (a.read_text(), b.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
