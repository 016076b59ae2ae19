#!/usr/bin/env bash
# Set up (first time only) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ADMM_DATA=${ADMM_DATA:-$(cd .. && pwd)/shared/data}
exec .venv/bin/python -m pytest -q "$@"
