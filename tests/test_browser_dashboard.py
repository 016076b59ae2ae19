"""End to end in a real Chromium: start the dashboard, start a digits run from the Train page,
watch the live charts fill, stop the run, find it 'stopped' on the Runs page.

Also measures how far the live accuracy chart trails the worker: for every point that
appears in the browser's plotly chart, the time it appeared minus the ``time`` field of its
metrics.jsonl line (same machine, same clock). With ADMM_SCREENSHOTS=assets it saves the docs'
screenshots assets/dashboard-train.png (mid-run) and assets/dashboard-compare.png; otherwise they
go to the test's temporary folder, so a test run never changes tracked files. Needs the system Chromium (apt-get install chromium).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import time
import warnings
from pathlib import Path

import pytest
from helpers import ARGS, CHROMIUM, dashboard, digits_cfg, needs_chromium
from helpers import free_port as _free_port
from helpers import wait as _wait

# ARGS, CHROMIUM, _free_port and _wait stay importable from here: test_browser_live.py and
# test_reliability_load.py import them from this module
__all__ = ["ARGS", "CHROMIUM", "_free_port", "_wait"]

ROOT = Path(__file__).resolve().parent.parent

pytestmark = needs_chromium

# generous: on a shared 2-core machine at load ~25 the Train page took 185 s to draw all its charts
TIMEOUT_MS = int(float(os.environ.get("DASH_BROWSER_TIMEOUT_S", "240")) * 1000)

PLOTS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(d => ({
    title: (d.layout && d.layout.title && (d.layout.title.text || d.layout.title)) || '',
    run: (d.layout && d.layout.meta && d.layout.meta.run) || null,
    n: (d.data || []).map(t => (t.x || []).filter(v => v !== null).length)}))"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The dashboard on 127.0.0.1:<free port> with its own runs folder; stopped afterwards."""
    import torch

    from admm_core.network import train

    root, plain = _runs_folder(tmp_path_factory)
    # small finished runs of three methods for the Compare page (made the CLI's / a notebook's way)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for i, method in enumerate(("block-admm", "adam", "sgd")):
        train(digits_cfg(method, 6, n=400, test_n=None), root / f"20260101-00000{i}-digits-mlp-{method}-s0")
    torch.set_num_threads(threads)
    # a DeepFacto run trains (and caches) a tiny backbone: keep it out of ~/.cache
    cache = tmp_path_factory.mktemp("browser-cache")
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT), "ADMM_CACHE": str(cache)}
    with dashboard(env, root / "server.log") as (url, proc):
        yield url, root, proc.pid
        # stop every worker we started, then (leaving the block) the server's whole process group
        from app.dashboard import workers as W

        for d in root.iterdir():
            if d.is_dir():
                W.stop_run(d)
    if plain:  # made for the screenshots: gone with them taken
        shutil.rmtree(root, ignore_errors=True)


SHOTS_RUNS = "~/admm-runs"  # the runs folder the docs' screenshots show (not a test's temporary path)


def _runs_folder(tmp_path_factory) -> tuple[Path, bool]:
    """A temporary runs folder; with $ADMM_SCREENSHOTS, a plainly named one ($ADMM_SCREENSHOTS_RUNS,
    default ~/admm-runs) that must be absent or empty and is removed afterwards. -> (folder, plain)."""
    if not os.environ.get("ADMM_SCREENSHOTS"):
        return tmp_path_factory.mktemp("browser-runs"), False
    root = Path(os.environ.get("ADMM_SCREENSHOTS_RUNS") or SHOTS_RUNS).expanduser()
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        pytest.fail(
            f"ADMM_SCREENSHOTS_RUNS = {root}: not an empty folder (the screenshots' runs go there, then it is removed)"
        )
    root.mkdir(parents=True, exist_ok=True)
    return root, True


def _eval_frames(page, js: str, arg=None) -> list:
    """``js`` (returning a list) evaluated in the page and in each of its frames, concatenated: the
    Train page's live charts are drawn inside their component's iframe (app/dashboard/live_charts.py)."""
    out = []
    for frame in page.frames:
        try:
            out += frame.evaluate(js, arg) or []
        except Exception:  # noqa: BLE001 - a frame navigating or gone (a redraw): the next look sees it
            pass
    return out


PLOT_COUNT_JS = "() => [...document.querySelectorAll('.js-plotly-plot')].map(() => 1)"


def _plots(page) -> list[dict]:
    return _eval_frames(page, PLOTS_JS)


def _screenshots_dir(tmp: Path) -> Path:
    """$ADMM_SCREENSHOTS (relative to the project, e.g. ``assets``) when set, else a temporary folder."""
    where = os.environ.get("ADMM_SCREENSHOTS")
    path = (ROOT / where) if where else (Path(tmp) / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _plot(page, prefix: str, run: str | None = None) -> dict | None:
    """The chart whose title contains ``prefix`` (and that plots ``run``, when given)."""
    return next((p for p in _plots(page) if prefix in str(p["title"]) and (run is None or p["run"] == run)), None)


def test_train_watch_stop_in_chromium(server, browser):
    from admm_core.rundir import read_metrics
    from app.dashboard import workers as W

    url, root, _ = server
    before = {d.name for d in root.iterdir()}
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    # a shareable setup link: digits, Block-ADMM, long enough to watch and stop (400 epochs took
    # 63 s, and on a loaded machine the run finished before the Stop click: 3000)
    page.goto(f"{url}/?preset=digits-mlp&method=block-admm&epochs=3000&train_limit=400&m.iters_per_epoch=1")
    start = page.get_by_role("button", name=re.compile("Start run"))
    start.wait_for()
    from playwright.sync_api import expect

    expect(page.get_by_label("Epochs", exact=True)).to_have_value("3000", timeout=TIMEOUT_MS)  # the URL filled the form
    start.click()
    run_dir = _wait(lambda: next((d for d in root.iterdir() if d.is_dir() and d.name not in before), None), 20)
    assert run_dir is not None, "no run directory appeared"
    # the live panel switches to the new run at once (its charts appear with its first evaluation)
    page.wait_for_function("name => document.body.innerText.includes(name)", arg=run_dir.name)

    # watch the accuracy chart gain points; time each point's arrival against the worker's clock
    seen_at: dict[int, float] = {}
    t0, first, reloaded = time.time(), None, False
    while (
        time.time() - t0 < TIMEOUT_MS / 1000
        and len(seen_at) < 8
        and not (first and time.time() - first > 12 and len(seen_at) >= 4)
    ):
        if not seen_at and not reloaded and time.time() - t0 > 15:
            # the first session can miss the switch to the new run (seen on fresh clones): open its
            # link afresh once (a plain reload would keep the old ?run= in the URL)
            page.goto(f"{url}/?run={run_dir.name}")
            reloaded = True
        acc = _plot(page, "Accuracy", run_dir.name)
        now = time.time()
        n = max(acc["n"]) if acc and acc["n"] else 0
        for i in range(n):
            seen_at.setdefault(i, now)
        if n and first is None:
            first = now
        time.sleep(0.05)
    assert len(seen_at) >= 3, f"the accuracy chart gained only {len(seen_at)} points"
    metrics = read_metrics(run_dir)
    # the first points land while the page is still loading the worker's first output: skip index 0
    lat = [seen_at[i] - metrics[i]["time"] for i in sorted(seen_at) if i > 0 and i < len(metrics)]
    res = _wait(
        lambda: (lambda p: p if p and min(p["n"] or [0]) >= 2 else None)(_plot(page, "Primal residual", run_dir.name)),
        TIMEOUT_MS / 1000,
    )
    assert res is not None, (_plots(page), len(read_metrics(run_dir)))
    assert len(res["n"]) == 3 and min(res["n"]) >= 2, res  # one trace per block
    # the live fragment redraws its charts every refresh: look again until both are on the page
    both = _wait(
        lambda: (
            _plot(page, "Dual norm", run_dir.name) is not None
            and _plot(page, "Penalty", run_dir.name) is not None
            or None
        ),
        20,
    )
    assert both, [p["title"] for p in _plots(page)]
    # the progress bar's text is drawn by the live charts' page, in its iframe
    assert _wait(lambda: any("ETA" in t for t in _eval_frames(page, "() => [document.body.innerText]")), 20)
    # the Live panel, its charts whole (Streamlit scrolls inside its own pane; the form is above it)
    page.set_viewport_size({"width": 1440, "height": 1300})
    page.evaluate("() => document.getElementById('live').scrollIntoView({block: 'start'})")
    page.wait_for_timeout(1500)
    page.screenshot(path=str(_screenshots_dir(root) / "dashboard-train.png"))

    # not the toolbar's own Stop; force: the live fragment redraws every 0.5 s, never "stable" under load
    page.locator("button[kind=secondary]", has_text="Stop").click(force=True)
    assert _wait(lambda: W.state_of(run_dir).get("state") == "stopped", 30), W.state_of(run_dir)

    page.goto(f"{url}/runs?run={run_dir.name}")  # the selection is in the URL
    page.wait_for_function("name => document.body.innerText.includes(name)", arg=run_dir.name)
    page.wait_for_function("() => document.body.innerText.includes('stopped')")
    page.locator("h4", has_text="stopped").wait_for()
    page.locator("[data-testid='stSelectbox']").first.wait_for()  # rendered after the heading under load
    details = page.evaluate("""() => { const b = document.querySelector("[data-testid='stSelectbox']");
        return b.innerText + ' ' + [...b.querySelectorAll('input')].map(i => i.value).join(' '); }""")
    assert run_dir.name in details, details  # the details pick (its state is the heading's)
    assert page.locator("h4", has_text="stopped").count() == 1

    page.close()

    report = {
        "points": len(lat),
        "median_s": round(statistics.median(lat), 3),
        "max_s": round(max(lat), 3),
        "min_s": round(min(lat), 3),
    }
    print("\nlive chart latency (browser shows point − worker wrote it):", json.dumps(report))
    (root / "latency.json").write_text(json.dumps({**report, "all": lat}))
    # the lag is a measured figure (docs/dashboard.md). It regressed with the dashboard rework:
    # median 5.7-12.9 s on a quiet machine (0.7-0.8 s before; open). This bound asserts only that
    # the chart is live, i.e. keeps following the run instead of freezing.
    assert report["median_s"] < 30.0, report


# --- the diagram, memory, ticks, meta, images ---------------------------------------------------

WATCH_JS = """() => { const b = [...document.querySelectorAll("[data-testid='stSelectbox']")]
    .find(e => e.innerText.startsWith('Run'));
    return b ? b.innerText + ' ' + [...b.querySelectorAll('input')].map(i => i.value).join(' ') : ''; }"""


def _fixture_run(root: Path, method: str) -> str:
    return next(d.name for d in sorted(root.iterdir()) if d.is_dir() and d.name.endswith(f"-{method}-s0"))


def _tiny(method: str, epochs: int):
    """200 digits, block-admm at one iteration per epoch, the other methods at their default settings."""
    return digits_cfg(method, epochs, n=200).replace(
        method_params={"iters_per_epoch": 1} if method == "block-admm" else {}
    )


def test_watched_run_stays_when_others_finish_or_start(server, browser):
    """Watch A; B (short) finishes and C starts meanwhile: the live panel keeps showing A."""
    from app.dashboard import workers as W

    url, root, _ = server
    a = W.start_run(_tiny("block-admm", 400), root)  # long: still running while we look
    b = W.start_run(_tiny("sgd", 2), root)  # finishes while we watch A
    c = None  # started below; named here so that the clean-up sees it whatever fails first
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{url}/?run={a.name}")
        page.wait_for_function("name => document.body.innerText.includes(name)", arg=a.name)
        assert _wait(lambda: W.state_of(b)["state"] == "finished", 90), W.state_of(b)
        seen_runs, picked = set(), set()
        t0 = time.time()
        while time.time() - t0 < 12:
            if c is None and time.time() - t0 > 4:
                c = W.start_run(_tiny("adam", 400), root)  # a new run starts while we watch A
            seen_runs |= {p["run"] for p in _plots(page) if p["run"]}
            picked.add(page.evaluate(WATCH_JS))
            time.sleep(0.3)
        assert _wait(lambda: W.state_of(c)["state"] == "running", 60), W.state_of(c)
        page.wait_for_timeout(2000)
        seen_runs |= {p["run"] for p in _plots(page) if p["run"]}
        assert seen_runs <= {a.name}, seen_runs  # never B or C
        # the menu names A all along: never another run, never blank (it went blank once A's label
        # changed with its state: Streamlit keeps a pick by its label; labels no longer carry the state)
        assert all(a.name in p for p in picked), picked
        page.wait_for_function(f"name => ({WATCH_JS})().includes(name)", arg=a.name)
        assert f"run={a.name}" in page.url
    finally:
        page.close()
        for d in (a, b, c):
            if d is not None:
                W.stop_run(d)


def test_load_into_train_loads_the_picked_run(server, browser):
    """Runs → Load into Train, for two runs of different methods: the form gets each one's config."""
    url, root, _ = server
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        for method in ("sgd", "block-admm"):
            run = _fixture_run(root, method)

            def loaded() -> bool:
                # the URL mirrors the form: the picked run's method, epochs and samples are in it
                # (polled from Python: page.wait_for_function on location.href never saw the change here)
                return f"method={method}&" in page.url and "epochs=6&" in page.url

            page.goto(f"{url}/runs?run={run}")
            page.locator("h4", has_text="finished").wait_for()
            # a link (/?load=<run>): a real navigation, so the URL leaves /runs and then mirrors the form
            page.get_by_role("link", name="Load into Train").click()
            heading = page.get_by_role("heading", name="Train", exact=True)
            try:
                heading.wait_for(timeout=60_000)
            except PlaywrightTimeout:
                # seen once under load (CI, 2026-12-02): the page still on /runs after the click, as if it
                # landed while the page redrew; a user clicks again. Counted as a warning, not hidden.
                if "/runs" not in page.url:
                    raise
                warnings.warn(f"Load into Train ({method}): the first click did not navigate", stacklevel=1)
                page.get_by_role("link", name="Load into Train").click()
                heading.wait_for()
            # the form holds the picked run's config (both differ from the defaults)
            expect(page.get_by_label("Epochs", exact=True)).to_have_value("6")
            expect(page.get_by_label("Training samples (0 = all)", exact=True)).to_have_value("400")
            # Known gap (docs/dashboard.md): in about 1 of 3 runs the address bar stays at ?run=<id>
            # after the link, though the form is loaded; the next change to the form writes it.
            if _wait(loaded, 20):
                assert f"run={run}" in page.url and "train_limit=400" in page.url, page.url
            else:
                warnings.warn(f"Load into Train ({method}): URL not mirrored yet: {page.url}", stacklevel=1)
    finally:
        page.close()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_huge_widths_show_the_memory_message_without_allocating(server, browser):
    from playwright.sync_api import expect

    url, _, pid = server
    page = browser.new_page(viewport={"width": 1280, "height": 1200})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{url}/?preset=digits-mlp&method=block-admm&hidden=128")
        page.get_by_role("button", name=re.compile("Start run")).wait_for()
        page.wait_for_timeout(1500)
        before = _rss_mb(pid)
        for hidden in ("100000,100000", "12000,12000", "12001,12000"):
            box = page.get_by_role("textbox", name="MLP hidden widths")
            box.fill(hidden)
            box.press("Enter")
            if hidden.startswith("100000"):
                page.get_by_text("this run needs about").first.wait_for()
                # the message is drawn before the button in the same rerun: wait for the button's redraw
                expect(page.get_by_role("button", name=re.compile("Start run"))).to_be_disabled()
            else:
                page.get_by_text(re.compile("parameters .* to train")).first.wait_for()
            page.wait_for_timeout(1000)
        after = _rss_mb(pid)
        text = page.inner_text("body")
        assert "Traceback" not in text and "RuntimeError" not in text
        print(f"\napp RSS {before:.0f} MB -> {after:.0f} MB over widths 100000², 12000², 12001×12000")
        assert after - before < 100, (before, after)  # building 12000² layers grew it by ~2.4 GB
    finally:
        page.close()


LOG_TICKS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')]
    .filter(d => d.layout && d.layout.yaxis && d.layout.yaxis.type === 'log')
    .map(d => ({title: (d.layout.title && d.layout.title.text) || '',
               ticks: [...d.querySelectorAll('.ytick text')].map(t => t.textContent)}))"""


def test_log_axes_show_full_tick_labels(server, browser):
    url, root, _ = server
    run = _fixture_run(root, "block-admm")
    page = browser.new_page(viewport={"width": 1440, "height": 1600})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{url}/?run={run}")
        assert _wait(lambda: len(_eval_frames(page, PLOT_COUNT_JS)) >= 6, TIMEOUT_MS / 1000)
        page.wait_for_timeout(1500)
        axes = _eval_frames(page, LOG_TICKS_JS)
        assert len(axes) >= 3, axes  # loss, residuals, dual norms
        for ax in axes:
            vals = [float(t.replace("−", "-")) for t in ax["ticks"]]  # every label is a whole number
            assert len(vals) >= 2 and vals == sorted(vals) and len(set(vals)) == len(vals), ax
        print("\nlog-axis tick labels:", [(a["title"][:20], a["ticks"]) for a in axes])
    finally:
        page.close()


# when the run picker was first painted (the animation frame after it entered the page) and when
# the first chart entered the page, in the page's clock
FIRST_PAINT_JS = """(() => {
  const t = window.__firstPaint = {};
  const picker = () => [...document.querySelectorAll("[data-testid='stMultiSelect']")].find(e =>
    [...e.querySelectorAll("[data-testid='stWidgetLabel'] p")].some(p => p.textContent.trim() === "Runs"));
  const look = () => {
    if (t.pickerDom === undefined && picker()) {
      t.pickerDom = performance.now();
      requestAnimationFrame(() => { t.pickerPainted = performance.now(); });
    }
    if (t.chartDom === undefined && document.querySelector(".js-plotly-plot")) t.chartDom = performance.now();
    if (t.allDom === undefined && document.querySelectorAll(".js-plotly-plot").length >= 5
        && document.querySelector("[data-testid='stDataFrame']")) t.allDom = performance.now();
  };
  document.addEventListener("DOMContentLoaded", () =>
    new MutationObserver(look).observe(document.body, {childList: true, subtree: true}));
})();"""


def test_compare_settings_columns_and_parallel_coordinates(server, browser):
    """Compare from a link (?runs=…): the run picker is painted before any chart enters the page
    (follow.after_paint); ⚙ columns, paper column, parallel coordinates; saves the screenshot."""
    url, root, _ = server
    runs = [_fixture_run(root, m) for m in ("block-admm", "adam", "sgd")]
    page = browser.new_page(viewport={"width": 1440, "height": 2300})
    page.set_default_timeout(TIMEOUT_MS)
    page.add_init_script(FIRST_PAINT_JS)
    try:
        page.goto(f"{url}/compare?runs={','.join(runs)}")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 5")
        t = page.evaluate("() => window.__firstPaint")
        assert t["pickerPainted"] < t["chartDom"], t  # the page's controls were shown before plotly was loaded
        page.wait_for_function("() => window.__firstPaint.allDom !== undefined")
        t = page.evaluate("() => window.__firstPaint")
        print(
            f"\ncompare (page clock): picker painted {t['pickerPainted'] / 1000:.2f} s, first chart in the page "
            f"{t['chartDom'] / 1000:.2f} s, all five charts and the table {t['allDom'] / 1000:.2f} s"
        )
        types = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].map(d => d.data[0].type)")
        assert "parcoords" in types, types
        dims = page.evaluate(
            "() => [...document.querySelectorAll('.js-plotly-plot')].find(d => d.data[0].type === 'parcoords')"
            ".data[0].dimensions.map(x => x.label)"
        )
        assert "method" in dims and dims[-1] == "final test %", dims
        page.locator("[data-testid='stDataFrame'] canvas").first.wait_for()
        page.wait_for_timeout(3000)  # the table is drawn on a canvas a moment later
        page.screenshot(path=str(_screenshots_dir(root) / "dashboard-compare.png"))
    finally:
        page.close()


THEME_JS = """() => ({app: getComputedStyle(document.querySelector('.stApp')).backgroundColor,
    plots: [...document.querySelectorAll('.js-plotly-plot')].map(d => [d._fullLayout.paper_bgcolor,
        d._fullLayout.font.color])})"""


def _luminance(css: str) -> float:
    """0 (black) … 1 (white) of 'rgb(r, g, b)' or '#rrggbb'."""
    if css.startswith("#"):
        rgb = [int(css[i : i + 2], 16) for i in (1, 3, 5)]
    else:
        rgb = [int(float(v)) for v in re.findall(r"[\d.]+", css)[:3]]
    return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_theme_follows_the_system(server, browser, scheme):
    """The page and every chart follow the browser's colour scheme (no forced light template)."""
    url, root, _ = server
    runs = [_fixture_run(root, m) for m in ("block-admm", "adam")]
    page = browser.new_page(viewport={"width": 1440, "height": 1600}, color_scheme=scheme)
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{url}/compare?runs={','.join(runs)}")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3")
        seen = page.evaluate(THEME_JS)
        dark = scheme == "dark"
        assert (_luminance(seen["app"]) < 0.25) == dark, seen
        for paper, font in seen["plots"]:
            assert (_luminance(paper) < 0.25) == dark and (_luminance(font) > 0.6) == dark, seen
    finally:
        page.close()


LFW = Path(os.environ.get("ADMM_DATA") or ROOT.parent / "shared" / "data") / "lfw"
# the smallest DeepFacto that runs every stage (the settings of tests/test_deepfacto.py's smoke run)
TINY_DEEPFACTO = {
    "rank": 4,
    "data_limit": 160,
    "image_size": 32,
    "backbone_epochs": 1,
    "finetune_epochs": 1,
    "admm_images": 48,
    "eval_images": 30,
    "svm_train_limit": 80,
    "batch_size": 32,
    "device": "cpu",
}


@pytest.mark.skipif(not LFW.is_dir(), reason=f"LFW faces not found at {LFW} (set ADMM_DATA)")
def test_deepfacto_from_train_stop_resume_then_heatmaps(server, browser):
    """DeepFacto from a Train link: started, stopped, on Runs as 'stopped', resumed to the end, then
    its finished run opens on Heatmaps with score maps over a held-out face."""
    from playwright.sync_api import expect

    from admm_core.rundir import read_metrics
    from app.dashboard import workers as W

    url, root, _ = server
    before = {d.name for d in root.iterdir()}
    LONG = 100_000  # warm-up epochs: stopped long before (at 400 a slow page once saw the run end first)
    page = browser.new_page(viewport={"width": 1440, "height": 1400})
    page.set_default_timeout(TIMEOUT_MS)
    query = "&".join(f"df.{k}={v}" for k, v in {**TINY_DEEPFACTO, "warmup_epochs": LONG}.items())
    page.goto(f"{url}/?mode=deepfacto&{query}")
    expect(page.get_by_label("NMF rank r", exact=True)).to_have_value("4", timeout=TIMEOUT_MS)  # the URL filled it
    page.get_by_role("button", name=re.compile("Start run")).click()
    run_dir = _wait(lambda: next((d for d in root.iterdir() if d.is_dir() and d.name not in before), None), 30)
    assert run_dir is not None and "lfwa-deepfacto-r4" in run_dir.name, run_dir
    assert _wait(lambda: (run_dir / "config.json").is_file(), 30)  # the directory comes first; the file is atomic
    cfg = json.loads((run_dir / "config.json").read_text())["deepfacto"]
    assert {k: cfg[k] for k in TINY_DEEPFACTO} == TINY_DEEPFACTO and cfg["warmup_epochs"] == LONG

    # its own charts while it runs: the NMF residuals and DeepFacto's three constraints
    assert _wait(lambda: len(read_metrics(run_dir)) >= 3, TIMEOUT_MS / 1000), W.log_tail(run_dir)
    if not _wait(lambda: _plot(page, "NMF module", run_dir.name), 15):
        page.goto(f"{url}/?mode=deepfacto&run={run_dir.name}")  # the first session can miss the switch (as above)

    def nmf_points():  # the chart as soon as it has two iterations drawn (the page may trail the worker)
        p = _plot(page, "NMF module", run_dir.name)
        return p if p and max(p["n"] or [0]) >= 2 else None

    nmf = _wait(nmf_points, TIMEOUT_MS / 1000)
    assert nmf is not None, [(p["title"], p["n"]) for p in _plots(page)]
    # the live fragment redraws its charts every refresh: look again until this one is on the page
    assert _wait(lambda: _plot(page, "Face verification", run_dir.name), 20), [p["title"] for p in _plots(page)]
    page.locator("button[kind=secondary]", has_text="Stop").click(force=True)  # not the toolbar's own Stop
    assert _wait(lambda: W.state_of(run_dir)["state"] == "stopped", 120), W.state_of(run_dir)
    done = len(read_metrics(run_dir)) - 1  # iteration 0 is the initialisation
    assert 1 <= done < LONG

    # Runs lists it as stopped, like every other run
    page.goto(f"{url}/runs?run={run_dir.name}")
    page.wait_for_function("name => document.body.innerText.includes(name)", arg=run_dir.name)
    page.locator("h4", has_text="stopped").wait_for()

    # resume it from the live panel to 2 iterations more than it did (the fine-tune iteration is the last)
    page.goto(f"{url}/?mode=deepfacto&run={run_dir.name}")
    target = page.get_by_role("spinbutton", name="Resume to epoch")
    target.fill(str(done + 2))
    target.press("Enter")
    page.wait_for_timeout(1000)
    page.get_by_role("button", name="Resume", exact=True).click()
    assert _wait(lambda: W.state_of(run_dir)["state"] == "finished", TIMEOUT_MS / 1000), W.log_tail(run_dir)
    ms = read_metrics(run_dir)
    assert [m["epoch"] for m in ms] == list(range(done + 3)), [m["epoch"] for m in ms]
    assert ms[-1]["phase"] == "finetune"

    # finished: the live panel links to Heatmaps, which opens on this run and draws its maps
    link = page.get_by_role("link", name=re.compile("Open its score maps"))
    link.wait_for()
    link.click()
    page.wait_for_url(re.compile("heatmaps"))
    expect(page.get_by_text("DeepFacto model", exact=True)).to_be_visible()
    picked = WATCH_JS.replace("startsWith('Run')", "startsWith('DeepFacto model')")
    page.wait_for_function(f"name => ({picked})().includes(name)", arg=run_dir.name)
    assert _wait(lambda: any("S[" in str(p["title"]) or p["n"] for p in _plots(page)), TIMEOUT_MS / 1000)
    page.wait_for_timeout(1500)
    page.screenshot(path=str(_screenshots_dir(root) / "dashboard-heatmaps.png"), full_page=True)
    page.close()
