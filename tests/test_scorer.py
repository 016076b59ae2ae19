"""The Heatmaps page's scorer process (app/dashboard/scorer.py): the same maps as the engine computes
in-process, the engine's own errors, a fresh process after a crash, none left when idle, and a
dashboard server that never imports torch while it draws maps (server memory ≤ 500 MB)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import fresh_python_json

from admm_core.errors import ConfigError
from app.dashboard.scorer import Scorer

ROOT = Path(__file__).resolve().parent.parent
REF = "shipped:deepfacto-r4"


@pytest.fixture(scope="module")
def scorer():
    s = Scorer()
    yield s
    s.close()


def test_maps_equal_the_engines_in_process_maps(scorer):
    from admm_core import heatmaps as hm
    from admm_core.deepfacto import shipped

    face = shipped.mean_face()
    rank, order = scorer.info(REF)
    assert rank == len(hm.load_model(REF).scale) and order == hm.default_components(REF, rank)
    crop, maps = scorer.maps(REF, face, order[:3])
    assert np.array_equal(crop, hm.crop_image(REF, face))
    for got, want in zip(maps, hm.heatmaps(REF, face, order[:3]), strict=True):
        assert got.shape == want.shape == crop.shape[:2] and np.array_equal(got, want)


def test_failures_come_back_as_the_engines_errors_and_the_process_serves_on(scorer):
    face = np.full((120, 100, 3), 128, np.uint8)
    with pytest.raises(ConfigError, match="shipped model = 'nope'"):
        scorer.info("shipped:nope")
    with pytest.raises(ValueError, match="out of range"):
        scorer.maps(REF, face, [999])
    pid = scorer.pid
    assert scorer.info(REF)[0] == 4 and scorer.pid == pid  # the same process after both


def test_a_killed_scorer_is_started_afresh(scorer):
    scorer.info(REF)
    pid = scorer.pid
    os.kill(pid, signal.SIGKILL)  # asked at once: it may still be dying (CI once failed here after 0.3 s)
    assert scorer.info(REF)[0] == 4 and scorer.pid not in (None, pid)
    os.kill(scorer.pid, signal.SIGKILL)
    crop, maps = scorer.maps(REF, np.full((120, 100, 3), 128, np.uint8), [0])  # the face goes to the new folder
    assert len(maps) == 1 and maps[0].shape == crop.shape[:2]


def test_an_idle_scorer_ends_and_gives_its_memory_back():
    s = Scorer(idle_s=0.6)
    try:
        s.info(REF)
        pid = s.pid
        assert pid is not None
        deadline = time.monotonic() + 10
        while s.pid is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.pid is None and not Path(f"/proc/{pid}").exists()  # ended and reaped
        assert s.info(REF)[0] == 4  # and the next request starts one again
    finally:
        s.close()


HEATMAPS_PAGE = """
import json, sys
from streamlit.testing.v1 import AppTest

at = AppTest.from_file(sys.argv[1], default_timeout=180)
at.run()
at.switch_page("views/heatmaps.py").run()
at.radio(key="hm_source").set_value("Mean training face").run()
assert not at.exception, [e.value for e in at.exception]
charts = at.get("plotly_chart")
print(json.dumps({"charts": len(charts), "errors": [e.value for e in at.error], "torch": "torch" in sys.modules}))
"""


def test_the_heatmaps_page_draws_maps_without_torch_in_the_server(tmp_path):
    """The page, rendered in a fresh interpreter (the server), draws the shipped model's maps over the
    mean face; the network ran in the scorer, so the server never imported torch."""
    seen = fresh_python_json(HEATMAPS_PAGE, ROOT / "app" / "main.py", runs_root=tmp_path / "runs")
    assert seen == {"charts": 1, "errors": [], "torch": False}, seen


KILLED_SERVER = """
import os, signal, sys
from app.dashboard.scorer import Scorer

s = Scorer()
s.info(sys.argv[1])
print(s._dir, s.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the server killed: nothing of its own cleans up
"""


def test_the_scratch_folder_goes_with_a_killed_server_and_an_orphan_is_removed(tmp_path):
    """A server killed with SIGKILL leaves no scorer and no scratch folder (the scorer removes it at
    the end of its stdin), and a folder whose server and scorer were killed together is removed by
    the next server's scorer start; seen failing before (139 folders left in /tmp by a day of tests)."""
    import subprocess
    import sys
    import tempfile

    out = subprocess.run(
        [sys.executable, "-c", KILLED_SERVER, REF], capture_output=True, text=True, cwd=ROOT, timeout=240
    ).stdout.split()
    folder, pid = Path(out[0]), int(out[1])
    deadline = time.monotonic() + 20
    while (folder.exists() or Path(f"/proc/{pid}").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the scorer outlived its server"
    assert not folder.exists(), f"{folder} left behind"

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = Path(tempfile.mkdtemp(prefix=f"admm-scorer-{dead.pid}-"))
    (orphan / "maps.npz").write_bytes(b"x")
    mine = Path(tempfile.mkdtemp(prefix=f"admm-scorer-{os.getpid()}-"))  # a live server's: kept
    s = Scorer()
    try:
        s.info(REF)
        assert not orphan.exists() and mine.exists() and s._dir.exists()
    finally:
        s.close()
        mine.rmdir()
    assert s._dir is None
