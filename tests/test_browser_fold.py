"""Start above the fold: on the default Train page and its DeepFacto form, in a real Chromium at
1440 × 1000 and at 1280 × 800, the Start button lies inside the window without any scrolling (it
was at y ≈ 1314 px, under the whole form), and the start row's link brings the Live panel into view."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers import dashboard, needs_chromium

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
