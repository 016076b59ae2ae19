"""Widen block 1 of a trained face backbone: its output gets ``--channels`` C' channels instead of 256.

Why: the backbone trained here ends in a 1 × 1 expansion to C = 256 channels, so DeepFacto at
r = 256 does not compress at all (the paper's block 1 ends in 1,792 channels, factored at
r = 4, 32, 256). Training a wider backbone from scratch costs about 80 minutes on 2 CPU cores;
this keeps the stem and the four stages of a trained backbone (frozen, BatchNorm statistics
included) and trains only a new expansion (1 × 1 conv, stages → C', BatchNorm, ReLU) and the
embedding head, with the loss of :func:`admm_core.faces.train_backbone` (batch-hard triplet +
cosine identity softmax) and its Adam one-cycle schedule. The stage outputs are computed once,
for every training image and its mirror image (the augmentation: each step draws one of the
two), so an epoch costs only the expansion and the head. The result is an ordinary backbone
file for ``--set backbone_weights=…``:

    PYTHONPATH=. python experiments/deepfacto_wide_backbone.py \\
        ~/.cache/admm_core/lfw-backbone-64px-w32-e40-b0023c60e8721f52.pt \\
        --channels 512 --epochs 30 --out bench_out/backbone-w32-c512.pt

Training uses the training identities of the DeepFacto split (seed 0, test fraction 0.2), as
the backbone it starts from did; the test people stay unseen.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from admm_core.faces.backbone import (
    FaceBackbone,
    backbone_loss,
    identity_batches,
    load_backbone,
    people_with_pairs,
    save_backbone,
)
from admm_core.faces.lfw import load_lfwa
from admm_core.faces.tensors import to_tensor


@torch.no_grad()
def stage_outputs(net: FaceBackbone, images: np.ndarray, chunk: int = 256) -> torch.Tensor:
    """Output of the stem and stages (before the expansion) of uint8 images: (N, C_stage, h, w)."""
    net.eval()
    out = []
    for i in range(0, len(images), chunk):
        x = to_tensor(images[i : i + chunk])
        out.append(net.stages(net.stem((x - net.mean) / net.std)))
    return torch.cat(out)


def widen(base: FaceBackbone, channels: int, seed: int) -> FaceBackbone:
    """A copy of ``base`` whose expansion and head are new (``channels`` outputs), the rest copied."""
    torch.manual_seed(seed)
    arch = {**base.arch, "out_channels": channels}
    net = FaceBackbone(widths=tuple(arch["widths"]), out_channels=channels, emb_dim=arch["emb_dim"])
    keep = {k: v for k, v in base.state_dict().items() if not k.startswith(("expand.", "head."))}
    missing, unexpected = net.load_state_dict(keep, strict=False)
    assert not unexpected and all(k.startswith(("expand.", "head.")) for k in missing), (missing, unexpected)
    return net


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("base", help="a trained backbone file (admm-face-backbone-v1)")
    p.add_argument("--channels", type=int, default=512, help="C', the channels of the new block-1 output")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--data-root", default=None)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if a.channels < 1 or a.epochs < 1:
        p.error(f"--channels {a.channels} / --epochs {a.epochs}: must be positive")
    t0 = time.time()
    base, meta = load_backbone(a.base)
    size = int(meta.get("image_size", 64))
    faces = load_lfwa(a.data_root, size=size)
    tr, _ = faces.split(a.seed, a.test_fraction)
    use, ident, ident_cls, n_classes = people_with_pairs(faces.identity, tr)  # as train_backbone
    net = widen(base, a.channels, a.seed)
    views = [
        stage_outputs(net, faces.images[use]),
        stage_outputs(net, np.ascontiguousarray(faces.images[use][:, :, ::-1])),
    ]
    print(
        f"stage outputs of {len(use)} faces × 2 views: {tuple(views[0].shape)} ({time.time() - t0:.0f} s)", flush=True
    )

    train = nn.ModuleDict({"expand": net.expand, "head": net.head})
    classifier = nn.Linear(net.arch["emb_dim"], n_classes, bias=False)
    opt = torch.optim.Adam(list(train.parameters()) + list(classifier.parameters()), lr=a.lr, weight_decay=5e-4)
    rng, gen = np.random.default_rng(a.seed), torch.Generator().manual_seed(a.seed)
    n_batches = len(identity_batches(ident, np.random.default_rng(0), 4, a.batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=a.lr, total_steps=a.epochs * (n_batches + 2), pct_start=0.15
    )
    history = []
    for ep in range(1, a.epochs + 1):
        train.train()
        tot, nb = 0.0, 0
        for b in identity_batches(ident, rng, 4, a.batch_size):
            flip = torch.rand(len(b), generator=gen) < 0.5
            h = torch.where(flip.view(-1, 1, 1, 1), views[1][b], views[0][b])
            emb = net.embed_features(net.expand(h))
            loss = backbone_loss(emb, torch.from_numpy(ident[b]), torch.from_numpy(ident_cls[b]), classifier)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            tot, nb = tot + float(loss.detach()), nb + 1
        history.append({"epoch": ep, "loss": tot / nb, "wall_time_s": time.time() - t0})
        print(f"epoch {ep}/{a.epochs}: loss {tot / nb:.4f} ({time.time() - t0:.0f} s)", flush=True)
    net.eval()
    wide_meta = {
        **{k: v for k, v in meta.items() if k != "history"},
        "widened_from": str(a.base),
        "out_channels": a.channels,
        "widen_epochs": a.epochs,
        "widen_history": history,
        "train_wall_time_s": float(meta.get("train_wall_time_s", 0.0)) + time.time() - t0,
    }
    save_backbone(Path(a.out), net, wide_meta)
    print(f"wrote {a.out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
