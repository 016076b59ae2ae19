"""The live charts' rules (``app/dashboard/live_series.js``, run in node) on real and edge-case
metrics lines, and the data route's server half (``app/dashboard/tail.py``): incremental reads equal
``read_metrics``, a half-written line waits, a truncated file starts over, tokens are the only key,
and a run launched but not yet reporting reads 'starting'.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from helpers import live_js, needs_node

from admm_core import rundir
from admm_core.network import train
from admm_core.rundir import read_metrics
from admm_core.spec.config import RunConfig
from app.dashboard import charts as C
from app.dashboard import tail as T


@pytest.fixture(scope="module")
def real_lines(tmp_path_factory) -> list[dict]:
    """A real online-admm run's lines: per-block lists, the backprop cosine, wall times."""
    d = tmp_path_factory.mktemp("series") / "run"
    cfg = RunConfig(method="online-admm").replace(data__train_limit=200, data__test_limit=100, train__epochs=3)
    train(cfg, d)
    lines = read_metrics(d)
    assert len(lines) >= 3 and any(m.get("residuals") for m in lines) and any(m.get("backprop_cosine") for m in lines)
    return lines


def edge_lines() -> list[dict]:
    """What real files hold now and then: missing keys, nulls (NaN cleaned), negatives and zeros
    (gaps on a log axis), ragged per-block lists, a repeated epoch, a non-list where a list belongs."""
    out = []
    for e in range(7):
        m = {"epoch": e if e != 4 else 3, "iteration": 10 * e, "time": 50.0 + 1.7 * e, "wall_time_s": 1.3 * e}
        m["train_accuracy"] = 0.5 + 0.05 * e
        m["test_accuracy"] = None if e == 2 else 0.45 + 0.05 * e
        m["train_loss"] = [2.0, 1.0, 0.0, -0.5, 0.4, 0.3, 0.2][e]
        if e != 1:
            m["test_loss"] = 1.0 / (e + 1)
        m["residuals"] = [0.3 / (e + 1), 0.0, -1e-3][: 1 + e % 3]
        m["dual_norms"] = [1.0, None, 2.0]
        m["betas"] = 5 if e == 3 else [1.0, 2.0, 4.0]
        m["backprop_cosine"] = [0.3, -0.9] if e % 2 else []
        out.append(m)
    return out


def deepfacto_lines() -> list[dict]:
    return [
        {
            "epoch": i,
            "time": 10.0 + i,
            "wall_time_s": 2.0 * i,
            "test_accuracy": 0.6 + 0.01 * i,
            "train_loss": 0.5 / i,
            "residuals": [0.1 / i, 0.2, 0.3],
            "dual_norms": [1.0, 2.0, 3.0],
            "nmf_residual": 0.2 / i,
            "s_mismatch": 0.1 if i > 1 else None,
        }
        for i in range(1, 5)
    ]


def ys(trace) -> list:
    return [None if y is None else round(y, 9) for y in trace["y"]]


@needs_node
def test_live_traces_follow_the_declarations_on_edge_lines():
    """Gaps on a log axis (0 and negatives), ragged per-block lists, a number where a list belongs, a
    missing value, a repeated epoch (no seconds bar), percent accuracy, the palette by series and block."""
    spec, lines, S = C.live_spec(), edge_lines(), C.STYLE
    acc, loss_log, loss, res_log, res, betas, duals, secs = live_js(
        ["traces", spec["accuracy"], lines, False, S],
        ["traces", spec["loss"], lines, True, S],
        ["traces", spec["loss"], lines, False, S],
        ["traces", spec["residuals"], lines, True, S],
        ["traces", spec["residuals"], lines, False, S],
        ["traces", spec["betas"], lines, False, S],
        ["traces", spec["dual_norms"], lines, True, S],
        ["traces", spec["seconds"], lines, False, S],
    )
    epochs = [m["epoch"] for m in lines]
    assert [(t["name"], t["line"]["color"], t["x"]) for t in acc] == [
        ("train", C.COLOURS[0], epochs),
        ("test", C.COLOURS[1], epochs),
    ]
    assert ys(acc[0]) == [50.0, 55.0, 60.0, 65.0, 70.0, 75.0, 80.0] and ys(acc[1])[2] is None
    assert ys(loss_log[0]) == [2.0, 1.0, None, None, 0.4, 0.3, 0.2] and ys(loss[0])[2:4] == [0.0, -0.5]
    assert ys(loss_log[1])[:3] == [1.0, None, round(1 / 3, 9)]
    assert [t["name"] for t in res_log] == ["block 1", "block 2", "block 3"]
    assert [t["line"]["color"] for t in res_log] == C.COLOURS[:3]
    assert ys(res_log[0]) == [round(0.3 / (e + 1), 9) for e in range(7)]
    assert ys(res_log[1]) == [None] * 7 and ys(res_log[2]) == [None] * 7  # 0 and −1e-3: gaps on a log axis
    assert ys(res[1]) == [None, 0.0, 0.0, None, 0.0, 0.0, None]  # linear: zeros drawn, short lists gaps
    assert len(betas) == 3 and ys(betas[2])[3] is None  # a number where a list belongs: a gap
    assert len(duals) == 3 and ys(duals[1]) == [None] * 7  # a block of nulls keeps its trace (and colour)
    assert secs == [
        {"type": "bar", "x": [1, 2, 3, 5, 6], "y": secs[0]["y"], "name": "s / epoch", "marker": {"color": C.COLOURS[2]}}
    ]
    # wall time 1.3 s a line: the repeated epoch has no bar, and 3 → 5 is 1.3 s over two epochs
    assert [round(y, 9) for y in secs[0]["y"]] == [1.3, 1.3, 1.3, 0.65, 1.3]


@needs_node
def test_live_charts_shown_empty_runs_and_legend_band():
    spec, S = C.live_spec(), C.STYLE
    no_cosine = [{**m, "backprop_cosine": []} for m in edge_lines()]
    frame = C.spec_frame(spec["residuals"], "r")
    three = [{"name": f"block {t}", "type": "scatter"} for t in (1, 2, 3)]
    shown, hidden, empty_acc, empty_res, legend, one, note = live_js(
        ["shown", spec, list(spec), edge_lines()],
        ["shown", spec, list(spec), no_cosine],
        ["traces", spec["accuracy"], [], False, S],
        ["traces", spec["residuals"], [], True, S],
        ["layout", frame, three, "", S],
        ["layout", frame, three[:1], "", S],
        ["layout", frame, [], "no blocks", S],
    )
    assert shown == list(spec) and hidden == [n for n in spec if n != "backprop_cosine"]
    assert [(t["name"], t["y"]) for t in empty_acc] == [("train", []), ("test", [])]  # kept while no line came
    assert empty_res == []
    band = C.LEGEND
    rows = math.ceil(3 * (7 * band["char_px"] + band["entry_px"]) / band["row_px"])
    assert legend["showlegend"] and legend["margin"]["b"] == band["bottom"] + band["row_height"] * rows
    assert legend["height"] == frame["height"] + band["row_height"] * rows
    assert not one["showlegend"] and one["height"] == frame["height"] and one["margin"] == frame["margin"]
    assert note["annotations"][0]["text"] == "no blocks" and "annotations" not in legend


@needs_node
def test_live_traces_of_a_real_run_are_its_logged_values(real_lines):
    """A real online-admm run: one trace per block with the logged values, accuracy in percent."""
    spec = C.live_spec("online-admm")
    assert "residuals" in spec
    acc, res, shown = live_js(
        ["traces", spec["accuracy"], real_lines, False, C.STYLE],
        ["traces", spec["residuals"], real_lines, False, C.STYLE],
        ["shown", spec, list(spec), real_lines],
    )
    blocks = max(len(m.get("residuals") or []) for m in real_lines)
    assert len(res) == blocks >= 2
    for t, trace in enumerate(res):
        assert trace["y"] == [(m.get("residuals") or [None] * blocks)[t] for m in real_lines]
    assert [round(y, 9) for y in acc[1]["y"]] == [round(100 * m["test_accuracy"], 9) for m in real_lines]
    assert ("backprop_cosine" in shown) == any(m.get("backprop_cosine") for m in real_lines)


@needs_node
def test_smoothing_keeps_gaps_and_log_ticks_name_every_decade():
    (sm, plain, ticks, finer, wide) = live_js(
        ["ema", [1.0, None, 3.0], 0.5],
        ["ema", [1.0, None, 3.0], 0],
        ["logTicks", [0.5, 0.2, 0.1, 0.05, 0.02], C.TICKS],
        ["logTicks", [0.19, 0.6], C.TICKS],
        ["logTicks", [1e-6, 1e3], C.TICKS],
    )
    assert sm == [1.0, None, 2.0] and plain == [1.0, None, 3.0]
    assert ticks["ticktext"] == ["0.02", "0.05", "0.1", "0.2", "0.5"]
    assert finer["ticktext"] == ["0.2", "0.3", "0.4", "0.5", "0.6"]  # under a decade: a finer ladder
    assert len(wide["tickvals"]) <= C.TICKS["max"] and wide["ticktext"][0] == "1e-6"
    assert (ticks["ticktext"], finer["ticktext"]) == (
        C.log_ticks([0.5, 0.2, 0.1, 0.05, 0.02])[1],
        C.log_ticks([0.19, 0.6])[1],
    )


@needs_node
def test_a_narrow_chart_wraps_its_title_and_legend_to_its_width(real_lines):
    """A third of the panel at 1280 px (~270 px): "Cosine with backprop's gradient" ran under the modebar and
    three block entries took two legend rows where one was reserved, over the x axis title."""
    chart = next(c for c in C.live_spec(None).values() if c["title"].startswith("Cosine"))
    frame = C.spec_frame(chart, "r")
    (trs,) = live_js(["traces", chart, real_lines, False, C.STYLE])
    plain, wide, narrow = live_js(*(["layout", frame, trs, "", C.STYLE, w] for w in (None, 2000, 270)))
    assert wide == plain  # wide enough: the frame's own title
    room = 270 - plain["margin"]["l"] - plain["margin"]["r"]
    lines = narrow["title"]["text"].split("<br>")
    assert len(lines) == 2 and all(len(t) * C.TITLE["char_px"] <= room for t in lines), lines
    assert narrow["margin"]["t"] == plain["margin"]["t"] + C.TITLE["top_px"]
    # plotly lifts a second line's title by about a line's half: padded back, as charts._figure pads its own
    assert narrow["title"]["pad"]["t"] == C.TITLE["pad_px"] + C.TITLE["shift_px"]
    two = C._figure([], "Seconds per epoch (training only) " * 2, "epoch", "s").to_plotly_json()["layout"]
    assert two["title"]["text"].count("<br>") == 1 and two["title"]["pad"]["t"] == narrow["title"]["pad"]["t"]
    blocks = len(real_lines[-1]["backprop_cosine"])
    assert blocks >= 3 and narrow["margin"]["b"] == plain["margin"]["b"] + C.LEGEND["row_height"]  # a second row
    assert narrow["height"] == plain["height"] + C.TITLE["line_px"] + C.LEGEND["row_height"]


# --- the route's server half -------------------------------------------------------------------------


def write(path: Path, lines: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(m) + "\n" for m in lines) + tail)


def _ask(tok: str, have: list[dict], gen: int) -> tuple[int, list[dict]]:
    """What a page holding ``have`` (of generation ``gen``) keeps after one request: (gen, lines)."""
    doc = json.loads(T.body(tok, len(have), gen))
    return doc["gen"], have[: doc["start"]] + doc["lines"]


def test_route_sends_only_new_complete_lines_equal_to_read_metrics(tmp_path, monkeypatch):
    run = tmp_path / "r"
    run.mkdir()
    ms = [{"epoch": e, "train_loss": 1.0 / (e + 1)} for e in range(5)]
    write(run / "metrics.jsonl", ms[:2], tail='{"epoch": 2, "train_lo')  # a line being written
    tok = T.grant(run)
    gen, have = _ask(tok, [], 0)
    assert have == read_metrics(run)[:2] == ms[:2]  # the half line waits: the page counts what it holds
    with open(run / "metrics.jsonl", "a") as f:
        f.write('ss": 0.3333333333333333}\n' + json.dumps(ms[3]) + "\n" + "[1, 2]\n" + json.dumps(ms[4]) + "\n")
    sent = []
    real = T.json.dumps
    monkeypatch.setattr(T.json, "dumps", lambda o, **kw: sent.append(o) or real(o, **kw))
    gen2, have = _ask(tok, have, gen)
    assert gen2 == gen and sent[0] == have[2:]  # only the three new lines were sent
    assert have == read_metrics(run) == [*ms[:2], {"epoch": 2, "train_loss": 0.3333333333333333}, ms[3], ms[4]]


def test_route_starts_over_when_the_file_is_replaced_truncated_or_rewritten(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    write(run / "metrics.jsonl", [{"epoch": e} for e in range(4)])
    tok = T.grant(run)
    g0, have = _ask(tok, [], 0)
    write(run / "metrics.jsonl", [{"epoch": 9}])  # shorter: truncated / rewritten
    g1, have = _ask(tok, have, g0)
    assert g1 != g0 and have == [{"epoch": 9}]
    other = tmp_path / "new.jsonl"
    write(other, [{"epoch": 1}, {"epoch": 2}, {"epoch": 3}, {"epoch": 4}, {"epoch": 5}])
    other.replace(run / "metrics.jsonl")  # replaced by a longer file (another inode)
    g2, have = _ask(tok, have, g1)
    assert g2 not in (g0, g1) and [m["epoch"] for m in have] == [1, 2, 3, 4, 5]
    # a resume rewrites the file in place with the lines its checkpoint covers, then appends: by the
    # next read it may be longer than before, with other bytes before the old offset
    rundir.reset_metrics(run, keep_through=2)
    for e in range(3, 9):
        rundir.append_metrics(run, {"epoch": e, "train_loss": 0.5})
    g3, have = _ask(tok, have, g2)
    assert g3 not in (g0, g1, g2) and have == read_metrics(run) and len(have) == 8


def test_route_body_sends_what_the_page_lacks_and_nothing_for_unknown_tokens(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "running", "epoch": 2, "epochs": 8, "progress": 0.25}))
    (run / "metrics.jsonl").write_text(
        '{"epoch": 1, "test_accuracy": 0.5, "time": 1.0, "residuals": [NaN, 1.0]}\n{"epoch": 2, "test_accuracy": 0.75, "time": 2.0}\n'
    )
    tok = T.grant(run)
    assert T.grant(run) == tok and T.body("nope", 0, 0) is None and T.body(tok + "x", 0, 0) is None
    first = json.loads(T.body(tok, 0, 0))  # the browser's JSON.parse would refuse NaN: json.loads with
    assert first["start"] == 0 and [m["epoch"] for m in first["lines"]] == [1, 2]
    assert first["lines"][0]["residuals"] == [None, 1.0]
    st = first["status"]
    assert st["live"] and st["progress"] == 0.25 and st["test"] == "test 75.00% at epoch 2"
    assert st["text"].startswith("running · epoch 2/8 · 25%")
    again = json.loads(T.body(tok, 2, first["gen"]))
    assert again["start"] == 2 and again["lines"] == []
    stale = json.loads(T.body(tok, 2, first["gen"] - 1))  # another generation: everything again
    assert stale["start"] == 0 and len(stale["lines"]) == 2
    beyond = json.loads(T.body(tok, 7, first["gen"]))
    assert beyond["start"] == 0 and len(beyond["lines"]) == 2


def test_route_json_is_strict_json(tmp_path):
    """No NaN / Infinity tokens reach the browser, whatever the worker wrote."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"epoch": 1, "train_loss": Infinity, "x": {"y": [-Infinity, NaN]}}\n')
    out = T.body(T.grant(run), 0, 0).decode()

    def refuse(tok):
        raise ValueError(tok)

    doc = json.loads(out, parse_constant=refuse)
    assert doc["lines"] == [{"epoch": 1, "train_loss": None, "x": {"y": [None, None]}}]


def test_the_answer_that_says_ended_carries_every_line(tmp_path, monkeypatch):
    """The page stops asking once it reads an ended state: a worker that appends its last line and
    writes 'finished' between the route's two reads must not leave that line out."""
    run = tmp_path / "r"
    run.mkdir()
    write(run / "metrics.jsonl", [{"epoch": 1}])
    (run / "status.json").write_text(json.dumps({"state": "running", "epoch": 1, "epochs": 2}))
    real = T.state_of

    def worker_finishes_now(path):  # the worker's last two writes land exactly at the route's first read
        if not (run / "done").exists():
            (run / "done").touch()
            rundir.append_metrics(run, {"epoch": 2})
            (run / "status.json").write_text(json.dumps({"state": "finished", "epoch": 2, "epochs": 2}))
        return real(path)

    monkeypatch.setattr(T, "state_of", worker_finishes_now)
    doc = json.loads(T.body(T.grant(run), 0, 0))
    assert not doc["status"]["live"] and [m["epoch"] for m in doc["lines"]] == [1, 2]


def test_a_run_launched_but_not_reporting_is_starting_and_the_answer_carries_the_panels_stamp(tmp_path):
    """The chart's first request can come before the new worker writes status.json. The
    route reads the run's state as the dashboard does (launch.json with a live pid: 'starting'), so
    the page keeps asking; and each answer carries the digest of what the panel draws, which
    changes with the state (then the page reruns the panel), not with a new line."""
    from app.dashboard.live import digest, live_stamp

    run = tmp_path / "runs" / "20260101-000000-new"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"train": {"epochs": 30}}))
    (run / "launch.json").write_text(json.dumps({"pid": os.getpid(), "cmd": [], "launched": 0.0}))
    tok = T.grant(run)
    first = json.loads(T.body(tok, 0, 0))
    assert first["status"]["state"] == "starting" and first["status"]["live"], first["status"]
    assert first["status"]["text"] == "starting · epoch 0/30 · 0%"
    assert first["stamp"] == digest(live_stamp(run.parent, run.name))
    (run / "status.json").write_text(json.dumps({"state": "running", "pid": os.getpid(), "epoch": 0, "epochs": 30}))
    second = json.loads(T.body(tok, 0, first["gen"]))
    assert second["status"]["state"] == "running" and second["stamp"] != first["stamp"]
    rundir.append_metrics(run, {"epoch": 1, "test_accuracy": 0.5})
    third = json.loads(T.body(tok, 0, second["gen"]))
    assert third["stamp"] == second["stamp"] and len(third["lines"]) == 1  # a line: the page draws it itself


def test_the_panel_draws_the_digest_the_route_answers_until_the_state_changes(tmp_path, monkeypatch):
    """The Train page's live panel hands its charts the digest of what it drew, computed as the route
    computes it: equal while nothing the panel shows changed (no rerun; a mismatch would rerun the
    panel every few seconds), different once the run's state changes (the page reruns the panel)."""
    from streamlit.testing.v1 import AppTest

    from app.dashboard import follow as FL

    root = tmp_path / "runs"
    run = root / "20260101-000000-live"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(RunConfig().to_dict()))
    status = {"state": "running", "pid": os.getpid(), "epoch": 1, "epochs": 30, "progress": 0.03}
    (run / "status.json").write_text(json.dumps(status))
    rundir.append_metrics(run, {"epoch": 1, "test_accuracy": 0.5, "time": 1.0})
    monkeypatch.setenv("ADMM_RUNS", str(root))
    monkeypatch.setenv(FL.ENV, "1")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app" / "main.py"), default_timeout=120)
    at.query_params["run"] = run.name
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    charts = [json.loads(c.proto.json_args) for c in at.get("component_instance")]
    args = next(a for a in charts if a.get("run") == run.name)
    assert args["live"]["route"] == T.ROUTE and args["style"] == C.STYLE
    answer = json.loads(T.body(args["live"]["token"], 0, 0))
    assert answer["stamp"] == args["drawn"] and answer["status"]["state"] == "running"
    rundir.append_metrics(run, {"epoch": 2, "test_accuracy": 0.6, "time": 2.0})  # a new line: the page's own
    assert json.loads(T.body(args["live"]["token"], 1, answer["gen"]))["stamp"] == args["drawn"]
    (run / "status.json").write_text(json.dumps({**status, "state": "finished"}))
    assert json.loads(T.body(args["live"]["token"], 2, answer["gen"]))["stamp"] != args["drawn"]  # told
    at.run()
    again = next(a for a in map(lambda c: json.loads(c.proto.json_args), at.get("component_instance")) if "run" in a)
    assert again["drawn"] == json.loads(T.body(again["live"]["token"], 2, answer["gen"]))["stamp"] != args["drawn"]
