"""Safe by default: no code from files, no paths outside the runs root, a dashboard bound to loopback.

- Every checkpoint / weights file is read with ``torch.load(weights_only=True)``: a pickle
  whose payload would create a marker file is refused with a clear message and the marker
  never appears (as ``checkpoint.pt`` of a run, of a DeepFacto run, and as backbone weights).
- Our own checkpoints load that way for every method (tensors and plain containers only).
- The runs folder typed in the sidebar, run names from the page or a URL, and delete are
  confined to the allowed root (``..``, absolute paths, symlinks all refused).
- The real dashboard, started with the repository's ``.streamlit/config.toml``, answers on
  127.0.0.1 and not on this machine's other addresses.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from helpers import cli_run
from helpers import free_port as _free_port

from admm_core import network
from admm_core.checkpoint import load_checkpoint, safe_load, save_checkpoint
from admm_core.errors import CheckpointError, ConfigError
from admm_core.spec.config import RunConfig
from admm_core.spec.methods import names_for
from app.dashboard import workers as W

ROOT = Path(__file__).resolve().parent.parent


class Payload:
    """Unpickling this runs ``open(marker, 'w')`` (a stand-in for any code an attacker wants)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def evil_file(path: Path, marker: Path, wrap: bool = True) -> Path:
    obj = Payload(marker)
    if wrap:  # looks like a checkpoint from the outside
        obj = {"epoch": 1, "wall_time_s": 0.0, "net": {"w": torch.zeros(2)}, "method_state": {"x": obj}}
    torch.save(obj, path)
    return path


def test_the_payload_really_runs_code_when_loaded_unsafely(tmp_path):
    """Control: the same file *does* execute under weights_only=False (so the refusals below mean something)."""
    marker = tmp_path / "marker"
    evil_file(tmp_path / "x.pt", marker)
    torch.load(tmp_path / "x.pt", weights_only=False)
    assert marker.read_text() == "pwned"


def test_a_code_payload_as_checkpoint_is_refused_and_runs_nothing(run_copy, tmp_path):
    run = run_copy
    marker = tmp_path / "marker"
    evil_file(run / "checkpoint.pt", marker)
    for argv in (["train", "--resume", str(run), "--quiet"], ["evaluate", "--run", str(run)]):
        rc, err = cli_run(argv)
        assert rc == 2 and "Traceback" not in err
        (line,) = err.strip().splitlines()
        assert str(run / "checkpoint.pt") in line and "refused" in line, line
    sess = network.build(RunConfig.from_json((run / "config.json").read_text()))
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(run / "checkpoint.pt", sess)
    assert not marker.exists()


def test_a_code_payload_as_backbone_weights_is_refused(tmp_path):
    from admm_core.faces.backbone import load_backbone

    marker = tmp_path / "marker"
    for wrap in (False, True):
        path = evil_file(tmp_path / f"backbone-{wrap}.pt", marker, wrap=wrap)
        with pytest.raises(CheckpointError, match=r"--backbone-weights .*refused"):
            load_backbone(path)
    assert not marker.exists()


def test_a_code_payload_as_deepfacto_checkpoint_is_refused(tmp_path):
    """The Heatmaps page loads a DeepFacto run's checkpoint.pt (load_inference_model)."""
    from admm_core.deepfacto.inference import load_inference_model

    marker = tmp_path / "marker"
    evil_file(tmp_path / "checkpoint.pt", marker, wrap=False)
    with pytest.raises(CheckpointError, match="refused"):
        load_inference_model(tmp_path)
    with pytest.raises(CheckpointError, match="refused"):
        safe_load(tmp_path / "checkpoint.pt")
    assert not marker.exists()


@pytest.mark.parametrize("method", sorted(names_for("network")))  # a DeepFacto checkpoint: tests below
def test_our_checkpoints_load_with_weights_only(method, tmp_path):
    cfg = RunConfig(method=method).replace(data__train_limit=100, data__test_limit=50, model__hidden=(16, 16))
    sess = network.build(cfg)
    sess.method.run_epoch(sess.net, sess.state, sess.batch, None)  # optimizer moments, generator state
    save_checkpoint(tmp_path / "checkpoint.pt", sess, 1, 0.5)
    ck = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ck["epoch"] == 1
    fresh = network.build(cfg)
    assert load_checkpoint(tmp_path / "checkpoint.pt", fresh) == (1, 0.5)
    for a, b in zip(sess.net.parameters(), fresh.net.parameters()):
        assert torch.equal(a, b)


def test_backbone_weights_round_trip_with_weights_only(tmp_path):
    from admm_core.faces.backbone import FaceBackbone, load_backbone, save_backbone

    net = FaceBackbone(widths=(4, 4, 4, 4), out_channels=8, emb_dim=4)
    save_backbone(tmp_path / "bb.pt", net, {"trained_on": "test", "epochs": 1})
    loaded, meta = load_backbone(tmp_path / "bb.pt")
    assert meta["epochs"] == 1
    for a, b in zip(net.state_dict().values(), loaded.state_dict().values()):
        assert torch.equal(a, b)


def test_no_weights_only_false_left_in_the_code():
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in [*ROOT.joinpath("admm_core").rglob("*.py"), *ROOT.joinpath("app").rglob("*.py")]
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "weights_only=False" in line
    ]
    assert hits == []


# --- the runs root --------------------------------------------------------------------------------


@pytest.fixture
def confined(tmp_path, monkeypatch):
    """allowed root = tmp/root; a run inside it, a run outside it, a symlink from inside to outside."""
    root = tmp_path / "root"
    inside = root / "sub" / "r-in"
    outside = tmp_path / "elsewhere" / "r-out"
    for d in (inside, outside):
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
        (d / "status.json").write_text('{"state": "finished"}')
    (root / "sub" / "link-out").symlink_to(outside)
    (root / "link-root").symlink_to(tmp_path / "elsewhere")
    (root / "a-file").write_text("x")
    monkeypatch.setenv("ADMM_RUNS", str(root))
    monkeypatch.delenv("ADMM_RUNS_ROOT", raising=False)
    return root, inside, outside


def test_runs_folder_is_confined_to_the_allowed_root(confined, tmp_path):
    root, inside, outside = confined
    assert W.confine_runs_root(str(root)) == root.resolve()
    assert W.confine_runs_root(f" {root / 'sub'} ") == (root / "sub").resolve()
    assert W.confine_runs_root(str(root / "new" / "..")) == root.resolve()
    for bad in (
        "..",
        "../..",
        f"{root}/sub/../../elsewhere",
        str(outside.parent),
        "/",
        "/etc",
        str(root / "link-root"),
        str(root / "link-root" / "r-out"),
        str(root / "a-file"),
    ):
        with pytest.raises(ConfigError, match="runs folder"):
            W.confine_runs_root(bad)
        assert W.safe_runs_root(bad) == root  # the pages fall back to the default folder
        assert W.runs_root_problem(bad) and "\n" not in W.runs_root_problem(bad)
    assert W.runs_root_problem(str(root)) is None


def test_allowed_root_can_be_widened_deliberately(confined, tmp_path, monkeypatch):
    root, inside, outside = confined
    monkeypatch.setenv("ADMM_RUNS_ROOT", str(tmp_path))
    assert W.confine_runs_root(str(outside.parent)) == outside.parent.resolve()


@pytest.mark.parametrize("name", ["..", "../..", "../elsewhere/r-out", "/etc", "sub/r-in", "", ".", "link-root"])
def test_run_names_from_the_page_or_url_cannot_escape(confined, name):
    root, _, _ = confined
    with pytest.raises(PermissionError):
        W.run_path(root, name)


def test_delete_never_acts_outside_the_root(confined):
    root, inside, outside = confined
    for target in (outside, root / "sub" / "link-out", root / ".." / "elsewhere" / "r-out"):
        with pytest.raises(PermissionError):
            W.delete_run(target)
    with pytest.raises(PermissionError):
        W.resume_run(outside)
    assert outside.is_dir() and (outside / "config.json").exists()
    assert (root / "sub" / "link-out").is_symlink()
    W.delete_run(W.run_path(root / "sub", "r-in"))  # a real run inside: deleted
    assert not inside.exists() and outside.is_dir()


def test_stop_signals_only_a_worker_process(tmp_path):
    """A status.json naming some other process (crafted, or a recycled pid) never gets it signalled."""
    victim = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "status.json").write_text(f'{{"state": "running", "pid": {victim.pid}}}')
        assert W.stop_run(tmp_path) is False
        time.sleep(0.2)
        assert victim.poll() is None  # still alive: not signalled
    finally:
        victim.kill()
        victim.wait()


# --- the dashboard's network exposure ----------------------------------------------------------------


def test_streamlit_config_binds_loopback_and_limits_uploads():
    conf = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert conf["server"]["address"] == "127.0.0.1"
    assert 0 < conf["server"]["maxUploadSize"] <= 50  # MB
    assert conf["server"].get("enableXsrfProtection", True) is True


def _non_loopback_ipv4() -> str | None:
    addrs = set()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout
        addrs |= {a for a in out.split() if "." in a}
    with contextlib.suppress(OSError):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing interface
            addrs.add(s.getsockname()[0])
    addrs = sorted(a for a in addrs if not a.startswith("127.") and a != "0.0.0.0")
    return addrs[0] if addrs else None


def _answers(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/_stcore/health", timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


def test_real_dashboard_answers_on_loopback_only(tmp_path):
    other = _non_loopback_ipv4()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 address to probe")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env.update(ADMM_RUNS=str(tmp_path), PYTHONPATH=str(ROOT))
    # the repository's .streamlit/config.toml applies (cwd = ROOT); no --server.address given
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app/serve.py", "--server.port", str(port)],  # as run.sh
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        end = time.time() + 180
        while not _answers("127.0.0.1", port) and time.time() < end:
            assert proc.poll() is None, "the dashboard exited"
            time.sleep(0.5)
        assert _answers("127.0.0.1", port), "no answer on 127.0.0.1"
        # the routes serve granted tokens only (the live charts' run directories, the pages' stamps): a
        # path or an unknown token is refused
        for route in ("/api/admm/live", "/api/admm/stamp"):
            for bad in ("nope", "..%2F..%2Fetc%2Fpasswd", "../../etc/passwd"):
                with pytest.raises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{route}/{bad}?n=0&gen=0", timeout=10)
                assert e.value.code in (400, 404), (route, bad)  # 400: Streamlit's own path check refuses encoded ../
        with pytest.raises(OSError):  # connection refused: nothing listens on that address
            socket.create_connection((other, port), timeout=3).close()
        assert not _answers(other, port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
