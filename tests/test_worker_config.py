"""The worker's config.json: the dashboard writes it, the worker it launches reads it once and
the run loop leaves it as it is."""

from __future__ import annotations

import json
from pathlib import Path


def test_a_dashboard_launched_worker_reads_its_config_once_and_leaves_the_file(tmp_path, monkeypatch):
    """``train --config RUN/config.json --out RUN`` (the dashboard's worker command): config.json is
    read once, and the loop does not write the file again (the same inode after the run)."""
    from admm_core.cli import main
    from admm_core.spec.config import RunConfig

    run = tmp_path / "run"
    run.mkdir()
    cfg = RunConfig(method="sgd").replace(data__name="digits", model__hidden=(8,), train__epochs=1, train__device="cpu")
    path = run / "config.json"
    path.write_text(cfg.to_json())
    inode = path.stat().st_ino
    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: reads.append(p) or read_text(p, *a, **k))
    assert main(["train", "--config", str(path), "--out", str(run), "--preflighted"]) == 0
    assert [p for p in reads if p.name == "config.json"] == [path]
    assert path.stat().st_ino == inode and path.read_text() == cfg.to_json()
    assert json.loads((run / "status.json").read_text())["state"] == "finished"
