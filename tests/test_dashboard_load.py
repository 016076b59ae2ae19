"""What a live page costs per redraw (issue #36, a thousand runs): the Runs page's stamp follows
what a live row shows, not its files' times; Compare's charts draw a bounded number of points."""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import wait as _wait

from admm_core import runs
from admm_core.runs import append_metrics
from app.dashboard import charts as C


def _live_run(root: Path, name: str, epoch: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    status = {"state": "running", "pid": os.getpid(), "pid_start": None, "host": None, "epoch": epoch, "epochs": 100}
    runs.write_json(d / "status.json", {**status, "updated": 1.0})
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
    runs.write_json(done / "status.json", {"state": "finished"})
    names = frozenset({"b-live"})
    stamp = R.runs_stamp(root, names)
    append_metrics(live, {"epoch": 3, "test_accuracy": 0.5, "system": 1})  # nothing shown changes
    runs.write_json(live / "status.json", {**json.loads((live / "status.json").read_text()), "updated": 2.0})
    assert R.runs_stamp(root, names) == stamp
    append_metrics(live, {"epoch": 4, "test_accuracy": 0.6})  # a new test accuracy in the row
    after = R.runs_stamp(root, names)
    assert after != stamp
    runs.write_json(live / "status.json", {**json.loads((live / "status.json").read_text()), "epoch": 4})
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


def test_push_asks_a_quiet_stamp_less_often(monkeypatch):
    """A stamp that has not changed for 40 s (a tab on a finished run) is asked about once a
    second, and a change of it is still pushed within about a second; one drawn just now is asked
    every tick (0.1 s)."""
    import time

    from app.dashboard import push as P

    monkeypatch.setattr(P, "_alive", lambda sid: True)
    calls = []

    class Loop:
        def call_soon_threadsafe(self, fn, *args):
            calls.append(time.monotonic())

    asked = {"quiet": 0, "fresh": 0}
    changed_at = [float("inf")]

    def sub(name, drawn):
        def stamp_fn():
            asked[name] += 1
            return (int(name == "quiet" and time.monotonic() >= changed_at[0]),)

        s = {"fid": "f", "stamp_fn": stamp_fn, "stamp": (0,), "loop": Loop(), "every": 0.0, "drawn": drawn}
        s["session"] = type("Session", (), {"_scriptrunner": None})()
        return s

    now = time.monotonic()
    with P._lock:
        P._subs[("test-quiet", "k")] = sub("quiet", now - 40.0)
        P._subs[("test-fresh", "k")] = sub("fresh", now)
        P._ensure_thread()
    P._wake.set()  # as subscribe does
    try:
        time.sleep(1.5)
        assert 1 <= asked["quiet"] <= 2, asked
        assert asked["fresh"] >= 6, asked  # 14 at 0.1 s on an idle machine, fewer under load
        assert not calls  # nothing changed: nothing rerun
        changed_at[0] = time.monotonic()
        time.sleep(1.6)
    finally:
        with P._lock:
            P._subs.pop(("test-quiet", "k"), None)
            P._subs.pop(("test-fresh", "k"), None)
    assert len(calls) == 1 and calls[0] - changed_at[0] <= 1.3, (calls, changed_at)


def test_push_waits_for_the_browser_to_draw_a_page_before_rerunning_into_it(monkeypatch):
    """A rerun pushed while the browser is still drawing a page it was just sent blanked the tab
    (the frontend's "Bad delta path" error, issue 36). After ``hold`` (a session's first run of a
    page) a changed stamp is not rerun; ``release`` (the browser has drawn it) lets it go at once,
    and a hold whose answer never comes ends after ``max_s``."""
    import time

    from app.dashboard import push as P

    monkeypatch.setattr(P, "_alive", lambda sid: True)
    sid = ["test-held"]
    monkeypatch.setattr(P, "_session_id", lambda: sid[0])

    class Loop:
        def call_soon_threadsafe(self, fn, sub, *args):
            sub["calls"].append(time.monotonic())

    def sub():  # a stamp that changes at every ask
        s = {"fid": "f", "stamp_fn": lambda: (time.monotonic(),), "stamp": (0,), "loop": Loop(), "every": 0.0}
        s["session"] = type("Session", (), {"_scriptrunner": None})()
        return s | {"drawn": time.monotonic(), "calls": []}

    assert P.hold()
    first, second = sub(), sub()
    with P._lock:
        P._subs[("test-held", "k")] = first
        P._ensure_thread()
    P._wake.set()
    try:
        time.sleep(0.8)
        assert not first["calls"]  # changed at every ask, and held
        t = time.monotonic()
        P.release()
        time.sleep(0.5)
        assert first["calls"] and first["calls"][0] - t <= 0.3, first["calls"]  # released: rerun at once
        sid[0] = "test-held-2"
        assert P.hold(max_s=0.6)
        t = time.monotonic()
        with P._lock:
            P._subs[("test-held-2", "k")] = second
        P._wake.set()
        time.sleep(1.2)
        assert second["calls"] and 0.5 <= second["calls"][0] - t <= 1.0, (second["calls"], t)  # after max_s
    finally:
        with P._lock:
            for k in ("test-held", "test-held-2"):
                P._subs.pop((k, "k"), None)
                P._held.pop(k, None)


def test_throttled_serves_a_fresh_value_to_an_ask_every_seconds_after_the_last():
    """The push thread asks a quiet stamp once a second, and the Runs page throttles its stamp to
    1 s: timed from after a slow ``fn``, every second ask got the old value (a change seen ~2 s
    late). Timed from before ``fn``, an ask ``every`` s after the previous one calls ``fn``."""
    import time

    from app.dashboard import push as P

    values = iter(range(100))

    def slow():
        time.sleep(0.06)  # a thousand stats
        return next(values)

    stamp = P.throttled(slow, 0.3)
    t0 = time.monotonic()
    assert stamp() == 0
    assert stamp() == 0  # at once: the last value
    time.sleep(max(0.0, t0 + 0.3 - time.monotonic()))
    assert stamp() == 1


def test_push_asks_no_stamp_and_reruns_nothing_sooner_than_every_after_a_draw(monkeypatch):
    """The push thread with a subscription whose stamp changes on every call (a live run writing
    lines all the time): with every=0.6 s it asks nothing for 0.6 s after the draw, then reruns
    the fragment once; without ``every`` it reruns at the thread's first tick."""
    import threading
    import time

    from app.dashboard import push as P

    class Loop:
        def __init__(self):
            self.calls = []

        def call_soon_threadsafe(self, fn, *args):
            self.calls.append(time.monotonic())

    class Session:
        _scriptrunner = None

    monkeypatch.setattr(P, "_alive", lambda sid: True)

    def sub(every):
        asked = []

        def stamp_fn():
            asked.append(time.monotonic())
            return (len(asked),)  # new on every call

        return {
            "fid": "f",
            "stamp_fn": stamp_fn,
            "stamp": (0,),
            "session": Session(),
            "loop": Loop(),
            "every": every,
            "drawn": time.monotonic(),
            "asked": asked,  # the test's own record (the thread ignores unknown keys)
        }

    slow, fast = sub(0.6), sub(0.0)
    with P._lock:
        P._subs[("test-slow", "k")] = slow
        P._subs[("test-fast", "k")] = fast
        P._ensure_thread()
    P._wake.set()  # as subscribe does
    assert isinstance(P._thread, threading.Thread)
    try:
        # judged by the times of the asks and reruns, not by when this thread wakes (a loaded CI
        # machine overslept a 0.45 s sleep, and the plain subscription's later asks were counted)
        assert _wait(lambda: fast["loop"].calls and slow["loop"].calls, 10)
        assert slow["asked"] and min(slow["asked"]) - slow["drawn"] >= 0.6  # its stamp not asked sooner
        assert slow["loop"].calls[0] - slow["drawn"] >= 0.6
    finally:
        with P._lock:
            P._subs.pop(("test-slow", "k"), None)
            P._subs.pop(("test-fast", "k"), None)


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
