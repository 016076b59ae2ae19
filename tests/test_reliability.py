"""Reliability: memory estimate before start, damaged files, worker lifecycle, concurrency.

Each test makes the failure for real (a truncated checkpoint, a file-size limit, SIGKILL,
four runs started at once) and checks what a user sees: one clear line, the other runs
still listed, the last good checkpoint intact, status.json telling the truth on disk.
"""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import cli_run, tiny
from helpers import wait as _wait

from admm_core import checkpoint as checkpoint_mod
from admm_core import data as data_mod
from admm_core import network, rundir
from admm_core import status as status_mod
from admm_core.checkpoint import atomic_torch_save, verify_checkpoint
from admm_core.errors import CheckpointError, ConfigError
from admm_core.methods.base import tensor_bytes
from admm_core.rundir import read_json, read_metrics, unique_run_dir
from admm_core.spec import datasets
from admm_core.spec.config import RunConfig
from admm_core.spec.datasets import DATASETS
from admm_core.spec.methods import names_for
from admm_core.spec.resources import available_memory, check_fits, estimate_memory, preflight
from admm_core.status import list_runs, run_status
from app.dashboard import workers as W

NETWORK_METHODS = names_for("network")  # deepfacto runs with its own task

ROOT = Path(__file__).resolve().parent.parent


# --- resource estimate ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,params",
    [(m, {}) for m in NETWORK_METHODS]
    + [("block-admm", {"z_optimizer": "adam"}), ("online-admm", {"z_optimizer": "adam"})],
)
def test_memory_estimate_equals_what_the_run_allocates(method, params):
    """param_bytes = Σ numel(Θ)·4 and state_bytes = the bytes of Z, U (moments, lifted variables) built."""
    cfg = tiny(method, method_params=params)
    sess = network.build(cfg)
    st = sess.state
    if method == "online-admm":  # its Z lives per minibatch: measured over one epoch
        sess.method.run_epoch(sess.net, st, sess.batch, None)
        actual = sess.method.state_bytes(st)
    elif hasattr(st, "z"):  # Block-ADMM, Gotmare: Z and U (Gotmare's U stays allocated at zero)
        actual = tensor_bytes([*st.z, *st.u, *(st.z_m or []), *(st.z_v or [])])
    else:
        actual = sess.method.state_bytes(st)
    est = estimate_memory(cfg)
    assert est["param_bytes"] == sum(p.numel() * 4 for p in sess.net.parameters())
    assert est["state_bytes"] == actual
    assert est["total_bytes"] == sum(v for k, v in est.items() if k != "total_bytes")


@pytest.mark.parametrize("data", ["cifar10", "mnist"])
def test_resnet_parameter_count_by_arithmetic(data):
    from admm_core.blocks import build_blocknet

    cfg = RunConfig().replace(model__arch="resnet18", data__name=data)
    shape, n_out = DATASETS[data].input_shape, DATASETS[data].n_classes
    net = build_blocknet(cfg.model, shape, n_out)
    assert estimate_memory(cfg)["param_bytes"] == sum(p.numel() * 4 for p in net.parameters())
    # Z_1 is conv3_x's output: 128 × ⌈H/2⌉ × ⌈W/2⌉ per sample; Z_2 the 10 logits
    h = -(-shape[1] // 2)
    n = DATASETS[data].n_train
    assert estimate_memory(cfg)["state_bytes"] == 2 * n * (128 * h * h + 10) * 4


@pytest.mark.parametrize("name", datasets.BUNDLED)
def test_data_shapes_table_matches_the_loaders(name):
    ds = data_mod.load(name)
    s = DATASETS[name]
    assert (s.input_shape, s.n_classes, s.n_train, s.n_test) == (
        ds.input_shape,
        ds.n_classes,
        len(ds.y_train),
        len(ds.y_test),
    )


def test_check_fits_names_estimate_and_what_is_available():
    cfg = tiny()
    est = check_fits(cfg, available=(10**12, "available CPU RAM"))
    assert est["total_bytes"] > 0
    with pytest.raises(ConfigError) as e:
        check_fits(cfg, available=(1000, "available CPU RAM"))
    msg = str(e.value)
    assert "model.hidden = [32, 16]" in msg and "needs about" in msg and "available CPU RAM is 1000 B" in msg
    free, what = available_memory("cpu")
    assert free > 0 and "RAM" in what or "cgroup" in what


# --- damaged files ---------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "not-a-checkpoint"])
def test_resume_refuses_a_damaged_checkpoint_and_leaves_the_run_alone(run_copy, damage):
    ck = run_copy / "checkpoint.pt"
    if damage == "truncated":
        ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    elif damage == "garbage":
        ck.write_bytes(os.urandom(5000))
    elif damage == "empty":
        ck.write_bytes(b"")
    else:
        torch.save({"hello": torch.zeros(3)}, ck)
    before = {p.name: p.read_bytes() for p in run_copy.iterdir()}
    rc, err = cli_run(["train", "--resume", str(run_copy), "--epochs", "3", "--quiet"])
    assert rc == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and str(ck) in line
    assert "damaged" in line or "not a run checkpoint" in line, line
    assert {p.name: p.read_bytes() for p in run_copy.iterdir()} == before  # nothing touched
    rc, err = cli_run(["evaluate", "--run", str(run_copy)])
    assert rc == 2 and str(ck) in err and len(err.strip().splitlines()) == 1


def test_half_written_last_metrics_line_is_skipped_and_resume_continues(run_copy):
    with open(run_copy / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 3, "train_loss": 0.1, "test_acc')  # the writer died mid-line
    with open(run_copy / "metrics.jsonl", "a") as f:
        f.write("\n12\n[1, 2]\n")  # cut lines that still parse as JSON
    assert [m["epoch"] for m in read_metrics(run_copy)] == [0, 1, 2]
    rc, err = cli_run(["train", "--resume", str(run_copy), "--epochs", "3", "--quiet"])
    assert rc == 0, err
    lines = (run_copy / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(ln)["epoch"] for ln in lines] == [0, 1, 2, 3]
    assert read_json(run_copy / "status.json")["state"] == "finished"


@pytest.mark.parametrize("what", ["missing", "garbled", "a list", "bad value"])
def test_damaged_config_json_is_one_line_and_the_run_stays_listed(run_copy, what):
    path = run_copy / "config.json"
    if what == "missing":
        path.unlink()
    elif what == "garbled":
        path.write_text('{"method": "block-ad')
    elif what == "a list":
        path.write_text("[1, 2]")
    else:
        d = json.loads(path.read_text())
        d["train"]["epochs"] = -4
        path.write_text(json.dumps(d))
    rc, err = cli_run(["train", "--resume", str(run_copy), "--quiet"])
    assert rc == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "--resume" in line and "config.json" in line
    if what == "bad value":
        assert "train.epochs = -4" in line
    (r,) = list_runs(run_copy.parent)
    assert r["name"] == "r1" and isinstance(r["config"], dict) and r["status"]["state"] == "finished"


def test_other_runs_stay_listed_next_to_damaged_ones(finished_run, tmp_path):
    root = tmp_path / "runs"
    for name in ("ok", "bad-ckpt", "bad-config", "bad-status", "no-status"):
        shutil.copytree(finished_run, root / name)
    (root / "bad-ckpt" / "checkpoint.pt").write_bytes(b"\x00garbage")
    (root / "bad-config" / "config.json").write_text("{{{")
    (root / "bad-status" / "status.json").write_bytes(b"\xff\xfe not json")
    (root / "no-status" / "status.json").unlink()
    (root / "stray.txt").write_text("not a run")
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    (root / "empty-dir").mkdir()
    listed = {r["name"]: r for r in list_runs(root)}
    assert set(listed) == {"ok", "bad-ckpt", "bad-config", "bad-status", "no-status"}
    assert listed["ok"]["status"]["state"] == "finished" and listed["ok"]["summary"]["epochs"] == 2
    assert listed["bad-config"]["config"] == {} and listed["bad-status"]["status"] == {}
    dash = {r["name"]: r["status"]["state"] for r in W.runs(root)}  # the dashboard's view, no exception
    assert dash["ok"] == "finished" and dash["bad-status"] == "unknown"
    with pytest.raises(CheckpointError, match="bad-ckpt"):
        verify_checkpoint(root / "bad-ckpt" / "checkpoint.pt")


def test_a_runs_folder_that_is_a_file_lists_nothing(tmp_path):
    f = tmp_path / "runs"
    f.write_text("oops")
    assert list_runs(f) == [] and W.runs(f) == []


def test_unwritable_run_directory_is_one_line(tmp_path):
    # as root, permission bits do not stop writes: use a path no one can create (under /proc)
    out = Path("/proc/admm-no-such-dir/run") if os.geteuid() == 0 else tmp_path / "ro" / "run"
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o500)
    rc, err = cli_run(
        ["train", "--preset", "digits-mlp", "--method", "sgd", "--epochs", "1", "--out", str(out), "--quiet"]
    )
    assert rc != 0 and "Traceback" not in err
    (line,) = [ln for ln in err.strip().splitlines() if not ln.startswith("run dir:")]
    assert line.startswith("error: ") and ("admm-no-such-dir" in line or "ro" in line), line


def test_full_disk_keeps_the_last_good_checkpoint(run_copy):
    """A file-size limit (RLIMIT_FSIZE) smaller than the next checkpoint: the write fails with
    EFBIG (Python ignores SIGXFSZ), the run ends 'crashed' with that error in one line, and the
    epoch-2 checkpoint is still there, intact; no temporary file is left behind."""
    ck = run_copy / "checkpoint.pt"
    good = ck.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(good) // 2, hard))
    try:
        rc, err = cli_run(["train", "--resume", str(run_copy), "--epochs", "3", "--quiet"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert rc == 1 and "Traceback" not in err
    (line,) = [ln for ln in err.strip().splitlines() if not ln.startswith("run dir:")]
    assert "File too large" in line
    assert ck.read_bytes() == good and verify_checkpoint(ck)["epoch"] == 2
    assert not list(run_copy.glob("*.tmp"))
    st = read_json(run_copy / "status.json")
    assert st["state"] == "crashed" and "File too large" in st["error"]


# --- lifecycle ---------------------------------------------------------------------------------


def test_dead_worker_is_recorded_crashed_on_disk_by_whoever_notices(run_copy):
    p = subprocess.Popen(["true"])
    p.wait()  # a pid that no longer exists
    st = read_json(run_copy / "status.json")
    rundir.write_json(run_copy / "status.json", {**st, "state": "running", "pid": p.pid})
    seen = run_status(run_copy)  # the CLI / dashboard reading it
    assert seen["state"] == "crashed" and "without reporting" in seen["error"]
    assert read_json(run_copy / "status.json")["state"] == "crashed"  # on disk, for every reader


def test_launcher_reaps_a_killed_worker_and_writes_the_signal(tmp_path, monkeypatch):
    """SIGKILL a dashboard worker mid-run: the launcher's reaper writes crashed + SIGKILL, no zombie."""
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    cfg = tiny("sgd", epochs=100000)
    run_dir = W.start_run(cfg, tmp_path)
    st = _wait(lambda: (s := read_json(run_dir / "status.json")) and s.get("state") == "running" and s, 90)
    assert st, W.log_tail(run_dir)
    pid = st["pid"]
    os.kill(pid, signal.SIGKILL)
    st = _wait(lambda: (s := read_json(run_dir / "status.json")) and s.get("state") == "crashed" and s, 30)
    assert st and st["signal"] == "SIGKILL" and "SIGKILL" in st["error"]
    assert not Path(f"/proc/{pid}").exists()  # reaped: not even a zombie
    a, b = W.runs(tmp_path), W.runs(tmp_path)  # two dashboard sessions read the same truth
    assert [r["status"]["state"] for r in a] == [r["status"]["state"] for r in b] == ["crashed"]


def test_worker_that_exits_before_reporting_gets_its_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    run_dir = tmp_path / "early"
    run_dir.mkdir()
    pid = W._spawn(["--config", str(run_dir / "missing.json"), "--out", str(run_dir)], run_dir)
    st = _wait(lambda: (s := read_json(run_dir / "status.json")) and s, 90)
    assert st["state"] == "crashed" and st["exit_code"] == 2 and st["pid"] == pid
    assert "missing.json" in W.log_tail(run_dir)  # the worker's one-line reason stays in worker.log
    assert not Path(f"/proc/{pid}").exists()


# --- concurrency ---------------------------------------------------------------------------------


def test_run_directories_are_unique_under_a_race(tmp_path):
    got, barrier = [], threading.Barrier(16)

    def one():
        barrier.wait()
        got.append(unique_run_dir("same-name", tmp_path))

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 16 and all(p.is_dir() for p in got)


def test_four_runs_started_at_once_from_cli_and_dashboard(tmp_path, monkeypatch):
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    env = {**os.environ, "ADMM_RUNS": str(tmp_path), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = ["--preset", "digits-mlp", "--method", "sgd", "--epochs", "2", "--train-limit", "100", "--quiet"]
    cfg = RunConfig.from_dict({**json.loads(tiny("sgd").to_json()), "preset": "digits-mlp"})
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "admm_core", "train", *argv],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    dash = [W.start_run(cfg, tmp_path) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read().decode()
    for d in dash:
        assert _wait(lambda d=d: (read_json(d / "status.json") or {}).get("state") == "finished", 600), W.log_tail(d)
    dirs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(dirs) == 4  # same preset, method and seed, same second: distinct directories
    for d in dirs:
        assert RunConfig.from_json((d / "config.json").read_text()).method == "sgd"
        lines = (d / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(ln)["epoch"] for ln in lines] == [0, 1, 2]
        assert verify_checkpoint(d / "checkpoint.pt")["epoch"] == 2
        assert read_json(d / "summary.json")["status"] == "finished"


def _fork_and_wait(child) -> int:
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            child()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return status


def test_kill_during_a_checkpoint_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    """A worker SIGKILLed half-way through writing: checkpoint.pt is the previous one, loadable."""
    path = tmp_path / "checkpoint.pt"
    old = {"epoch": 1, "wall_time_s": 1.0, "net": {"w": torch.ones(1000)}, "method_state": {}}
    atomic_torch_save(old, path)
    real_save = torch.save

    def dying_save(obj, f):
        buf = io.BytesIO()
        real_save(obj, buf)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def child():
        torch.save = dying_save
        atomic_torch_save({**old, "epoch": 2, "net": {"w": torch.zeros(1000)}}, path)

    status = _fork_and_wait(child)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    ck = verify_checkpoint(path)
    assert ck["epoch"] == 1 and torch.equal(ck["net"]["w"], torch.ones(1000))
    leftovers = list(tmp_path.glob("checkpoint.pt.*.tmp"))
    assert len(leftovers) == 1  # the dead writer's half file, never the checkpoint itself
    atomic_torch_save(old, path)  # the next save clears a dead writer's temporary
    assert not list(tmp_path.glob("checkpoint.pt.*.tmp"))


def test_stop_during_a_checkpoint_write_finishes_the_write(tmp_path):
    """SIGTERM (the dashboard's Stop) arriving mid-write only raises the stop flag: the checkpoint
    being written is completed and loads; the run stops after it."""
    path = tmp_path / "checkpoint.pt"
    result = tmp_path / "flag"
    real_save = torch.save

    def save_with_stop(obj, f):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the file is open for writing
        real_save(obj, f)

    def child():
        should_stop = status_mod.install_stop_handlers()
        torch.save = save_with_stop
        atomic_torch_save({"epoch": 3, "wall_time_s": 1.0, "net": {"w": torch.arange(10.0)}, "method_state": {}}, path)
        result.write_text(str(should_stop()))

    status = _fork_and_wait(child)
    assert os.WIFEXITED(status)
    assert result.read_text() == "True"
    assert verify_checkpoint(path)["epoch"] == 3


def test_preflight_checks_before_any_directory():
    for bad, field in [
        (tiny().replace(model__split=("fc2", "fc1")), "model.split"),
        (tiny(method_params={"beta": [1.0, 2.0]}), "block-admm.beta"),
        (tiny().replace(model__hidden=(100000, 100000)), "model.hidden"),
        (tiny().replace(model__arch="resnet18"), "model.arch"),
    ] + (
        [(tiny("taylor").replace(data__name="cifar10", model__arch="resnet18"), "taylor")]
        if "cifar10" in datasets.available()
        else []
    ):
        with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
            preflight(bad, available=(10**10, "available CPU RAM"))


def test_stamped_json_reads_are_cached_only_while_the_file_is_unchanged(tmp_path):
    p = tmp_path / "summary.json"
    old = time.time() - 60
    p.write_text('{"a": 1}')
    os.utime(p, (old, old))
    assert rundir.read_json_stamped(p) == {"a": 1}
    with open(p, "r+") as f:  # same inode, size and mtime: the cache is what answers
        f.write('{"a": 2}')
    os.utime(p, (old, old))
    assert rundir.read_json_stamped(p) == {"a": 1}
    os.utime(p, (old + 1, old + 1))  # any new stamp: parsed again
    assert rundir.read_json_stamped(p) == {"a": 2}
    p.write_text('{"a": 3}')  # just written: never trusted to the cache (coarse file clocks)
    assert rundir.read_json_stamped(p) == {"a": 3}
    with open(p, "r+") as f:
        f.write('{"a": 4}')
    assert rundir.read_json_stamped(p) == {"a": 4}
    p.unlink()
    assert rundir.read_json_stamped(p, "gone") == "gone"


def test_checkpoint_from_before_states_counted_epochs_resumes_the_decay(tmp_path):
    """A checkpoint whose method state lacks ``epoch`` (written before states counted epochs)
    resumes with η·γ^epoch of the epoch it reached, not η again: it ends as an unbroken run."""
    cfg = tiny("sgd", epochs=3, method_params={"lr": 0.05, "lr_decay": 0.5})
    whole = network.train(cfg, tmp_path / "whole")
    part = tmp_path / "part"
    network.train(cfg.replace(train__epochs=2), part)
    ck = torch.load(part / "checkpoint.pt", weights_only=True)
    assert ck["method_state"].pop("epoch") == 2
    checkpoint_mod.atomic_torch_save(ck, part / "checkpoint.pt")
    rc, err = cli_run(["train", "--resume", str(part), "--epochs", "3", "--quiet"])
    assert rc == 0, err
    last = [m for m in rundir.read_metrics(part) if m["epoch"] == 3][0]
    assert last["test_accuracy"] == whole["test_accuracy"]
    assert last["train_loss"] == pytest.approx(rundir.read_metrics(tmp_path / "whole")[-1]["train_loss"], rel=1e-6)


@pytest.mark.parametrize("end", ["stopped", "diverged"])
def test_an_end_whose_summary_cannot_be_written_is_recorded_not_left_running(tmp_path, monkeypatch, end):
    """Stop (or divergence) on a full disk: the summary's write fails inside the loop's stop handler,
    which runs outside its crash handler. The run still ends as asked, with the one disk-full line,
    never 'running'; the last checkpoint loads and, space back, the resume finishes."""
    import errno

    run = tmp_path / "r"
    real = rundir.write_json

    def full(path, obj, durable=True):
        if Path(path).name == "summary.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, obj, durable)

    monkeypatch.setattr(status_mod, "write_json", full)  # RunStatus writes summary.json

    def should_stop():  # once the first epoch's checkpoint is there
        return end == "stopped" and (run / "checkpoint.pt").exists()

    if end == "diverged":  # at epoch 2's evaluation, before its checkpoint
        monkeypatch.setattr(
            network, "divergence", lambda sess, m, *a: "the loss exploded (test)" if m["epoch"] >= 2 else None
        )
    with pytest.raises(OSError) as e:
        network.train(tiny(epochs=3), run, should_stop=should_stop)
    assert e.value.errno == errno.ENOSPC
    st = json.loads((run / "status.json").read_text())
    assert st["state"] == end and st["error"].startswith("disk full: No space left on device writing ")
    assert "summary.json" in st["error"] and not (run / "summary.json").exists()
    assert checkpoint_mod.verify_checkpoint(run / "checkpoint.pt")["epoch"] == 1
    assert not list(run.glob("*.tmp"))
    monkeypatch.setattr(status_mod, "write_json", real)
    monkeypatch.undo()
    network.train(tiny(epochs=3), run, resume=True)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
    assert [m["epoch"] for m in rundir.read_metrics(run)] == [0, 1, 2, 3]  # epoch 0: before training
