import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ADMM_DATA", str(ROOT.parent / "shared" / "data"))
# one runs folder per pytest-xdist worker: the notebooks and CLI tests list what they wrote there
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
os.environ.setdefault("ADMM_RUNS", f"/tmp/admm-test-runs{'-' + _WORKER if _WORKER else ''}")
# decoded faces, backbones and SVMs that tests make stay out of the user's ~/.cache/admm_core
os.environ.setdefault("ADMM_CACHE", "/tmp/admm-test-cache")


@pytest.fixture(scope="module")
def browser():
    """A headless system Chromium through Playwright (skips where Playwright is missing)."""
    from helpers import ARGS, CHROMIUM

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished 2-epoch ``helpers.tiny()`` digits run, made once per test process: copy it
    (``run_copy``) before changing anything in it."""
    from helpers import tiny

    from admm_core.runs import train

    d = tmp_path_factory.mktemp("finished") / "run"
    train(tiny(), d)
    return d


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A copy of ``finished_run`` of this test's own, at tmp_path/runs/r1."""
    d = tmp_path / "runs" / "r1"
    shutil.copytree(finished_run, d)
    return d
