"""The live panel in a real Chromium: the browser asks, nothing is polled through Streamlit and
nothing is pushed.

- an idle tab on a finished run costs the server almost no CPU (read from /proc) and almost no
  websocket traffic;
- with several tabs open on as many live runs (8 in scripts/bench_live.sh, 4 in the suite), each new
  metrics line reaches its tab's chart quickly (lag =
  the time the chart showed the point − the time the line was appended to metrics.jsonl);
- a drag-zoom on a live chart survives new points;
- Start makes the new run the watched one every time (10 tries in the benchmark, 4 in the suite),
  without a reload;
- with both cores kept busy by other processes, the first point after Start and after Resume is
  in the same tab's chart within 15 s of the worker writing it, every try (5 in the benchmark, 2 in
  the suite), and Start brings the Live
  panel into view.

The live runs of the first three tests are *replayed*: a thread of this test appends the lines of
a real (tiny, finished) digits run to a fresh run directory once a second, with ``status.json``
saying 'running' under this process's pid. So the lag measured is the dashboard's own, not that
of eight training workers fighting for a 2-core machine, and each line's write time is known
exactly. The Start test launches real (tiny) workers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from test_browser_dashboard import CHROMIUM, PLOTS_JS, WATCH_JS, _eval_frames, _free_port, _wait

from app.dashboard.live_charts import NAME as LIVE_NAME
from app.dashboard.live_charts import SELECTOR as LIVE_FRAME

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_MS = int(float(os.environ.get("DASH_BROWSER_TIMEOUT_S", "240")) * 1000)

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"system Chromium not found at {CHROMIUM}")
# lag, CPU and under-load figures: scripts/test.sh runs these alone, after the parallel part; the
# zoom, controls and light/dark tests measure no time and run in the parallel part
timing = pytest.mark.serial
# The suite checks the behaviour at a smaller size (the whole suite in ~15 min); the figures
# (8 tabs over 30 s, Start 10 times, 5 tries under load) come from scripts/bench_live.sh, which runs
# these same tests at full size and writes the lag table into docs/dashboard.md.
SUITE_TABS, SUITE_START_TRIES, SUITE_LOAD_TRIES = 4, 4, 2

TEMPLATE = "20260101-000000-digits-mlp-block-admm-s0"  # the finished run every replay copies


def _cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (/proc/PID/stat fields 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _browser_cpu_s() -> float:
    """CPU seconds of this test's Chromium (every process under this one whose name says chrom)."""
    kids: dict[int, list[int]] = {}
    names = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                head, rest = (d / "stat").read_text().rsplit(")", 1)
            except OSError:
                continue
            kids.setdefault(int(rest.split()[1]), []).append(int(d.name))
            names[int(d.name)] = head.split("(", 1)[1]
    total, todo = 0.0, list(kids.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        if "chrom" in names.get(pid, ""):
            try:
                total += _cpu_s(pid)
            except OSError:
                pass
    return total


def _show_live_charts(page) -> None:
    """Scroll the live charts into view, as a user watching them would."""
    box = page.locator(LIVE_FRAME)
    (box if box.count() else page.locator(".js-plotly-plot").first).scroll_into_view_if_needed()


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _machine() -> str:
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "CPU",
    )
    return f"{model}, {os.cpu_count()} cores"


LAG_HEAD = (
    "| when (UTC) | machine | server | tabs | median lag | p90 | worst | all charts: median / worst | missing |"
    " server CPU | browser CPU | load average |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _write_lag_row(doc: Path, r: dict, keep: int = 12) -> None:
    """Add this measurement to the table between ``<!-- live-lag -->`` markers in ``doc`` (newest
    last, the last ``keep`` rows), each row naming its machine (rows written before the column
    existed get the machine the table named above them then)."""
    text = doc.read_text()
    a, b = "<!-- live-lag -->", "<!-- /live-lag -->"
    i, j = text.index(a) + len(a), text.index(b)
    was = re.search(r"Machine: ([^;]+);", text[i:j])
    old = [
        ln if ln.count("|") == LAG_HEAD.count("|") // 2 else ln.replace(" |", f" | {was.group(1) if was else '?'} |", 1)
        for ln in text[i:j].splitlines()
        if ln.startswith("| 20")
    ]
    entry = "app/serve.py (followed)"
    row = (
        f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {_machine()} | {entry} | {r['tabs']} | {r['median_s']} s | {r['p90_s']} s |"
        f" {r['worst_s']} s | {r.get('median_all_charts_s')} / {r.get('worst_all_charts_s')} s | {r['missing']} of"
        f" {r['points'] + r['missing']} | {r['server_cpu_pct']} % | {r['browser_cpu_pct']} % | {r['loadavg']} |"
    )
    rows = (old + [row])[-keep:]
    body = "\nWritten by `scripts/bench_live.sh` (`test_live_tabs_lag` at 8 tabs over 30 s).\n\n"
    doc.write_text(text[:i] + body + LAG_HEAD + "\n" + "\n".join(rows) + "\n" + text[j:])


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    """The dashboard on 127.0.0.1 over a runs folder holding one finished tiny digits run."""
    import torch

    from admm_core.network import train
    from admm_core.spec.presets import preset_config

    root = tmp_path_factory.mktemp("live-runs")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cfg = preset_config("digits-mlp", "block-admm").replace(
        train__epochs=40, data__train_limit=200, data__test_limit=200, method_params={"iters_per_epoch": 1}
    )
    train(cfg, root / TEMPLATE)
    torch.set_num_threads(threads)
    port = _free_port()
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT)}
    entry = ROOT / "app" / "serve.py"  # the dashboard as run.sh starts it, with its routes
    cmd = [sys.executable, "-m", "streamlit", "run", str(entry), "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    cmd += ["--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    log = open(root / "server.log", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            return urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok"
        except OSError:
            return proc.poll() is not None

    _wait(healthy, 60)
    if proc.poll() is not None:
        pytest.fail("streamlit did not start:\n" + (root / "server.log").read_text())
    yield url, root, proc.pid
    from app.dashboard import workers as W

    for d in root.iterdir():
        if d.is_dir():
            W.stop_run(d)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


class Replay:
    """A live run without a worker: the template's metrics lines appended once every ``period`` s.

    ``written[i]`` is the wall time line i reached metrics.jsonl (its ``time`` field too).
    """

    def __init__(self, root: Path, name: str, period: float = 1.0, first: int = 2):
        src = root / TEMPLATE
        self.dir = root / name
        self.dir.mkdir()
        self.lines = [json.loads(x) for x in (src / "metrics.jsonl").read_text().splitlines() if x.strip()]
        (self.dir / "config.json").write_text((src / "config.json").read_text())
        self.period, self.written, self.stop = period, {}, threading.Event()
        self._status(0)
        for i in range(first):  # a run already under way when the tab opens
            self._append(i)
        self.thread = threading.Thread(target=self._run, args=(first,), daemon=True)

    def _status(self, epoch: int, state: str = "running") -> None:
        total = self.lines[-1]["epoch"]
        st = {"state": state, "pid": os.getpid(), "started": time.time(), "updated": time.time(), "epoch": epoch}
        st.update(epochs=total, progress=epoch / total, error=None)
        tmp = self.dir / "status.json.tmp"
        tmp.write_text(json.dumps(st))
        tmp.replace(self.dir / "status.json")

    def _append(self, i: int) -> None:
        now = time.time()
        line = {**self.lines[i], "time": now}
        with open(self.dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
        self.written[i] = now
        self._status(line["epoch"])

    def _run(self, start: int) -> None:
        for i in range(start, len(self.lines)):
            if self.stop.wait(self.period):
                return
            self._append(i)
        self._status(self.lines[-1]["epoch"], "finished")

    def start(self) -> Replay:
        self.thread.start()
        return self

    def end(self) -> None:
        self.stop.set()
        if self.thread.ident is not None:
            self.thread.join(5)
        self._status(max(self.written) if self.written else 0, "stopped")


def _acc_points(page, run: str) -> int:
    """Points of the accuracy chart of ``run`` in ``page`` (0 when it is not drawn)."""
    plots = _eval_frames(page, PLOTS_JS)  # the live charts sit in their component's iframe
    acc = next((p for p in plots if "Accuracy" in str(p["title"]) and p["run"] == run), None)
    return max(acc["n"]) if acc and acc["n"] else 0


def _open(browser, url: str, run: str, *, width: int = 1280):
    page = browser.new_page(viewport={"width": width, "height": 1400})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{url}/?run={run}", wait_until="domcontentloaded")
    return page


@timing
def test_idle_tab_on_a_finished_run_costs_almost_nothing(live_server, browser):
    """Server CPU (from /proc) and websocket bytes for one tab on a finished run, once drawn,
    against the same server's CPU with no tab open, measured right after. The server alone is
    not free: Streamlit polls its config files and uvicorn ticks (2.7-5.4 % of a core on the
    2-core test machine), so only the tab's share is bounded."""
    url, root, pid = live_server
    page = _open(browser, url, TEMPLATE)
    frames = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda f: frames.append((time.time(), len(f)))))
    window = 12.0  # 0.48 s of a core is the bound's whole allowance: a 4 Hz poll (24-57 %) shows in far less

    def cpu_over_window() -> float:
        c0, t0 = _cpu_s(pid), time.time()
        time.sleep(window)
        return 100 * (_cpu_s(pid) - c0) / (time.time() - t0)

    try:
        page.reload()  # the websocket listener sees the session's socket from its start
        assert _wait(lambda: _acc_points(page, TEMPLATE) >= 40, TIMEOUT_MS / 1000)
        page.wait_for_timeout(4000)  # settle: fonts, the last deltas
        t0 = time.time()
        cpu = cpu_over_window()
        sent = sum(n for t, n in frames if t >= t0)
        n_frames = sum(1 for t, _ in frames if t >= t0)
    finally:
        page.close()
    time.sleep(3)  # the closed tab's last requests
    base = cpu_over_window()
    print(
        f"\nidle tab on a finished run: server CPU {cpu:.1f}% of a core over {window:.0f} s, "
        f"{base:.1f}% with no tab; {sent / window:.0f} B/s to the browser ({n_frames} frames); "
        f"loadavg {_loadavg()}"
    )
    assert cpu - base <= 4.0, (cpu, base)  # a tab polled at 4 Hz costs 24-57 % of a core
    assert sent / window < 2000, sent  # the figures (~36 KB a redraw) are not re-sent


# installed in each tab before the page loads: when a point of a run's accuracy chart first
# appears in the page's DOM, its wall time (the browser's clock is this machine's clock). So a
# busy renderer delays the recording only as much as it delays the chart itself, and no
# round-robin over the tabs adds its own lag.
# It runs in every frame (the live charts are drawn in their component's iframe). An iframe's first
# document is about:blank, whose window the page loaded into it keeps: the observer follows the
# frame's current document (checked every 50 ms; only the first points, not measured, wait for it).
SEEN_JS = """window.__seen = {};
const __obs = new MutationObserver(() => document.querySelectorAll('.js-plotly-plot').forEach(gd => {
  const l = gd.layout || {}, t = String((l.title && (l.title.text || l.title)) || '');
  if (!t.includes('Accuracy') || !l.meta) return;
  const n = Math.max(0, ...(gd.data || []).map(tr => (tr.x || []).filter(v => v !== null).length));
  for (let i = 0; i < n; i++) { const k = l.meta.run + '|' + i; if (!(k in window.__seen)) window.__seen[k] = Date.now() / 1000; }
}));
let __doc = null;
const __attach = () => { if (__doc !== document) { __doc = document; __obs.observe(document, {childList: true, subtree: true}); } };
__attach(); setInterval(__attach, 50);
window.__msg = {};  // when each line first reached the live charts' page (fetched)
window.addEventListener('admm-live-lines', e => { const d = e.detail || {}, m = window.__msg;
  for (let i = 0; i < (d.n || 0); i++) { const k = d.run + '|' + i; if (!(k in m)) m[k] = Date.now() / 1000; } });
window.__charts = {};  // chart -> run|line -> when the page had drawn that line in that chart (its own event)
window.addEventListener('admm-live-chart', e => { const d = e.detail || {}, m = (window.__charts[d.chart] ||= {});
  for (let i = 0; i < (d.n || 0); i++) { const k = d.run + '|' + i; if (!(k in m)) m[k] = Date.now() / 1000; } });"""


@timing
def test_live_tabs_lag(live_server, browser):
    """N tabs (DASH_LIVE_TABS), each on its own live run (a line a second): the lag from a line on disk to its point in
    the page, and the server's CPU, printed. Asserted: every tab keeps up (median < 30 s); the issue's
    targets (median ≤ 1 s, worst ≤ 3 s) with DASH_LAG_STRICT=1 (docs/dashboard.md has the figures)."""
    url, root, pid = live_server
    n_tabs = int(os.environ.get("DASH_LIVE_TABS", str(SUITE_TABS)))
    period = float(os.environ.get("DASH_LIVE_PERIOD", "1.0"))
    replays = [Replay(root, f"20260102-00000{i}-replay-{i}", period=period) for i in range(n_tabs)]
    pages = []
    try:
        for r in replays:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.set_default_timeout(TIMEOUT_MS)
            page.add_init_script(SEEN_JS)
            page.goto(f"{url}/?run={r.dir.name}", wait_until="domcontentloaded")
            pages.append(page)
        reloaded = 0
        for p, r in zip(pages, replays):  # every tab drawn before the clock starts
            drawn = lambda p=p, r=r: _acc_points(p, r.dir.name) >= 2  # noqa: E731
            if not _wait(drawn, TIMEOUT_MS / 2000):
                # seen once in ~5 runs on a loaded machine: a tab that never drew; a reload is what a
                # user would do, and it is counted in the report
                p.reload(wait_until="domcontentloaded")
                reloaded += 1
                assert _wait(drawn, TIMEOUT_MS / 1000), f"tab {r.dir.name} drew no chart, even after a reload"
        late = 0
        for p in pages:
            _show_live_charts(p)
            for f in p.frames:  # in case Playwright's init script never ran in the component's iframe
                try:
                    if f.evaluate("() => typeof window.__seen") == "undefined":
                        f.evaluate(f"() => {{ {SEEN_JS} }}")
                        late += 1
                except Exception:  # noqa: BLE001 - a frame gone meanwhile
                    pass
        for r in replays:
            r.start()
        c0, t0, b0 = _cpu_s(pid), time.time(), _browser_cpu_s()
        load0 = _loadavg()
        time.sleep(float(os.environ.get("DASH_LIVE_SECONDS", "10")))  # scripts/bench_live.sh: 8 tabs, 30 s
        for r in replays:
            r.stop.set()
        cpu = 100 * (_cpu_s(pid) - c0) / (time.time() - t0)
        browser_cpu = 100 * (_browser_cpu_s() - b0) / (time.time() - t0)
        time.sleep(5)  # the last lines' points
        seen = {}
        for p, r in zip(pages, replays):
            for k, t in _eval_frames(p, "() => Object.entries(window.__seen || {})"):  # page and iframes
                run, i = k.rsplit("|", 1)
                if run == r.dir.name:
                    seen[run, int(i)] = min(t, seen.get((run, int(i)), t))
        lag = [
            seen[r.dir.name, i] - t for r in replays for i, t in r.written.items() if i >= 2 and (r.dir.name, i) in seen
        ]
        missing = sum(1 for r in replays for i in r.written if i >= 2 and (r.dir.name, i) not in seen)
        # the split: line on disk -> it reaches the live charts' page (fetched from the route) and ->
        # drawn there (Plotly in the iframe)
        msg = {}
        for p, r in zip(pages, replays):
            for k, t in _eval_frames(p, "() => Object.entries(window.__msg || {})"):
                run, i = k.rsplit("|", 1)
                if run == r.dir.name and int(i) >= 2 and int(i) in r.written:
                    msg[run, int(i)] = t
        drawn = {}  # (run, line) -> when every chart of its tab had drawn it
        for p, r in zip(pages, replays):
            for per_chart in _eval_frames(p, "() => window.__charts ? [Object.values(window.__charts)] : []"):
                for i in r.written:
                    ts = [m.get(f"{r.dir.name}|{i}") for m in per_chart]
                    if i >= 2 and per_chart and all(ts):
                        drawn[r.dir.name, i] = max(ts)
        all_lag = [t - r.written[i] for r in replays for (run, i), t in drawn.items() if run == r.dir.name]
        to_iframe = [t - r.written[i] for r in replays for (run, i), t in msg.items() if run == r.dir.name]
        in_iframe = [seen[k] - t for k, t in msg.items() if k in seen]
        report = {
            "tabs": n_tabs,
            "line_every_s": period,
            "points": len(lag),
            "missing": missing,
            "observers_added_late": late,
            "tabs_reloaded_before_start": reloaded,
            "median_s": round(statistics.median(lag), 3) if lag else None,
            "p90_s": round(sorted(lag)[int(0.9 * (len(lag) - 1))], 3) if lag else None,
            "worst_s": round(max(lag), 3) if lag else None,
            "server_cpu_pct": round(cpu, 1),
            "browser_cpu_pct": round(browser_cpu, 1),
            "median_to_iframe_s": round(statistics.median(to_iframe), 3) if to_iframe else None,
            "median_drawn_in_iframe_s": round(statistics.median(in_iframe), 3) if in_iframe else None,
            # the lag above is the accuracy chart's (drawn first); this is until every chart had the point
            "median_all_charts_s": round(statistics.median(all_lag), 3) if all_lag else None,
            "worst_all_charts_s": round(max(all_lag), 3) if all_lag else None,
            "loadavg": f"{load0} -> {_loadavg()}",
        }
        print("\nlive lag:", json.dumps(report))
        if os.environ.get("DASH_LAG_DOC"):  # the table in docs/dashboard.md is this test's output
            _write_lag_row(Path(os.environ["DASH_LAG_DOC"]), report)

        assert lag and report["median_s"] < 30.0, report
        if os.environ.get("DASH_LAG_STRICT") == "1":
            assert report["median_s"] <= 1.0 and report["worst_s"] <= 3.0 and not missing, report
    finally:
        for r in replays:
            r.end()
        for p in pages:
            p.close()


ZOOM_JS = """run => { const d = [...document.querySelectorAll('.js-plotly-plot')].find(d =>
    d.layout && d.layout.meta && d.layout.meta.run === run && String(d.layout.title.text).includes('Accuracy'));
    return d ? {range: d._fullLayout.xaxis.range, auto: d._fullLayout.xaxis.autorange,
                n: Math.max(...d.data.map(t => (t.x || []).filter(v => v !== null).length))} : null; }"""


def test_drag_zoom_survives_new_points(live_server, browser):
    url, root, _ = live_server
    r = Replay(root, "20260103-000000-replay-zoom", period=1.5, first=6)
    page = _open(browser, url, r.dir.name, width=1440)
    try:
        assert _wait(lambda: _acc_points(page, r.dir.name) >= 6, TIMEOUT_MS / 1000)
        page.wait_for_timeout(1500)
        # the frame drawing the chart: the live charts' component iframe (or the page, server-drawn)
        frame = next(f for f in page.frames if f.evaluate(ZOOM_JS, r.dir.name))
        before = frame.evaluate(ZOOM_JS, r.dir.name)
        drag = frame.locator(".js-plotly-plot", has_text="Accuracy").first.locator(".nsewdrag").first
        drag.scroll_into_view_if_needed()  # the live panel is below the form
        page.wait_for_timeout(300)
        box = drag.bounding_box()
        x0, y = box["x"] + 0.3 * box["width"], box["y"] + 0.5 * box["height"]
        page.mouse.move(x0, y)
        page.mouse.down()
        page.mouse.move(x0 + 0.15 * box["width"], y, steps=8)
        page.mouse.move(x0 + 0.3 * box["width"], y, steps=8)
        page.mouse.up()
        page.wait_for_timeout(500)
        zoomed = frame.evaluate(ZOOM_JS, r.dir.name)
        assert zoomed["range"] != before["range"] and not zoomed["auto"], (before, zoomed)
        r.start()
        grown = _wait(
            lambda: (lambda z: z if z and z["n"] >= zoomed["n"] + 2 else None)(frame.evaluate(ZOOM_JS, r.dir.name)),
            60,
        )
        assert grown is not None, frame.evaluate(ZOOM_JS, r.dir.name)
        page.wait_for_timeout(500)
        after = frame.evaluate(ZOOM_JS, r.dir.name)
        print(f"\nzoom: before {before['range']}, zoomed {zoomed['range']}, after 2 new points {after['range']}")
        assert after["range"] == zoomed["range"] and not after["auto"], (zoomed, after)
        assert not frame.is_detached()  # the charts were updated in place, never mounted again
    finally:
        r.end()
        page.close()


CHART_JS = """([title, what]) => { const d = [...document.querySelectorAll('.js-plotly-plot')]
    .find(d => String(d.layout.title.text).startsWith(title));
    return {type: d._fullLayout.yaxis.type, x: d.data[0].x, y: d.data[0].y, range: d._fullLayout.xaxis.range,
            xtitle: d._fullLayout.xaxis.title.text}; }"""


def test_live_chart_controls(live_server, browser):
    """The live charts' own controls (app/dashboard/live_charts.html), on a finished run: log scale per
    chart, smoothing, x by step, linked x axes, CSV and PNG per chart."""
    from admm_core.rundir import read_metrics
    from app.dashboard import charts as C

    url, root, _ = live_server
    metrics = read_metrics(root / TEMPLATE)
    page = _open(browser, url, TEMPLATE, width=1440)
    try:
        assert _wait(lambda: _acc_points(page, TEMPLATE) >= len(metrics), TIMEOUT_MS / 1000)
        frame = next((f for f in page.frames if LIVE_NAME in f.url), None)
        assert frame is not None, [f.url for f in page.frames]  # drawn by the component, not the server
        frame.locator("#grid").scroll_into_view_if_needed()
        chart = lambda title: frame.evaluate(CHART_JS, [title, None])  # noqa: E731
        cells = frame.locator(".cell")
        # log scale, per chart: accuracy on, loss (log by default) off; the others keep theirs
        assert chart("Accuracy")["type"] == "linear" and chart("Loss")["type"] == "log"
        cells.nth(0).locator(".log").check()
        cells.nth(1).locator(".log").uncheck()
        assert _wait(lambda: chart("Accuracy")["type"] == "log" and chart("Loss")["type"] == "linear", 20)
        assert chart("Primal residual")["type"] == "log"
        # smoothing: the loss lines are the EMA of the logged values; accuracy is never smoothed
        frame.evaluate(
            "() => { const s = document.getElementById('smooth'); s.value = '0.9'; s.dispatchEvent(new Event('input')); }"
        )
        want = C.smooth([m.get("train_loss") for m in metrics], 0.9)
        assert _wait(lambda: abs(chart("Loss")["y"][-1] - want[-1]) < 1e-9, 20), (chart("Loss")["y"][-3:], want[-3:])
        assert chart("Accuracy")["y"][-1] == 100 * metrics[-1]["train_accuracy"]
        # x by step (the method's iterations)
        frame.locator("#xby").select_option("step")
        assert _wait(lambda: chart("Accuracy")["x"] == [m["iteration"] for m in metrics], 20), chart("Accuracy")["x"]
        assert _wait(lambda: chart("Loss")["xtitle"].startswith("step"), 20)  # charts are redrawn one per task
        frame.locator("#xby").select_option("epoch")
        # linked x axes: a zoom of one chart moves the others
        frame.evaluate(
            "() => Plotly.relayout([...document.querySelectorAll('.js-plotly-plot')][0], {'xaxis.range': [5, 15]})"
        )
        assert _wait(lambda: chart("Dual norm")["range"] == [5, 15], 20), chart("Dual norm")["range"]
        # CSV and PNG of one chart
        with page.expect_download() as dl:
            cells.nth(1).locator(".csv").click()
        rows = Path(dl.value.path()).read_text().splitlines()
        assert rows[0] == "series,epoch,value" and len(rows) == 1 + 2 * len(metrics), rows[:3]
        last = rows[-1].split(",")  # the test loss's last point, smoothed as drawn
        want_test = C.smooth([m.get("test_loss") for m in metrics], 0.9)[-1]
        assert last[:2] == ["test", str(metrics[-1]["epoch"])] and abs(float(last[2]) - want_test) < 1e-9, last
        with page.expect_download() as dl:
            cells.nth(0).locator(".png").click()
        assert dl.value.suggested_filename.endswith(".png")
        assert Path(dl.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        print(f"\ncontrols: log, smoothing, x by step, linked x, CSV ({len(rows)} rows), PNG: ok")
    finally:
        page.close()


@timing
def test_start_switches_the_live_panel_every_time(live_server, browser):
    """Watch a live run, press Start DASH_START_TRIES times (a new seed each): every new run becomes the watched
    one (menu and ?run=) without a reload."""
    from playwright.sync_api import expect

    from app.dashboard import workers as W

    url, root, _ = live_server
    old = Replay(root, "20260104-000000-replay-start", period=1.0).start()
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.set_default_timeout(TIMEOUT_MS)
    started, switched = [], []
    try:
        query = "preset=digits-mlp&method=sgd&epochs=2&train_limit=100&eval_every=1"
        page.goto(f"{url}/?run={old.dir.name}&{query}")
        expect(page.get_by_label("Epochs", exact=True)).to_have_value("2", timeout=TIMEOUT_MS)
        page.wait_for_function(f"name => ({WATCH_JS})().includes(name)", arg=old.dir.name)
        for seed in range(1, int(os.environ.get("DASH_START_TRIES", str(SUITE_START_TRIES))) + 1):
            _set_seed(page, seed)
            before = {d.name for d in root.iterdir()}
            page.get_by_role("button", name=re.compile("Start run")).click()
            new = _wait(lambda: next((d.name for d in root.iterdir() if d.is_dir() and d.name not in before), None), 30)
            assert new is not None, f"try {seed}: no run directory appeared"
            started.append(new)
            t0 = time.time()
            ok = _wait(lambda: new in page.evaluate(WATCH_JS) and f"run={new}" in page.url, 30)
            took = time.time() - t0
            # and it stays: no late refresh puts the old pick back
            stays = ok and all(new in page.evaluate(WATCH_JS) for _ in range(10) if not time.sleep(0.3))
            switched.append(bool(stays))
            print(f"try {seed}: {new} watched after {took:.1f} s and stayed 3 s: {bool(stays)}")
        print(f"\nStart switched the live panel in {sum(switched)} of {len(switched)} tries")
        assert all(switched), switched
    finally:
        old.end()
        page.close()
        for name in started:
            W.stop_run(root / name)


def _set_seed(page, seed: int) -> None:
    """Type ``seed`` into the Seed box and wait until the page's link holds it. A rerun that redraws the
    box between the typing and Enter (the end of the previous try's run, a Resume under load) drops the
    typed value, as it would a user's (seen in CI at c2050a8 and b5e0fbf): then it is typed again.

    The link is read from the page (``location.href``), not ``page.url``: Playwright's sync API updates
    ``page.url`` only while a call into it runs, so a loop of ``page.url`` and sleeps never saw the
    new link and every seed was typed twice, 15 s apart."""
    from playwright.sync_api import expect

    want = re.compile(f"seed={seed}(&|$)")
    for _ in range(3):
        box = page.get_by_label("Seed", exact=True)
        box.fill(str(seed))
        box.press("Enter")
        if _wait(lambda: want.search(_href(page)), 15, every=0.25):
            return
    expect(page).to_have_url(want, timeout=TIMEOUT_MS)


def _href(page) -> str:
    """The page's link as the page itself has it ("" while a navigation replaces the document)."""
    from playwright.sync_api import Error

    try:
        return page.evaluate("() => location.href")
    except Error:
        return ""


def _first_seen(page, run: str, i: int) -> float | None:
    """When point ``i`` of ``run``'s accuracy chart first appeared in ``page`` (SEEN_JS), else None."""
    ts = [t for k, t in _eval_frames(page, "() => Object.entries(window.__seen || {})") if k == f"{run}|{i}"]
    return min(ts) if ts else None


def _lines(run_dir: Path) -> list[dict]:
    try:
        return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, ValueError):
        return []


def busy_cores(folder: Path) -> list:
    """One busy loop per core, started as the dashboard starts its workers (their own session, the
    workers' niceness, as other runs or a sweep would be): the machine "under load". End with end_busy."""
    from admm_core.spawn import spawn_detached

    # each loop ends itself after 15 min: a test killed from outside must not leave them spinning
    busy = [sys.executable, "-c", "import time\nend = time.time() + 900\nwhile time.time() < end: pass"]
    return [spawn_detached(busy, folder / f"busy-{i}.log")[0] for i in range(os.cpu_count() or 2)]


def end_busy(hogs: list) -> None:
    for h in hogs:
        h.kill()
        h.wait()


# where the live charts' frame is after Start: [its top, its bottom, the window's height] (null: not drawn yet)
LIVE_IN_VIEW_JS = (
    f"() => {{ const f = document.querySelector({LIVE_FRAME!r}); if (!f) return null; "
    "const r = f.getBoundingClientRect(); return [r.top, r.bottom, window.innerHeight]; }"
)


@timing
def test_start_and_resume_under_load_chart_the_first_point_within_15_s(live_server, browser):
    """On a machine kept busy by other processes (one busy loop per core, started here as
    the dashboard starts its workers: their own session, the workers' niceness, as other runs or a
    sweep would be),
    a run started or resumed from a tab is followed by that tab, however long its worker takes to
    start: the first evaluation written after Start (and after Resume) is a point of the tab's
    chart within 15 s of the worker writing it, every try of DASH_LOAD_TRIES (before: the chart's first request came
    before the worker's status.json, read 'unknown', and the chart never asked again). After Start
    the live charts are scrolled into view, not only the Live heading (a 1440 × 1000 window: they are
    below the form)."""
    from playwright.sync_api import expect

    from app.dashboard import workers as W

    url, root, _ = live_server
    tries = int(os.environ.get("DASH_LOAD_TRIES", str(SUITE_LOAD_TRIES)))
    hogs = busy_cores(root)
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.add_init_script(SEEN_JS)
    started, report = [], []
    try:
        page.goto(f"{url}/?preset=digits-mlp&method=sgd&epochs=1&train_limit=200&test_limit=200&eval_every=1")
        expect(page.get_by_label("Epochs", exact=True)).to_have_value("1", timeout=TIMEOUT_MS)
        for k in range(1, tries + 1):
            _set_seed(page, 100 + k)
            before = {d.name for d in root.iterdir()}
            page.get_by_role("button", name=re.compile("Start run")).click()
            run = _wait(lambda: next((d for d in root.iterdir() if d.is_dir() and d.name not in before), None), 60)
            assert run is not None, f"try {k}: no run directory appeared"
            started.append(run.name)
            in_view = _wait(
                lambda: (lambda r: r and r[0] >= -1 and r[0] < r[2] - 200)(page.evaluate(LIVE_IN_VIEW_JS)), 20
            )
            for what, i, ok_state in (("start", 0, None), ("resume", 2, "finished")):
                if ok_state:  # resume the finished run from the same tab, one epoch more (its default)
                    assert _wait(lambda: W.state_of(run)["state"] == "finished", 240), W.state_of(run)
                    n0 = len(_lines(run))
                    assert _wait(lambda: _first_seen(page, run.name, n0 - 1), 60), f"try {k}: the run's last point"
                    page.get_by_role("button", name="Resume", exact=True).click()
                    i = n0
                line = _wait(lambda: (lambda ls: ls[i] if len(ls) > i else None)(_lines(run)), 240)
                assert line is not None, f"try {k} {what}: no evaluation {i} on disk ({W.state_of(run)})"
                seen = _wait(lambda: _first_seen(page, run.name, i), 60, every=0.2)
                lag = None if seen is None else round(seen - line["time"], 2)
                report.append((k, what, lag))
                print(
                    f"try {k} {what}: {run.name} point {i} in the tab {lag} s after it was written; loadavg {_loadavg()}"
                )
            report.append((k, "in view", bool(in_view)))
        lags = [lag for _, what, lag in report if what != "in view"]
        print(f"\nunder load: {sum(1 for x in lags if x is not None and x <= 15)} of {len(lags)} within 15 s: {report}")
        assert all(x is not None and x <= 15 for x in lags), report
        assert all(ok for _, what, ok in report if what == "in view"), report
    finally:
        end_busy(hogs)
        page.close()
        for name in started:
            W.stop_run(root / name)


def _shots_dir(tmp: Path) -> Path:
    """$ADMM_SCREENSHOTS (relative to the project, e.g. ``assets``) when set, else the runs folder."""
    where = os.environ.get("ADMM_SCREENSHOTS")
    path = (ROOT / where) if where else (Path(tmp) / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


TITLES_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(d => {
    const t = d.querySelector('.gtitle'), p = d.querySelector('.nsewdrag');
    return t && p ? [t.textContent, t.getBoundingClientRect().bottom, p.getBoundingClientRect().top] : null; })
    .filter(x => x)"""


CONTROLS_JS = """() => { const box = document.querySelector('input.log'), bar = document.querySelector('.modebar-group'),
    btn = document.querySelector('.tools button');
    if (!box || !bar || !btn) return [];
    const primary = getComputedStyle(document.documentElement).getPropertyValue('--primary').trim();
    const probe = document.createElement('i'); probe.style.color = primary; document.body.appendChild(probe);
    const want = getComputedStyle(probe).color; probe.remove();
    return [{accent: getComputedStyle(box).accentColor, primary: want,
             bar: getComputedStyle(bar).backgroundColor, radius: parseFloat(getComputedStyle(btn).borderRadius)}]; }"""


def test_train_light_dark_and_compare_seed_bands(live_server, browser):
    """Train in light and dark (titles clear of the plots), Compare grouped over seeds with its bands;
    the screenshots go to $ADMM_SCREENSHOTS (the docs' assets/) or the test's folder."""
    import torch

    from admm_core.network import train
    from admm_core.spec.presets import preset_config

    url, root, _ = live_server
    shots = _shots_dir(root)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    names = []
    for method in ("block-admm", "sgd"):
        for seed in (1, 2, 3):
            cfg = preset_config("digits-mlp", method).replace(
                train__epochs=15, train__seed=seed, data__train_limit=200, data__test_limit=200
            )
            name = f"20260105-00000{seed}-digits-mlp-{method}-s{seed}"
            train(cfg, root / name)
            names.append(name)
    torch.set_num_threads(threads)
    for scheme in ("light", "dark"):
        page = browser.new_page(viewport={"width": 1440, "height": 2000}, color_scheme=scheme)
        page.set_default_timeout(TIMEOUT_MS)
        try:
            page.goto(f"{url}/?run={TEMPLATE}")
            titles = lambda: _eval_frames(page, TITLES_JS)  # noqa: E731 - page and the live charts' iframe
            assert _wait(lambda: len(titles()) >= 7, TIMEOUT_MS / 1000), titles()
            page.wait_for_timeout(1500)
            overlaps = [t for t in titles() if t[1] > t[2] + 1]
            assert not overlaps, overlaps  # a title's last line over its plot (two-line titles did)
            # the charts' own controls in the theme's colours, and no half-black modebar beside each chart
            looks = _eval_frames(page, CONTROLS_JS)
            assert looks and all(lk["accent"] == lk["primary"] for lk in looks), looks
            assert all(lk["bar"] in ("rgba(0, 0, 0, 0)", "transparent") for lk in looks), looks
            assert all(lk["radius"] >= 4 for lk in looks), looks  # rounded, as Streamlit's buttons
            page.screenshot(path=str(shots / f"dashboard-train-{scheme}.png"))
        finally:
            page.close()
    page = browser.new_page(viewport={"width": 1440, "height": 1300})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{url}/compare?runs={','.join(names)}")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 4")
        page.get_by_role("combobox", name="Group runs by").click()
        page.get_by_role("option", name="seeds (mean of runs alike but for the seed)", exact=True).click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot')].some(d => (d.data || []).some(t => t.fill === 'tonexty'))"
        )
        page.wait_for_timeout(2000)
        legend = page.evaluate(
            "() => [...document.querySelectorAll('.js-plotly-plot')][0].data.filter(t => t.showlegend !== false).map(t => t.name)"
        )
        assert legend == ["block-admm (n = 3)", "sgd (n = 3)"], legend
        page.screenshot(path=str(shots / "dashboard-compare-bands.png"))
    finally:
        page.close()
