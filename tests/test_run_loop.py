"""The one run loop (admm_core.loop) and the run's kind (admm_core.spec.kinds), both kinds of
run go through run_loop, the run records its kind, and runs saved before that are read by the old rule."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from admm_core import loop
from admm_core.rundir import read_json, read_metrics, write_json
from admm_core.spec import kinds
from admm_core.spec.kinds import run_kind
from admm_core.status import list_runs

# --- the kind ---------------------------------------------------------------------------------------


def test_run_kind_reads_the_recorded_kind_first():
    assert run_kind({"kind": "deepfacto", "method": "block-admm"}) == "deepfacto"
    assert run_kind({"kind": "network", "preset": "lfwa-something"}) == "network"  # recorded beats the old rule
    assert run_kind({"method": "sgd"}, {"kind": "deepfacto"}) == "deepfacto"  # status.json's kind
    assert run_kind({}, {"kind": "nonsense"}) == "network"  # an unknown kind is not trusted


def test_run_kind_reads_the_old_layout_by_the_old_rule():
    assert run_kind({"preset": "lfwa-deepfacto", "deepfacto": {"rank": 4}}) == "deepfacto"
    assert run_kind({"deepfacto": {}}) == "deepfacto"
    assert run_kind({"preset": "lfwa-deepfacto"}) == "deepfacto"  # the heatmaps page's rule
    assert run_kind({"method": "block-admm", "preset": "digits-mlp"}) == "network"
    for nothing in (None, {}, [], "x"):
        assert run_kind(nothing) == "network"


def test_run_method_is_read_off_what_the_run_recorded():
    """The charts' method: a DeepFacto run of either layout is the deepfacto method's (its old
    config.json said "block-admm"), a network run its config's method; no metrics key is read."""
    assert kinds.run_method({"kind": "deepfacto", "method": "block-admm"}) == "deepfacto"
    assert kinds.run_method({"deepfacto": {"rank": 4}, "method": "block-admm"}) == "deepfacto"
    assert kinds.run_method({"method": "gotmare"}, {"kind": "network"}) == "gotmare"
    assert kinds.run_method(None) is None


def test_a_deepfacto_config_records_its_kind():
    from admm_core.spec.deepfacto import DeepFactoConfig, run_config_dict

    d = run_config_dict(DeepFactoConfig())
    assert d["kind"] == "deepfacto" and run_kind(d) == "deepfacto"
    assert run_kind({k: v for k, v in d.items() if k != "kind"}) == "deepfacto"  # the old layout too


def test_an_old_layout_deepfacto_run_dir_is_listed_with_its_kind(tmp_path):
    """A DeepFacto run directory as runs were written before kinds (config.json with the
    ``deepfacto`` key, no ``kind`` in config or status) is found and read as DeepFacto."""
    old = tmp_path / "20260101-000000-lfwa-deepfacto-r4-s0"
    old.mkdir()
    cfg = {
        "preset": "lfwa-deepfacto",
        "method": "block-admm",
        "data": {"name": "lfwa", "root": None},
        "model": {"arch": "face-resnet18s+nmf+fc", "rank": 4},
        "train": {"epochs": 2, "seed": 0, "device": "cpu", "batch_size": 32},
        "deepfacto": {"rank": 4, "warmup_epochs": 1, "finetune_epochs": 1},
    }
    write_json(old / "config.json", cfg)
    write_json(old / "status.json", {"state": "finished", "epoch": 2, "epochs": 2, "phase": "done"})
    (rec,) = list_runs(tmp_path)
    assert "kind" not in rec["config"] and "kind" not in rec["status"]
    assert run_kind(rec["config"], rec["status"]) == "deepfacto"
    from admm_core.spec.deepfacto import read_run_config

    assert read_run_config(old).rank == 4


# --- the loop ------------------------------------------------------------------------------------------


class Counter(loop.Task):
    """A task with no torch: x += 1 per epoch; its loss is 1/x, NaN from epoch ``nan_at``."""

    kind = "network"

    def __init__(self, epochs=4, nan_at=None, fail_at=None):
        self.epochs, self.nan_at, self.fail_at = epochs, nan_at, fail_at
        self.x, self.finished_hook = 0, []

    def resume_point(self, run_dir: Path):
        return read_json(run_dir / "state.json")

    def config_text(self, resumed):
        return json.dumps({"kind": self.kind, "epochs": self.epochs})

    def load(self, run_dir, point):
        self.x = point["x"]
        return point["epoch"], point["wall"]

    def run_epoch(self, epoch, progress):
        progress(0.5)
        if epoch == self.fail_at:
            raise RuntimeError("boom")
        self.x += 1

    def evaluate(self, epoch):
        loss = math.nan if self.nan_at is not None and epoch >= self.nan_at else 1.0 / (1 + self.x)
        return {"train_loss": loss, "x": self.x}

    def diverged(self, m):
        return None if math.isfinite(m["train_loss"]) else "loss is NaN"

    def save(self, run_dir, epoch, wall):
        write_json(run_dir / "state.json", {"x": self.x, "epoch": epoch, "wall": wall})

    def finish(self, run_dir, status, metrics, wall):
        self.finished_hook.append(len(metrics))  # the end-of-run hook sees every line
        return {"status": "finished", "x": self.x}, {"phase": "done"}


def test_the_loop_runs_a_task_to_its_end(tmp_path):
    task = Counter(epochs=3)
    seen = []
    out = loop.run_loop(task, tmp_path / "r", on_progress=lambda e, m: seen.append(e))
    st = read_json(tmp_path / "r" / "status.json")
    assert out == {"status": "finished", "x": 3} == read_json(tmp_path / "r" / "summary.json")
    assert st["state"] == "finished" and st["kind"] == "network" and st["phase"] == "done" and st["progress"] == 1.0
    assert [m["epoch"] for m in read_metrics(tmp_path / "r")] == [0, 1, 2, 3] and task.finished_hook == [4]
    assert seen == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert json.loads((tmp_path / "r" / "config.json").read_text())["kind"] == "network"


def test_a_stopped_task_resumes_where_its_checkpoint_is(tmp_path):
    run = tmp_path / "r"
    out = loop.run_loop(Counter(epochs=5), run, should_stop=lambda: len(read_metrics(run)) >= 3)
    assert out["status"] == "stopped" and read_json(run / "status.json")["state"] == "stopped"
    assert [m["epoch"] for m in read_metrics(run)] == [0, 1, 2]
    task = Counter(epochs=5)
    assert loop.run_loop(task, run, resume=True) == {"status": "finished", "x": 5}
    assert [m["epoch"] for m in read_metrics(run)] == [0, 1, 2, 3, 4, 5] and not (
        run / "summary.json"
    ).read_text() == ""


def test_divergence_and_crash_end_the_status(tmp_path):
    out = loop.run_loop(Counter(epochs=5, nan_at=2), tmp_path / "d")
    st = read_json(tmp_path / "d" / "status.json")
    assert out["status"] == "diverged" and st["state"] == "diverged" and st["error"] == "epoch 2: loss is NaN"
    with pytest.raises(RuntimeError, match="boom"):
        loop.run_loop(Counter(epochs=5, fail_at=2), tmp_path / "c")
    st = read_json(tmp_path / "c" / "status.json")
    assert st["state"] == "crashed" and "boom" in st["error"] and (tmp_path / "c" / "error.txt").is_file()


def test_both_kinds_of_run_go_through_the_one_loop(monkeypatch, tmp_path):
    """train (the engine) and train_deepfacto hand their task to loop.run_loop: no second loop."""
    from admm_core import network
    from admm_core.deepfacto import run as df_run
    from admm_core.spec.config import RunConfig
    from admm_core.spec.deepfacto import DeepFactoConfig

    got = []
    fake = lambda task, run_dir, **kw: got.append((type(task).__name__, task.kind)) or {}  # noqa: E731
    monkeypatch.setattr(network, "run_loop", fake)
    monkeypatch.setattr(df_run, "run_loop", fake)
    network.train(RunConfig(), tmp_path / "a")
    df_run.train_deepfacto(DeepFactoConfig(), tmp_path / "b")
    assert got == [("NetworkTask", "network"), ("DeepFactoTask", "deepfacto")]
    assert issubclass(network.NetworkTask, loop.Task) and issubclass(df_run.DeepFactoTask, loop.Task)


def test_deepfacto_state_is_a_method_state_and_reads_the_old_state_pt_layout():
    """DeepFactoState is a MethodState whose fields are state.pt's ``trainer["state"]``; a dict
    written the old way (dataclasses.asdict, before it was a MethodState) loads into a trainer and
    the next iteration continues exactly as from the trainer that saved it."""
    import dataclasses
    import io

    import numpy as np
    import torch

    from admm_core.deepfacto.trainer import DeepFactoState, DeepFactoTrainer
    from admm_core.faces.backbone import FaceBackbone
    from admm_core.methods.base import MethodState
    from admm_core.spec.deepfacto import DeepFactoConfig

    def trainer():
        torch.manual_seed(0)
        cfg = DeepFactoConfig(rank=3, image_size=32, emb_dim=8, batch_size=8, s_steps=2, m_steps=2)
        bb = FaceBackbone(widths=(8, 8, 16, 16), out_channels=8, emb_dim=8).eval()
        images = np.random.default_rng(0).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
        return DeepFactoTrainer(cfg, bb, images, np.repeat(np.arange(4), 4), "cpu", torch.Generator().manual_seed(0))

    assert issubclass(DeepFactoState, MethodState)
    a = trainer()
    a.iterate(finetune=False)
    old = {**a.state_dict(), "state": dataclasses.asdict(a.state)}  # the layout saved before
    assert old["state"].keys() == a.state.state_dict().keys()
    buf = io.BytesIO()
    torch.save(old, buf)  # through a file, as state.pt: nothing shared with ``a``
    buf.seek(0)
    b = trainer()
    b.load_state_dict(torch.load(buf, weights_only=True))
    da, db = a.iterate(finetune=True), b.iterate(finetune=True)
    assert da["residuals"] == db["residuals"] and torch.equal(a.state.m, b.state.m) and b.state.iteration == 2
