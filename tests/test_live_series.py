"""The live charts drawn in the browser equal the server's rule.

``app/dashboard/live_series.js`` builds the Train page's charts from the declarations
(``charts.live_spec``), the style (``charts.STYLE``: it has no palette or legend sizes of its own)
and raw metrics lines; ``charts.spec_traces`` / ``figure_from_spec`` is the reference. Both run here
on the same lines (a real digits run's, DeepFacto-shaped lines and edge cases), the JavaScript in
node, and every trace (type, name, colour, x, y) and the legend sizing must agree. Plus the data
route's server half (``app/dashboard/tail.py``): incremental reads equal ``read_metrics``, a
half-written line waits, a truncated file starts over, tokens are the only key, and a run launched
but not yet reporting reads 'starting'.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from admm_core import rundir
from admm_core.network import train
from admm_core.rundir import read_metrics
from admm_core.spec.config import RunConfig
from app.dashboard import charts as C
from app.dashboard import tail as T

JS = Path(C.__file__).with_name("live_series.js")
NODE = shutil.which("node") or shutil.which("nodejs")

RUNNER = """
const L = require(process.argv[1]);
const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const out = cases.map(c => {
  const trs = L.traces(c.chart, c.lines, c.log, c.style);
  return {traces: trs, layout: L.layout(c.frame, trs, c.chart.note, c.style), shown: L.shown(c.spec, Object.keys(c.spec), c.lines)};
});
process.stdout.write(JSON.stringify(out));
"""


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


def close(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return a == b


@pytest.mark.skipif(NODE is None, reason="node is not installed (scripts/test.sh installs it with apt)")
def test_browser_traces_equal_the_servers(real_lines):
    cases, want = [], []
    for lines, deepfacto in ((real_lines, False), (edge_lines(), False), (deepfacto_lines(), True), ([], False)):
        spec = C.live_spec("deepfacto" if deepfacto else None)
        for name, chart in spec.items():
            for log in (True, False):
                frame = C.spec_frame(chart, "r")
                cases.append(
                    {"chart": chart, "lines": lines, "log": log, "frame": frame, "spec": spec, "style": C.STYLE}
                )
                fig = C.figure_from_spec(chart, lines, "r", log_y=log).to_plotly_json()
                shown = [n for n, c in spec.items() if not c.get("when") or any(m.get(c["when"]) for m in lines)]
                want.append((name, log, fig, shown))
    proc = subprocess.run(
        [NODE, "-e", RUNNER, str(JS)], input=json.dumps(cases), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert len(got) == len(want) > 40
    compared = 0
    for g, (name, log, fig, shown) in zip(got, want):
        where = f"{name} log={log}"
        assert g["shown"] == shown, where
        assert len(g["traces"]) == len(fig["data"]), where
        for a, b in zip(g["traces"], fig["data"]):
            assert (a["type"], a["name"]) == (b["type"], b["name"]), where
            assert a.get("line", a.get("marker")) == b.get("line", b.get("marker")), where
            assert close(a["x"], list(b["x"])) and close(a["y"], list(b["y"])), (where, a["y"], b["y"])
            compared += len(a["y"])
        lay, ref = g["layout"], fig["layout"]
        assert lay["height"] == ref["height"] and lay["margin"] == ref["margin"], where
        assert lay.get("showlegend", True) == ref.get("showlegend", True), where
        assert lay.get("annotations", []) == [dict(a) for a in ref.get("annotations", [])], where
    assert compared > 300  # the comparison saw real series, not empty ones


@pytest.mark.skipif(NODE is None, reason="node is not installed (scripts/test.sh installs it with apt)")
def test_a_narrow_chart_wraps_its_title_and_legend_to_its_width(real_lines):
    """A third of the panel at 1280 px (~270 px): "Cosine with backprop's gradient" ran under the modebar and
    three block entries took two legend rows where one was reserved, over the x axis title."""
    runner = """
const L = require(process.argv[1]);
const c = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const trs = L.traces(c.chart, c.lines, false, c.style);
process.stdout.write(JSON.stringify([null, 2000, 270].map(w => L.layout(c.frame, trs, "", c.style, w))));
"""
    spec = C.live_spec(None)
    name = next(n for n, c in spec.items() if c["title"].startswith("Cosine"))
    chart = spec[name]
    case = {"chart": chart, "lines": real_lines, "frame": C.spec_frame(chart, "r"), "style": C.STYLE}
    proc = subprocess.run([NODE, "-e", runner, str(JS)], input=json.dumps(case), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    plain, wide, narrow = json.loads(proc.stdout)
    assert wide == plain  # wide enough: as the server lays it out (the test above)
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


def test_edge_lines_really_exercise_the_rules():
    """The edge cases above are edges: gaps on log axes, left-out series, a chart shown by `when`."""
    spec = C.live_spec()
    loss = C.spec_traces(spec["loss"], edge_lines(), True)
    assert [t["name"] for t in loss] == ["train", "test"] and None in loss[0]["y"]  # 0 and -0.5: gaps
    assert C.spec_traces(spec["loss"], edge_lines(), False)[0]["y"][3] == -0.5
    res = C.spec_traces(spec["residuals"], edge_lines(), True)
    assert len(res) == 3 and all(y is None for y in res[1]["y"])  # block 2 is 0 everywhere
    assert len(C.spec_traces(spec["betas"], edge_lines(), False)) == 3  # a number where a list belongs: a gap
    assert any(m.get(spec["backprop_cosine"]["when"]) for m in edge_lines())  # the cosine chart is shown
    assert C.spec_traces(spec["accuracy"], [], False)[0]["y"] == []  # a run with no line yet: empty series


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
