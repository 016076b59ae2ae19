"""The live charts component's Python half (app/dashboard/live_charts.py); its page is driven in
Chromium by tests/test_browser_live.py."""

from __future__ import annotations

import json

from app.dashboard import charts as C
from app.dashboard import live_charts as LC


def test_asset_dir_is_made_once_from_the_installed_plotly(tmp_path):
    out = LC.asset_dir([tmp_path / "cache"])
    assert out is not None and out.parent == tmp_path / "cache"
    assert (out / "index.html").read_bytes() == LC.HTML.read_bytes()
    assert (out / "plotly.min.js").stat().st_size == LC._plotly_js().stat().st_size  # no network, no copy in git
    assert LC.asset_dir([tmp_path / "cache"]) == out  # reused
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [out.name]  # no half-made folder left


def test_asset_dir_falls_through_to_a_writable_folder_or_none(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert LC.asset_dir([blocked]) is None  # then the panel draws the server's figures
    assert LC.asset_dir([blocked, tmp_path / "ok"]).parent == tmp_path / "ok"


def test_server_figures_when_asked(monkeypatch):
    monkeypatch.setenv("ADMM_DASH_LIVE_CHARTS", "server")
    assert LC.component() is None


def test_payload_maps_each_line_to_epoch_step_and_wall_time():
    ms = [
        {"epoch": e, "iteration": 10 * e, "time": 100.0 + 2.5 * e, "train_loss": 1 / (e + 1), "residuals": [0.1, 0.2]}
        for e in range(4)
    ]
    figs = C.live_figures(ms, True, run="r1")
    order = ["accuracy", "loss", "seconds", "residuals", "dual_norms", "betas"]
    p = LC.payload(figs, ms, "r1", order)
    json.dumps(p)  # the component's arguments travel as JSON
    assert p["run"] == "r1" and p["order"] == order and set(p["figures"]) == set(order)
    assert p["x"] == {"epoch": [0, 1, 2, 3], "step": [0, 10, 20, 30], "wall": [0.0, 2.5, 5.0, 7.5]}
    assert p["meta"]["loss"] == {"smooth": True, "log": True, "xtitle": "epoch"}
    assert p["meta"]["accuracy"]["smooth"] is False and p["meta"]["betas"]["log"] is False
    assert p["figures"]["loss"]["data"][0]["y"] == [1.0, 0.5, 1 / 3, 0.25]  # unsmoothed: the page smooths
    assert p["figures"]["accuracy"]["layout"]["meta"]["run"] == "r1"
