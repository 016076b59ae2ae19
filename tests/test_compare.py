"""The comparison of runs (:mod:`admm_core.compare`), shared by the dashboard's Compare page and
``admm compare``: legends, the table's rows, the paper's figures, the plotted series as CSV, and the
command on real run directories (the page's own drawing of them: tests/test_app_compare.py)."""

from __future__ import annotations

import csv
import io
import json
import shutil

import pytest
from helpers import cli_call, tiny

from admm_core import compare as X
from admm_core.network import train
from admm_core.rundir import read_json_dict, read_metrics
from admm_core.spec.presets import PAPER, preset_config


def test_legend_labels_say_what_differs():
    labels = X.legend_labels([{"method": "sgd", "train": {"seed": 0}}] * 2)
    assert labels == ["sgd #1", "sgd #2"]  # runs alike in every setting stay told apart
    assert X.fmt_value(5e-4) == "5e-4" and X.fmt_value(0.1) == "0.1" and X.fmt_value(1e9) == "1e9"
    mnist = {"method": "sgd", "data": {"name": "mnist"}, "model": {"hidden": [128, 64]}}
    digits = {"method": "sgd", "data": {"name": "digits"}, "model": {"hidden": [32]}}
    assert X.legend_labels([mnist, digits]) == [
        "sgd · data mnist · hidden widths 128,64",
        "sgd · data digits · hidden widths 32",
    ]


def test_run_kind_is_the_method_that_trained_the_run():
    assert X.run_kind({"method": "block-admm", "deepfacto": {}}) == "deepfacto"  # a DeepFacto run is its own kind
    assert X.run_kind({"method": "sgd"}) == "sgd"


def test_series_csv_names_runs_by_full_id_in_percent():
    run = "20261201-183531-digits-block-admm-lr5e-4"
    ms = [{"epoch": 1, "test_accuracy": 0.9778, "train_loss": 0.25}]
    series = [X.Series(run, "block-admm · lr 5e-4", ms, "block-admm")]
    text = X.series_csv(
        {"test accuracy": series, "train loss": series},
        {"test accuracy": "test_accuracy", "train loss": "train_loss"},
        "epoch",
        {"test accuracy"},
    )
    rows = [line.split(",") for line in text.strip().splitlines()]
    assert rows[0] == ["chart", "run", "legend", "group", "epoch", "value", "unit"]
    assert rows[1] == ["test accuracy", run, "block-admm · lr 5e-4", "block-admm", "1", "97.78", "%"]
    assert rows[2] == ["train loss", run, "block-admm · lr 5e-4", "block-admm", "1", "0.25", ""]
    # the page's own CSV: its accuracy charts in %, the loss and residuals as logged
    page = X.compare_csv(series, [], "epoch").strip().splitlines()
    assert page[1:3] == [
        f"test accuracy,{run},block-admm · lr 5e-4,block-admm,1,97.78,%",
        f"train loss,{run},block-admm · lr 5e-4,block-admm,1,0.25,",
    ], page


def test_compare_rows_carry_the_paper_figures(finished_run):
    cfg = json.loads((finished_run / "config.json").read_text())
    metrics = read_metrics(finished_run)
    # a 2-epoch, 200-sample digits run under the paper's preset name is not the paper's setup
    row = X.run_row("x", {**cfg, "preset": "mnist-mlp-mse"}, {"state": "finished"}, metrics, PAPER)
    assert row["paper test %"] is None and row["Δ vs paper"] is None and row["epochs"] == 2
    assert row["paper"].startswith("setup differs") and "epochs 2 ≠ 50" in row["paper"], row["paper"]
    # the preset's own config (full MNIST, 50 epochs) is: its figure and Δ are shown
    same = preset_config("mnist-mlp-mse", "block-admm").to_dict()
    row = X.run_row("y", same, {"state": "finished"}, metrics, PAPER)
    assert row["paper test %"] == 97.61 and row["paper"] == "same setup"
    assert row["Δ vs paper"] == round(100 * metrics[-1]["test_accuracy"] - 97.61, 2)


# --- admm compare ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_runs(finished_run, tmp_path_factory):
    """Two real run directories: ``finished_run`` (block-admm, seed 0) and an sgd run of seed 1."""
    root = tmp_path_factory.mktemp("compare")
    shutil.copytree(finished_run, root / "a")
    train(tiny(method="sgd", train__seed=1), root / "b")
    return [str(root / "a"), str(root / "b")]


def table_of(out: str) -> list[dict]:
    """The rows of ``admm compare``'s table by its header (columns apart by two spaces or more)."""
    lines = out.split("\n\n")[0].splitlines()
    bounds = [i for i in range(len(lines[0])) if lines[0][i] != " " and (i == 0 or lines[0][i - 2 : i] == "  ")]
    cells = [[line[a:b].strip() for a, b in zip(bounds, [*bounds[1:], None])] for line in lines]
    return [dict(zip(cells[0], row)) for row in cells[1:]]


def test_compare_prints_what_differs_and_the_final_and_best_accuracy(two_runs):
    rc, out, err = cli_call(["compare", *two_runs])
    assert rc == 0, err
    cfgs = [read_json_dict(f"{d}/config.json") for d in two_runs]
    rows = table_of(out)
    assert [r["run"] for r in rows] == two_runs
    assert [r["legend"] for r in rows] == X.legend_labels(cfgs) == ["block-admm · s0", "sgd · s1"]
    for d, row in zip(two_runs, rows):
        acc = [m["test_accuracy"] for m in read_metrics(d)]
        assert row["final test %"] == str(round(100 * acc[-1], 2))
        assert row["best test %"] == str(round(100 * max(acc), 2))
        assert row["status"] == "finished" and row["epochs"] == "2"
        assert row["paper"] == "no figure"  # a tiny run of no preset: no paper figure, no column for one
        assert "paper test %" not in row
    assert [r["⚙ train.seed"] for r in rows] == ["0", "1"]
    differ = X.table_settings(cfgs)
    assert {"method", "train.seed"} <= set(differ)
    assert out.rstrip().endswith(f"settings that differ: {', '.join(differ)}")


def test_compare_csv_is_the_pages_download(two_runs):
    """``--csv``: the Compare page's "Download the charts' data (CSV)", every logged evaluation."""
    rc, out, err = cli_call(["compare", *two_runs, "--csv"])
    assert rc == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["chart", "run", "legend", "group", "epoch", "value", "unit"]
    for d, legend in zip(two_runs, ["block-admm · s0", "sgd · s1"]):
        want = [
            ["test accuracy", d, legend, "", str(m["epoch"]), f"{100 * m['test_accuracy']:.6g}", "%"]
            for m in read_metrics(d)
        ]
        assert [r for r in rows if r[0] == "test accuracy" and r[1] == d] == want
        assert any(r[0] == "train loss" and r[1] == d and r[6] == "" for r in rows)
    series = [X.Series(d, lab, read_metrics(d)) for d, lab in zip(two_runs, ["block-admm · s0", "sgd · s1"])]
    assert out == X.compare_csv(series, [], "epoch")


def test_compare_groups_as_the_page_does_and_refuses_what_it_cannot_read(two_runs, tmp_path):
    rc, out, err = cli_call(["compare", *two_runs, "--group-by", "method"])
    assert rc == 0, err
    assert [r["group"] for r in table_of(out)] == ["block-admm", "sgd"]
    rc, _, err = cli_call(["compare", *two_runs, "--group-by", "colour"])
    assert rc == 2 and "--group-by 'colour': choose from" in err and "'method × train.seed'" in err
    rc, _, err = cli_call(["compare", two_runs[0], str(tmp_path)])
    assert rc == 2 and f"{tmp_path}: no config.json here (not a run directory)" in err
