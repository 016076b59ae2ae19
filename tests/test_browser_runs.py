"""The Runs page in a real Chromium: refreshed by push when the runs folder changes, not every
2 s (issue 33). An idle Runs tab costs the server almost no CPU (from /proc); a run added to the
folder still appears without a reload."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_browser_dashboard import ARGS, CHROMIUM, _free_port, _wait

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = float(os.environ.get("DASH_BROWSER_TIMEOUT_S", "240"))

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"system Chromium not found at {CHROMIUM}")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_runs_tab_costs_almost_nothing_and_sees_new_runs(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from admm_core.presets import preset_config
    from admm_core.runs import train

    root = tmp_path / "runs"
    cfg = preset_config("digits-mlp", "sgd").replace(train__epochs=1, data__train_limit=200, data__test_limit=200)
    train(cfg, root / "20260101-000000-first")
    port = _free_port()
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"), "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    cmd += ["--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy():
            try:
                return urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok"
            except OSError:
                return proc.poll() is not None

        _wait(healthy, 60)
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        with sync_api.sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = b.new_page(viewport={"width": 1280, "height": 1200})
            page.set_default_timeout(TIMEOUT_S * 1000)
            page.goto(f"{url}/runs?run=20260101-000000-first", wait_until="domcontentloaded")
            page.get_by_text("Details of run").first.wait_for()
            page.wait_for_timeout(5000)  # settle: fonts, the table's canvas, the last deltas
            window = 20.0
            c0, t0 = _cpu_s(proc.pid), time.time()
            time.sleep(window)
            cpu = 100 * (_cpu_s(proc.pid) - c0) / (time.time() - t0)
            load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            print(f"\nidle Runs tab: server CPU {cpu:.1f}% of a core over {window:.0f} s; loadavg {load}")
            # a new run in the folder reaches the table (the run menu lists it) without a reload
            shutil.copytree(root / "20260101-000000-first", root / "20260101-000001-second")
            t1 = time.time()
            menu = page.get_by_role("combobox").last  # the "Details of run" menu

            def listed():
                menu.click()
                page.wait_for_timeout(300)
                seen = page.get_by_role("option", name="20260101-000001-second").count() > 0
                page.keyboard.press("Escape")
                return seen

            assert _wait(listed, 30, every=0.5), "the new run never reached the Runs page"
            print(f"a new run listed {time.time() - t1:.1f} s after it appeared")
            b.close()
        assert cpu <= 5.0, cpu
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
