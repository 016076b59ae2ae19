"""Reliability under load and faults: a full disk, a dashboard killed under live runs,
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
from helpers import cli_run, fresh_python_json
from test_browser_dashboard import ARGS, CHROMIUM, _free_port

from admm_core import checkpoint as checkpoint_mod
from admm_core import device as device_mod
from admm_core import rundir
from admm_core import status as status_mod
from admm_core.checkpoint import verify_checkpoint
from admm_core.network import train
from admm_core.rundir import read_json, read_metrics
from admm_core.spec.config import RunConfig

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
    assert status_mod.run_status(run)["state"] == "crashed"  # not 'running' for ever: the claim was released

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

    # the backbone and SVM caches stay where the other DeepFacto tests keep them ($ADMM_CACHE): off the small disk
    run = small_disk / "df"
    argv = ["train", "--preset", "lfwa-deepfacto", "--rank", "4", "--epochs", "2", "--out", str(run), "--device", "cpu"]
    for s in ("data_limit=160", "image_size=32", "backbone_epochs=1", "finetune_epochs=1", "admm_images=48"):
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
    real_write = checkpoint_mod._KeepWriteError.write

    def full_after_half(self, b):
        self.n = getattr(self, "n", 0) + len(b)
        if self.n > len(good) // 2:
            self.error = OSError(errno.ENOSPC, "No space left on device")
            raise self.error
        return real_write(self, b)

    monkeypatch.setattr(checkpoint_mod._KeepWriteError, "write", full_after_half)
    rc, err = cli_run(["train", "--resume", str(run), "--epochs", "3", "--quiet"])
    assert rc == 1 and "Traceback" not in err
    (line,) = [ln for ln in err.strip().splitlines() if not ln.startswith("run dir:")]
    assert line.startswith("error: disk full: No space left on device writing ") and "checkpoint.pt" in line, line
    assert (run / "checkpoint.pt").read_bytes() == good and verify_checkpoint(run / "checkpoint.pt")["epoch"] == 2
    st = read_json(run / "status.json")
    assert st["state"] == "crashed" and st["error"].startswith("disk full:")
    assert not list(run.glob("*.tmp"))
    monkeypatch.setattr(checkpoint_mod._KeepWriteError, "write", real_write)
    rc, err = cli_run(["train", "--resume", str(run), "--epochs", "3", "--quiet"])
    assert rc == 0, err
    assert_intact(run, 3)


@pytest.mark.skipif(not HAVE_LFW, reason=f"LFW/LFWA not found under {DATA.parent} (set ADMM_DATA)")
def test_deepfacto_training_write_errors_end_the_run_and_it_resumes(tmp_path, monkeypatch):
    """A DeepFacto run whose write fails (ENOSPC) at config.json, a metrics line, its loop state
    (state.pt) or its summary: the error is raised, the run is 'crashed' with one 'disk full: …'
    line naming the file (never left 'running'), state.pt of the last iteration is byte-identical,
    and once space is back the resume finishes with every iteration's line and a loadable model."""
    from admm_core import loop as loop_mod  # the one run loop writes config.json and the metrics
    from admm_core.deepfacto import run as run_mod
    from admm_core.deepfacto.inference import load_inference_model
    from admm_core.deepfacto.run import train_deepfacto
    from admm_core.spec.deepfacto import STATE_FILE, DeepFactoConfig

    cfg = DeepFactoConfig(
        rank=4, data_limit=160, image_size=32, backbone_epochs=1, warmup_epochs=1, finetune_epochs=1,
        admm_images=48, eval_images=30, svm_train_limit=80, batch_size=32, device="cpu",
    )  # fmt: skip
    quiet = {"log": lambda m: None}

    def full(name, real):  # ``real`` with ENOSPC for the file called ``name``
        def write(*a, **k):
            path = next(x for x in a if isinstance(x, (str, os.PathLike)))  # atomic_torch_save(obj, path)
            if Path(path).name == name:
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return real(*a, **k)

        return write

    def crashed_on(run, name):
        st = read_json(run / "status.json")
        assert st["state"] == "crashed", st  # before the fix: 'running' after a config.json failure
        assert st["error"].startswith("disk full: No space left on device writing ") and name in st["error"], st
        assert "\n" not in st["error"] and not list(run.glob("*.tmp"))

    # a new run: config.json is its first write
    with monkeypatch.context() as m:
        m.setattr(loop_mod, "write_text_atomic", full("config.json", loop_mod.write_text_atomic))
        with pytest.raises(OSError):
            train_deepfacto(cfg, tmp_path / "a", **quiet)
    crashed_on(tmp_path / "a", "config.json")

    run = tmp_path / "b"  # a metrics line of iteration 2: iteration 1's state is the last good one
    real_append = loop_mod.append_metrics

    def append_until_2(d, m):
        if m["epoch"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(Path(d) / "metrics.jsonl"))
        return real_append(d, m)

    with monkeypatch.context() as m:
        m.setattr(loop_mod, "append_metrics", append_until_2)
        with pytest.raises(OSError):
            train_deepfacto(cfg, run, **quiet)
    crashed_on(run, "metrics.jsonl")
    good = (run / STATE_FILE).read_bytes()
    assert [x["epoch"] for x in read_metrics(run)] == [0, 1]
    # resumed on the still-full disk: config.json, then the loop state, then the summary fail
    for target, attr, module in (
        ("config.json", "write_text_atomic", loop_mod),
        (STATE_FILE, "atomic_torch_save", run_mod),  # DeepFactoTask.save
        ("summary.json", "write_json", status_mod),  # RunStatus.finish writes it
    ):
        with monkeypatch.context() as m:
            m.setattr(module, attr, full(target, getattr(module, attr)))
            with pytest.raises(OSError):
                train_deepfacto(cfg, run, resume=True, **quiet)
        crashed_on(run, target)
        if target != "summary.json":
            assert (run / STATE_FILE).read_bytes() == good, target  # kept: a resume is possible
    # the last try got through iteration 2 (its state saved) and failed on the summary: kept too
    assert checkpoint_mod.safe_load(run / STATE_FILE)["iteration"] == 2
    done = train_deepfacto(cfg, run, resume=True, **quiet)  # space back
    assert done["status"] == "finished" and read_json(run / "status.json")["state"] == "finished"
    assert [x["epoch"] for x in read_metrics(run)] == [0, 1, 2]
    assert read_json(run / "summary.json")["status"] == "finished" and not (run / STATE_FILE).exists()
    load_inference_model(run)


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
        rundir.write_files_atomic({a: "new a", b: "new b"})
    assert e.value.filename == str(b)
    assert (a.read_text(), b.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


# --- the dashboard killed under live runs, two dashboards on one folder ------------------------

PAGE_MS = int(float(os.environ.get("DASH_BROWSER_TIMEOUT_S", "240")) * 1000)


def _dashboard(root: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """The real dashboard (``streamlit run app/serve.py``, as run.sh) on 127.0.0.1:<free port> over ``root``."""
    port = _free_port()
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "serve.py"), "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    cmd += ["--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            return urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok"
        except OSError:
            return proc.poll() is not None

    _wait(healthy, 90, 0.2)
    assert proc.poll() is None, log.read_text()
    return proc, url


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def _workers_of(run_dir: Path) -> list[int]:
    """Live processes training ``run_dir`` (by command line): a double start shows as two."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                args = (p / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                b"admm_core" in args
                and b"train" in args
                and str(run_dir).encode() in args
                and status_mod.pid_alive(int(p.name))
            ):
                out.append(int(p.name))
    return out


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"system Chromium not found at {CHROMIUM}")
def test_dashboard_killed_under_four_live_runs_and_a_second_dashboard(tmp_path):
    """Four digits runs started from dashboard A's Train page; dashboard B opened on the same
    folder; A SIGKILLed (its whole process group). The runs go on; B and a restarted dashboard C
    show them running; Stop in C, Resume in B: one worker, never two; no run is ever reported
    crashed; at the end every run's metrics, summary and checkpoint read back intact."""
    import threading

    sync_api = pytest.importorskip("playwright.sync_api")
    from app.dashboard import workers as W

    root = tmp_path / "runs"
    root.mkdir()
    a, url_a = _dashboard(root, tmp_path / "a.log")
    b = c = None
    seen: dict[str, set] = {}
    watching = threading.Event()

    def watch_states():  # every reader's view, all along: 'crashed' must never appear
        while not watching.is_set():
            for d in root.iterdir():
                if d.is_dir():
                    seen.setdefault(d.name, set()).add(W.state_of(d).get("state"))
            time.sleep(0.2)

    threading.Thread(target=watch_states, daemon=True).start()
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(PAGE_MS)
            started: list[Path] = []
            for _ in range(4):
                page.goto(f"{url_a}/?preset=digits-mlp&method=sgd&epochs=100000&train_limit=200&test_limit=100")
                sync_api.expect(page.get_by_label("Epochs", exact=True)).to_have_value("100000", timeout=PAGE_MS)
                page.get_by_role("button", name="Start run").click()
                new = _wait(lambda: next((d for d in root.iterdir() if d.is_dir() and d not in started), None), 60)
                assert new is not None, "no run directory appeared"
                started.append(new)
            assert _wait(lambda: all(W.state_of(d)["state"] == "running" for d in started), 120), [
                W.state_of(d) for d in started
            ]
            b, url_b = _dashboard(root, tmp_path / "b.log")  # a second dashboard on the same folder
            _kill_group(a)  # the dashboard dies: SIGKILL, no chance to clean up
            epochs = {d: read_json(d / "status.json")["epoch"] for d in started}
            assert _wait(lambda: all(read_json(d / "status.json")["epoch"] > epochs[d] for d in started), 60)
            assert all(W.state_of(d)["state"] == "running" for d in started)
            assert all(len(_workers_of(d)) == 1 for d in started)

            c, url_c = _dashboard(root, tmp_path / "c.log")  # the dashboard restarted
            one = started[0]
            pc, pb = browser.new_page(), browser.new_page()
            for pg in (pc, pb):
                pg.set_default_timeout(PAGE_MS)
            pc.goto(f"{url_c}/runs?run={one.name}")
            # the page's own buttons (by key: Streamlit's toolbar has a "Stop" of its own)
            pc.locator(".st-key-runs_stop button").click()  # Stop in the restarted dashboard
            assert _wait(lambda: W.state_of(one)["state"] == "stopped", 60), W.state_of(one)
            done = read_json(one / "status.json")["epoch"]
            pb.goto(f"{url_b}/runs?run={one.name}")  # Resume in the other one
            pb.get_by_label("Resume to epoch", exact=True).fill(str(done + 3))
            pb.get_by_label("Resume to epoch", exact=True).press("Enter")
            pb.locator(".st-key-runs_resume button").click()
            # a new worker under three training ones and the other tests: CI once saw it still
            # 'starting' (alive, importing) after 60 s; the four first starts get 120 s too
            assert _wait(lambda: W.state_of(one)["state"] == "running", 120), (W.state_of(one), W.log_tail(one))
            assert len(_workers_of(one)) <= 1
            assert _wait(lambda: W.state_of(one)["state"] == "finished", 120), W.state_of(one)
            assert "--resume" in json.loads((one / "launch.json").read_text())["cmd"]
            text = pb.inner_text("body")
            browser.close()
        for d in started[1:]:
            assert W.stop_run(d)
        assert _wait(lambda: all(W.state_of(d)["state"] == "stopped" for d in started[1:]), 60)
    finally:
        watching.set()
        for proc in (a, b, c):
            if proc is not None:
                _kill_group(proc)
        for d in root.iterdir():
            if d.is_dir():
                W.stop_run(d)
    assert one.name in text
    assert not [n for n, states in seen.items() if "crashed" in states], seen
    assert_intact(one, done + 3)
    for d in started[1:]:  # stopped: every epoch up to the stop, its checkpoint that epoch's
        ms = read_metrics(d)
        assert [m["epoch"] for m in ms] == list(range(len(ms)))
        assert read_json(d / "summary.json")["status"] == "stopped"
        assert verify_checkpoint(d / "checkpoint.pt")["epoch"] == ms[-1]["epoch"]


RESUMER = """
import json, os, subprocess, sys, time
from pathlib import Path
from admm_core.rundir import write_text_atomic
from app.dashboard import workers as W

def spawn(args, run_dir, processes=1):  # a stand-in worker: launching a real one takes a while too
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    time.sleep(0.05)
    write_text_atomic(run_dir / "launch.json", json.dumps({"pid": p.pid, "cmd": ["admm_core", "train", *args]}))
    return p.pid

W._spawn = spawn
run, sync = Path(sys.argv[1]), Path(sys.argv[2])
for k in range(int(sys.argv[3])):
    print("ready", flush=True)
    while not (sync / f"go{k}").exists():  # spin: both leave within microseconds of each other
        pass
    try:
        W.resume_run(run)
        print("started", flush=True)
    except RuntimeError as e:
        print("refused", e, flush=True)
"""
ROUNDS = 4


def test_two_dashboards_pressing_resume_at_once_start_one_worker(tmp_path):
    """Two dashboard processes call Resume on the same stopped run at the same instant, four
    times over: each time exactly one launches a worker, the other is told it is running (the
    check and the launch are one step under RUN/launch.lock). The run's files are untouched."""
    root, sync = tmp_path / "runs", tmp_path / "sync"
    run = root / "r"
    train(tiny(epochs=2), run)
    sync.mkdir()
    keep = {n: (run / n).read_bytes() for n in ("metrics.jsonl", "summary.json", "checkpoint.pt")}
    status = (run / "status.json").read_bytes()
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", RESUMER, str(run), str(sync), str(ROUNDS)]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    said = []
    try:
        for k in range(ROUNDS):
            assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"], procs[0].stderr.read()
            (sync / f"go{k}").touch()
            said.append(sorted(p.stdout.readline().split(" ")[0].strip() for p in procs))
            pid = json.loads((run / "launch.json").read_text())["pid"]
            os.kill(pid, signal.SIGKILL)
            _wait(lambda: not status_mod.pid_alive(pid), 10)
            (run / "status.json").write_bytes(status)  # stopped again for the next round
            (run / "launch.json").unlink()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        launch = read_json(run / "launch.json") or {}
        if isinstance(launch.get("pid"), int) and status_mod.pid_alive(launch["pid"]):
            os.kill(launch["pid"], signal.SIGKILL)
    assert said == [["refused", "started"]] * ROUNDS, said
    assert {n: (run / n).read_bytes() for n in keep} == keep
    assert_intact(run, 2)


def test_a_resume_never_shows_the_last_workers_dead_pid_as_a_crash(tmp_path, monkeypatch):
    """Between Resume's clean-up and the new worker's launch.json, another reader saw no status and
    the last worker's dead pid in launch.json: 'worker ended before it reported' (a second dashboard
    showed 'crashed' for a run that was starting; seen in CI). Now it reads 'starting'."""
    from app.dashboard import workers as W

    run = tmp_path / "r"
    run.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / "launch.json").write_text(json.dumps({"pid": dead.pid, "cmd": ["old"]}))
    (run / "status.json").write_text(json.dumps({"state": "stopped", "pid": dead.pid, "epoch": 2}))
    seen = []

    def spawn(args, run_dir, processes):  # the moment before the new worker exists: what do others read?
        seen.append(W.state_of(run_dir)["state"])

    monkeypatch.setattr(W, "_spawn", spawn)
    monkeypatch.setattr(W, "confine_run_dir", lambda d: Path(d))
    monkeypatch.setattr(W, "checkpoint_world", lambda d: 1)
    W.resume_run(run, epochs=4)
    assert seen == ["starting"], seen
    assert W.state_of(run)["state"] == "unknown"  # the lock is released: no launch, no status


def test_a_second_worker_on_a_claimed_run_is_refused_and_changes_nothing(tmp_path):
    """`admm train --resume RUN` while a live process trains RUN: one line, exit 2, nothing written."""
    run = tmp_path / "r"
    train(tiny(epochs=2), run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    claim = status_mod.claim_run(run)  # a worker training it (the lock is what a live worker holds)
    try:
        rc, err = cli_run(["train", "--resume", str(run), "--epochs", "3", "--quiet"])
        with pytest.raises(status_mod.RunBusy):
            status_mod.RunStatus(run, 3)
    finally:
        claim.close()
    assert rc == 2 and err.strip().splitlines()[-1].startswith("error: --resume") and "being trained already" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert_intact(run, 2)


# --- parallel sweep workers ----------------------------------------------------------------------


def four_workers_24_trials(root: Path, storage: str | None = None) -> None:
    """`admm sweep --jobs 4` into ``root`` (``storage``: an RDB URL; default the SQLite file under
    it): 24 trials, each exactly once (distinct numbers, distinct run directories, one per trial),
    none failed or left running, no "database is locked", the median pruner pruning a trial it must
    prune; every finished trial's run intact.

    Whether the median pruner prunes anything in a free-running 4-worker study depends on which
    trials happen to finish first (seen: 0 to 16 pruned in 24). So the study starts with 4 trials run
    by one worker (the same every time: seeded, sequential), and one trial at the space's lowest
    learning rate is queued before the four workers start. Whichever worker takes it, at least 4
    trials have finished by then, most of them far above chance, and it is below their median."""
    import optuna
    from optuna.trial import TrialState

    args = ["--preset", "digits-mlp", "--method", "sgd", "--epochs", "6", "--name", "par"]
    args += ["--space", "lr=log:0.0001:0.5", "--pruner", "median", "--seed", "0"]
    args += ["--train-limit", "200", "--test-limit", "100"]
    if storage:
        args += ["--storage", storage]
    env = {**os.environ, "ADMM_RUNS": str(root), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

    def sweep(*more: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "admm_core", "sweep", *args, *more],
            cwd=ROOT,
            env=env,
            text=True,
            capture_output=True,
        )
        assert done.returncode == 0, done.stderr
        assert "locked" not in done.stderr.lower() and "Traceback" not in done.stderr, done.stderr
        return done

    url = storage or f"sqlite:///{root / 'sweeps.db'}"
    sweep("--trials", "4", "--jobs", "1")
    first = optuna.load_study(study_name="par", storage=url)
    assert [t.state for t in first.trials] == [TrialState.COMPLETE] * 4
    first.enqueue_trial({"lr": 0.0001}, user_attrs={"queued": True})
    t0 = time.time()
    done = sweep("--trials", "24", "--jobs", "4")
    wall = time.time() - t0
    study = optuna.load_study(study_name="par", storage=url)
    trials = study.trials
    states = [t.state for t in trials]
    assert states.count(TrialState.COMPLETE) + states.count(TrialState.PRUNED) == 24, states
    assert not [t for t in trials if t.state in (TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING)]
    assert len(trials) == 24 and sorted(t.number for t in trials) == list(range(24))
    queued = [t for t in trials if t.user_attrs.get("queued")]
    assert len(queued) == 1 and queued[0].state == TrialState.PRUNED, [(t.params, t.state) for t in queued]
    dirs = [Path(t.user_attrs["run_dir"]) for t in trials]
    assert len(set(dirs)) == 24 and sorted(d.name for d in root.iterdir() if d.is_dir()) == sorted(d.name for d in dirs)
    assert len({t.user_attrs["pid"] for t in trials[4:]}) >= 2, [
        ln for ln in done.stderr.splitlines() if "trial" not in ln
    ][-40:]  # really shared between workers
    for t, d in zip(trials, dirs):
        summary = read_json(d / "summary.json")
        assert summary["sweep"]["trial"] == t.number and summary["sweep"]["params"] == t.params
        if t.state == TrialState.COMPLETE:
            assert_intact(d, 6)
            assert t.value == pytest.approx(summary["best_test_accuracy"])
        else:
            assert read_json(d / "status.json")["state"] == "pruned" and summary["status"] == "pruned"
            assert verify_checkpoint(d / "checkpoint.pt")["epoch"] == read_metrics(d)[-1]["epoch"] < 6
    print(
        f"4 workers, 24 trials on {(storage or 'sqlite').split(':')[0]}: {wall:.1f} s wall, load {open('/proc/loadavg').read().split()[0]}"
    )


def test_four_sweep_workers_on_one_sqlite_study_run_24_trials(tmp_path):
    """Four workers on one SQLite file (see :func:`four_workers_24_trials`)."""
    four_workers_24_trials(tmp_path / "runs")


def postgres_bin() -> Path | None:
    """The newest PostgreSQL server's bin/ (Debian: /usr/lib/postgresql/<v>/bin), else initdb on the PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if found:
        return found[-1].parent
    return Path(shutil.which("initdb")).parent if shutil.which("initdb") else None


@pytest.fixture
def postgres_url():
    """A throwaway PostgreSQL cluster: initdb in a temporary folder, started on 127.0.0.1 at a free
    port (no fsync, trust auth for its own user), stopped and removed afterwards. PostgreSQL refuses
    to run as root: as root it runs as the ``postgres`` user (made by Debian's package) via runuser."""
    pytest.importorskip("psycopg2", reason="no PostgreSQL driver (pip install psycopg2-binary, requirements.txt)")
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server here (apt-get install -y postgresql; scripts/test.sh does it as root)")
    as_user: list[str] = []
    if os.geteuid() == 0:
        import pwd

        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no 'postgres' user to run the server as (PostgreSQL refuses root)")
        as_user = ["runuser", "-u", "postgres", "--"]
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="admm-pg-"))  # not under pytest's root-only tmp: the server user reads it
    if as_user:
        os.chown(base, pw.pw_uid, pw.pw_gid)
    data, port = base / "data", _free_port()
    run = lambda *cmd: subprocess.run([*as_user, *map(str, cmd)], capture_output=True, text=True, timeout=120)  # noqa: E731
    r = run(bin_dir / "initdb", "-D", data, "-U", "admm", "--auth=trust", "--no-sync")
    if r.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"initdb failed here: {r.stderr.strip()[-300:]}")
    opts = f"-h 127.0.0.1 -p {port} -k {base} -F -c max_connections=60"
    r = run(bin_dir / "pg_ctl", "-D", data, "-o", opts, "-l", base / "server.log", "-w", "-t", "60", "start")
    try:
        assert r.returncode == 0, r.stderr + (base / "server.log").read_text()
        yield f"postgresql+psycopg2://admm@127.0.0.1:{port}/postgres"
    finally:
        run(bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
        shutil.rmtree(base, ignore_errors=True)


def test_four_sweep_workers_on_one_postgresql_study_run_24_trials(tmp_path, postgres_url):
    """The same four workers on a PostgreSQL study (a server started by the test on 127.0.0.1)."""
    four_workers_24_trials(tmp_path / "runs", postgres_url)


def test_liveness_is_the_workers_own_pid_start_time_and_heartbeat(tmp_path):
    """A live pid that is another process (a recycled pid: same number, other start time) is not
    the worker: crashed, on disk. A worker on another host is alive while its heartbeat is fresh,
    and reported crashed (not written: its host may come back) once it is stale."""
    run = tmp_path / "r"
    train(tiny(epochs=1), run)
    st = {**read_json(run / "status.json"), "state": "running"}
    me = status_mod.proc_start(os.getpid())
    rundir.write_json(run / "status.json", {**st, "pid": os.getpid(), "pid_start": me, "host": socket.gethostname()})
    assert status_mod.run_status(run)["state"] == "running"  # this very process: alive
    rundir.write_json(
        run / "status.json", {**st, "pid": os.getpid(), "pid_start": me + 1, "host": socket.gethostname()}
    )
    seen = status_mod.run_status(run)
    assert seen["state"] == "crashed" and read_json(run / "status.json")["state"] == "crashed"

    far = {**st, "pid": 999_999_999, "pid_start": 1, "host": "another-host"}  # its pid means nothing here
    rundir.write_json(run / "status.json", far)
    (run / "heartbeat").touch()
    assert status_mod.run_status(run)["state"] == "running"
    stale = time.time() - status_mod.HEARTBEAT_STALE_S - 10
    os.utime(run / "heartbeat", (stale, stale))
    seen = status_mod.run_status(run)
    assert seen["state"] == "crashed" and "no heartbeat from another-host" in seen["error"]
    assert read_json(run / "status.json")["state"] == "running"  # not written


def test_a_worker_touches_its_heartbeat_while_it_trains(tmp_path, monkeypatch):
    """RunStatus's thread touches RUN/heartbeat every HEARTBEAT_S, also inside a long step; it stops at the end."""
    monkeypatch.setattr(status_mod, "HEARTBEAT_S", 0.05)  # RunStatus lives in admm_core.status
    status = status_mod.RunStatus(tmp_path / "r", 1)
    beat = tmp_path / "r" / "heartbeat"
    first = _wait(lambda: beat.exists() and beat.stat().st_mtime_ns, 5)
    assert _wait(lambda: beat.stat().st_mtime_ns > first, 5)  # no update() call in between: the thread did it
    status.finish({"status": "finished"})
    time.sleep(0.2)
    last = beat.stat().st_mtime_ns
    time.sleep(0.3)
    assert beat.stat().st_mtime_ns == last and not status_mod.run_busy(tmp_path / "r")


# --- a thousand runs ---------------------------------------------------------------------------------


def test_a_thousand_runs_are_listed_from_an_index_and_paged(tmp_path, monkeypatch):
    """1,000 finished runs: the second listing reads no file of a settled run (one stat each),
    a change to one run (its meta.json, its status) is seen at once, the Runs page draws one page
    of 50 rows and the Train run menu offers the 50 newest plus the live one; the runs read back intact.
    Figures for the same folder: experiments/thousand_runs.py (docs/reliability.md)."""
    from streamlit.testing.v1 import AppTest

    from app import ui
    from app.dashboard import meta as M

    root = tmp_path / "runs"
    seed = tmp_path / "seed"
    train(tiny("sgd", epochs=1), seed)
    past = time.time() - 3600
    for i in range(1000):
        d = root / f"20260101-{i:06d}-digits-sgd-s0"
        shutil.copytree(seed, d)
        os.utime(d, (past + i, past + i))
    live = root / "20270101-000000-live"  # newest, 'running' with a live pid (this process)
    shutil.copytree(seed, live)
    st = read_json(live / "status.json")
    rundir.write_json(
        live / "status.json", {**st, "state": "running", "pid": os.getpid(), "pid_start": None, "host": None}
    )
    assert len(status_mod.list_runs(root)) == 1001
    reads = []
    real = rundir.read_json  # list_runs reads through admm_core.rundir
    monkeypatch.setattr(rundir, "read_json", lambda p, default=None: reads.append(Path(p)) or real(p, default))
    rundir._STAMPED.clear()  # only the index may spare the reads
    listed = status_mod.list_runs(root)
    assert len(listed) == 1001 and listed[0]["name"] == live.name and listed[0]["status"]["state"] == "running"
    assert {p.parent for p in reads} <= {live}, sorted({p.parent.name for p in reads})[:5]
    victim = root / "20260101-000500-digits-sgd-s0"
    old = next(r for r in listed if r["name"] == victim.name)
    assert old["stamp"] is not None and ui._meta(old)["name"] == ""  # indexed, its meta remembered
    M.write_meta(victim, "renamed", "big", "")  # a rename in its folder: the folder's mtime moves
    other = root / "20260101-000600-digits-sgd-s0"
    rundir.write_json(other / "status.json", {**read_json(other / "status.json"), "state": "stopped"})
    now = {r["name"]: r for r in status_mod.list_runs(root)}
    assert now[victim.name]["stamp"] != old["stamp"] and ui._meta(now[victim.name])["name"] == "renamed"
    assert now[other.name]["status"]["state"] == "stopped"
    final = list(now)

    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120).run()
    menu = next(s for s in at.selectbox if (s.key or "").startswith("watch_pick."))
    assert len(menu.options) == ui.MENU_SIZE and live.name in menu.options  # the live run and the 49 newest
    at.switch_page("views/runs.py").run()
    assert not at.exception
    shown = lambda names: [ui.short_id(n) for n in names]  # noqa: E731 - the table's ids (long ones shortened)
    assert list(at.dataframe[0].value["run"]) == shown(final[:50])
    at.number_input(key="runs_page").set_value(21).run()
    assert list(at.dataframe[0].value["run"]) == shown(final[1000:])
    at.text_input(key="runs_filter").set_value("renamed").run()
    assert list(at.dataframe[0].value["run"]) == shown([victim.name])
    for r in listed[1:1001:97]:
        assert_intact(r["dir"], 1)


def test_thousand_runs_script_writes_its_table_between_the_markers(tmp_path, finished_run):
    """experiments/thousand_runs.py on a small folder: the table, with the machine, lands in the page;
    with the system Chromium, the real server's figures too, and neither process imported PyTorch."""
    page = tmp_path / "page.md"
    # the finished runs are copies of this process's finished run (--seeds), not three trained by the CLI
    shutil.copytree(finished_run, tmp_path / "seeds" / "block-admm")
    page.write_text("# x\n<!-- thousand-runs -->\nstale-table\n<!-- /thousand-runs -->\ntail\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # one draw per page and condition, two of the four pages (Train's chart needs a live run, Heatmaps'
    # the scorer process: other browser tests draw both): the table's shape, not its medians, is checked
    args = ["--finished", "30", "--live", "0", "--repeats", "1", "--window", "1", "--draws", "1"]
    args += ["--pages", "runs,compare"]
    args += ["--root", str(tmp_path / "runs"), "--seeds", str(tmp_path / "seeds")]
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "thousand_runs.py"), *args, "--markdown", str(page)],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "stale-table" not in text and text.endswith("<!-- /thousand-runs -->\ntail\n")
    assert "30 finished runs + 0 live ones" in text and device_mod.machine("cpu").split("; CPU only")[0] in text
    assert "| Runs |" in text and "| Train (run menu) |" in text and "Server memory (resident)" in text
    assert "PyTorch imported by the pages: no" in text
    if Path(CHROMIUM).exists():  # a real `streamlit run` opened in Chromium: its rows and memory
        assert "served for real" in text and "| Compare |" in text.split("served for real")[1]
        assert "PyTorch loaded in the server: no" in text and "VmHWM" in text
        assert "refreshes in 1 s" in text and "once with a new profile" in text
        assert "a page with one menu and nothing else showed it in" in text
        assert "a page with one two-point chart and nothing else showed it in" in text
    listed = status_mod.list_runs(tmp_path / "runs")
    assert len(listed) == 30 and {r["status"]["state"] for r in listed} == {"finished"}


# Every page, rendered in a fresh interpreter (this one has torch already), with a run picked in
# each (its charts, config and live panel drawn): prints, per page, whether torch got imported, and
# which modules of the package the server holds at the end.
NO_TORCH_PAGES = """
import json, sys
from streamlit.testing.v1 import AppTest

main, run = sys.argv[1], sys.argv[2]
import app.ui, app.dashboard.workers, app.dashboard.form  # noqa: E401,F401
seen = {"imports": "torch" in sys.modules}
for page in ("views/train.py", "views/runs.py", "views/compare.py", "views/sweeps.py", "views/heatmaps.py"):
    at = AppTest.from_file(main, default_timeout=120)
    at.query_params["run"] = run
    at.query_params["runs"] = run
    at.run()
    if page != "views/train.py":
        at.switch_page(page).run()
    at.run()  # a refresh
    assert not at.exception, [e.value for e in at.exception]
    seen[page] = "torch" in sys.modules
# a models-folder network picked: its cut graph (traced in a child process), the memory estimate and
# Start drawn; the server itself reads the file's source only
at = AppTest.from_file(main, default_timeout=300)
at.query_params.update({"preset": "none", "data": "digits", "arch": "tiny.py:Net", "split": "fc1", "run": run})
at.run()
at.run()  # a refresh
assert not at.exception, [e.value for e in at.exception]
drawn = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]  # the layers, each cut point a marker
marks = [t for t in drawn[1:] if "customdata" in t]  # the skip's dotted arc (h past fc2) has none
assert [c for t in marks for (c,) in t["customdata"]] == ["fc1", "act", "fc2"], at.error
assert at.multiselect(key="f.split").value == ["fc1"] and not at.button(key="start").disabled
seen["views/train.py with a model file"] = "torch" in sys.modules
seen["modules"] = sorted(m for m in sys.modules if m == "admm_core" or m.startswith("admm_core."))
print(json.dumps(seen))
"""
# What the server may import of the package: the spec layer, the run-file readers, and the readers of
# DeepFacto's files (its shipped models' manifest, a run's held-out people, LFW's labels) and of sweep
# studies (Optuna's storage); none of them imports torch.
SERVER_MODULES = {
    "admm_core",
    "admm_core.errors",
    "admm_core.rundir",
    "admm_core.runs",
    "admm_core.compare",
    "admm_core.status",
    "admm_core.spawn",
    "admm_core.deepfacto",
    "admm_core.deepfacto.shipped",
    "admm_core.deepfacto.heldout",
    "admm_core.faces",
    "admm_core.faces.lfw",
    "admm_core.sweep",
    "admm_core.sweep.launcher",
    "admm_core.sweep.report",
    "admm_core.sweep.space",
    "admm_core.sweep.study",
}


def test_every_page_never_imports_torch(tmp_path, monkeypatch):
    """The server's memory target (≤ 500 MB, docs/reliability.md): ``import torch`` alone is ~500 MB
    resident, so no page (a run picked, a refresh, a models-folder network picked with its cut
    points drawn) may import it; the server holds the spec layer (:mod:`admm_core.spec`) and the
    readers of run files, nothing else of the package."""
    from test_dashboard_models import TINY

    root = tmp_path / "runs"
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.py").write_text(TINY)
    monkeypatch.setenv("ADMM_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "cache"))  # the cut table computed afresh, in its child
    train(tiny("block-admm", epochs=1), root / "20260101-000000-digits-block-admm-s0")
    seen = fresh_python_json(
        NO_TORCH_PAGES, ROOT / "app" / "main.py", "20260101-000000-digits-block-admm-s0", runs_root=root
    )
    modules = set(seen.pop("modules"))
    pages = ("train", "runs", "compare", "sweeps", "heatmaps")
    want = {"imports": False} | {f"views/{p}.py": False for p in pages} | {"views/train.py with a model file": False}
    assert seen == want, seen
    assert (tmp_path / "cache" / "model-cuts").is_dir()  # the child traced it (no cached table to read)
    outside = sorted(m for m in modules if not m.startswith("admm_core.spec") and m not in SERVER_MODULES)
    assert not outside, outside
    assert {"admm_core.spec.config", "admm_core.spec.resources", "admm_core.rundir"} <= modules  # it read them
