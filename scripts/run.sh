#!/usr/bin/env bash
# Set up (first time only) and start the dashboard: http://localhost:8501 (offline, on digits).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ADMM_DATA=${ADMM_DATA:-$(cd .. && pwd)/shared/data}
exec .venv/bin/python -m streamlit run app/serve.py "$@"
