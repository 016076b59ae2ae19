import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ADMM_DATA", str(ROOT.parent / "shared" / "data"))
os.environ.setdefault("ADMM_RUNS", "/tmp/admm-test-runs")
# decoded faces, backbones and SVMs that tests make stay out of the user's ~/.cache/admm_core
os.environ.setdefault("ADMM_CACHE", "/tmp/admm-test-cache")
