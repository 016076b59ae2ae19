"""Heatmaps in the first minute, in a real Chromium: a copy of the checkout with no data root
anywhere (no $ADMM_DATA, no ./data, no ../shared/data) and no runs; open the Heatmaps page,
upload a face photo, and the shipped model's r score maps are drawn in under 30 s.
Needs the system Chromium (apt-get install chromium) and one LFW photo to upload (the test's
own input, not the server's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers import dashboard, needs_chromium

ROOT = Path(__file__).resolve().parent.parent
PHOTO = (
    Path(os.environ.get("ADMM_DATA", "")) / "lfw" / "lfw-deepfunneled-160" / "Aaron_Eckhart" / "Aaron_Eckhart_0001.jpg"
)

pytestmark = needs_chromium

# the panels' titles in the drawn figure (app.dashboard.faces.overlay_figure: one subplot per component)
PANELS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(
    d => ((d.layout && d.layout.annotations) || []).map(a => a.text || '')).filter(t => t.startsWith('S['))"""


def _bare_checkout(dest: Path) -> Path:
    """The tracked (and new, not ignored) files of this checkout, copied where no data root is beside them."""
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
    ).stdout.split(b"\0")
    for f in filter(None, files):
        src = ROOT / f.decode()
        if src.is_file():
            (dest / f.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f.decode())
    return dest


@pytest.mark.skipif(not PHOTO.is_file(), reason=f"no face photo to upload ({PHOTO} missing: set ADMM_DATA)")
def test_heatmaps_of_an_uploaded_photo_with_no_data_root(tmp_path, browser):
    checkout = _bare_checkout(tmp_path / "nowhere" / "checkout")  # ../shared does not exist here
    env = {k: v for k, v in os.environ.items() if k not in ("ADMM_DATA", "ADMM_DEEPFACTO_MODELS")}
    env |= {"ADMM_RUNS": str(tmp_path / "runs"), "ADMM_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(checkout)}
    with dashboard(env, tmp_path / "server.log", checkout=checkout) as (url, _):
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            opened = time.time()
            page.goto(url + "/heatmaps", wait_until="domcontentloaded")
            try:
                page.get_by_text("Trained by the project on LFW and shipped").first.wait_for(timeout=30_000)
            except Exception:
                page.screenshot(path=str(tmp_path / "failed.png"), full_page=True)
                raise AssertionError(f"no shipped model offered; the page says:\n{page.inner_text('body')}") from None
            page.get_by_text("No LFW here").or_(page.locator("input[type=file]")).first.wait_for(
                state="attached", timeout=30_000
            )
            page.locator("input[type=file]").set_input_files(str(PHOTO))
            page.wait_for_function(f"({PANELS_JS})().length >= 4", timeout=30_000)
            took = time.time() - opened
            panels = page.evaluate(PANELS_JS)
            page.screenshot(path=str(tmp_path / "heatmaps.png"), full_page=True)
            text = page.inner_text("body")
        finally:
            page.close()
    print(f"\nheatmaps drawn {took:.1f} s after the page opened (panels {panels})")
    assert took < 30, f"the score maps took {took:.1f} s"
    assert sorted(panels) == ["S[0]", "S[1]", "S[2]", "S[3]"]  # r = 4: all four rows of S
    assert "face found at" in text and "Traceback" not in text
