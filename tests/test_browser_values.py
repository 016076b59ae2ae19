"""Typed bad values in a real Chromium: a number typed outside a widget's bounds is not
sent by the browser (a red outline, the old value kept), so the page would say "30 epochs" and keep
Start on. With no bounds on the form's numbers, 0 epochs and seed -1 typed into the Train form, and
0 trials typed into Sweeps, each reach the page, are named, and hold Start / Launch."""

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
    root = tmp_path_factory.mktemp("values-runs")
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT)}
    with dashboard(env, root / "server.log") as (url, _):
        yield url


def _type(page, label: str, text: str) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(text)
    box.press("Enter")


def test_typed_zero_epochs_and_negative_seed_are_named_and_hold_start(server, browser):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(f"{server}/?preset=digits-mlp&method=block-admm")
        start = page.get_by_role("button", name=re.compile("Start run"))
        start.wait_for()
        expect(start).to_be_enabled()
        _type(page, "Epochs", "0")
        page.get_by_text("Epochs = 0: must be a positive integer").wait_for()
        _type(page, "Seed", "-1")
        page.get_by_text(re.compile(r"Seed = -1")).wait_for()
        expect(start).to_be_disabled()
        expect(page.get_by_text("Fix 2 fields below to start: Epochs, Seed.")).to_be_visible()
        _type(page, "Epochs", "4")
        _type(page, "Seed", "2")
        expect(page.get_by_text(re.compile(r"· 4 epochs\."))).to_be_visible()
        expect(start).to_be_enabled()

        page.goto(f"{server}/sweeps")
        launch = page.get_by_role("button", name=re.compile("Launch study"))
        launch.wait_for()
        expect(launch).to_be_enabled()
        _type(page, "Trials", "0")
        page.get_by_text("Trials = 0: must be a positive integer").wait_for()
        expect(launch).to_be_disabled()
    finally:
        page.close()
