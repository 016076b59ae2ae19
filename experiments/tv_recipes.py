"""torchvision's architectures (the ``tv-*`` records): which Θ step Block-ADMM trains them at, beside Adam.

A quick proxy on one CPU thread: each record's preset (``cifar10-<record>``) on a small real subset
of CIFAR-10 ($ADMM_DATA), Block-ADMM at the preset's η and at the ResNet-18 preset's η = 5e-3, and
backprop with Adam (the preset's η = 1e-3 and 5e-3), same seed, same images. Writes its table into
docs/architectures.md (section ``tv-recipes``) with the machine it ran on.

    OMP_NUM_THREADS=1 python experiments/tv_recipes.py --train 256 --epochs 2
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import torch

from admm_core.device import machine
from admm_core.docs import code_version, command_line, write_section
from admm_core.network import train
from admm_core.spec.presets import TV_BLOCK_LR, preset_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"


def rows_of(record: str, n: int, epochs: int, seed: int, out: Path) -> list[dict]:
    runs = [("block-admm", TV_BLOCK_LR[record]), ("block-admm", 5e-3), ("adam", None), ("adam", 5e-3)]
    rows = []
    for method, lr in runs:
        cfg = preset_config(f"cifar10-{record}", method).replace(
            data__train_limit=n, data__test_limit=n, train__epochs=epochs, train__seed=seed
        )
        if lr is not None:
            cfg = cfg.replace(method_params={**cfg.method_params, "lr": lr})
        t = time.perf_counter()
        s = train(cfg, out / f"{record}-{method}-{lr}")
        rows.append(
            {
                "record": record,
                "method": method,
                "lr": cfg.method_params.get("lr"),
                "status": s["status"],
                "test": s.get("test_accuracy"),
                "loss": s.get("train_loss"),
                "s_epoch": s.get("seconds_per_epoch"),
                "wall": time.perf_counter() - t,
            }
        )
        print(rows[-1], flush=True)
    return rows


def table(rows: list[dict]) -> str:
    def pct(v):
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"

    def num(v):
        return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.3f}"

    out = [
        "| record | method | η | status | test accuracy | training loss | s / epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['record']} | {r['method']} | {r['lr']:g} | {r['status']} | {pct(r['test'])} | {num(r['loss'])} "
            f"| {r['s_epoch']:.1f} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=",".join(TV_BLOCK_LR))
    ap.add_argument("--train", type=int, default=256, help="training and test images (CIFAR-10 subset)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", default=str(DOC))
    a = ap.parse_args()
    torch.set_num_threads(1)
    version, cmd = code_version(), command_line(prog="python experiments/tv_recipes.py")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for record in a.records.split(","):
            rows += rows_of(record, a.train, a.epochs, a.seed, Path(d))
    body = (
        f"{a.train} training and {a.train} test images of CIFAR-10, {a.epochs} epochs, seed {a.seed}, each record's "
        f"preset otherwise (batch 64, cosine Θ schedule, augmented). Machine: {machine()} (a shared 2-core VM: "
        "seconds per epoch are under other load).\n\n" + table(rows)
    )
    write_section(a.markdown, "tv-recipes", body, cmd, version)


if __name__ == "__main__":
    main()
