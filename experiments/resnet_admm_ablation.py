"""Answers: does Block-ADMM fail on ResNet-18 because of augmentation or of BatchNorm's start?

Small CPU ablation (ResNet-18 width 8, 2,000 CIFAR-10 training images, 1,000 test, the
``cifar10-resnet18-small`` preset's settings otherwise), one thread per run:

    python experiments/resnet_admm_ablation.py block-admm --augment on  --epochs 5
    python experiments/resnet_admm_ablation.py block-admm --augment off --epochs 5
    python experiments/resnet_admm_ablation.py block-admm --augment off --epochs 5 --calibrate-bn
    python experiments/resnet_admm_ablation.py sgd --augment off --epochs 5

``--calibrate-bn`` sets every BatchNorm's running statistics by a train-mode pass over the
training images (cumulative average) before Z is initialised; without it Z is initialised by
an eval-mode pass through statistics that are still (0, 1). Prints, per epoch: test accuracy,
eval-mode training loss, RMS residual and dual norm per block.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from admm_core import runs
from admm_core.methods import block_admm
from admm_core.presets import preset_config


def calibrate_bn_before_init() -> None:
    orig = block_admm.BlockADMM.init_state

    @torch.no_grad()
    def calibrated(self, net, batch, gen):
        bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        saved = [m.momentum for m in bns]
        for m in bns:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the pass
        net.train()
        for s in range(0, batch.n, 256):
            net.forward_all(batch.x[s : s + 256])
        for m, mom in zip(bns, saved):
            m.momentum = mom
        return orig(self, net, batch, gen)

    block_admm.BlockADMM.init_state = calibrated


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("method")
    p.add_argument("--augment", choices=["on", "off"], default="on")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--calibrate-bn", action="store_true")
    p.add_argument("--data-root", default=None, help="folder with cifar10-jpeg/ or cifar10-jpeg.npz")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.calibrate_bn:
        calibrate_bn_before_init()
    cfg = preset_config("cifar10-resnet18-small", a.method).replace(
        data__augment=a.augment == "on",
        model__width=8,
        data__train_limit=2000,
        data__test_limit=1000,
        data__root=a.data_root,
        train__epochs=a.epochs,
        train__device="cpu",
    )
    d = Path(tempfile.mkdtemp())
    t0 = time.time()
    runs.train(cfg, d)
    tag = f"{a.method} augment={a.augment}{' calibrate-bn' if a.calibrate_bn else ''}"
    for m in runs.read_metrics(d):
        res = [round(r, 1) for r in m["residuals"]]
        duals = [round(r, 1) for r in m["dual_norms"]]
        print(
            f"{tag} epoch {m['epoch']}: test {m['test_accuracy']:.3f} loss {m['train_loss']:.3g} residuals {res} duals {duals}"
        )
    print(f"{tag}: {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
