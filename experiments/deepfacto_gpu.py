"""DeepFacto's rank table trained on a GPU, its attribute SVMs fitted here.

The r = 4 / 32 / 256 table took hours on the 2-core CPU (r = 256 alone: 53 min of
training), so no run had been made on a GPU. The device machine has no copy of LFW and gives
back at most 8 files, so:

    python experiments/deepfacto_gpu.py pack --out .devpack/lfw64.npz
        # here: the 13,143 labelled LFWA faces at 64 px as JPEG bytes (faces.pack_faces, ≈ 41 MB)
    PYTHONPATH=. python3 experiments/deepfacto_gpu.py run --pack .devpack/lfw64.npz --out $OUT --ranks 4,32,256 \
        --set backbone_width=32 --set backbone_epochs=40 --set m_steps=20 --set fc_lr=1e-4
        # there: one backbone trained on the GPU, then one DeepFacto run per rank (train_deepfacto,
        # the engine's run lifecycle), without the attribute SVMs; each finished run is tarred
        # into $OUT at once (a run cut off by the time limit loses only itself)
    python experiments/deepfacto_gpu.py collect --from FILES_AT --out bench_out/deepfacto-gpu
        # here: the run directories, each with the backbone it started from
    python -m admm_core deepfacto evaluate --run bench_out/deepfacto-gpu/r4   # (and r32, r256)
    python -m admm_core deepfacto bench --ranks '' --out bench_out/deepfacto-gpu \
        --markdown docs/results/deepfacto.md --section gpu-w32

Measured (one NVIDIA H200): the whole call for r = 32, 256, 4 took 133 s, the
backbone 41 s, DeepFacto's 13 iterations 3 / 12 / 2 s; the SVMs here about an hour per r = 256 run.

The SVMs are fitted here, from the original JPEGs (``evaluate`` recomputes every feature with the
run's saved networks and M), because LinearSVC is CPU work and the device time is short. The
faces trained on there went through one JPEG round trip (quality 95, mean pixel error 2/255).

``run --svm`` fits them there instead, by the batched Newton solver (``svm_solver=newton``, the
default: the same problem as LinearSVC, experiments/svm_solver_bench.py compares the two), on the pack's faces;
the runs then come back finished and ``evaluate`` here is a check on the original images.
The next device call (the r = 256 target) is experiments/deepfacto_gpu_next.sh.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path
from unittest import mock

from admm_core.faces.lfw import load_lfwa, pack_faces, unpack_faces
from admm_core.spec.settings import parse_sets

KEEP = ("config.json", "summary.json", "metrics.jsonl", "status.json", "checkpoint.pt", "attributes.json")


def log(msg: str) -> None:
    print(f"[deepfacto_gpu {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(a) -> int:
    import torch

    from admm_core.deepfacto import run as df_run
    from admm_core.spec.deepfacto import DeepFactoConfig

    t0 = time.time()
    faces = unpack_faces(Path(a.pack))
    log(f"{faces.n} faces of {faces.images.shape[1]} px unpacked ({time.time() - t0:.0f}s)")

    def packed_lfwa(root=None, size=64, limit=None, progress=None, **_):
        # the device machine has no LFW folder: the run reads the pack instead
        if size != faces.images.shape[1]:
            raise SystemExit(f"image_size={size}: the pack holds {faces.images.shape[1]} px faces")
        return faces.first(limit)

    patches = [mock.patch.object(df_run, "load_lfwa", packed_lfwa)]
    if not a.svm:  # the SVMs are fitted later, here: `admm deepfacto evaluate --run DIR`
        patches.append(mock.patch.object(df_run, "attribute_evaluation", lambda *args, **kw: ([], {})))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sets = parse_sets(a.set)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU)"
    info = {"gpu": gpu, "torch": torch.__version__, "sets": sets, "ranks": {}}
    log(f"GPU: {gpu}; settings {sets}")
    runs = Path(a.runs)
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        for r in [int(v) for v in a.ranks.split(",") if v.strip()]:
            t = time.time()
            cfg = DeepFactoConfig.from_dict({**sets, "rank": r})
            summary = df_run.train_deepfacto(cfg, runs / f"r{r}")
            info["ranks"][r] = {"status": summary.get("status"), "wall_s": time.time() - t}
            log(f"r = {r}: {summary.get('status')} in {time.time() - t:.0f}s")
            with tarfile.open(out / f"r{r}.tar", "w") as tf:
                for name in KEEP:
                    if (runs / f"r{r}" / name).is_file():
                        tf.add(runs / f"r{r}" / name, arcname=name)
            if not (out / "backbone.pt").is_file():  # the same backbone for every rank: one copy travels
                shutil.copy(runs / f"r{r}" / "backbone.pt", out / "backbone.pt")
            (out / "info.json").write_text(json.dumps(info, indent=2))
    log(f"done in {time.time() - t0:.0f}s")
    return 0


def collect(a) -> int:
    src, out = Path(a.src), Path(a.out)
    for tar in sorted(src.glob("r*.tar")):
        d = out / tar.stem
        d.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tar) as tf:
            tf.extractall(d, filter="data")
        shutil.copy(src / "backbone.pt", d / "backbone.pt")
        log(f"{d}: {sorted(p.name for p in d.iterdir())}")
    if (src / "info.json").is_file():
        shutil.copy(src / "info.json", out / "device.json")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="here: the labelled LFWA faces into one file")
    pk.add_argument("--out", default=".devpack/lfw64.npz")
    pk.add_argument("--size", type=int, default=64)
    r = sub.add_parser("run", help="there: one DeepFacto run per rank, on the GPU")
    r.add_argument("--pack", required=True)
    r.add_argument("--out", required=True, help="where the tarred runs go ($OUT)")
    r.add_argument("--runs", default="/tmp/deepfacto-gpu", help="the run directories (not sent back whole)")
    r.add_argument("--ranks", default="4,32,256")
    r.add_argument("--set", action="append", metavar="NAME=VALUE", help="any DeepFactoConfig field")
    r.add_argument("--svm", action="store_true", help="also fit the attribute SVMs there")
    c = sub.add_parser("collect", help="here: unpack the runs that came back")
    c.add_argument("--from", dest="src", required=True)
    c.add_argument("--out", default="bench_out/deepfacto-gpu")
    a = p.parse_args(argv)
    if a.cmd == "pack":
        pack_faces(load_lfwa(size=a.size, progress=log), Path(a.out))
        log(f"{a.out}: {os.path.getsize(a.out) / 2**20:.1f} MiB")
        return 0
    return run(a) if a.cmd == "run" else collect(a)


if __name__ == "__main__":
    sys.exit(main())
