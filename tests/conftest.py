import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ADMM_DATA", str(ROOT.parent / "shared" / "data"))
# one runs folder per pytest-xdist worker: the notebooks and CLI tests list what they wrote there
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
os.environ.setdefault("ADMM_RUNS", f"/tmp/admm-test-runs{'-' + _WORKER if _WORKER else ''}")
# decoded faces, backbones and SVMs that tests make stay out of the user's ~/.cache/admm_core
os.environ.setdefault("ADMM_CACHE", "/tmp/admm-test-cache")
