"""Answers: which face backbone (width × epochs) gives DeepFacto the best features?

Trains face-backbone variants and scores each the way DeepFacto's table does.

For every variant (widths × epochs) this trains a FaceBackbone on the training identities
(triplet + identity softmax, ``admm_core.faces.train_backbone``), then reports
  * verification accuracy on test identities (3000 same + 3000 different pairs, threshold
    chosen on training-identity pairs), and
  * mean LFWA attribute accuracy of linear SVMs on the pooled Z_1 features (the "raw
    backbone" column of the DeepFacto table: same split, same SVMs),
and saves the weights, usable as ``--backbone-weights``.

The accelerator machine has no copy of LFW, so ``pack`` writes the labelled faces at one
size into a single file (JPEG quality 95, ~35 MB at 64 px) and ``--pack`` reads it back.

    python experiments/backbone_study.py pack --size 64 --out .devpack/lfw64.npz
    python experiments/backbone_study.py train --variants 32x100,64x100 --out bench_out/backbones [--pack F]
    python experiments/backbone_study.py eval FILE.pt [...]          # score existing weights
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from admm_core.deepfacto.attributes import attribute_svms, majority_baseline
from admm_core.device import resolve_device
from admm_core.faces.backbone import load_backbone, save_backbone, train_backbone
from admm_core.faces.lfw import FaceSet, load_lfwa, pack_faces, unpack_faces
from admm_core.faces.verification import embed_all, verification_accuracy, verification_pairs
from admm_core.spec.faces import backbone_widths


def score(net, faces: FaceSet, tr: np.ndarray, te: np.ndarray, device, seed: int = 0, svm_c: float = 0.01) -> dict:
    """Verification (test identities) and mean attribute accuracy of SVMs on pooled Z_1."""
    net = net.to(device).eval()
    t = time.time()

    def both(x):  # one forward pass: pooled Z_1 and the unit embedding, side by side
        z = net.features(x)
        return torch.cat([z.mean(dim=(2, 3)), net.embed_features(z)], 1)

    with torch.no_grad():
        o_tr, o_te = embed_all(both, faces.images, tr, device), embed_all(both, faces.images, te, device)
    c = o_tr.shape[1] - net.arch["emb_dim"]
    f_tr, f_te, e_tr, e_te = o_tr[:, :c].numpy(), o_te[:, :c].numpy(), o_tr[:, c:], o_te[:, c:]
    p_tr = verification_pairs(faces.identity[tr], 3000, np.random.default_rng(seed + 2))
    p_te = verification_pairs(faces.identity[te], 3000, np.random.default_rng(seed + 3))
    ver = verification_accuracy(e_tr, p_tr, e_te, p_te)
    acc = attribute_svms(f_tr, faces.attributes[tr], f_te, faces.attributes[te], svm_c, seed)
    maj = majority_baseline(faces.attributes[tr], faces.attributes[te])
    return {
        "verification": ver,
        "attr_acc": float(acc.mean()),
        "majority": float(maj.mean()),
        "eval_s": time.time() - t,
    }


def table(rows: list[dict]) -> str:
    out = [
        "| variant | widths | epochs | train s | device | verification (test ids) | raw attribute acc. | majority |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pcts = " | ".join(f"{100 * r[k]:.1f}" for k in ("verification", "attr_acc", "majority"))
        out.append(f"| {r['name']} | {r['widths']} | {r['epochs']} | {r['train_s']:.0f} | {r['device']} | {pcts} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--out", required=True)
    for name in ("train", "eval"):
        q = sub.add_parser(name)
        q.add_argument("--pack", help="faces from a `pack` file instead of ../shared/data/lfw")
        q.add_argument("--size", type=int, default=64)
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--device", default="auto")
        q.add_argument("--out", default="bench_out/backbones")
    sub.choices["train"].add_argument(
        "--variants", default="32x100", help="WIDTHxEPOCHS,... (base width w: stages w, 2w, 4w, 4w)"
    )
    sub.choices["train"].add_argument("--lr", type=float, default=3e-3)
    sub.choices["train"].add_argument(
        "--deadline-s", type=float, default=None, help="skip a variant that would end past this many seconds"
    )
    sub.choices["eval"].add_argument("weights", nargs="+")
    a = ap.parse_args(argv)
    log = lambda m: print(m, flush=True)  # noqa: E731
    if a.cmd == "pack":
        pack_faces(load_lfwa(size=a.size, progress=log), Path(a.out))
        log(f"wrote {a.out} ({Path(a.out).stat().st_size / 2**20:.1f} MiB)")
        return 0
    t0 = time.time()
    faces = unpack_faces(Path(a.pack)) if a.pack else load_lfwa(size=a.size, progress=log)
    tr, te = faces.split(a.seed, 0.2)
    device = resolve_device(a.device)
    torch.backends.cudnn.benchmark = True
    log(
        f"{faces.n} faces ({faces.images.shape[1]} px), train {len(tr)} / test {len(te)}, device {device} (load {time.time() - t0:.0f}s)"
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    if a.cmd == "eval":
        for w in a.weights:
            net, meta = load_backbone(w)
            rows.append(
                {
                    "name": Path(w).name,
                    "widths": tuple(net.arch["widths"]),
                    "epochs": meta.get("epochs", "?"),
                    "train_s": meta.get("train_wall_time_s", 0.0),
                    "device": meta.get("device", "cpu"),
                    **score(net, faces, tr, te, device, a.seed),
                }
            )
            log(table(rows[-1:]))
    else:
        per_epoch = {}  # measured s/epoch per width, to respect the deadline
        for v in a.variants.split(","):
            w, ep = (int(x) for x in v.lower().split("x"))
            # unseen width: guess from the widest one measured (cost grows about linearly on a GPU)
            known = max(per_epoch, default=None)
            est = ep * per_epoch.get(w, per_epoch[known] * w / known if known else 0.0)
            if a.deadline_s and time.time() - t0 + est > a.deadline_s:
                log(f"skip {v}: would need ~{est:.0f}s, {a.deadline_s - (time.time() - t0):.0f}s left")
                continue
            t = time.time()
            net, hist = train_backbone(
                faces,
                tr,
                epochs=ep,
                lr=a.lr,
                widths=backbone_widths(w),
                seed=a.seed,
                device=device,
                log=log if ep <= 10 else (lambda m: None),
            )
            wall = time.time() - t
            per_epoch[w] = wall / ep
            meta = {
                "image_size": faces.images.shape[1],
                "seed": a.seed,
                "test_fraction": 0.2,
                "epochs": ep,
                "id_weight": 1.0,
                "history": hist,
                "train_wall_time_s": wall,
                "device": str(torch.cuda.get_device_name() if device.type == "cuda" else device),
            }
            name = f"backbone-w{w}-e{ep}-{faces.images.shape[1]}px.pt"
            save_backbone(out / name, net, meta)
            rows.append(
                {
                    "name": name,
                    "widths": backbone_widths(w),
                    "epochs": ep,
                    "train_s": wall,
                    "device": meta["device"],
                    **score(net, faces, tr, te, device, a.seed),
                }
            )
            log(f"{v}: loss {hist[-1]['loss']:.4f}\n" + table(rows[-1:]))
            (out / "backbones.json").write_text(json.dumps(rows, indent=1, default=str))
    log(table(rows))
    (out / "table.md").write_text(table(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
