"""The live charts component's Python half (app/dashboard/live_charts.py); its page is driven in
Chromium by tests/test_browser_live.py."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from app.dashboard import live_charts as LC

NODE = shutil.which("node") or shutil.which("nodejs")


def test_asset_dir_is_made_once_from_the_installed_plotly(tmp_path):
    out = LC.asset_dir([tmp_path / "cache"])
    assert out is not None and out.parent == tmp_path / "cache"
    assert (out / "index.html").read_bytes() == LC.HTML.read_bytes()
    assert (out / "live_series.js").read_bytes() == LC.SERIES_JS.read_bytes()
    assert (out / "follow.js").read_bytes() == LC.FOLLOW_JS.read_bytes()  # the follow component's own script
    assert (out / "plotly.min.js").stat().st_size == LC._plotly_js().stat().st_size  # no network, no copy in git
    assert LC.asset_dir([tmp_path / "cache"]) == out  # reused
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [out.name]  # no half-made folder left


def test_asset_dir_falls_through_to_a_writable_folder_or_none(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert LC.asset_dir([blocked]) is None  # then the panel says why it draws no charts
    assert LC.asset_dir([blocked, tmp_path / "ok"]).parent == tmp_path / "ok"


@pytest.mark.skipif(NODE is None, reason="node is not installed (scripts/test.sh installs it with apt)")
def test_page_maps_each_line_to_epoch_step_and_wall_time():
    """x by step or wall time: each line's ``iteration`` and seconds since the first timed line."""
    ms = [{"epoch": e, "iteration": 10 * e, "time": 100.0 + 2.5 * e} for e in range(4)]
    ms.insert(0, {"epoch": 0})  # a line without a time: no wall x, and not the origin
    js = f"const L = require({json.dumps(str(LC.SERIES_JS))}); process.stdout.write(JSON.stringify(L.xs({json.dumps(ms)})));"
    out = json.loads(subprocess.run([NODE, "-e", js], capture_output=True, text=True, check=True, timeout=60).stdout)
    assert out == {"epoch": [0, 0, 1, 2, 3], "step": [None, 0, 10, 20, 30], "wall": [None, 0.0, 2.5, 5.0, 7.5]}
