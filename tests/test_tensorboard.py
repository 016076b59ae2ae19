"""TensorBoard event files (admm_core.tboard): what TensorBoard's own reader gets
back from a run's folder equals metrics.jsonl, per block, for a run the loop wrote, a run resumed
after a stop, and an old run exported by ``admm export tensorboard``."""

from __future__ import annotations

import shutil

import pytest
from helpers import cli_call, tiny

pytest.importorskip("tensorboard", reason="tensorboard is not installed (requirements.txt pins it)")
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402

from admm_core import network  # noqa: E402
from admm_core.rundir import read_metrics  # noqa: E402
from admm_core.tboard import event_files  # noqa: E402


def tensorboard_view(folder, reader=event_accumulator) -> dict:
    """{tag: [(step, wall time, value)]} as TensorBoard's reader loads the folder (every event kept):
    ``event_accumulator`` (the reader's public class) or ``plugin_event_accumulator`` (the one its
    server's scalar charts read through)."""
    ea = reader.EventAccumulator(str(folder), size_guidance={"tensors": 0})
    ea.Reload()
    return {
        tag: [(e.step, e.wall_time, tensor_util.make_ndarray(e.tensor_proto).item()) for e in ea.Tensors(tag)]
        for tag in ea.Tags()["tensors"]
    }


def expected_view(run_dir) -> dict:
    """The same from metrics.jsonl, written out here by the rule docs/tensorboard.md states."""
    out: dict = {}
    for m in read_metrics(run_dir):
        for key, v in m.items():
            if key in ("epoch", "time"):
                continue
            values = {key: v} if not isinstance(v, list) else {f"{key}/block{t + 1}": x for t, x in enumerate(v)}
            for tag, x in values.items():
                out.setdefault(tag, []).append((m["epoch"], m["time"], float(x)))
    return out


@pytest.mark.parametrize("reader", [event_accumulator, plugin_event_accumulator], ids=["legacy", "plugin"])
def test_a_finished_run_reads_back_from_tensorboard_as_in_metrics_jsonl(finished_run, reader):
    view, want = tensorboard_view(finished_run, reader), expected_view(finished_run)
    assert event_files(finished_run), "the run loop wrote no event files"
    assert {"residuals/block1", "residuals/block3", "test_accuracy", "train_loss"} <= set(view)
    assert view == want  # every tag, every epoch, exact values (float64) and wall times
    assert [s for s, _, _ in view["test_accuracy"]] == [0, 1, 2]


def test_the_option_off_writes_no_event_files(tmp_path):
    network.train(tiny(epochs=1).replace(train__tensorboard=False), tmp_path / "r")
    assert read_metrics(tmp_path / "r") and not event_files(tmp_path / "r")


def test_a_resumed_run_keeps_one_value_per_epoch(tmp_path):
    """Stopped after epoch 3 with its checkpoint at 2: the resume drops epoch 3's first line and
    runs it again; TensorBoard's view has epoch 3 once, the final metrics.jsonl's."""
    d = tmp_path / "r"
    cfg = tiny(epochs=4).replace(train__checkpoint_every=2)
    seen = []
    network.train(cfg, d, on_progress=lambda e, m: m and seen.append(m["epoch"]), should_stop=lambda: 3 in seen)
    assert [m["epoch"] for m in read_metrics(d)] == [0, 1, 2, 3]
    first3 = next(m for m in read_metrics(d) if m["epoch"] == 3)
    network.train(cfg, d, resume=True)
    lines = read_metrics(d)
    assert [m["epoch"] for m in lines] == [0, 1, 2, 3, 4] and lines[3]["time"] != first3["time"]
    assert len(event_files(d)) == 1  # the resume rewrote the kept lines, then went on
    assert tensorboard_view(d) == expected_view(d)


def test_export_writes_the_same_for_an_old_run(run_copy, tmp_path):
    """An old run directory without event files: ``admm export tensorboard`` gives what the run
    loop would have written; with --out the run directory is left as it was."""
    for p in event_files(run_copy):
        p.unlink()
    before = sorted(p.name for p in run_copy.iterdir())
    rc, out, err = cli_call(["export", "tensorboard", str(run_copy), "--out", str(tmp_path / "tb")])
    assert rc == 0, err
    assert sorted(p.name for p in run_copy.iterdir()) == before
    assert tensorboard_view(tmp_path / "tb" / run_copy.name) == expected_view(run_copy)
    rc, out, err = cli_call(["export", "tensorboard", str(run_copy)])
    assert rc == 0 and "3 metrics lines" in out, (out, err)
    assert tensorboard_view(run_copy) == expected_view(run_copy)
    rc, _, _ = cli_call(["export", "tensorboard", str(run_copy)])  # again: replaced, not doubled
    assert rc == 0 and len(event_files(run_copy)) == 1 and tensorboard_view(run_copy) == expected_view(run_copy)


def test_export_names_every_bad_run_at_once(run_copy, tmp_path):
    other = tmp_path / "other" / "r1"
    shutil.copytree(run_copy, other)
    rc, out, err = cli_call(["export", "tensorboard", str(tmp_path / "nope"), str(tmp_path), str(run_copy)])
    assert rc == 2 and "Traceback" not in err
    assert "nope" in err and f"{str(tmp_path)!r}: no metrics.jsonl" in err
    rc, _, err = cli_call(["export", "tensorboard", str(run_copy), str(other), "--out", str(tmp_path / "tb")])
    assert rc == 2 and "share a folder name" in err and not (tmp_path / "tb").exists()
