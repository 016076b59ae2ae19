"""A folder's runs as rows, their stop and their delete (:mod:`admm_core.runs`), shared by the
dashboard's Runs page and ``admm runs`` / ``admm stop`` / ``admm delete``: the commands run on real
run directories, with their refusals (a pid that is not a worker's is never signalled; nothing
outside the runs root, and no symbolic link, is deleted). The page's own drawing: tests/test_app.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import cli_call, tiny

from admm_core import child_env
from admm_core import runs as R
from admm_core.rundir import read_json, read_metrics
from admm_core.spec.resources import human


def test_a_resumed_run_keeps_its_first_start(tmp_path):
    from admm_core.status import RunStatus

    first = RunStatus(tmp_path / "r", epochs=2)
    t0 = first.status["started"]
    first.stop({})  # the run is stopped, to be resumed
    time.sleep(0.01)
    again = RunStatus(tmp_path / "r", epochs=2)  # the resume's writer
    try:
        status = read_json(tmp_path / "r" / "status.json")
        assert status["first_started"] == pytest.approx(t0) and status["started"] > t0
        assert R.started_at(status) == pytest.approx(t0)  # what the Runs page calls "started"
    finally:
        again.stop({})
    fresh = RunStatus(tmp_path / "new", epochs=2)
    try:
        assert "first_started" not in fresh.status  # a new run: its start is its only one
    finally:
        fresh.stop({})


def test_done_epochs_reads_the_metrics_only_when_the_status_does_not_say():
    asked = []

    def lines():
        asked.append(1)
        return [{"epoch": 1}, {"epoch": 4}]

    assert R.done_epochs({"state": "running", "epoch": 3}, lines) == 3 and not asked
    assert R.done_epochs({"state": "running", "epoch": 0}, lines) == 4 and asked  # a resume before it reports
    assert R.done_epochs({}, []) == 0


def test_duration_is_the_elapsed_time_else_start_to_last_update():
    assert R.duration_text({"elapsed_s": 3725}) == "1 h 02 min"
    assert R.duration_text({"started": 100.0, "updated": 165.0}) == "1 min 05 s"
    assert R.duration_seconds({"started": 100.0, "updated": 165.0}) == 65.0
    assert R.duration_text({"started": 100.0}) == "—" and R.duration_text({"elapsed_s": -1}) == "—"


def test_dir_size_is_remembered_while_its_stamp_stands(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 5)
    assert R.dir_size(tmp_path, ("finished", 1.0)) == 15
    (tmp_path / "c").write_bytes(b"z" * 7)
    assert R.dir_size(tmp_path, ("finished", 1.0)) == 15  # the same stamp: not walked again
    assert R.dir_size(tmp_path, ("finished", 2.0)) == 22 and R.dir_size(tmp_path) == 22


# --- admm runs ------------------------------------------------------------------------------------


def files_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


@pytest.fixture
def folder(finished_run, tmp_path):
    """A runs folder: 'old' (the finished run), 'live' (its copy whose status names this test's
    process as a running worker, 1 epoch done of 5) and 'bad' (crashed), newest last."""
    root = tmp_path / "runs"
    for name in ("old", "live", "bad"):
        shutil.copytree(finished_run, root / name)
    live = root / "live"
    (live / "summary.json").unlink()
    st = read_json(live / "status.json")
    (live / "status.json").write_text(
        json.dumps({**st, "state": "running", "pid": os.getpid(), "epoch": 1, "epochs": 5})
    )
    (live / "metrics.jsonl").write_text(
        "".join(json.dumps(m) + "\n" for m in read_metrics(finished_run)[:2])
    )  # up to epoch 1
    st = read_json(root / "bad" / "status.json")
    (root / "bad" / "status.json").write_text(json.dumps({**st, "state": "crashed", "error": "boom: out of memory"}))
    for i, name in enumerate(("old", "live", "bad")):
        os.utime(root / name, (1e9 + i, 1e9 + i))  # the listing is newest first by the directory's mtime
    return root


def table_of(out: str) -> list[dict]:
    """The rows of a table printed by the CLI, by its header (columns apart by two spaces or more)."""
    lines = out.splitlines()
    bounds = [i for i in range(len(lines[0])) if lines[0][i] != " " and (i == 0 or lines[0][i - 2 : i] == "  ")]
    cells = [[line[a:b].strip() for a, b in zip(bounds, [*bounds[1:], None])] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[1:]]


def test_runs_lists_each_run_with_its_state_epochs_accuracy_and_size(folder, finished_run):
    rc, out, err = cli_call(["runs", "--root", str(folder)])
    assert rc == 0, err
    rows = table_of(out)
    assert [r["run"] for r in rows] == ["bad", "live", "old"]
    old, live, bad = rows[2], rows[1], rows[0]
    final = read_json(finished_run / "summary.json")["test_accuracy"]
    assert old["state"] == "finished" and old["epoch"] == "2/2" and old["test %"] == f"{100 * final:.2f}"
    assert old["method"] == "block-admm" and old["data"] == "digits"
    assert old["size"] == human(files_bytes(folder / "old"))
    assert old["duration"] == R.fmt_duration(read_json(finished_run / "status.json")["elapsed_s"])
    first_eval = read_metrics(finished_run)[1]["test_accuracy"]  # a live run: its last evaluation's
    assert live["state"] == "running" and live["epoch"] == "1/5" and live["test %"] == f"{100 * first_eval:.2f}"
    assert bad["state"] == "crashed" and bad["error"] == "boom: out of memory" and old["error"] == "—"


def test_runs_json_gives_the_same_facts_as_numbers(folder, finished_run):
    rc, out, err = cli_call(["runs", "--root", str(folder), "--json"])
    assert rc == 0, err
    recs = {r["run"]: r for r in json.loads(out)}
    assert list(recs) == ["bad", "live", "old"]
    old, live = recs["old"], recs["live"]
    assert old["state"] == "finished" and old["epochs_done"] == 2 and old["epochs"] == 2
    assert old["test_percent"] == round(100 * read_json(finished_run / "summary.json")["test_accuracy"], 2)
    assert old["size_bytes"] == files_bytes(folder / "old") and old["pid"] is None
    assert old["duration_s"] == read_json(finished_run / "status.json")["elapsed_s"]
    assert live["pid"] == os.getpid() and live["epochs_done"] == 1 and live["epochs"] == 5
    assert recs["bad"]["error"] == "boom: out of memory" and old["error"] is None


def test_runs_of_an_empty_or_missing_folder(tmp_path):
    rc, out, _ = cli_call(["runs", "--root", str(tmp_path / "none")])
    assert rc == 0 and out.strip() == f"no runs in {tmp_path / 'none'}"
    rc, out, _ = cli_call(["runs", "--root", str(tmp_path), "--json"])
    assert rc == 0 and json.loads(out) == []


# --- admm stop ------------------------------------------------------------------------------------


def test_stop_never_signals_a_pid_that_is_not_a_worker(tmp_path):
    """A status.json naming some other process (crafted, or a recycled pid): refused, not signalled."""
    victim = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "status.json").write_text(json.dumps({"state": "running", "pid": victim.pid}))
        rc, out, err = cli_call(["stop", str(tmp_path)])
        assert rc == 2 and out == "", out
        assert err.strip() == f"error: {tmp_path}: pid {victim.pid} is not an admm_core train process; not signalled"
        time.sleep(0.2)
        assert victim.poll() is None  # still alive: not signalled
    finally:
        victim.kill()
        victim.wait()
    rc, _, err = cli_call(["stop", str(tmp_path)])  # now gone: the run is recorded crashed, nothing to stop
    assert rc == 2 and "already crashed; no worker to stop" in err


def test_stop_says_why_there_is_nothing_to_stop(run_copy, tmp_path):
    rc, out, err = cli_call(["stop", str(run_copy)])
    assert (rc, out) == (2, "") and err.strip() == f"error: {run_copy}: already finished; no worker to stop"
    rc, _, err = cli_call(["stop", str(tmp_path / "nothing")])
    assert rc == 2 and "not a run directory" in err and "Traceback" not in err
    (run_copy / "status.json").unlink()  # configured, never reported
    rc, _, err = cli_call(["stop", str(run_copy)])
    assert rc == 2 and "no worker has reported in it" in err
    (run_copy / "status.json").write_text(json.dumps({"state": "running", "pid": os.getpid(), "host": "elsewhere"}))
    (run_copy / "heartbeat").touch()  # alive there
    rc, _, err = cli_call(["stop", str(run_copy)])
    assert rc == 2 and "its worker runs on elsewhere; stop it there" in err


def test_stop_stops_a_real_worker_which_stays_resumable(tmp_path):
    """``admm train`` in a process of its own, stopped by ``admm stop --wait``: 'stopped', with a checkpoint."""
    run_dir = tmp_path / "r"
    cfg = tmp_path / "cfg.json"
    cfg.write_text(tiny(epochs=100000).to_json())
    cmd = [sys.executable, "-m", "admm_core", "train", "--config", str(cfg), "--out", str(run_dir), "--quiet"]
    worker = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while R.run_done_epochs(run_dir, read_json(run_dir / "status.json", {}) or {}) < 1:
            assert worker.poll() is None and time.monotonic() < deadline, worker.stderr.read() if worker.poll() else ""
            time.sleep(0.2)
        rc, out, err = cli_call(["stop", str(run_dir), "--wait", "90"])
        assert rc == 0, err
        assert f"sent SIGTERM to its worker (pid {worker.pid})" in out and "stopped at epoch" in out
        assert worker.wait(timeout=60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    status = read_json(run_dir / "status.json")
    assert status["state"] == "stopped" and (run_dir / "checkpoint.pt").is_file()


# --- admm delete ----------------------------------------------------------------------------------


@pytest.fixture
def confined(run_copy, tmp_path, monkeypatch):
    """allowed root = tmp/runs holding r1 (a finished run) and a link to a run outside it."""
    root = run_copy.parent
    outside = tmp_path / "elsewhere" / "r-out"
    shutil.copytree(run_copy, outside)
    (root / "link-out").symlink_to(outside)
    monkeypatch.setenv("ADMM_RUNS", str(root))
    monkeypatch.delenv("ADMM_RUNS_ROOT", raising=False)
    return root, outside


def test_delete_removes_only_a_run_inside_the_root(confined):
    root, outside = confined
    for target, why in (
        (outside, "outside the allowed runs root"),
        (root / "link-out", "a symbolic link"),
        (root / ".." / "elsewhere" / "r-out", "outside the allowed runs root"),
        (root, "outside the allowed runs root"),  # the root itself: not strictly inside
    ):
        rc, out, err = cli_call(["delete", str(target), "--yes"])
        assert rc == 2 and why in err and "Traceback" not in err, err
    assert outside.is_dir() and (root / "link-out").is_symlink()
    rc, _, err = cli_call(["delete", str(root / "r1")])  # without --yes: nothing removed
    assert rc == 2 and "pass --yes" in err and (root / "r1").is_dir()
    (root / "plain").mkdir()  # not a run directory
    rc, _, err = cli_call(["delete", str(root / "plain"), "--yes"])
    assert rc == 2 and "not a run directory" in err and (root / "plain").is_dir()
    rc, out, err = cli_call(["delete", str(root / "r1"), "--yes"])
    assert rc == 0 and out.strip() == f"deleted {root / 'r1'}" and not (root / "r1").exists(), err
    assert outside.is_dir()


def test_delete_refuses_a_running_run(confined):
    root, _ = confined
    st = read_json(root / "r1" / "status.json")
    (root / "r1" / "status.json").write_text(json.dumps({**st, "state": "running", "pid": os.getpid()}))
    rc, _, err = cli_call(["delete", str(root / "r1"), "--yes"])
    assert rc == 2 and err.strip() == "error: r1 is running; stop it first" and (root / "r1").is_dir()
