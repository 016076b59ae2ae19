"""Answers: how fast is DeepFacto's test-time projection S = argmin_{S≥0}‖Z − M S‖ on a GPU?

The projection is batched on the GPU where there is one; r = 256 took 12 minutes
on the 2-core CPU for LFWA's 13,143 faces. The device machine has no copy of LFW, so:

    python experiments/projection_speed.py pack --run bench_out/deepfacto-full/r256 --out .devpack
        # here: M of a real r = 256 run and Z = block_1(x) of --faces random LFWA faces (float16)
    python experiments/projection_speed.py run --data .devpack --out OUT
        # there: time nmf.nnls on the CPU and on CUDA, check they agree

``run`` tiles the packed faces to ``--n`` (13,143, LFWA's count) so that the GPU sees the
run's real batch sizes; each chunk is then the same faces, which iterate as those faces do
(every sample converges on its own: :func:`admm_core.nmf.nnls`). It times, with the run's
tolerance and iteration cap:

* the CPU (all its threads) on one chunk of 256 faces, scaled to n;
* CUDA, float32, at the trainer's chunk (256 faces) and at larger chunks;

and reports max |S_cpu − S_cuda| / max |S_cpu| on the packed faces and the projection's
reconstruction error on both. Writes ``projection.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from admm_core import nmf
from admm_core.docs import add_collect_parser, write_section

PACK = "projection.pt"


def pack(run_dir: Path, out: Path, n_faces: int, seed: int) -> dict:
    from admm_core.deepfacto.inference import load_inference_model
    from admm_core.faces.lfw import load_lfwa
    from admm_core.faces.tensors import to_tensor

    model = load_inference_model(run_dir)
    faces = load_lfwa(model.cfg.data_root, size=model.cfg.image_size)
    pick = np.sort(np.random.default_rng(seed).choice(faces.n, n_faces, replace=False))
    with torch.no_grad():
        z = model.backbone.features(to_tensor(faces.images[pick]))
    out.mkdir(parents=True, exist_ok=True)
    blob = {
        "m": model.m.float(),
        "z": z.half(),  # float16 to travel (relative rounding ≤ 4.9e-4); cast back to float32 there
        "nnls_tol": float(model.cfg.nnls_tol),
        "nnls_max_iter": int(model.cfg.nnls_max_iter),
        "run": str(run_dir),
        "faces": int(n_faces),
        "total_faces": faces.n,
    }
    torch.save(blob, out / PACK)
    return {"z_shape": list(z.shape), "m_shape": list(model.m.shape), "bytes": (out / PACK).stat().st_size}


def _timed(fn, device) -> tuple[object, float]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    r = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return r, time.perf_counter() - t0


def project_chunks(m, z, chunk, tol, max_iter):
    """The trainer's loop (DeepFactoTrainer.project): nnls over ``chunk`` images at a time."""
    return torch.cat([nmf.nnls(m, z[i : i + chunk], tol=tol, max_iter=max_iter) for i in range(0, len(z), chunk)])


def run(a) -> int:
    blob = torch.load(Path(a.data) / PACK, weights_only=True)  # tensors and numbers only
    m, z = blob["m"], blob["z"].float().flatten(2)  # (C, r), (B, C, n)
    tol, max_iter = blob["nnls_tol"], blob["nnls_max_iter"]
    b = len(z)
    reps = -(-a.n // b)
    rows, info = [], {"faces_packed": b, "n": a.n, "rank": m.shape[1], "z_per_face": list(z.shape[1:])}
    info["threads"] = torch.get_num_threads()
    cpu = torch.device("cpu")
    s_cpu, t = _timed(lambda: project_chunks(m, z[:256], 256, tol, max_iter), cpu)
    rows.append({"device": f"cpu ({torch.get_num_threads()} threads)", "chunk": 256, "s_per_face": t / len(s_cpu)})
    rec_cpu = float((z[:256] - m @ s_cpu).norm() / z[:256].norm())
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        info["gpu"] = torch.cuda.get_device_name(0)
        mg = m.to(dev)
        zg = z.to(dev).repeat(reps, 1, 1)[: a.n]
        project_chunks(mg, zg[:512], 256, tol, max_iter)  # warm-up (kernels, cuBLAS handles)
        for chunk in (256, 1024, 4096, a.n):
            s, t = _timed(lambda c=chunk: project_chunks(mg, zg, c, tol, max_iter), dev)
            rows.append({"device": info["gpu"], "chunk": chunk, "s_per_face": t / a.n, "total_s": t})
            if chunk == 256:
                s_g = s[:256].cpu()
                info["max_rel_diff_cpu_cuda"] = float((s_g - s_cpu).abs().max() / s_cpu.abs().max())
                info["reconstruction_error_cuda"] = float((z[:256] - m @ s_g).norm() / z[:256].norm())
            del s
    info["reconstruction_error_cpu"] = rec_cpu
    for r in rows:
        r.setdefault("total_s", r["s_per_face"] * a.n)
    info["rows"] = rows
    lines = [f"| device | chunk (faces) | seconds for {a.n:,} faces | ms per face |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['device']} | {r['chunk']} | {r['total_s']:.1f} | {1e3 * r['s_per_face']:.2f} |")
    info["table"] = "\n".join(lines)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "projection.json").write_text(json.dumps(info, indent=2))
    print(info["table"])
    print({k: v for k, v in info.items() if k not in ("rows", "table")})
    return 0


def collect(src: Path, markdown: Path, section: str, call: str) -> str:
    """A returned projection.json -> a docs section (table, agreement, reconstruction error)."""
    info = json.loads((src / "projection.json").read_text())
    body = (
        f"Device call: `{call}`\n\n"
        f"r = {info['rank']}, Z per face {info['z_per_face'][0]} × {info['z_per_face'][1]} (C × n), "
        f"{info['faces_packed']} real LFWA faces tiled to {info['n']:,}; float32.\n\n"
        f"{info['table']}\n\n"
        f"max |S_cpu − S_cuda| / max |S_cpu| = {info.get('max_rel_diff_cpu_cuda', float('nan')):.1e}; "
        f"‖Z − M S‖/‖Z‖ = {info['reconstruction_error_cpu']:.4f} (CPU), "
        f"{info.get('reconstruction_error_cuda', float('nan')):.4f} (CUDA)."
    )
    cmd = f"python experiments/projection_speed.py collect --from {src} --markdown {markdown} --section {section}"
    write_section(markdown, section, body, command=cmd)
    return body


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("pack", help="M and real Z of a DeepFacto run, for the device machine")
    k.add_argument("--run", required=True, help="a DeepFacto run directory with checkpoint.pt")
    k.add_argument("--out", default=".devpack")
    k.add_argument("--faces", type=int, default=256)
    k.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="time the projection on the CPU and on CUDA")
    r.add_argument("--data", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--n", type=int, default=13143, help="faces to project (LFWA has 13,143)")
    add_collect_parser(sub, "write a returned projection.json into a docs section (here)")
    a = p.parse_args(argv)
    if a.cmd == "collect":
        print(collect(Path(a.src), Path(a.markdown), a.section, a.call))
        return 0
    if a.cmd == "pack":
        print(json.dumps(pack(Path(a.run), Path(a.out), a.faces, a.seed), indent=2))
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
