"""What a live page costs per redraw (a thousand runs): the Runs page's stamp follows
what a live row shows, not its files' times; Compare's charts draw a bounded number of points."""

from __future__ import annotations

import json
import os
from pathlib import Path

from admm_core import rundir
from admm_core.rundir import append_metrics
from app.dashboard import charts as C


def _live_run(root: Path, name: str, epoch: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    status = {"state": "running", "pid": os.getpid(), "pid_start": None, "host": None, "epoch": epoch, "epochs": 100}
    rundir.write_json(d / "status.json", {**status, "updated": 1.0})
    return d


def test_runs_stamp_changes_with_a_live_rows_values_not_with_its_files(tmp_path, monkeypatch):
    """A live run's metrics line that changes nothing the table shows (same epoch in its status,
    same last test accuracy) and a rewrite of its status.json's time leave the stamp alone; a new
    test accuracy, epoch or state change it. A finished run is stamped by its directory's mtime."""
    from app.views import runs as R  # noqa: PLC0415 - the page module runs its script on import

    root = tmp_path / "runs"
    live = _live_run(root, "b-live", epoch=3)
    append_metrics(live, {"epoch": 3, "test_accuracy": 0.5})
    done = root / "a-done"
    done.mkdir()
    rundir.write_json(done / "status.json", {"state": "finished"})
    names = frozenset({"b-live"})
    stamp = R.runs_stamp(root, names)
    append_metrics(live, {"epoch": 3, "test_accuracy": 0.5, "system": 1})  # nothing shown changes
    rundir.write_json(live / "status.json", {**json.loads((live / "status.json").read_text()), "updated": 2.0})
    assert R.runs_stamp(root, names) == stamp
    append_metrics(live, {"epoch": 4, "test_accuracy": 0.6})  # a new test accuracy in the row
    after = R.runs_stamp(root, names)
    assert after != stamp
    rundir.write_json(live / "status.json", {**json.loads((live / "status.json").read_text()), "epoch": 4})
    assert R.runs_stamp(root, names) != after
    before = R.runs_stamp(root, names)
    os.utime(done, ns=(1, 1))  # a finished run's folder changed (a rename in it moves its mtime)
    assert R.runs_stamp(root, names) != before


def test_thin_keeps_the_first_last_and_extreme_points_of_a_long_curve():
    n = 100_000
    xs = list(range(n))
    ys = [1.0 / (1 + i) for i in range(n)]
    ys[54_321] = 50.0  # a spike (a divergence) must stay drawn
    ys[70_000] = None  # a gap
    (t,) = C.thin([{"type": "scatter", "x": xs, "y": ys, "name": "r"}], 1500)
    assert 1000 <= len(t["x"]) <= 1600 and len(t["x"]) == len(t["y"])
    assert t["x"][0] == 0 and t["x"][-1] == n - 1 and 54_321 in t["x"]
    assert t["x"] == sorted(t["x"]) and all(ys[x] == y for x, y in zip(t["x"], t["y"]))
    short = {"type": "scatter", "x": [0, 1, 2], "y": [3, 2, 1]}
    assert C.thin([short], 1500) == [short] and C.thin([t], None) == [t]


def test_compare_figure_draws_at_most_max_points_per_curve():
    ms = [{"epoch": e, "test_accuracy": 0.5 + e / 1e6, "residuals": [1 / (e + 1), 2 / (e + 1)]} for e in range(20_000)]
    fig = C.compare_figure([("a", ms), ("b", ms[:100])], "residuals", C.Overlay(max_points=1500))
    assert [len(t.x) for t in fig.data if t.name.startswith("a")] and all(
        len(t.x) <= 1600 for t in fig.data if t.name.startswith("a")
    )
    assert all(len(t.x) == 100 for t in fig.data if t.name.startswith("b"))
    full = C.compare_figure([("a", ms)], "test_accuracy")
    assert len(full.data[0].x) == 20_000  # without max_points nothing is cut
    grouped = C.group_figure([("g", [ms, ms])], "test_accuracy", C.Overlay(max_points=1500))
    assert all(len(t.x) <= 1600 for t in grouped.data)


def test_the_stamp_route_answers_digests_and_forgets_tokens_nobody_asks_for(tmp_path, monkeypatch):
    """app/dashboard/follow.py's route, through Starlette's test client on the routes app/serve.py
    mounts: a granted token answers the digest of its stamp function now (what the page compares with
    the one it drew), an unknown token is a 404, a stamp that raises is a 503 (the page asks again),
    and a token not asked for FORGET_S is dropped (a closed tab)."""
    import asyncio

    import httpx
    from starlette.applications import Starlette

    from app.dashboard import follow as FL
    from app.dashboard.live import digest

    # routes() sets the variable itself, outside monkeypatch, and delenv of an absent name records
    # nothing to restore: set it first so the end of this test restores the value before it (else
    # "1" outlives the test, and AppTest pages in the same process wait for a browser that never paints)
    monkeypatch.setenv(FL.ENV, "0")
    monkeypatch.delenv(FL.ENV)
    assert not FL.available()
    app = Starlette(routes=FL.routes())
    assert FL.available()  # mounting the routes says so to the pages (same process)
    monkeypatch.delenv(FL.ENV)

    class Client:  # the route as a browser asks it, in this process (httpx's ASGI transport)
        def get(self, path):
            async def ask():
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
                    return await c.get(path)

            return asyncio.run(ask())

    client = Client()
    state = {"n": 0}
    FL.register("tok-a", lambda: ("runs", state["n"]))
    r = client.get(FL.ROUTE + "/tok-a")
    assert (
        r.status_code == 200 and r.json() == {"stamp": digest(("runs", 0))} and r.headers["cache-control"] == "no-store"
    )
    state["n"] = 1
    assert client.get(FL.ROUTE + "/tok-a").json()["stamp"] == digest(("runs", 1)) != digest(("runs", 0))
    assert client.get(FL.ROUTE + "/nope").status_code == 404
    FL.register("tok-b", lambda: 1 / 0)
    assert client.get(FL.ROUTE + "/tok-b").status_code == 503
    monkeypatch.setattr(FL, "FORGET_S", 0.0)
    FL.register("tok-c", lambda: 0)  # the sweep at this grant drops every token not asked since
    assert client.get(FL.ROUTE + "/tok-a").status_code == 404 and "tok-c" in FL._stamps


def test_a_page_follows_the_runs_folder_through_the_stamp_route(tmp_path, monkeypatch):
    """With the routes mounted, the Runs page ends its panel with the follow component, whose token
    answers the digest of what the panel drew; a new run in the folder changes the answer (then the
    page reruns the panel), and a page drawn again draws the same token and the new digest."""
    from streamlit.testing.v1 import AppTest

    from app.dashboard import follow as FL
    from app.dashboard.live import digest

    root = tmp_path / "runs"
    done = root / "20260101-000000-done"
    done.mkdir(parents=True)
    rundir.write_json(done / "status.json", {"state": "finished"})
    monkeypatch.setenv("ADMM_RUNS", str(root))
    monkeypatch.setenv(FL.ENV, "1")
    app = Path(__file__).resolve().parents[1] / "app" / "views" / "runs.py"
    at = AppTest.from_file(str(app), default_timeout=60).run()
    assert not at.exception
    args = json.loads(at.get("component_instance")[-1].proto.json_args)
    assert args["route"] == FL.ROUTE and args["every_ms"] == 1000
    assert FL.answer(args["token"]) == json.dumps({"stamp": args["drawn"]}).encode()  # nothing changed
    (root / "20260101-000001-new").mkdir()
    assert json.loads(FL.answer(args["token"]))["stamp"] != args["drawn"]  # the page is told
    at.run()
    again = json.loads(at.get("component_instance")[-1].proto.json_args)
    assert (
        again["token"] == args["token"] and FL.answer(again["token"]) == json.dumps({"stamp": again["drawn"]}).encode()
    )
    assert again["drawn"] != args["drawn"] and digest(None) != again["drawn"]


def test_the_dashboard_server_parses_http_with_httptools_and_runs_uvloop():
    """The server's static files (about 60 script modules before a new tab can open its websocket,
    then the widgets' lazy chunks) are answered one by one by one Python process on cores the
    workers load. uvicorn picks its HTTP parser and Streamlit its event loop by what is installed;
    with h11 and asyncio a new tab got its first message 0.2 s later and its first chart 1.6 s
    later (docs/reliability.md, "The server's HTTP parser and event loop"). Fails without the two
    pins in requirements.txt."""
    from streamlit.web import bootstrap
    from streamlit.web.server.starlette.starlette_server import _get_uvicorn_config_kwargs
    from uvicorn.config import Config

    cfg = Config(
        app=lambda scope, receive, send: None, **_get_uvicorn_config_kwargs()
    )  # as Streamlit's server builds it
    cfg.load()
    assert cfg.http_protocol_class.__module__ == "uvicorn.protocols.http.httptools_impl"
    assert bootstrap._get_uvloop_loop_factory() is not None


def test_the_dashboard_uses_streamlits_public_api_only():
    """The pages follow the runs on Streamlit's documented API (``st.*``, ``st.App``,
    ``streamlit.components.v1``). No module of app/ imports another part of Streamlit, or reaches
    for a private name of it (the push thread drove ``Runtime.instance()._session_mgr``,
    ``session._event_loop``, ``_create_scriptrunner`` and rebuilt ``RerunData``; it failed this)."""
    import ast
    import re

    public = {"streamlit", "streamlit.components.v1"}
    private = re.compile(r"_session_mgr|_create_scriptrunner|RerunData|_event_loop|_scriptrunner|script_run_context")
    app = Path(__file__).resolve().parents[1] / "app"
    seen = set()
    for path in sorted(app.rglob("*.py")):
        text = path.read_text()
        assert not private.search(text), (path, private.search(text).group())
        for node in ast.walk(ast.parse(text)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] == "streamlit":
                    assert name in public, (path.name, name)
                    seen.add(name)
    assert seen == public  # the check saw the imports it is about
