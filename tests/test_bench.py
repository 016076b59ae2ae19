"""The benchmark driver: per-method epochs reach each run; the accuracy-vs-time plot reads run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from admm_core import bench

ROOT = Path(__file__).resolve().parents[1]


def _plot_module():
    from admm_core import plots

    return plots


def test_epochs_for_sets_each_methods_length(tmp_path, capsys):
    out = tmp_path / "b"
    rc = bench.main(
        ["--preset", "digits-mlp", "--methods", "adam,bcd", "--epochs", "1", "--epochs-for", "bcd=2", "--out", str(out)]
    )
    assert rc == 0
    epochs = {m: json.loads((out / f"digits-mlp-{m}" / "summary.json").read_text())["epochs"] for m in ("adam", "bcd")}
    assert epochs == {"adam": 1, "bcd": 2}
    table = (out / "digits-mlp.md").read_text()
    assert "| adam | 1 |" in table and "| bcd | 2 |" in table


def test_collect_names_the_machine_each_run_recorded(tmp_path, capsys):
    """The table header says where the runs were measured, read from their status.json, not
    the collecting process's machine (a collect may read runs made elsewhere)."""
    from admm_core.device import machine
    from admm_core.rundir import read_json, write_json

    out = tmp_path / "b"
    assert bench.main(["--preset", "digits-mlp", "--methods", "adam,sgd", "--epochs", "1", "--out", str(out)]) == 0
    st_path = out / "digits-mlp-adam" / "status.json"
    assert read_json(st_path)["machine"] == machine("cpu")
    assert f"machine: {machine('cpu')}" in (out / "digits-mlp.md").read_text()
    elsewhere = "Some CPU; 64 cores; CPU only, 7 threads; torch 0"
    for m in ("adam", "sgd"):
        p = out / f"digits-mlp-{m}" / "status.json"
        write_json(p, {**read_json(p), "machine": elsewhere})
    assert bench.main(["--preset", "digits-mlp", "--methods", "adam,sgd", "--out", str(out), "--collect"]) == 0
    head = (out / "digits-mlp.md").read_text().splitlines()[0]
    assert head == f"Preset `digits-mlp`; machine: {elsewhere}"


def test_augment_flags_map_to_the_same_config_in_train_and_bench():
    """--augment / --augment-pad N / --no-flip: one mapping; either of the last two turns augmentation on."""
    from admm_core.cli import make_parser
    from admm_core.cli.train import config_from_args
    from admm_core.spec.config import RunConfig

    cfg = RunConfig()
    assert cfg.augmented() is cfg
    got = cfg.augmented(pad=2, flip=False).data
    assert (got.augment, got.augment_pad, got.augment_flip) == (True, 2, False)
    assert cfg.augmented(on=True).data == cfg.data.__class__(augment=True)
    a = make_parser().parse_args(["train", "--preset", "cifar10-resnet18-small", "--augment-pad", "3"])
    got = config_from_args(a).data
    assert (got.augment, got.augment_pad, got.augment_flip) == (True, 3, True)
    a = make_parser().parse_args(["train", "--preset", "mnist-mlp-mse", "--no-flip"])
    got = config_from_args(a).data
    assert (got.augment, got.augment_pad, got.augment_flip) == (True, 4, False)


@pytest.mark.parametrize("bad", ["bcd", "bcd=0", "bcd=x"])
def test_epochs_for_rejects_malformed_items(bad, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--preset", "digits-mlp", "--methods", "adam", "--epochs-for", bad, "--out", str(tmp_path)])
    assert "--epochs-for" in capsys.readouterr().err


def test_plot_reads_runs_and_writes_png(tmp_path):
    plot_bench = _plot_module()
    for method, accs in {"adam": [0.1, 0.9, 0.95], "bcd": [0.1, 0.5]}.items():
        run = tmp_path / method
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"method": method}))
        rows = [{"epoch": e, "wall_time_s": 1.5 * e, "test_accuracy": a} for e, a in enumerate(accs)]
        (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "notes").mkdir()  # a folder without metrics is ignored
    curves = plot_bench.load_curves(tmp_path)
    assert curves == {"adam": [(1.5, 0.9), (3.0, 0.95)], "bcd": [(1.5, 0.5)]}  # epoch 0 dropped (log axis)
    png = plot_bench.plot(curves, tmp_path / "out" / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_plot_cli_names_a_missing_folder(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _plot_module().main([str(tmp_path / "nope")])
    assert "folder" in capsys.readouterr().err


def test_machines_line_names_what_runs_recorded_and_says_what_they_did_not():
    from admm_core.bench import machines_line
    from admm_core.device import machine

    assert machines_line([{"machine": "A"}, {"machine": "A"}]) == "machine: A"
    assert machines_line([{"machine": "A"}, {"machine": "B"}, {}]) == (
        "machines: A | B (1 of the 3 runs did not record theirs)"
    )
    here = machine("cuda" if torch.cuda.is_available() else "cpu")
    assert machines_line([{}, {"machine": None}]) == f"machine (not recorded by the runs; this process): {here}"


def test_the_table_gives_time_to_95_as_a_multiple_of_adams_and_the_load():
    base = {"epochs": 5, "test_accuracy": 0.96, "best_test_accuracy": 0.96, "wall_time_s": 10.0}
    base |= {"seconds_per_epoch": 2.0, "state_bytes": 0, "status": "finished"}
    rows = [
        {**base, "method": "adam", "time_to_95_s": 4.0, "load": 1.04},
        {**base, "method": "block-admm", "time_to_95_s": 10.0, "load": 2.5},
        {**base, "method": "sgd", "time_to_95_s": None, "load": None},
    ]
    lines = bench.table("mnist-mlp-mse", rows).splitlines()
    head = [c.strip() for c in lines[0].split("|")]
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")] for line in lines[2:]}
    i, j = head.index("× adam to 95%"), head.index("load")
    assert (cells["adam"][i], cells["block-admm"][i], cells["sgd"][i]) == ("1.00", "2.50", "—")
    assert (cells["adam"][j], cells["block-admm"][j], cells["sgd"][j]) == ("1.0", "2.5", "—")
    assert len(lines[1].split("|")) == len(lines[0].split("|"))  # the separator has a cell per column


def test_a_trained_row_records_the_load_and_collect_reads_it_back(tmp_path):
    out = tmp_path / "b"
    assert bench.main(["--preset", "digits-mlp", "--methods", "adam", "--epochs", "1", "--out", str(out)]) == 0
    rec = json.loads((out / "digits-mlp-adam" / bench.LOAD_FILE).read_text())
    assert rec["samples"] == 3 and rec["load"] >= 0.0  # at the start, the epoch-0 evaluation, after epoch 1
    assert bench.main(["--preset", "digits-mlp", "--methods", "adam", "--out", str(out), "--collect"]) == 0
    row = next(line for line in (out / "digits-mlp.md").read_text().splitlines() if line.startswith("| adam |"))
    assert f"| {rec['load']:.1f} |" in row
