#!/usr/bin/env bash
# The CUDA path, on a machine with a GPU (CI has none, so this is run by hand):
#   1. the engine's test files (their configs say device=auto, so they train on CUDA there);
#   2. the MNIST benchmark with --device cuda, beside the CPU table of the README.
#
#   scripts/gpu_check.sh OUT [DATA]    # DATA holds MNIST/raw (plain or .gz idx files)
#
# Uses whatever python3 has torch, scikit-learn, scipy and opencv (no dashboard packages needed).
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUT [DATA]}
data=${2:-${ADMM_DATA:-../shared/data}}
py=${PYTHON:-python3}
mkdir -p "$out"
# idx files may travel gzipped: unpack beside them
find "$data" -name '*-ubyte.gz' | while read -r f; do [ -e "${f%.gz}" ] || gunzip -k "$f"; done
export ADMM_DATA=$data PYTHONUNBUFFERED=1
$py - <<'EOF' | tee "$out/device.txt"
import torch
assert torch.cuda.is_available(), "no CUDA device: this script checks the CUDA path"
print("torch", torch.__version__, "|", torch.cuda.get_device_name(0))
EOF
[ "${PIPESTATUS[0]}" = 0 ] || exit 1

xdist=$($py -c 'import xdist' 2>/dev/null && echo "-n 8")
timeout "${TEST_TIMEOUT:-300}" $py -m pytest -q -p no:cacheprovider $xdist -rs \
    tests/test_engine.py tests/test_block_admm_oracle.py tests/test_baselines.py tests/test_nmf.py \
    tests/test_deepfacto.py tests/test_bench.py 2>&1 | tee "$out/pytest.log"
tests_rc=${PIPESTATUS[0]}

timeout "${BENCH_TIMEOUT:-200}" $py -m admm_core bench --preset mnist-mlp-mse --methods "${BENCH_METHODS:-block-admm,adam}" \
    --epochs "${BENCH_EPOCHS:-10}" --device cuda --out "$out/bench" 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "tests rc=$tests_rc bench rc=$bench_rc"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
