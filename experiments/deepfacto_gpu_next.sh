#!/usr/bin/env bash
# The next device call: the r = 256 target (81.4; best so far 81.31 on an H200).
#
# The loss at r = 256 sits under the raw backbone features (S 0.5 under them), so both variants
# train a stronger backbone from scratch, then r = 256, 32 and 4 on it with the 48 warm-up
# iterations that gave the lowest reconstruction error, and fit the attribute SVMs there
# (svm_solver=newton: seconds on the GPU instead of an hour on 2 cores). One variant per call
# (each call gives back ≤ 8 files: r256.tar, r32.tar, r4.tar, backbone.pt, info.json).
#
#   here:  python experiments/deepfacto_gpu.py pack --out .devpack/lfw64.npz
#   there (carry .devpack/lfw64.npz, timeout 600):
#          bash experiments/deepfacto_gpu_next.sh w48       # then, in a second call: w32e80
#   here:  python experiments/deepfacto_gpu.py collect --from FILES_AT --out bench_out/deepfacto-gpu-w48
#          python -m admm_core deepfacto bench --ranks '' --out bench_out/deepfacto-gpu-w48 \
#              --markdown docs/results/deepfacto.md --section gpu-w48-backbone
#          # the winner, checked on the original images (not the pack's JPEG round trip):
#          python -m admm_core deepfacto evaluate --run bench_out/deepfacto-gpu-w48/r256 --set device=cpu
#
# EXTRA: more --set flags (the CPU smoke test of this script passes tiny sizes there).
set -euo pipefail
variant=${1:?usage: deepfacto_gpu_next.sh w48|w32e80}
case "$variant" in
  w48) backbone=(--set backbone_width=48 --set backbone_epochs=60) ;;
  w32e80) backbone=(--set backbone_width=32 --set backbone_epochs=80) ;;
  *) echo "unknown variant: $variant (w48 | w32e80)" >&2; exit 2 ;;
esac
device=$(python3 -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
export PYTHONPATH=. PYTHONUNBUFFERED=1 ADMM_CACHE=${ADMM_CACHE:-/tmp/admm-cache}
# shellcheck disable=SC2086  # EXTRA is a list of flags
python3 experiments/deepfacto_gpu.py run --pack "${PACK:-.devpack/lfw64.npz}" --out "${OUT:?OUT is the folder that comes back}" \
  --ranks "${RANKS:-256,32,4}" --svm "${backbone[@]}" \
  --set m_steps=20 --set fc_lr=1e-4 --set warmup_epochs=48 --set device="$device" ${EXTRA:-} 2>&1 | tee "$OUT/log.txt"
