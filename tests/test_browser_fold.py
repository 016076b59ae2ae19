"""Start above the fold: on the default Train page and its DeepFacto form, in a real Chromium at
1440 × 1000 and at 1280 × 800, the Start button lies inside the window without any scrolling (it
was at y ≈ 1314 px, under the whole form), and the start row's link brings the Live panel into view;
after Start at 1280 × 800 the live charts are in view."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers import dashboard, needs_chromium, wait

pytestmark = needs_chromium
ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_MS = int(float(os.environ.get("DASH_BROWSER_TIMEOUT_S", "240")) * 1000)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fold-runs")
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT)}
    with dashboard(env, root / "server.log") as (url, _):
        yield url


def _inside(box: dict | None, height: int) -> bool:
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height


# the page's link, and a text of the form's last part: drawn, nothing still to come above Start
MODES = {"network": ("", "Method and training"), "deepfacto": ("/?mode=deepfacto", "All DeepFacto settings")}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("width,height", [(1440, 1000), (1280, 800)])
def test_start_is_in_view_without_scrolling(server, browser, width, height, mode):
    link, last = MODES[mode]
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(server + link)  # the default Train page (or its DeepFacto form): no run
        start = page.get_by_role("button", name=re.compile("Start run"))
        start.wait_for()
        page.get_by_text(last).wait_for()
        live = page.locator("#live")
        live.wait_for()
        page.wait_for_timeout(1000)
        box = start.bounding_box()
        assert _inside(box, height), f"Start at {box} in a {width}×{height} window"
        # the start row's link scrolls the page to the Live panel (below the form at both sizes)
        page.get_by_role("link", name=re.compile("Live panel")).click()
        page.wait_for_function(
            "h => { const r = document.getElementById('live').getBoundingClientRect(); return r.top >= 0 && r.bottom <= h; }",
            arg=height,
        )
    finally:
        page.close()


def test_start_brings_the_live_charts_into_view_at_1280(server, browser):
    """After Start in a 1280 × 800 window the live charts' frame, once drawn (100 px tall), lies whole in the
    window or its top in the upper 40% of it (waited for as long as a page may take under load: the
    worker imports torch before the first line of metrics): scrolled to the Live heading alone, or judged by the empty
    frame's box before its charts, the frame stayed at 654-1024 px, its charts under the fold."""
    from playwright.sync_api import expect
    from test_browser_live import LIVE_IN_VIEW_JS

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{server}/?preset=digits-mlp&method=sgd&epochs=1&train_limit=200&test_limit=200&eval_every=1")
        expect(page.get_by_label("Epochs", exact=True)).to_have_value("1", timeout=TIMEOUT_MS)
        page.get_by_role("button", name=re.compile("Start run")).click()
        seen = []

        def in_view():
            r = page.evaluate(LIVE_IN_VIEW_JS)  # [top, bottom, window height]
            seen.append(r)
            return r and r[1] - r[0] >= 100 and r[0] >= -1 and (r[1] <= r[2] or r[0] <= 0.4 * r[2])

        assert wait(in_view, TIMEOUT_MS / 1000), (
            f"the live charts' frame (top, bottom, window height) after Start: {seen[-3:]}"
        )
    finally:
        page.close()  # the run (one epoch of 200 digits) ends by itself
