#!/usr/bin/env bash
# Answers: are our dlADMM and BCD as fast as the public codes?
# Speed of our dlADMM and BCD on the work the public codes were timed on:
#   dlADMM, 784-1000-1000-10, full MNIST, one iteration   (public code: minutes per iteration)
#   BCD,    784-1500-1500-1500-10, full MNIST, one epoch   (public code: 70 s per epoch, 7 GB)
# One run at a time on an otherwise idle machine; prints a markdown table (s = training wall
# time of the epoch from summary.json, peak RSS of the whole process from /usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench_out/public-speed}
mkdir -p "$OUT"
echo "| method | network | s per iteration | peak RSS | test % after 1 | public code |"
echo "|---|---|---|---|---|---|"
run() {  # name hidden public
  local m=$1 h=$2 pub=$3
  /usr/bin/time -f "%M" -o "$OUT/$m.rss" "$PY" -m admm_core train --preset mnist-mlp-mse --method "$m" --epochs 1 \
    --hidden "$h" --out "$OUT/$m" --quiet > "$OUT/$m.json" 2> "$OUT/$m.err"
  "$PY" - "$OUT/$m" "$OUT/$m.rss" "$m" "$h" "$pub" <<'PY'
import json, sys
from pathlib import Path
run, rss, m, h, pub = sys.argv[1:]
s = json.loads((Path(run) / "summary.json").read_text())
kb = int(Path(rss).read_text().split()[-1])
print(f"| {m} | 784-{h.replace(',', '-')}-10 | {s['wall_time_s']:.1f} | {kb / 2**20:.2f} GiB | {100 * s['test_accuracy']:.2f} | {pub} |")
PY
}
run dladmm 1000,1000 "minutes per iteration"
run bcd 1500,1500,1500 "70 s per epoch, 7 GB"
