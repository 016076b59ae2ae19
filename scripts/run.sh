#!/usr/bin/env bash
# Set up (first time only) and start the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m admm_core train --preset digits-mlp --method block-admm "$@"
