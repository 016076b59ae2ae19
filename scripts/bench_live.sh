#!/usr/bin/env bash
# The live panel's figures at full size (docs/dashboard.md, "Fetched lines" and "follow-figures"):
# tests/test_browser_live.py's timed tests with 8 tabs watched for 30 s, Start pressed 10 times and
# 5 Start/Resume tries under load, alone on a quiet machine; the lag row is written into
# docs/dashboard.md between the live-lag markers. The suite runs the same tests smaller.
#   scripts/bench_live.sh            # all four; extra arguments go to pytest (e.g. -k lag)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ADMM_DATA=${ADMM_DATA:-$(cd .. && pwd)/shared/data}
export DASH_LIVE_TABS=${DASH_LIVE_TABS:-8} DASH_LIVE_SECONDS=${DASH_LIVE_SECONDS:-30}
export DASH_START_TRIES=${DASH_START_TRIES:-10} DASH_LOAD_TRIES=${DASH_LOAD_TRIES:-5}
export DASH_LAG_DOC=${DASH_LAG_DOC:-docs/dashboard.md}
exec .venv/bin/python -m pytest -q -s -m serial tests/test_browser_live.py "$@"
