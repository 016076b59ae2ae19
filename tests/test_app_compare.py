"""The Compare page: grouping that keeps methods apart, grouped curves on a common
time grid, legends from the runs' configs, a selection that lasts, the table and the settings chart.

The run directories are written here (config.json from the presets, status.json, metrics.jsonl of
made-up but plausible curves): the page reads only those files, and the curves must be known to
check the means drawn from them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from admm_core.compare import settings_of
from admm_core.rundir import write_json
from admm_core.spec.presets import preset_config
from app.dashboard import charts as C

APP = Path(__file__).resolve().parent.parent / "app"
TIMEOUT = 60

# (run id, method, seed, lr or None for the preset's); listed oldest first
RUNS = [
    ("20261201-100000-digits-block-admm", "block-admm", 0, None),
    ("20261201-100100-digits-block-admm", "block-admm", 1, None),
    ("20261201-100200-digits-block-admm", "block-admm", 1, 5e-3),  # the preset: 2e-3
    ("20261201-100300-digits-sgd", "sgd", 0, None),
    ("20261201-100400-digits-sgd", "sgd", 1, None),
]


def make_run(root: Path, name: str, method: str, seed: int, lr: float | None, age: int, acc0: float = 0.5) -> Path:
    cfg = preset_config("digits-mlp", method)
    cfg = cfg.replace(train__seed=seed, train__epochs=3)
    if lr is not None:
        cfg = cfg.replace(method_params={**cfg.method_params, "lr": lr})
    d = root / name
    d.mkdir()
    write_json(d / "config.json", cfg.to_dict())
    write_json(d / "status.json", {"state": "finished", "epoch": 3, "epochs": 3})
    lines = [
        {"epoch": e, "wall_time_s": 1.5 * e + 0.1 * seed, "test_accuracy": acc0 + 0.1 * e + 0.01 * seed}
        for e in range(4)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    t = 1.7e9 + age
    os.utime(d, (t, t))  # the runs list is newest first by the folder's mtime
    return d


@pytest.fixture
def runs(tmp_path, monkeypatch):
    for i, (name, method, seed, lr) in enumerate(RUNS):
        make_run(tmp_path, name, method, seed, lr, age=i)
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    return tmp_path


def compare(runs_picked: list[str]) -> AppTest:
    at = AppTest.from_file(str(APP / "views" / "compare.py"), default_timeout=TIMEOUT)
    at.query_params["runs"] = ",".join(runs_picked)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def chart_names(at: AppTest, i: int = 0) -> list[str]:
    """Legend entries of the page's i-th chart (the test accuracy chart first), each on one line."""
    spec = json.loads(at.get("plotly_chart")[i].proto.spec)
    return [t["name"].replace("<br>", " ") for t in spec["data"] if t.get("showlegend", True) is not False]


# --- grouping -------------------------------------------------------------------------------------


def test_grouping_keeps_methods_apart_and_names_what_the_group_shares(runs):
    seeds = [RUNS[0][0], RUNS[1][0], RUNS[3][0], RUNS[4][0]]  # two seeds each of block-admm and sgd
    at = compare(seeds)
    group = at.selectbox(key="cmp_group")
    # no "seed" alone: grouping by the seed's value pooled gotmare with a diverged block-admm run
    assert group.options == ["nothing", "seeds (mean of runs alike but for the seed)", "method", "method × seed", "tag"]
    group.set_value("seeds").run()
    assert chart_names(at) == ["block-admm (n = 2)", "sgd (n = 2)"]
    # the mean of the two seeds: 0.5 + 0.1 e and 0.51 + 0.1 e, in %
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    mean = next(t for t in spec["data"] if t["name"] == "block-admm (n = 2)")
    assert mean["y"] == pytest.approx([50.5, 60.5, 70.5, 80.5])
    at.selectbox(key="cmp_group").set_value("method × train.seed").run()
    assert chart_names(at) == [
        "block-admm · s0 (n = 1)",
        "block-admm · s1 (n = 1)",
        "sgd · s0 (n = 1)",
        "sgd · s1 (n = 1)",
    ]


def test_grouping_by_method_and_by_method_times_setting(runs):
    at = compare([r[0] for r in RUNS])
    opts = at.selectbox(key="cmp_group").options
    assert {"method", "method × lr", "lr", "method × seed"} <= set(opts), opts
    at.selectbox(key="cmp_group").set_value("method").run()
    # the block-admm runs differ in lr besides the seed: the legend says so (not pooled as seeds)
    assert chart_names(at) == ["block-admm · pools lr 2e-3 / 5e-3 (n = 3)", "sgd (n = 2)"]
    at.selectbox(key="cmp_group").set_value("method × m.lr").run()
    assert chart_names(at) == ["block-admm · lr 2e-3 (n = 2)", "block-admm · lr 5e-3 (n = 1)", "sgd · lr 0.05 (n = 2)"]


def test_grouped_curves_against_wall_time_are_averaged_on_one_grid():
    """Two runs of one curve, one 10 points above, logged half a second apart: the mean is the curve
    + 5 wherever both ran. Matched on rounded wall times, each x had one run and the mean went
    up and down by 10 (a saw-tooth)."""
    a = [{"wall_time_s": float(t), "test_accuracy": float(t)} for t in range(10)]
    b = [{"wall_time_s": t + 0.5, "test_accuracy": t + 10.5} for t in range(10)]
    fig = C.group_figure([("g", [a, b])], "test_accuracy", C.Overlay(x_key="wall_time_s"))
    hi, lo, mean = fig.data
    both = [(x, y) for x, y in zip(mean.x, mean.y) if 0.5 <= x <= 9.0]
    assert len(both) >= 17 and all(y == pytest.approx(x + 5) for x, y in both), both
    assert all(y2 >= y1 for y1, y2 in zip(mean.y, mean.y[1:])), mean.y  # monotone: no saw-tooth
    assert all(h - m == pytest.approx(5) for h, m, x in zip(hi.y, mean.y, mean.x) if 0.5 <= x <= 9.0)
    # past the end of run a (x 9.5) only b counts: no extrapolation of a
    assert mean.x[-1] == 9.5 and mean.y[-1] == pytest.approx(19.5)


# --- legends (their rules: tests/test_compare.py) ------------------------------------------------------------------


def test_legends_say_what_differs_not_a_truncated_id(runs):
    at = compare([r[0] for r in RUNS[:3]])
    assert chart_names(at) == ["block-admm · s0 · lr 2e-3", "block-admm · s1 · lr 2e-3", "block-admm · s1 · lr 5e-3"]
    assert not any("2026" in n or "…" in n for n in chart_names(at))


# --- the selection ---------------------------------------------------------------------------------


def test_the_pick_lasts_across_visits_and_new_runs(runs):
    """Before any pick the newest runs are shown, and the page says so. A pick stays, in the link and
    at the next visit (a new session, no link), even after two new runs, which the menu offers but
    does not pick (the newest 6 were re-chosen before). (The session keeps it while the page is
    left: ``cmp_runs`` is set by the page, and Streamlit keeps such keys.)"""
    at = AppTest.from_file(str(APP / "views" / "compare.py"), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="cmp_runs").value == [r[0] for r in reversed(RUNS)]  # newest first
    assert any("Nothing picked yet" in c.value for c in at.caption)
    oldest = RUNS[0][0]
    at.multiselect(key="cmp_runs").set_value([oldest]).run()
    assert not any("Nothing picked yet" in c.value for c in at.caption)
    q = {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert q["runs"] == oldest
    make_run(runs, "20261201-110000-digits-sgd", "sgd", 2, None, age=100)
    make_run(runs, "20261201-110100-digits-sgd", "sgd", 3, None, age=101)
    again = AppTest.from_file(str(APP / "views" / "compare.py"), default_timeout=TIMEOUT).run()  # the next visit
    assert not again.exception, [e.value for e in again.exception]
    assert again.multiselect(key="cmp_runs").value == [oldest]
    assert "20261201-110100-digits-sgd" in again.multiselect(key="cmp_runs").options  # offered, not picked
    assert not any("Nothing picked yet" in c.value for c in again.caption)


# --- the table and the settings chart ------------------------------------------------------------


def test_table_one_method_column_status_early_no_none_two_decimals(runs):
    at = compare([r[0] for r in RUNS])
    df = at.dataframe[0]
    assert df.proto.placeholder == "—"  # a value a run lacks, not "None"
    order = list(df.proto.column_order)
    assert order[:3] == ["run", "method", "status"] and "name" not in order, order  # no run named: no column
    assert "⚙ method" not in order and "⚙ m.lr" in order
    cols = json.loads(df.proto.columns)
    for k in ("final test %", "best test %", "paper test %"):
        assert cols[k]["type_config"]["format"] == "%.2f", cols[k]
    table = df.value
    assert list(table["final test %"]) == pytest.approx([80.0, 81.0, 81.0, 80.0, 81.0])
    par = json.loads(at.get("plotly_chart")[-1].proto.spec)["data"][0]
    assert par["type"] == "parcoords"
    labels = [d["label"] for d in par["dimensions"]]
    assert labels[0] == "method" and "lr (log)" in labels and labels[-1] == "final test %", labels


def test_settings_chart_log_axis_for_lr_and_room_for_method_names():
    flat = [
        {"method": "online-admm", "m.lr": 5e-4, "m.k": 3},
        {"method": "sgd", "m.lr": 0.1, "m.k": 4},
        {"method": "adam", "m.lr": 5e-3, "m.k": 5},
    ]
    rows = [{"final test %": 90.0}, {"final test %": 92.0}, {"final test %": 91.0}]
    fig = C.parallel_figure(rows, flat, ["method", "m.lr", "m.k"])
    method, lr, k, acc = fig.data[0].dimensions
    assert method.ticktext == ("adam", "online-admm", "sgd")  # in full
    assert fig.layout.margin.l >= 20 + 7 * len("online-admm")
    assert lr.label == "lr (log)" and lr.values == pytest.approx((-3.30103, -1.0, -2.30103), abs=1e-5)
    assert "0.1" in lr.ticktext and lr.range == pytest.approx((-3.30103, -1.0), abs=1e-5)
    assert k.label == "k" and k.values == (3.0, 4.0, 5.0)  # not learning-rate-like, one decade: linear
    assert k.tickvals == (3, 4, 5) and k.ticktext == ("3", "4", "5")  # whole numbers: ticks at them only


def test_parallel_coordinates_put_a_seed_axis_at_its_values_only():
    """Two seeds: the axis says 0 and 1, not 0, 0.2, 0.4, … (raw fractions of a whole number)."""
    from app.dashboard import charts as C

    flat = [{"method": "sgd", "train.seed": 0}, {"method": "sgd", "train.seed": 1}]
    fig = C.parallel_figure([{"final test %": 90.0}, {"final test %": 91.0}], flat, ["train.seed"])
    seed = fig.data[0].dimensions[0]
    assert seed.label == "seed" and seed.tickvals == (0, 1) and seed.ticktext == ("0", "1")


# --- resolved values and what a group pools ------------------------------------------------------


def write_run(root: Path, name: str, cfg, epochs: int, age: int, acc0: float = 0.5) -> None:
    """A finished run of ``cfg`` with a test accuracy and per-block residuals at epochs 0…epochs."""
    d = root / name
    d.mkdir()
    write_json(d / "config.json", cfg.to_dict())
    write_json(d / "status.json", {"state": "finished", "epoch": epochs, "epochs": epochs})
    lines = [
        {"epoch": e, "wall_time_s": 1.0 * e, "test_accuracy": acc0 + 0.001 * e, "residuals": [0.1, 0.2]}
        for e in range(epochs + 1)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))
    t = 1.7e9 + age
    os.utime(d, (t, t))


def test_a_runs_default_split_is_shown_and_in_the_csv(tmp_path, monkeypatch):
    """A block-admm run with no split in its config was trained in its network's default blocks
    (fc1, fc2 of a 64,64 MLP): the ⚙ split column and the CSV say so, not '—' / an empty cell."""
    base = preset_config("digits-mlp", "block-admm").replace(model__hidden=(64, 64), train__epochs=2)
    write_run(tmp_path, "a-default-split", base, 2, 0)
    write_run(tmp_path, "b-one-cut", base.replace(model__split=("fc1",)), 2, 1)
    write_run(
        tmp_path, "c-sgd", preset_config("digits-mlp", "sgd").replace(model__hidden=(64, 64), train__epochs=2), 2, 2
    )
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    at = compare(["a-default-split", "b-one-cut", "c-sgd"])
    table = at.dataframe[0].value
    split = [v if isinstance(v, str) else None for v in table["⚙ model.split"]]
    assert split == ["fc1,fc2", "fc1", None]  # sgd: end to end, no blocks
    row = json.loads((tmp_path / "a-default-split" / "config.json").read_text())
    assert row["model"]["split"] is None and settings_of(row)["model.split"] == "fc1,fc2"
    assert "fc1,fc2" in table.to_csv(index=False)  # the CSV is this table's columns


def test_grouping_by_method_says_what_it_pools_and_n_at_each_x(tmp_path, monkeypatch):
    """Three block-admm runs of two networks and of 6, 20 and 60 epochs grouped by method: the legend
    says what the group pools (not as if they were seeds), n is the number of runs at each x (3 up to
    epoch 6, 1 past epoch 20), and the grouped residual chart has its legend too."""
    base = preset_config("digits-mlp", "block-admm")
    write_run(tmp_path, "r6", base.replace(model__hidden=(64, 64, 64), train__epochs=6), 6, 0)
    write_run(tmp_path, "r20", base.replace(model__hidden=(128, 128), train__epochs=20), 20, 1)
    write_run(tmp_path, "r60", base.replace(model__hidden=(128, 128), train__epochs=60), 60, 2)
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    at = compare(["r6", "r20", "r60"])
    at.selectbox(key="cmp_group").set_value("method").run()
    names = chart_names(at)
    assert len(names) == 1, names
    assert "pools" in names[0] and "hidden widths 64,64,64 / 128,128" in names[0], names
    assert "epochs 6 / 20 / 60" in names[0] and "(n = 1–3 by x)" in names[0], names
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    mean = next(t for t in spec["data"] if t.get("showlegend", True) is not False)
    n_at = dict(zip(mean["x"], mean["customdata"]))
    assert n_at[3] == 3 and n_at[10] == 2 and n_at[40] == 1, n_at
    assert spec["layout"].get("showlegend") is not False
    residual = json.loads(at.get("plotly_chart")[3].proto.spec)
    assert residual["layout"].get("showlegend") is True, residual["layout"].get("showlegend")
    # grouped by method × network: the 128,128 group still says it pools two lengths
    at.selectbox(key="cmp_group").set_value("method × model.hidden").run()
    assert chart_names(at) == [
        "block-admm · hidden widths 64,64,64 (n = 1)",
        "block-admm · hidden widths 128,128 · pools epochs 20 / 60 (n = 1–2 by x)",
    ]
