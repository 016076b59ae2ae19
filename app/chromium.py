"""The system Chromium and its flags for headless measurement of the dashboard, shared by the browser
tests (tests/helpers.py) and experiments/thousand_runs.py; imports nothing heavy, so a measuring
process stays torch-free."""

import os
import shutil

CHROMIUM = (
    os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
)
# no network beyond 127.0.0.1 (Playwright's own browser download cannot work offline), no sandbox in CI
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
