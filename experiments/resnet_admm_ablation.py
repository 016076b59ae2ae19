"""Answers: does Block-ADMM fail on ResNet-18 because of augmentation or of BatchNorm's start?

Small CPU ablation (ResNet-18 width 8, 2,000 CIFAR-10 training images, 1,000 test, the
``cifar10-resnet18-small`` preset's settings otherwise), one thread per run:

    python experiments/resnet_admm_ablation.py block-admm --augment off --set bn_calibrate=false
    python experiments/resnet_admm_ablation.py block-admm --augment off             # BN calibrated
    python experiments/resnet_admm_ablation.py block-admm --augment off --set lr=1e-3
    python experiments/resnet_admm_ablation.py block-admm --augment on --set lr=1e-3 [--reanchor]
    python experiments/resnet_admm_ablation.py sgd --augment off

``bn_calibrate`` (block-admm's setting, on by default) sets BatchNorm's running statistics by
a train-mode pass before Z's forward-pass start; off, Z starts from an eval-mode pass through
statistics that are still (0, 1). ``--reanchor`` moves Z_1 by block_1(x̃_new) − block_1(x̃_old)
when an epoch draws new augmentation views. Prints, per epoch: test accuracy, eval-mode
training loss, RMS residual and dual norm per block.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from admm_core import network, rundir
from admm_core.methods import block_admm
from admm_core.spec.presets import preset_config
from admm_core.spec.settings import parse_sets


def reanchor_z1_on_new_views() -> None:
    """At each epoch's start, Z_1 += block_1(x̃_new) − block_1(x̃_old): the new augmentation view
    moves Z_1 with block_1's output, so the residual Z_1 − block_1(x̃) (and U_1's meaning) is
    what it was before the view changed. The first epoch's old view is the plain image (Z's start)."""
    orig = block_admm.BlockADMM.run_epoch

    def run_epoch(self, net, state, batch, progress=None):
        aug = batch.augment
        if aug is not None:
            new_view = (aug.epoch, aug.dy, aug.dx, aug.flip)
            old_view = getattr(state, "_view", (None, None, None, None))
            net.eval()
            with torch.no_grad():
                for s in range(0, batch.n, self.chunk_size):
                    rows = slice(s, s + self.chunk_size)
                    aug.epoch, aug.dy, aug.dx, aug.flip = old_view
                    f_old = net.blocks[0](batch.inputs(rows))
                    aug.epoch, aug.dy, aug.dx, aug.flip = new_view
                    f_new = net.blocks[0](batch.inputs(rows))
                    state.z[0][rows] += (f_new - f_old).to(state.z[0].dtype)
            state._view = new_view
        return orig(self, net, state, batch, progress)

    block_admm.BlockADMM.run_epoch = run_epoch


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("method")
    p.add_argument("--augment", choices=["on", "off"], default="on")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--reanchor", action="store_true", help="move Z_1 with block_1's output when the view changes")
    p.add_argument("--data-root", default=None, help="folder with cifar10-jpeg/ or cifar10-jpeg.npz")
    p.add_argument("--set", action="append", default=[], help="method setting NAME=VALUE (e.g. lr=1e-3)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.reanchor:
        reanchor_z1_on_new_views()
    cfg = preset_config("cifar10-resnet18-small", a.method).replace(
        data__augment=a.augment == "on",
        model__width=8,
        data__train_limit=2000,
        data__test_limit=1000,
        data__root=a.data_root,
        train__epochs=a.epochs,
        train__device="cpu",
    )
    if a.set:
        cfg = cfg.replace(method_params={**cfg.method_params, **parse_sets(a.set)})
    d = Path(tempfile.mkdtemp())
    t0 = time.time()
    network.train(cfg, d)
    tag = f"{a.method} augment={a.augment}{' reanchor' if a.reanchor else ''} {' '.join(a.set)}".strip()
    for m in rundir.read_metrics(d):
        res = [round(r, 1) for r in m["residuals"]]
        duals = [round(r, 1) for r in m["dual_norms"]]
        print(
            f"{tag} epoch {m['epoch']}: test {m['test_accuracy']:.3f} loss {m['train_loss']:.3g} residuals {res} duals {duals}"
        )
    print(f"{tag}: {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
