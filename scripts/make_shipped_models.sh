#!/usr/bin/env bash
# Re-create the shipped DeepFacto models (assets/models) from scratch on LFW:
# a fresh backbone cache, so block 1 is trained here with the default settings (30 epochs, 64 px,
# width 16, seed 0), then DeepFacto at r = 4 and r = 32 from it, then the export (safetensors,
# SHA-256, shapes, config, command and code version in manifest.json).
# About 25 min of backbone training + 2 × (13 iterations + SVMs) on 2 idle cores; needs LFW (ADMM_DATA).
#   scripts/make_shipped_models.sh [WORK_DIR]    (default: bench_out/ship; the runs stay there)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-bench_out/ship}
export ADMM_CACHE="$work/cache"   # never a backbone cached earlier
mkdir -p "$work"
for r in 4 32; do
  [ -f "$work/r$r/summary.json" ] || .venv/bin/admm train --preset lfwa-deepfacto --rank "$r" \
    --set backbone_source=train --out "$work/r$r"
done
.venv/bin/admm deepfacto ship --run "$work/r4" --run "$work/r32" --out assets/models
.venv/bin/admm deepfacto bench --ranks '' --out "$work" --markdown docs/results/deepfacto.md --section shipped
