"""A thousand runs: how the dashboard's listings hold up (issue #36).

Makes a runs folder with ``--finished`` finished runs (copies of three small digits runs, each
with its own id, so no training is repeated) and ``--live`` live ones (real workers training
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
  websocket (each ends with Streamlit's ``script_finished`` message; the push thread reruns a
  page's live fragment when what it shows changed). The Train tab watches the newest live run,
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


def make_runs(root: Path, finished: int, live: int) -> list[Path]:
    """``finished`` copies of three finished runs (distinct ids) and ``live`` live workers; returns the live ones."""
    from admm_core.presets import preset_config
    from admm_core.rundir import write_json
    from app.dashboard import workers as W

    seeds = []
    for method in (
        ("block-admm", "adam", "sgd") if finished else ()
    ):  # trained by the CLI: this process stays a server's size
        d = root / "_seed" / method
        args = ["--preset", "digits-mlp", "--method", method, "--epochs", "3", "--train-limit", "200"]
        args += ["--test-limit", "100", "--out", str(d), "--quiet"]
        subprocess.run([sys.executable, "-m", "admm_core", "train", *args], cwd=ROOT, check=True)
        seeds.append(d)
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
RUN_MENU = "[data-testid='stSelectbox']:has([data-testid='stWidgetLabel'] p:text-is('Run'))"
RUN_PICKER = "[data-testid='stMultiSelect']:has([data-testid='stWidgetLabel'] p:text-is('Runs'))"
CHART = ".js-plotly-plot"
MODEL_MENU = "[data-testid='stSelectbox']:has([data-testid='stWidgetLabel'] p:text-is('DeepFacto model'))"
BROWSER_PAGES = (  # (row, path, controls, chart, what the chart needs: a live run / LFW / nothing)
    ("Runs", "/runs", "[data-testid='stDataFrame'] canvas", None, None),
    ("Compare", "/compare", RUN_PICKER, CHART, None),
    ("Train (run menu; the newest live run watched)", "/", RUN_MENU, CHART, "live"),
    ("Heatmaps (a held-out face's maps, from the scorer process)", "/heatmaps", MODEL_MENU, CHART, "lfw"),
)


def time_page(page, url: str, controls: str, chart: str | None, timeout_s: float) -> tuple[float, float | None]:
    """(s until the controls show, s until the first chart shows or None) of one navigation;
    inf for what did not show within ``timeout_s``."""
    t0 = time.perf_counter()
    page.goto(url)
    try:
        wait_shown(page, controls, timeout_s)
        usable = time.perf_counter() - t0
    except TimeoutError as e:
        print(f"{url}: {e}", file=sys.stderr)
        return float("inf"), None if chart is None else float("inf")
    if chart is None:
        return usable, None
    try:
        wait_shown(page, chart, timeout_s, frames=True)
        return usable, time.perf_counter() - t0
    except TimeoutError as e:
        print(f"{url}: {e}", file=sys.stderr)
        return usable, float("inf")


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
    from admm_core.faces import find_lfw

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
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(base)}
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


def wait_shown(page, selector: str, timeout_s: float, frames: bool = False) -> None:
    """Until ``selector`` is visible in the page, or with ``frames`` in the page or one of its frames
    (the Train page's live charts are drawn inside their component's iframe). A page's controls are
    always in the page itself: looking through its frames too (0.4 s each, the sidebar has two)
    found Train's run menu up to a second after it was shown (4.02 s against 1.9 s painted by the
    in-page clock of experiments/first_paint.py, the same hour)."""
    if not frames:
        try:
            page.wait_for_selector(selector, state="visible", timeout=timeout_s * 1000)
            return
        except Exception as e:  # noqa: BLE001 - Playwright's TimeoutError: one kind for both paths
            raise TimeoutError(f"{selector!r} not shown within {timeout_s:.0f} s") from e
    deadline = time.monotonic() + timeout_s
    while True:
        for frame in page.frames:
            # waited for inside the browser, a while per frame: asking is_visible() every 50 ms (the
            # first version) made the busy renderer lay the page out on each ask and slowed the
            # render it measured (Compare: 35 s against 9 s polled every 1.5 s, load 15)
            try:
                frame.wait_for_selector(selector, state="visible", timeout=400)
                return
            except Exception:  # noqa: BLE001 - not there yet, or a frame detached while we looked
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{selector!r} not shown within {timeout_s:.0f} s")


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
    selector: str = ".js-plotly-plot",
    draws: int = 3,
) -> tuple[list[float], list[float]]:
    """(new-profile tabs' s, warm tabs' s) until the control page's ``selector`` (its chart) shows,
    ``draws`` of each."""
    script = root.parent / f"{root.name}-control.py"
    script.write_text(app)
    proc, url = start_server(root, root.parent / f"{root.name}-control.log", script)

    def draw(page) -> float:
        t = time.perf_counter()
        page.goto(url)
        try:
            page.locator(selector).first.wait_for(state="visible", timeout=timeout_s * 1000)
            return time.perf_counter() - t
        except Exception:  # noqa: BLE001 - not shown in time: said in the table
            return float("inf")
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


def measure_browser(root: Path, window: float, live: int, timeout_s: float = 120.0, draws: int = 3) -> dict:
    """The pages served for real and opened in headless Chromium: per page (first render wall s,
    server CPU s during it, server CPU s per s with the tab open, per refresh where it has a
    period), the server's start time and its memory after all pages."""
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
                    chart = None if (needs == "live" and not live) or (needs == "lfw" and not have_lfw()) else chart
                    page = browser.new_page(viewport={"width": 1440, "height": 1000})
                    page.set_default_timeout(timeout_s * 1000)
                    reruns = count_reruns(page)
                    cpu0 = proc_cpu_s(proc.pid)
                    usable, first_chart = time_page(page, url + path, controls, chart, timeout_s)
                    first_cpu = proc_cpu_s(proc.pid) - cpu0
                    # waits that let Playwright take the tab's websocket frames (a plain sleep would not)
                    page.wait_for_timeout(min(2.0, window) * 1000)  # the page's own follow-up reruns settle
                    cpu1, n1 = proc_cpu_s(proc.pid), len(reruns)
                    page.wait_for_timeout(window * 1000)
                    cpu = proc_cpu_s(proc.pid) - cpu1
                    n = len(reruns) - n1
                    page.close()
                    new = [(usable, first_chart)]
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
                            "first": [u for u, _ in new],
                            "chart": [c for _, c in new],
                            "first_warm": [u for u, _ in warmed],
                            "chart_warm": [c for _, c in warmed],
                            "first_cpu": first_cpu,
                            "per_s": cpu / window,
                            "reruns": n,
                            "refresh": cpu / n if n else None,
                        }
                    )
                mem = proc_mem_mb(proc.pid)
                scorer = scorer_mem_mb(proc.pid)
                control = measure_control(browser, root, timeout_s, draws=draws)
                control_menu = measure_control(browser, root, timeout_s, CONTROL_MENU_APP, RUN_MENU, draws)
            finally:
                browser.close()
        with open(f"/proc/{proc.pid}/maps") as f:
            torch_loaded = any("libtorch" in ln for ln in f)  # PyTorch's own libraries mapped into the server
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

    draws = len(res["rows"][0]["first"]) if res["rows"] else 1
    out = [
        f"The same folder served for real (`streamlit run app/serve.py` on 127.0.0.1, its own process) and each"
        f" page opened in a new headless Chromium tab, {draws} times with a new profile (nothing cached), then"
        f" {draws} times in a browser that has opened the dashboard before (its caches warm); the table gives"
        f" the median and the range. Usable = the page's controls are shown (Runs:"
        f" its table; Compare: its run picker; Train: its run menu); first chart = its first plotly chart"
        f" (Compare; Train while a run is live), drawn once Streamlit's plotly bundle (4.7 MB of JavaScript) has"
        f" loaded. Server CPU = utime + stime of the server process"
        f" (/proc/<pid>/stat) over {window:g} s with only that tab open; refreshes = the reruns the server"
        f" sent that tab meanwhile (`script_finished` messages on its websocket). Load average"
        f" {' '.join(open('/proc/loadavg').read().split()[:3])} after the measurement.",
        "",
        f"| Page | usable in Chromium (controls shown), new profile (s, target ≤ {TARGETS['first']:g}) "
        f"| the same, browser caches warm (s) | first chart, new profile (s) | first chart, caches warm (s) "
        f"| server CPU until then (s) | server CPU per s, tab open (s) | refreshes in {window:g} s "
        f"| server CPU per refresh (s, target ≤ {TARGETS['refresh']:g}) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        out.append(
            f"| {r['page']} | {s(r['first'], TARGETS['first'])} | {s(r.get('first_warm'), TARGETS['first'])} "
            f"| {s(r.get('chart'))} | {s(r.get('chart_warm'))} | {s(r['first_cpu'])} | {s(r['per_s'])} "
            f"| {r['reruns']} | {s(r['refresh'], TARGETS['refresh'])} |"
        )
    ok = "✓" if res["hwm"] <= TARGETS["rss_mb"] else "✗"
    out += [
        "",
        f"Server memory with {finished} + {live} runs, after all pages: **{res['rss']:.0f} MB resident (VmRSS),"
        f" peak {res['hwm']:.0f} MB (VmHWM)**, target ≤ {TARGETS['rss_mb']:g} MB {ok}; PyTorch loaded in the server:"
        f" {'yes' if res['torch'] else 'no'} (libtorch in /proc/<pid>/maps). "
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
        f"Controls, served and opened the same way right after (new profile / caches warm): a page with one"
        f" menu and nothing else showed it in {s(res['control_menu'][0])} / {s(res['control_menu'][1])} s, the"
        f' floor under "usable" at this load; a page with one two-point chart and nothing else showed it in'
        f' {s(res["control"][0])} / {s(res["control"][1])} s, the floor under "first chart".',
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--finished", type=int, default=1000)
    p.add_argument("--live", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--root", help="runs folder to make (default: a temporary one, removed afterwards)")
    p.add_argument("--markdown", help="write the table into this file between the thousand-runs markers")
    p.add_argument("--no-browser", action="store_true", help="AppTest only: no real server, no Chromium")
    p.add_argument(
        "--no-apptest",
        action="store_true",
        help="the real server in Chromium only (AppTest's Train page took over 10 min at load 15-24 with 4 live runs)",
    )
    p.add_argument("--draws", type=int, default=3, help="navigations per page and condition (the median is shown)")
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
    lives = make_runs(root, a.finished, a.live)
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
            browser = measure_browser(root, a.window, a.live, draws=a.draws)
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
