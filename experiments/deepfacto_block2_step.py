"""Answers: at r = 256, does block 2 drift from Z_2 because its Adam step (``fc_lr``) is too large?

In the full r = 256 run (docs/results/deepfacto.md, "r = 256: block 2 drifts away from Z_2")
‖Z_2 − block_2(S)‖ grew every warm-up iteration and verification fell from 0.74 to 0.59. This
isolates block 2: the frozen backbone and a fitted M of that run are held fixed (so S is fixed,
computed once by the test-time projection), and the warm-up iteration of the real trainer
(:meth:`DeepFactoTrainer.iterate`: Z_2-step, Θ_2 Adam steps, U_2 step) runs for each ``fc_lr``.
Per iteration it logs the residual ‖Z_2 − block_2(S)‖ per face, the triplet loss at Z_2 and
the verification check on the run's 300 + 300 faces (its ``eval_images``), the same numbers
the run's ``metrics.jsonl`` holds.

    PYTHONPATH=. python experiments/deepfacto_block2_step.py bench_out/deepfacto-full/r256 \\
        --fc-lr 1e-3,3e-4,1e-4 --iters 12 --markdown docs/results/deepfacto.md

The run folder needs ``backbone.pt`` (block 1 before fine-tuning) and ``checkpoint.pt`` (its M).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from admm_core import nmf
from admm_core.deepfacto.run import run_indices
from admm_core.deepfacto.trainer import DeepFactoState, DeepFactoTrainer
from admm_core.device import machine
from admm_core.docs import code_version, command_line, write_section
from admm_core.faces.backbone import load_backbone
from admm_core.faces.lfw import load_lfwa
from admm_core.faces.verification import verification_accuracy
from admm_core.spec.deepfacto import read_run_config


def fixed_s_trainer(cfg, backbone, f, identity, m, s, device) -> DeepFactoTrainer:
    """A trainer at the state the real one starts from (block 2 scaled so ‖block_2(S)‖ ≈ 1, Z_2 =
    block_2(S), U_2 = 0), built around given features F = block_1(X), M and S instead of fitting M again."""
    t = DeepFactoTrainer.__new__(DeepFactoTrainer)
    t.cfg, t.backbone, t.images, t.device = cfg, backbone, None, device
    t.gen = torch.Generator().manual_seed(cfg.seed)
    t.identity, t.y = identity, torch.from_numpy(identity).to(device)
    t.rng = np.random.default_rng(cfg.seed + 1)
    t.chunk, t.version, t.hw, t.should_stop = 256, 0, (cfg.image_size // 8,) * 2, None
    torch.manual_seed(cfg.seed)
    t.fc = torch.nn.Linear(s.shape[1] * s.shape[2], cfg.emb_dim).to(device)  # as DeepFactoTrainer.__init__
    with torch.no_grad():
        t.fc.weight.mul_(1.0 / t.fc(s.flatten(1)).norm(dim=1).median().clamp(min=1e-6))
        t.fc.bias.zero_()
        g = t.block2(s)
    zero = torch.zeros_like(f)
    t.state = DeepFactoState(f=f, z1=f, u1=zero, v=zero, s=s, m=m, z2=g.clone(), u2=torch.zeros_like(g))
    t.opt_fc = torch.optim.Adam(t.fc.parameters(), lr=cfg.fc_lr)
    t.opt_bb = None
    return t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", help="a finished DeepFacto run folder (backbone.pt, checkpoint.pt, config.json)")
    p.add_argument("--fc-lr", default="1e-3,3e-4,1e-4")
    p.add_argument("--iters", type=int, default=12)
    p.add_argument("--markdown", help="write the table into this file's block 'block2-step'")
    a = p.parse_args(argv)
    run = Path(a.run)
    cfg = read_run_config(run)
    device = torch.device("cpu")
    t0, version = time.time(), code_version()
    faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit)
    tr, te = faces.split(cfg.seed, cfg.test_fraction)
    df_idx, _, ev_tr, ev_te, pairs_tr, pairs_te, _ = run_indices(cfg, faces, tr, te)
    backbone = load_backbone(run / "backbone.pt")[0].to(device).eval()
    ck = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    m = ck["m"].float()
    # S of the training and the check faces, once: the test-time projection on the run's M
    probe = DeepFactoTrainer.__new__(DeepFactoTrainer)
    probe.cfg, probe.backbone, probe.device, probe.chunk, probe.should_stop = cfg, backbone, device, 256, None
    probe.state = DeepFactoState(*(None,) * 5, m=m, z2=None, u2=None)
    f_df = probe.features(faces.images[df_idx])
    s_df, s_tr, s_te = probe.project(f_df), *(probe.project(probe.features(faces.images[i])) for i in (ev_tr, ev_te))
    print(
        f"S of {len(df_idx)} + {len(ev_tr)} + {len(ev_te)} faces at r = {m.shape[1]}: {time.time() - t0:.0f} s",
        flush=True,
    )

    nmf.update_m = lambda m, ss, zs, steps=1: m  # M (and so S) held fixed: only block 2 moves
    rows = []
    for lr in (float(x) for x in a.fc_lr.split(",")):
        c = dataclasses.replace(cfg, fc_lr=lr)
        t = fixed_s_trainer(c, backbone, f_df, faces.identity[df_idx], m, s_df.clone(), device)
        t.project = lambda z, m=None, to_cpu=True, s=t.state.s: s[: len(z)]  # S fixed: P_M(F) is s_df
        ver = lambda t=t: verification_accuracy(t.embed(s_tr), pairs_tr, t.embed(s_te), pairs_te)  # noqa: E731
        series = [(0, math.nan, math.nan, ver())]
        for it in range(1, a.iters + 1):
            out = t.iterate(finetune=False)
            series.append((it, out["residuals"][2], out["admm_triplet_loss"], ver()))
            print(
                f"fc_lr {lr:g} iter {it}: residual {series[-1][1]:.3f} J(Z_2) {series[-1][2]:.3f} check {series[-1][3]:.3f}",
                flush=True,
            )
        rows.append((lr, series))

    show = [i for i in (0, 1, 4, 8, a.iters) if i <= a.iters]
    lines = [
        f"Machine: {machine(device)}; {time.time() - t0:.0f} s in all.",
        "",
        f"Block 2 alone at r = {m.shape[1]} (M and S fixed, {len(df_idx)} faces, warm-up iterations of the real trainer). "
        "Each cell: ‖Z_2 − block_2(S)‖ per face / verification check.",
        "",
        "| fc_lr | " + " | ".join(f"iter {i}" for i in show) + " |",
        "|---|" + "---|" * len(show),
    ]
    for lr, series in rows:
        cells = [f"— / {series[0][3]:.2f}" if i == 0 else f"{series[i][1]:.2f} / {series[i][3]:.2f}" for i in show]
        lines.append(f"| {lr:g} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        cmd = command_line(argv, prog="PYTHONPATH=. python experiments/deepfacto_block2_step.py")
        write_section(a.markdown, "block2-step", text, command=cmd, version=version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
