"""A thousand runs: how the dashboard's listings hold up.

Makes a runs folder with ``--finished`` finished runs (copies of three small digits runs, each
with its own id, so no training is repeated; ``--seeds DIR``: copies of the finished runs in DIR,
none trained) and ``--live`` live ones (real workers training
long digits runs), then renders the Runs page, the Compare page and the Train page (its run
menu) under Streamlit's AppTest (the server's script run, in this process) and measures:

- first render: a new session's first run of the page (s);
- refresh: a rerun of the same session, what each auto-refresh costs the server (s), the median
  of ``--repeats``; and the listing alone (``ui.list_runs``, what the live fragments call);
- memory: this process's resident set after all pages (MB), i.e. the server's.

Then (unless ``--no-browser``, or without the system Chromium) the same folder is served by a real
``streamlit run app/serve.py`` on 127.0.0.1 and each page is opened in headless Chromium (a new
tab, so a new session), measuring:

- usable (the issue's first render): from the navigation until the page shows its controls (Runs:
  the table; Compare: the run picker; Train: the run menu), and its first chart (Compare; Train while
  a run is live), wall time in the browser (s), and the server's CPU time meanwhile (s);
- refresh: the server's CPU time (utime + stime from /proc/<pid>/stat) over ``--window`` seconds
  with only that tab open, per second and per refresh: the reruns are counted from the tab's
  websocket (each ends with Streamlit's ``script_finished`` message; a page's live fragment is
  rerun when its component finds that what it shows changed, app/dashboard/follow.py). The Train tab watches the newest live run,
  so its figure includes its live panel's redraws;
- memory: the server's VmRSS and VmHWM (peak) from /proc/<pid>/status, after all pages;
- two controls: a page with one menu and nothing else, and one with one two-point chart, served and
  opened the same way: the floors under "usable" and "first chart" on this machine at this load.

With ``--markdown FILE`` the table replaces the block between ``<!-- thousand-runs -->`` and
``<!-- /thousand-runs -->`` in FILE (docs/reliability.md), with the machine and load named.

    python experiments/thousand_runs.py --markdown docs/reliability.md
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TARGETS = {"first": 2.0, "refresh": 0.3, "rss_mb": 500.0}
APPTEST_TIMEOUT_S = 600  # a page run under AppTest; 120 s timed out at load 24 on the 2-core machine (other jobs)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")) / 1024


def make_runs(root: Path, finished: int, live: int, seeds: Path | None = None) -> list[Path]:
    """``finished`` copies of three finished runs (distinct ids) and ``live`` live workers; returns the
    live ones. ``seeds``: a folder of finished runs to copy instead (none trained here)."""
    from admm_core.rundir import write_json
    from admm_core.spec.presets import preset_config
    from app.dashboard import workers as W

    procs = []
    seeds = sorted(d for d in seeds.iterdir() if (d / "status.json").is_file()) if seeds else []
    for method in (
        ("block-admm", "adam", "sgd") if finished and not seeds else ()
    ):  # trained by the CLI, side by side (each mostly imports torch): this process stays a server's size
        d = root / "_seed" / method
        args = ["--preset", "digits-mlp", "--method", method, "--epochs", "3", "--train-limit", "200"]
        args += ["--test-limit", "100", "--out", str(d), "--quiet"]
        procs.append(subprocess.Popen([sys.executable, "-m", "admm_core", "train", *args], cwd=ROOT))
        seeds.append(d)
    for p in procs:
        if p.wait():
            raise subprocess.CalledProcessError(p.returncode, p.args)
    for i in range(finished):
        src = seeds[i % len(seeds)]
        dst = root / f"20260101-{i // 60:04d}{i % 60:02d}-digits-mlp-{src.name}-s{i}"
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("run.lock", "heartbeat"))
        st = json.loads((dst / "status.json").read_text())
        write_json(dst / "status.json", {**st, "updated": st["updated"] - (finished - i)}, durable=False)
        os.utime(dst, (time.time() - (finished - i), time.time() - (finished - i)))
    shutil.rmtree(root / "_seed", ignore_errors=True)
    lives = []
    for i in range(live):
        cfg = preset_config("digits-mlp", "sgd").replace(
            train__epochs=100000, data__train_limit=200, data__test_limit=100, train__seed=1000 + i
        )
        lives.append(W.start_run(cfg, root))
    return lives


def worker_autogroup(lives: list[Path]) -> str | None:
    """The first live worker's autogroup niceness as the kernel reports it (``/proc/<pid>/autogroup``,
    e.g. ``nice 5``), or None (no live worker, or a kernel without autogroups)."""
    from app.dashboard import workers as W

    for d in lives:
        try:
            return "niceness " + open(f"/proc/{W.worker_pid(d)}/autogroup").read().split()[-1]
        except (OSError, TypeError, IndexError):
            continue
    return None


def measure(root: Path, repeats: int) -> tuple[list[dict], float]:
    """(rows, cold start s): per page the first render of a new session on a warm server, a full
    rerun (what an interaction costs) and the auto-refresh fragment alone (what every poll costs)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from app import ui

    os.environ["ADMM_RUNS"] = str(root)
    spent: dict[str, list[float]] = {}
    real_fragment = st.fragment

    def timed_fragment(func=None, **kw):  # st.fragment with each call of the fragment body timed
        def wrap(f):
            def body(*a, **k):
                t = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    spent.setdefault(f.__name__, []).append(time.perf_counter() - t)

            body.__name__ = body.__qualname__ = f.__name__
            return real_fragment(body, **kw)

        return wrap(func) if func is not None else wrap

    st.fragment = timed_fragment
    t = time.perf_counter()
    AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=APPTEST_TIMEOUT_S).run()  # a server's first page
    cold = time.perf_counter() - t
    rows = []
    pages = (("Runs", "views/runs.py", "runs_panel"), ("Compare", "views/compare.py", None))
    for page, path, frag in (*pages, ("Train (run menu)", None, "live_panel")):
        at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=APPTEST_TIMEOUT_S)
        t = time.perf_counter()
        at.run()  # a new session opens on Train (the default page)
        if path:  # then the page itself, first time in this session
            t = time.perf_counter()
            at.switch_page(path).run()
        first = time.perf_counter() - t
        assert not at.exception, [e.value for e in at.exception]
        spent.clear()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - t)
        poll = statistics.median(spent[frag]) if frag and spent.get(frag) else None
        rows.append({"page": page, "first": first, "rerun": statistics.median(times), "refresh": poll})
    st.fragment = real_fragment
    lst = []
    for _ in range(repeats):
        t = time.perf_counter()
        n = len(ui.list_runs())
        lst.append(time.perf_counter() - t)
    rows.append(
        {
            "page": f"listing alone (`ui.list_runs`, {n} runs)",
            "first": None,
            "rerun": None,
            "refresh": statistics.median(lst),
        }
    )
    return rows, cold


def machine_line() -> str:
    from admm_core.device import machine

    load = open("/proc/loadavg").read().split()[:3]
    return f"{machine('cpu')}; load average {' '.join(load)} during the measurement"


def table(rows: list[dict], cold: float, rss: tuple, finished: int, live: int) -> str:
    def s(v, target=None):
        return "—" if v is None else f"{v:.2f}" + ("" if target is None else (" ✓" if v <= target else " ✗"))

    out = [
        f"{finished} finished runs + {live} live ones, `python experiments/thousand_runs.py` (Streamlit AppTest,"
        f" the server's script runs in this process). Machine: {machine_line()}.",
        "",
        f"| Page | first render, new session (s, target ≤ {TARGETS['first']:g}) "
        f"| auto-refresh, server time (s, target ≤ {TARGETS['refresh']:g}) | full rerun (s) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['page']} | {s(r['first'], TARGETS['first'])} | {s(r['refresh'], TARGETS['refresh'])} | {s(r['rerun'])} |"
        )
    base, total, torch_in = rss
    out += [
        "",
        f"The server's first page after its start (imports included): {cold:.2f} s. Compare has no auto-refresh"
        " (it redraws on a change of the picker); its full rerun is what a change costs.",
        "",
        f"Server memory (resident): {total:.0f} MB after all pages (target ≤ {TARGETS['rss_mb']:g} MB), of which"
        f" {base:.0f} MB before any run was listed (Python, Streamlit, pandas, plotly imported); the runs and the"
        f" pages add {total - base:.0f} MB. PyTorch imported by the pages: {'yes' if torch_in else 'no'}.",
    ]
    return "\n".join(out)


# per page two CSS selectors: its controls (the page is usable: the "first render") and its
# first chart (Compare always, Train while a run is live; drawn after Streamlit's 4.7 MB plotly bundle)
# Injected before a page's own scripts: in the page's clock (ms from its navigation start), when each
# known control entered the document (``dom``) and the animation frame after that (``painted``, the
# first moment the browser can show it), frame gaps over 150 ms, and the websocket's messages.
PAINT_PROBE = r"""
(() => {
  const KEEP_RAW = false;  // true: every message kept, base64 (first_paint.py --dump; it costs the page time)
  const t = {dom: {}, painted: {}, gaps: [], plotly: null, ws: [], raw: []};
  window.__probe = t;
  const WS = window.WebSocket;
  window.WebSocket = function (...a) {
    const s = new WS(...a);
    s.addEventListener("message", (m) => {
      const n = m.data.size || m.data.byteLength || m.data.length || 0;
      if (t.ws.length < 400) t.ws.push([Math.round(performance.now()), n]);
      if (KEEP_RAW && t.raw.length < 400 && m.data instanceof ArrayBuffer) {  // for a dump (decoded in Python)
        let b = "";
        for (const c of new Uint8Array(m.data)) b += String.fromCharCode(c);
        t.raw.push(btoa(b));
      }
    });
    return s;
  };
  window.WebSocket.prototype = WS.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  const label = (el, text) => [...el.querySelectorAll("[data-testid='stWidgetLabel'] p")].some(p => p.textContent.trim() === text);
  const find = {
    picker: () => [...document.querySelectorAll("[data-testid='stMultiSelect']")].find(e => label(e, "Runs")),
    menu: () => [...document.querySelectorAll("[data-testid='stSelectbox']")].find(e => label(e, "Run")),
    model: () => [...document.querySelectorAll("[data-testid='stSelectbox']")].find(e => label(e, "DeepFacto model")),
    table: () => document.querySelector("[data-testid='stDataFrame'] canvas"),
    start: () => [...document.querySelectorAll("button")].find(b => b.textContent.trim().endsWith("Start run")),
    chart: () => document.querySelector(".js-plotly-plot") ||
      [...document.querySelectorAll("iframe")].map(f => {
        try { return f.contentDocument.querySelector(".js-plotly-plot"); } catch (e) { return null; }
      }).find(Boolean),
  };
  const seen = () => {
    for (const [k, f] of Object.entries(find)) {
      if (t.dom[k] !== undefined) continue;
      const el = f();
      if (el && el.getBoundingClientRect().height > 0) {
        t.dom[k] = performance.now();
        requestAnimationFrame(() => { t.painted[k] = performance.now(); });
      }
    }
  };
  let last = null;
  const frame = (now) => {
    if (last !== null && now - last > 150) t.gaps.push([Math.round(last), Math.round(now - last)]);
    last = now;
    seen();
    if (now < 130000) requestAnimationFrame(frame);  // past the longest wait (120 s); an open tab then costs nothing
  };
  requestAnimationFrame(frame);
  document.addEventListener("DOMContentLoaded", () => new MutationObserver(seen).observe(document.body, {childList: true, subtree: true}));
})();
"""

BROWSER_PAGES = (  # (row, path, controls, chart: PAINT_PROBE's names; what the chart needs: a live run / LFW / nothing)
    ("Runs", "/runs", "table", None, None),
    ("Compare", "/compare", "picker", "chart", None),
    ("Train (run menu; the newest live run watched)", "/", "menu", "chart", "live"),
    ("Heatmaps (a held-out face's maps, from the scorer process)", "/heatmaps", "model", "chart", "lfw"),
)


def time_page(page, url: str, controls: str, chart: str | None, timeout_s: float) -> dict:
    """One navigation: s until its ``controls`` and its first ``chart`` (PAINT_PROBE's names, e.g.
    "menu", "chart"; None: no chart asked) were painted,
    by the page's own clock from its navigation start (``usable``, ``chart``: PAINT_PROBE), and s
    until this harness had that time (``usable_seen``, ``chart_seen``: from before ``page.goto``, the
    page asked every 200 ms); inf for what did not show within ``timeout_s``. The harness's time adds
    its own latency: a command to the browser, the polling, the answer, on the same loaded cores."""
    page.add_init_script(PAINT_PROBE)
    inf = float("inf")
    out = {"usable": inf, "usable_seen": inf, "chart": None, "chart_seen": None}
    t0 = time.perf_counter()
    page.goto(url)
    for what, key in (("usable", controls), ("chart", chart)):
        if key is None:
            break
        try:
            # asked every 200 ms, one property read: Playwright's own wait for a selector runs the query
            # (and a visibility check) in the measured page on every frame, which slowed its paint
            page.wait_for_function(
                "k => window.__probe && window.__probe.painted[k] !== undefined",
                arg=key,
                polling=200,
                timeout=max(1.0, timeout_s - (time.perf_counter() - t0)) * 1000,
            )
            out[what + "_seen"] = time.perf_counter() - t0
            out[what] = page.evaluate("k => window.__probe.painted[k]", key) / 1000
        except Exception as e:  # noqa: BLE001 - Playwright's TimeoutError (or a closed page): not shown
            print(f"{url}: {key} not painted within {timeout_s:.0f} s ({e.__class__.__name__})", file=sys.stderr)
            out[what] = out[what + "_seen"] = inf
            if what == "usable" and chart is not None:
                out["chart"] = out["chart_seen"] = inf
            break
    return out


def chromium_args() -> list[str]:
    from app.chromium import ARGS

    return ARGS


def chromium_path() -> str | None:
    """The test suite's system Chromium (app/chromium.py), or None where there is none."""
    from app.chromium import CHROMIUM

    return CHROMIUM if Path(CHROMIUM).exists() else None


def proc_cpu_s(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), s."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_mem_mb(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        return {ln.split(":")[0]: int(ln.split()[1]) / 1024 for ln in f if ln.startswith(("VmRSS:", "VmHWM:"))}


def have_lfw() -> bool:
    from admm_core.errors import DataError
    from admm_core.spec.faces import find_lfw

    try:
        return find_lfw() is not None
    except DataError:  # no LFW under the data roots: the Heatmaps row has no chart
        return False


def scorer_mem_mb(server_pid: int) -> float | None:
    """VmRSS (MB) of the server's scorer process (app/dashboard/scorer.py), None when it has none."""
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
            if (
                int(stat.rsplit(")", 1)[1].split()[1]) == server_pid
                and b"admm_core.heatmaps" in (d / "cmdline").read_bytes()
            ):
                return proc_mem_mb(int(d.name))["VmRSS"]
        except (OSError, ValueError, IndexError):
            continue
    return None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path, log: Path, script: Path = ROOT / "app" / "serve.py") -> tuple[subprocess.Popen, str]:
    """``streamlit run app/serve.py`` (as scripts/run.sh; or ``script``) on 127.0.0.1:<free port> over ``root`` (its own
    session, so the caller can stop it with its whole group); returns (process, url) once
    /_stcore/health answers."""
    import urllib.request

    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(script), "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    cmd += ["--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    base = Path(script).resolve().parents[1]  # the checkout the script belongs to (another one: an A/B)
    # the checkout first; a PYTHONPATH given (e.g. first_paint.py's --server PYTHONPATH=…) after it
    env = {
        **os.environ,
        "ADMM_RUNS": str(root),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(base), os.environ.get("PYTHONPATH")])),
    }
    out = open(log, "wb")
    proc = subprocess.Popen(cmd, cwd=base, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"streamlit did not start:\n{log.read_text()[-2000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def count_reruns(page) -> list[float]:
    """Times (monotonic s) at which the server told ``page`` that a run of its script or of a
    fragment finished: one per full rerun or fragment rerun, read from the tab's websocket."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    done: list[float] = []

    def frame(payload) -> None:
        if isinstance(payload, bytes | bytearray):
            try:
                if ForwardMsg.FromString(bytes(payload)).WhichOneof("type") == "script_finished":
                    done.append(time.monotonic())
            except Exception:  # noqa: BLE001 - not a ForwardMsg: not ours to count
                pass

    page.on("websocket", lambda ws: ws.on("framereceived", frame))
    return done


# The controls: pages with nothing but one menu, or one two-point chart, served and opened the same
# way. Their render times are what Chromium and Streamlit need on this machine at this load whatever
# the page does: the floors under the pages' "usable" and "first chart".
CONTROL_MENU_APP = """import streamlit as st

st.title("Control")
st.selectbox("Run", ["a", "b", "c"])
"""
CONTROL_APP = """import plotly.graph_objects as go
import streamlit as st

st.title("Control")
st.plotly_chart(go.Figure(go.Scatter(x=[0, 1], y=[0, 1])))
"""


def measure_control(
    browser,
    root: Path,
    timeout_s: float,
    app: str = CONTROL_APP,
    control: str = "chart",
    draws: int = 3,
) -> tuple[list[float], list[float]]:
    """(new-profile tabs, warm tabs): :func:`time_page` of the control page until its ``control``
    (its chart) shows, ``draws`` of each."""
    script = root.parent / f"{root.name}-control.py"
    script.write_text(app)
    proc, url = start_server(root, root.parent / f"{root.name}-control.log", script)

    def draw(page) -> dict:
        try:
            return time_page(page, url, control, None, timeout_s)
        finally:
            page.close()

    try:
        new = [draw(browser.new_page(viewport={"width": 1440, "height": 1000})) for _ in range(draws)]
        warm = browser.new_context(viewport={"width": 1440, "height": 1000})
        draw(warm.new_page())  # fills the caches, as the dashboard's first page did
        warmed = [draw(warm.new_page()) for _ in range(draws)]
        warm.close()
    finally:
        stop_server(proc)
        script.unlink(missing_ok=True)
        (root.parent / f"{root.name}-control.log").unlink(missing_ok=True)
    return new, warmed


def measure_browser(
    root: Path, window: float, live: int, timeout_s: float = 120.0, draws: int = 3, pages: set[str] | None = None
) -> dict:
    """The pages served for real and opened in headless Chromium: per page (first render wall s,
    server CPU s during it, server CPU s per s with the tab open, per refresh where it has a
    period), the server's start time and its memory after all pages; ``pages``: only the rows whose
    path is named (e.g. ``{"/runs", "/compare"}``; None: every one of BROWSER_PAGES)."""
    from playwright.sync_api import sync_playwright

    t = time.perf_counter()
    proc, url = start_server(root, root.parent / f"{root.name}-server.log")
    start = time.perf_counter() - t
    rows = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), args=chromium_args(), headless=True)
            try:
                # a browser that has opened the dashboard before (its HTTP and code caches warm, as a
                # user's is after the first page); each measured page also gets a new profile's tab below
                warm = browser.new_context(viewport={"width": 1440, "height": 1000})
                page = warm.new_page()  # the server's first page pays its imports: kept apart
                t = time.perf_counter()
                page.goto(url + "/runs")
                page.locator("[data-testid='stDataFrame'] canvas").first.wait_for(
                    state="visible", timeout=timeout_s * 1000
                )
                cold = time.perf_counter() - t
                page.close()
                for name, path, controls, chart, needs in BROWSER_PAGES:
                    if pages is not None and path not in pages:
                        continue
                    chart = None if (needs == "live" and not live) or (needs == "lfw" and not have_lfw()) else chart
                    page = browser.new_page(viewport={"width": 1440, "height": 1000})
                    page.set_default_timeout(timeout_s * 1000)
                    reruns = count_reruns(page)
                    cpu0 = proc_cpu_s(proc.pid)
                    first = time_page(page, url + path, controls, chart, timeout_s)
                    first_cpu = proc_cpu_s(proc.pid) - cpu0
                    # waits that let Playwright take the tab's websocket frames (a plain sleep would not)
                    page.wait_for_timeout(min(2.0, window) * 1000)  # the page's own follow-up reruns settle
                    cpu1, n1 = proc_cpu_s(proc.pid), len(reruns)
                    page.wait_for_timeout(window * 1000)
                    cpu = proc_cpu_s(proc.pid) - cpu1
                    n = len(reruns) - n1
                    page.close()
                    new = [first]
                    for _ in range(draws - 1):  # more draws: one navigation is one draw (±0.5 s at this load)
                        page = browser.new_page(viewport={"width": 1440, "height": 1000})
                        new.append(time_page(page, url + path, controls, chart, timeout_s))
                        page.close()
                    warmed = []
                    for _ in range(draws):
                        page = warm.new_page()
                        warmed.append(time_page(page, url + path, controls, chart, timeout_s))
                        page.close()
                    rows.append(
                        {
                            "page": name,
                            **{k: [d[k] for d in new] for k in ("usable", "usable_seen", "chart")},
                            **{k + "_warm": [d[k] for d in warmed] for k in ("usable", "usable_seen", "chart")},
                            "first_cpu": first_cpu,
                            "per_s": cpu / window,
                            "reruns": n,
                            "refresh": cpu / n if n else None,
                        }
                    )
                mem = proc_mem_mb(proc.pid)
                scorer = scorer_mem_mb(proc.pid)
                control = measure_control(browser, root, timeout_s, draws=draws)
                control_menu = measure_control(browser, root, timeout_s, CONTROL_MENU_APP, "menu", draws)
            finally:
                browser.close()
        with open(f"/proc/{proc.pid}/maps") as f:
            maps = f.read()
        torch_loaded = "libtorch" in maps  # PyTorch's own libraries mapped into the server
        # uvicorn parses HTTP with httptools and Streamlit runs uvloop when they are installed (requirements.txt)
        fast = {m: f"/{m}/" in maps for m in ("httptools", "uvloop")}
    finally:
        stop_server(proc)
    return {
        "rows": rows,
        "start": start,
        "cold": cold,
        "rss": mem["VmRSS"],
        "scorer": scorer,
        "hwm": mem["VmHWM"],
        "torch": torch_loaded,
        "fast": fast,
        "control": control,
        "control_menu": control_menu,
    }


def browser_table(res: dict, finished: int, live: int, window: float) -> str:
    def s(v, target=None):
        if isinstance(v, list):  # draws: their median, then min–max
            if not v or v[0] is None:
                return "—"
            lo, hi = min(v), max(v)
            return s(statistics.median(v), target) + (f" ({lo:.2f}–{hi:.2f})" if len(v) > 1 else "")
        if v == float("inf"):
            return "not shown in 120 s ✗"
        return "—" if v is None else f"{v:.2f}" + ("" if target is None else (" ✓" if v <= target else " ✗"))

    draws = len(res["rows"][0]["usable"]) if res["rows"] else 1
    times = "once" if draws == 1 else f"{draws} times"
    out = [
        f"The same folder served for real (`streamlit run app/serve.py` on 127.0.0.1, its own process) and each"
        f" page opened in a new headless Chromium tab, {times} with a new profile (nothing cached), then"
        f" {times} in a browser that has opened the dashboard before (its caches warm); the table gives"
        f" the median and the range. Usable = the page's controls painted (Runs: its table; Compare: its run"
        f" picker; Train: its run menu), by the page's own clock from its navigation start: the animation frame"
        f" after they entered the document, the first moment the browser can show them. Seen by the harness ="
        f" the same from outside: from before Playwright's `goto` until the harness, asking the page every"
        f" 200 ms, had that time (its commands and polls, on the same cores, included). First chart = its first plotly chart"
        f" painted (Compare; Train while a run is live), drawn once Streamlit's plotly bundle (4.7 MB of"
        f" JavaScript) has loaded. Server CPU = utime + stime of the server process"
        f" (/proc/<pid>/stat) over {window:g} s with only that tab open; refreshes = the reruns the server"
        f" sent that tab meanwhile (`script_finished` messages on its websocket). Load average"
        f" {' '.join(open('/proc/loadavg').read().split()[:3])} after the measurement.",
        "",
        f"| Page | usable (controls painted), new profile (s, target ≤ {TARGETS['first']:g}) "
        f"| the same, browser caches warm (s) | seen by the harness, new / warm (s, medians) "
        f"| first chart painted, new / warm (s, medians) "
        f"| server CPU until then (s) | server CPU per s, tab open (s) | refreshes in {window:g} s "
        f"| server CPU per refresh (s, target ≤ {TARGETS['refresh']:g}) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def med(v) -> str:
        return "—" if not v or v[0] is None else s(statistics.median(v))

    for r in res["rows"]:
        out.append(
            f"| {r['page']} | {s(r['usable'], TARGETS['first'])} | {s(r['usable_warm'], TARGETS['first'])} "
            f"| {med(r['usable_seen'])} / {med(r['usable_seen_warm'])} | {med(r['chart'])} / {med(r['chart_warm'])} "
            f"| {s(r['first_cpu'])} | {s(r['per_s'])} | {r['reruns']} | {s(r['refresh'], TARGETS['refresh'])} |"
        )

    def ctl(c) -> str:
        new, warm = c
        return (
            f"{s([d['usable'] for d in new])} / {s([d['usable'] for d in warm])}"
            f" ({med([d['usable_seen'] for d in new])} / {med([d['usable_seen'] for d in warm])})"
        )

    ok = "✓" if res["hwm"] <= TARGETS["rss_mb"] else "✗"
    out += [
        "",
        f"Server memory with {finished} + {live} runs, after all pages: **{res['rss']:.0f} MB resident (VmRSS),"
        f" peak {res['hwm']:.0f} MB (VmHWM)**, target ≤ {TARGETS['rss_mb']:g} MB {ok}; PyTorch loaded in the server:"
        f" {'yes' if res['torch'] else 'no'} (libtorch in /proc/<pid>/maps); its HTTP parser: "
        f"{'httptools' if res['fast'].get('httptools') else 'h11 (pure Python)'}, its event loop: "
        f"{'uvloop' if res['fast'].get('uvloop') else 'asyncio'}. "
        + (
            f"The Heatmaps page's scorer process (torch and the model; it ends after 10 min unused):"
            f" {res['scorer']:.0f} MB resident. "
            if res.get("scorer")
            else ""
        )
        + "Server start until /_stcore/health"
        f" answered: {res['start']:.1f} s; its first page (Runs, the server's own imports included):"
        f" {res['cold']:.2f} s.",
        "",
        f"Controls, served and opened the same way right after (new profile / caches warm; painted, and in"
        f" brackets seen by the harness, medians): a page with one menu and nothing else showed it in"
        f' {ctl(res["control_menu"])} s, the floor under "usable" at this load; a page with one two-point'
        f' chart and nothing else showed it in {ctl(res["control"])} s, the floor under "first chart".',
    ]
    return "\n".join(out)


def write_block(md: Path, name: str, text: str) -> None:
    """Replace what lies between ``<!-- name -->`` and ``<!-- /name -->`` in ``md`` (appended when absent)."""
    doc = md.read_text()
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if start in doc and end in doc:
        doc = doc[: doc.index(start) + len(start)] + "\n" + text + "\n" + doc[doc.index(end) :]
    else:
        doc += f"\n{start}\n{text}\n{end}\n"
    md.write_text(doc)
    print(f"wrote {md}", file=sys.stderr)


def page_paths(value: str) -> set[str]:
    """``--pages runs,train`` -> {"/runs", "/"}; every unknown name said at once."""
    paths = {"runs": "/runs", "compare": "/compare", "train": "/", "heatmaps": "/heatmaps"}
    names = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in names if x not in paths]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"--pages {value!r}: unknown {bad or 'nothing named'}; pick from {sorted(paths)}"
        )
    return {paths[x] for x in names}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--finished", type=int, default=1000)
    p.add_argument("--live", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--root", help="runs folder to make (default: a temporary one, removed afterwards)")
    p.add_argument(
        "--seeds", help="a folder of finished runs copied as the finished ones (default: three trained by the CLI)"
    )
    p.add_argument("--markdown", help="write the table into this file between the thousand-runs markers")
    p.add_argument("--no-browser", action="store_true", help="AppTest only: no real server, no Chromium")
    p.add_argument(
        "--no-apptest",
        action="store_true",
        help="the real server in Chromium only (AppTest's Train page took over 10 min at load 15-24 with 4 live runs)",
    )
    p.add_argument("--draws", type=int, default=3, help="navigations per page and condition (the median is shown)")
    p.add_argument(
        "--pages",
        type=page_paths,
        help="the browser's pages only, by path (e.g. runs,compare,train,heatmaps; default: all)",
    )
    p.add_argument("--window", type=float, default=20.0, help="seconds of server CPU counted per open tab")
    p.add_argument("--worker-nice", type=int, help="the live workers' niceness (default: the dashboard's, spawn.NICE)")
    p.add_argument(
        "--no-autogroup",
        action="store_true",
        help="leave the workers' autogroup at niceness 0 (how workers were started before; the ablation)",
    )
    a = p.parse_args(argv)
    tmp = None if a.root else tempfile.mkdtemp(prefix="thousand-runs-")
    root = Path(a.root or tmp)
    root.mkdir(parents=True, exist_ok=True)
    os.environ["ADMM_RUNS"] = str(root)
    from admm_core import spawn
    from app.dashboard import workers as W

    default_nice = spawn.NICE
    if a.worker_nice is not None:
        spawn.NICE = a.worker_nice
    spawn.AUTOGROUP_NICE = not a.no_autogroup
    t = time.time()
    lives = make_runs(root, a.finished, a.live, Path(a.seeds) if a.seeds else None)
    print(f"made {a.finished} finished + {a.live} live runs in {time.time() - t:.1f} s", file=sys.stderr)
    try:
        from admm_core.rundir import read_json

        deadline = time.time() + 120
        while time.time() < deadline and not all(
            (read_json(d / "status.json") or {}).get("state") == "running" for d in lives
        ):
            time.sleep(0.5)
        group = worker_autogroup(lives)
        import streamlit.testing.v1  # noqa: F401 - the server's imports, before the baseline

        import app.ui  # noqa: F401

        base = rss_mb()
        rows = None
        if not a.no_apptest:
            rows, cold = measure(root, a.repeats)
            rss = (base, rss_mb(), "torch" in sys.modules)  # before machine_line(), which asks torch its version
        browser = None
        if not a.no_browser and chromium_path():
            browser = measure_browser(root, a.window, a.live, draws=a.draws, pages=a.pages)
        elif not a.no_browser:
            print("no system Chromium: the real-server figures are left out", file=sys.stderr)
    finally:
        for d in lives:
            W.stop_run(d)
    if rows is not None:
        text = table(rows, cold, rss, a.finished, a.live)
    else:
        text = f"{a.finished} finished runs + {a.live} live ones, `python experiments/thousand_runs.py --no-apptest`."
        text += f" Machine: {machine_line()}."
    text += f" The live workers ran at niceness {spawn.NICE} (the dashboard's: {default_nice})"
    text += f", their scheduling autogroup at {group}." if group else "."
    if browser:
        text += "\n\n" + browser_table(browser, a.finished, a.live, a.window)
    print(text)
    if a.markdown:
        write_block(Path(a.markdown), "thousand-runs", text)
    if tmp:
        time.sleep(2)  # the stopped workers write their last status
        shutil.rmtree(tmp, ignore_errors=True)
        Path(f"{tmp}-server.log").unlink(missing_ok=True)  # the real server's log, beside the folder
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
