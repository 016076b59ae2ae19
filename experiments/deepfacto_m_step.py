"""Answers: how far does the NMF module's alternation get at r = 256, per kind of M-step?

The NMF module alternates an M-step with the test-time projection S = P_M(F) (``s_mode =
"projection"``, warm-up: F = block_1(X) of the frozen backbone). The M-step is either ``k``
projected gradient steps (``m_update = "gradient"``, ``m_steps = k``) or the convex NNLS in M
solved (``m_update = "exact"``, :func:`admm_core.nmf.solve_m`). This runs that alternation alone,
on block_1(X) of the first ``--images`` Block-ADMM training faces of a DeepFacto run, from the
trainer's start (:func:`admm_core.nmf.init_basis`, then S by 20 projection iterations), and
prints ‖F − M S‖/‖F‖ after each round for each M-step:

    PYTHONPATH=. python experiments/deepfacto_m_step.py bench_out/deepfacto-w32-r256/r256 \\
        --images 128 --rounds 8 --updates gradient:20,gradient:200,exact --markdown docs/results/deepfacto.md

The run folder needs ``backbone.pt`` and ``config.json`` (its rank, image size and projection
tolerance are used).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from admm_core import nmf
from admm_core.deepfacto.run import run_indices
from admm_core.device import machine
from admm_core.docs import code_version, command_line, write_section
from admm_core.faces.backbone import load_backbone
from admm_core.faces.lfw import load_lfwa
from admm_core.faces.verification import embed_all
from admm_core.spec.deepfacto import read_run_config


def alternation(f: torch.Tensor, r: int, update: str, rounds: int, tol: float, max_iter: int, seed: int = 0) -> dict:
    """Alternate M-step (``update``: "gradient:<k>" or "exact") and S = P_M(F) on F (N, C, n);
    returns the relative error after each round, the final M and S, and the seconds taken."""
    t0 = time.time()
    m = nmf.init_basis(f[: min(512, len(f))], r, torch.Generator().manual_seed(seed))
    s = nmf.nnls(m, f, tol=tol, max_iter=20)  # as DeepFactoTrainer starts
    errors = []
    for _ in range(rounds):
        ss, zs = nmf.gram_terms(f, s)
        if update == "exact":
            m = nmf.solve_m(m, ss, zs)
        else:
            m = nmf.update_m(m, ss, zs, int(update.split(":")[1]))
        s = nmf.nnls(m, f, tol=tol, max_iter=max_iter)
        errors.append(float((f - nmf.reconstruct(m, s)).norm() / f.norm()))
    return {"errors": errors, "m": m, "s": s, "seconds": time.time() - t0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", help="a DeepFacto run folder (backbone.pt, config.json)")
    p.add_argument("--images", type=int, default=128)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--updates", default="gradient:20,gradient:200,exact")
    p.add_argument("--markdown", help="write the table into this file's block 'm-step'")
    a = p.parse_args(argv)
    updates = a.updates.split(",")
    for u in updates:
        if u != "exact" and not (u.startswith("gradient:") and u.split(":")[1].isdigit()):
            p.error(f"--updates: {u!r} is not 'exact' or 'gradient:<steps>'")
    run = Path(a.run)
    cfg = read_run_config(run)
    device = torch.device("cpu")
    t0, version = time.time(), code_version()
    faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit)
    tr, te = faces.split(cfg.seed, cfg.test_fraction)
    df_idx = np.asarray(run_indices(cfg, faces, tr, te)[0])[: a.images]
    backbone = load_backbone(run / "backbone.pt")[0].to(device).eval()
    with torch.no_grad():
        f = embed_all(backbone.features, faces.images, df_idx, device, 256).flatten(2)
    print(f"block_1(X) of {len(df_idx)} faces: {tuple(f.shape)}", flush=True)
    rows = []
    for u in updates:
        out = alternation(f, cfg.rank, u, a.rounds, cfg.nnls_tol, cfg.nnls_max_iter, cfg.seed)
        sparsity = float((out["s"] == 0).float().mean())
        rows.append((u, out["errors"], sparsity, out["seconds"]))
        print(
            f"{u}: {[round(e, 4) for e in out['errors']]} S zeros {sparsity:.2f} ({out['seconds']:.0f} s)", flush=True
        )
    c = f.shape[1]
    lines = [
        f"Machine: {machine(device)}; {time.time() - t0:.0f} s in all.",
        "",
        f"‖F − M S‖/‖F‖ after each round of (M-step, S = P_M(F)), F = block_1(X) of {len(df_idx)} training "
        f"faces ({c} channels × {f.shape[2]} positions), r = {cfg.rank}, projection tolerance {cfg.nnls_tol:g}.",
        "",
        "| M-step | " + " | ".join(f"round {i + 1}" for i in range(a.rounds)) + " | S zeros | seconds |",
        "|---|" + "---|" * (a.rounds + 2),
    ]
    for u, errors, sparsity, seconds in rows:
        name = "solved (exact)" if u == "exact" else f"{u.split(':')[1]} gradient steps"
        lines.append(f"| {name} | " + " | ".join(f"{e:.3f}" for e in errors) + f" | {sparsity:.0%} | {seconds:.0f} |")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        cmd = command_line(argv, prog="PYTHONPATH=. python experiments/deepfacto_m_step.py")
        write_section(a.markdown, "m-step", text, command=cmd, version=version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
