"""Run directories written before Block-ADMM was split into parts resume with today's classes.

tests/fixtures/oldrun/<method>/ is a tiny digits run (96 rows, an MLP 64-16-16-10, seed 3) that
main's code at ae05ce8 stopped after epoch 1: its text files as written, its checkpoint.pt kept
as checkpoint.json + checkpoint.safetensors (:mod:`packing`, no pickle in git). block-admm runs
Alg. 1 as printed (``recipe=paper``: the sweep schedule, Adam on Z, U uniform), gotmare the
minibatch schedule. Resumed to epoch 2, each must log what the same code logged when it ran the
two epochs without a stop (expected_epoch2.json): the state loads into the new classes and the
updates after it are the same.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from admm_core.network import train
from admm_core.spec.config import RunConfig

OLD = Path(__file__).parent / "fixtures" / "oldrun"


def _unpack(folder: Path) -> dict:
    from fixtures.oldrun.packing import unpack  # tests/ is on the path (pytest's rootdir conftest)

    return unpack(folder)


def _close(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):  # one process may sum in another order than the next: float32 rounding only
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7)
    return a == b


@pytest.mark.parametrize("method", ["block-admm", "gotmare"])
def test_an_old_run_resumes_to_the_numbers_of_an_unbroken_one(method, tmp_path):
    src, run = OLD / method, tmp_path / "run"
    run.mkdir()
    for f in ("config.json", "metrics.jsonl", "status.json", "summary.json"):
        shutil.copy(src / f, run / f)
    torch.save(_unpack(src), run / "checkpoint.pt")
    cfg = RunConfig.from_json((run / "config.json").read_text())
    assert cfg.method == method and cfg.train.epochs == 1
    train(cfg.replace(train__epochs=2), run, resume=True)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]  # epochs 0, 1 from the old files, epoch 2 trained now
    expected = json.loads((src / "expected_epoch2.json").read_text())
    got = {k: rows[-1][k] for k in expected}
    bad = {k: (expected[k], got[k]) for k in expected if not _close(expected[k], got[k])}
    assert not bad, bad
