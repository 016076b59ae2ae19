#!/usr/bin/env bash
# The deep-network runs on a GPU machine in one budgeted call (experiments/gpu_deep.py):
# a speed-option probe, CIFAR-10 ResNet-18 (sgd, block-admm, gotmare) and fmnist-mlp-ce, each
# stopping at an epoch boundary inside its share of --budget-s; results, a plot and the Θ of
# unfinished jobs come back under OUT. Before the call, here: python experiments/gpu_deep.py pack
#
#   scripts/gpu_deep.sh OUT [DATA] [run options...]   # DATA: the pack folder (default .devpack)
#   scripts/gpu_deep.sh OUT .devpack --resume .devpack/resume   # a second call, warm resume
#
# Uses whatever python3 has torch, torchvision, pillow (and matplotlib for the plot).
set -uo pipefail
out=${1:?usage: scripts/gpu_deep.sh OUT [DATA] [options]}
data=${2:-.devpack}
shift $(( $# >= 2 ? 2 : 1 ))
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 ADMM_DECODE_WORKERS=${ADMM_DECODE_WORKERS:-$(nproc)}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU: running on the CPU"
$py experiments/gpu_deep.py run --data "$data" --out "$out" "$@"
