#!/usr/bin/env bash
# Set up (first time only) and run the whole check: ruff (format and lint), unit/oracle tests,
# the dashboard (AppTest + a real headless Chromium) and every teaching notebook in small mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# System Chromium for the browser test (Playwright's own browser download cannot work offline).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[test] installing chromium (apt)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
    || echo "[test] chromium could not be installed; the browser test will skip"
fi
# node runs the live charts' JavaScript against the Python chart builder (tests/test_live_series.py).
if ! command -v node >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[test] installing nodejs (apt)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null) \
    || echo "[test] nodejs could not be installed; the live-series test will skip"
fi
# A PostgreSQL server for the parallel-sweep test on an RDB study (the test starts its own throwaway
# cluster on 127.0.0.1 and skips, with the reason, where none is installed).
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1 \
  && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[test] installing postgresql (apt)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
    || echo "[test] postgresql could not be installed; the PostgreSQL sweep test will skip"
fi
echo "[test] ruff (format and lint)"
# Two commands, not `a && b`: under `set -e` a failure on the left of `&&` would not stop the script.
.venv/bin/ruff format --check --quiet .
.venv/bin/ruff check --quiet .
export ADMM_DATA=${ADMM_DATA:-$(cd .. && pwd)/shared/data}
export ADMM_SMALL=1   # notebooks run in small mode
if [ "${1:-}" = "--full" ]; then  # the full tier (tests/conftest.py FULL) alone, two workers
  shift
  exec .venv/bin/python -m pytest -q --durations=10 -n "${ADMM_TEST_WORKERS:-2}" -m full tests "$@"
fi
if [ $# -gt 0 ]; then  # a file, a -k filter...: as asked, in one process
  exec .venv/bin/python -m pytest -q --durations=15 --nbmake "$@"
fi
# Two workers for everything but the timing-sensitive tests (most of the suite waits on servers,
# browsers and worker processes), then those alone on a quiet machine. Three workers were tried once
# (ADMM_TEST_WORKERS=3, 2026-12-02): load ~9 and 24:18 for the parallel part, 13 min of it three tests
# timing out on a test bug since fixed, so not shown faster; untried again.
rc=0
.venv/bin/python -m pytest -q --durations=15 -n "${ADMM_TEST_WORKERS:-2}" --dist loadfile -m "not serial and not full" --nbmake tests notebooks || rc=$?
.venv/bin/python -m pytest -q --durations=10 -m serial tests || rc=$((rc ? rc : $?))
exit $rc
