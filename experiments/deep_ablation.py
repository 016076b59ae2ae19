"""Answers: which change makes Block-ADMM learn ResNet-18 (and the 20-layer MLP), which do not, and
which of its knobs reach 95% on MNIST soonest?

One row per configuration tried, each an ordinary run of the engine (``admm train``) on a small,
fast proxy of real data, the baselines measured in the same study:

- ``resnet-small``: CIFAR-10 (JPEG copy), ResNet-18 at width 8 split after conv3_x, 5,000 training /
  2,000 test images, augmented, batch 128, 5 epochs, constant η (the ``cifar10-resnet18-small``
  preset made narrower and larger); about 1–4 min per row on one core. The exploration.
- ``resnet-cpu``: the ``cifar10-resnet18-cpu`` preset (20,000 / 10,000 images, 8 epochs, cosine η):
  the recipe and its ablations at the size the issue asks for; 6–14 min per row on one core.
- ``deep20``: MNIST, the 20-layer MLP (``mnist-deep20``), all 60,000 training images, 4 epochs, cosine η.
- ``mnist-final``: MNIST, 784-128-128-10 (``mnist-mlp-mse``), 50 epochs: time to 95% and the final
  accuracy of Block-ADMM's schedules and of online-admm's knobs, beside Adam.

    python experiments/deep_ablation.py resnet-small --out bench_out/ablation --jobs 2 \\
        --markdown docs/results/deep-networks.md
    python experiments/deep_ablation.py resnet-cpu --rows online-admm,adam --out ...   # some rows only

Rows run ``--jobs`` at a time, one thread each (``OMP_NUM_THREADS=1``), so their seconds are
comparable within a table only. A finished row whose config.json equals the row's is reused.
The table (test accuracy after each epoch; the last epoch's RMS residual and dual norm per
block, and the cosine of the Θ-step to backprop's gradient per block) is written into
``--markdown`` as the generated section ``ablation-<study>``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from admm_core.docs import code_version, command_line, write_section
from admm_core.rundir import read_json, read_metrics, write_json
from admm_core.spec.config import RunConfig

LOAD_FILE = "ablation_load.json"  # the machine's load average while a row trained (rows from before: none)

ROOT = Path(__file__).resolve().parent.parent

# Block-ADMM's settings before the ResNet-18 recipe (the sweep schedule of Alg. 1 as printed, the small preset's
# ζ = 0.5, η = 1e-3), written out in full so that a row is the same run whatever the presets say now.
OLD = {
    "lr": 1e-3,
    "z_lr": 0.5,
    "z_step": "fixed",
    "beta": 1.0,
    "primal_steps": 1,
    "iters_per_epoch": 4,
    "z_schedule": "sweep",
    "bn_mode": "eval",
    "z_start": "previous",
    "dual_theta": "new",
    "dual_lr": 1.0,
    "theta_input": "new",
}
OLD_ONLINE = {"lr": 1e-3, "z_lr": 1.0, "z_step": "scaled", "bn_mode": "eval"}
MB = {**OLD, "z_schedule": "minibatch", "bn_mode": "train"}
FWD_SCALED = {**MB, "z_start": "forward", "z_step": "scaled", "z_lr": 1.0}
SMALL = ["--preset", "cifar10-resnet18-small", "--width", "8", "--train-limit", "5000", "--test-limit", "2000"]
# The recipe the presets now use (admm_core.spec.presets._RESNET_BLOCK), and its ablations on the CPU proxy.
RECIPE = {
    **FWD_SCALED,
    "iters_per_epoch": 7,  # unused by the minibatch schedule (the default)
    "lr": 5e-3,
    "z_lr": 0.1,
    "dual_theta": "old",
    "dual_lr": 0.01,
}

# The 20-layer MLP's recipe (admm_core.spec.presets._DEEP_BLOCK), written out in full.
DEEP = {
    "fused": True,
    "lr": 1e-3,
    "z_lr": 1.0,
    "z_step": "fixed",
    "beta": 1.0,
    "primal_steps": 1,
    "z_schedule": "minibatch",
    "z_start": "forward",
    "theta_input": "start",
    "dual_theta": "old",
    "dual_lr": 0.1,
}
# MNIST: Alg. 1's sweep schedule as the mnist-mlp-mse preset has it, and the minibatch schedule
# from a forward start that made ResNet-18 learn (no BatchNorm here); settings written out in full.
# (The preset's defaults are now the measured minibatch recipe, so the sweep schedule is spelled out too.)
MNIST_SWEEP = {
    "lr": 5e-4,
    "z_lr": 0.5,
    "beta": 1.0,
    "primal_steps": 3,
    "iters_per_epoch": 7,
    "z_schedule": "sweep",
    "z_start": "previous",
    "dual_theta": "new",
    "theta_input": "new",
}
MNIST_MB = {
    **MNIST_SWEEP,
    "primal_steps": 1,
    "z_schedule": "minibatch",
    "z_start": "forward",
    "dual_theta": "old",
}
# online-admm as the preset had it before the measured recipes (its defaults are now the "online-pe10-start" row)
MNIST_ONLINE = {
    "lr": 1e-3,
    "z_lr": 0.1,
    "z_step": "scaled",
    "power_every": 1,
    "dual_theta": "new",
    "theta_input": "new",
}
MNIST_ROWS = {
    "adam": ("adam", {"lr": 1e-3}, "backprop, Adam η = 1e-3, batch 64 (the preset)"),
    "sweep": ("block-admm", MNIST_SWEEP, "block-admm as the preset had it: 7 × 3 sweeps an epoch, batch 256"),
    "mb": ("block-admm", MNIST_MB, "minibatch schedule, forward start, dual residual off the Θ-step, batch 256"),
    "mb-start-lr5e-4": (
        "block-admm",
        {**MNIST_MB, "theta_input": "start"},
        "minibatch schedule, Θ-steps at the forward pass's inputs (no Θ forward pass)",
    ),
    "mb-lr2e-3": ("block-admm", {**MNIST_MB, "lr": 2e-3}, "minibatch schedule, η = 2e-3"),
    "mb-start": (
        "block-admm",
        {**MNIST_MB, "lr": 2e-3, "theta_input": "start"},
        "minibatch schedule, η = 2e-3, Θ-steps at the forward pass's inputs",
    ),
    "mb-start-seed1": (
        "block-admm",
        {**MNIST_MB, "lr": 2e-3, "theta_input": "start"},
        "the same, seed 1",
        ["--seed", "1"],
    ),
    "online": ("online-admm", MNIST_ONLINE, "online-admm as the preset had it"),
    "online-pe10": (
        "online-admm",
        {**MNIST_ONLINE, "power_every": 10},
        "… L_t re-estimated every 10 minibatches",
    ),
    "online-pe10-old": (
        "online-admm",
        {**MNIST_ONLINE, "power_every": 10, "dual_theta": "old"},
        "… and the dual residual read off the Θ-step's forward pass (additive dual: the same training)",
    ),
    "online-pe10-start": (
        "online-admm",
        {**MNIST_ONLINE, "power_every": 10, "dual_theta": "old", "theta_input": "start"},
        "… and the Θ-steps at the forward pass's inputs (no forward pass of their own)",
    ),
}

GOT = {**RECIPE, "dual_lr": 1.0}  # gotmare has no dual step (α unused; the default, as its runs recorded it)

STUDIES = {
    "resnet-small": {
        "args": [*SMALL, "--epochs", "5", "--batch-size", "128", "--lr-schedule", "constant"],
        # name: (method, settings, what the row changes)
        "rows": {
            "sgd": ("sgd", {"lr": 0.05, "momentum": 0.9}, "backprop, SGD momentum 0.9, η = 0.05"),
            "adam": ("adam", {"lr": 1e-3}, "backprop, Adam η = 1e-3"),
            "online-eval": (
                "online-admm",
                OLD_ONLINE,
                "online-admm as it was: BatchNorm running statistics in its forward start and sweep",
            ),
            "online-admm": (
                "online-admm",
                {**OLD_ONLINE, "bn_mode": "train"},
                "online-admm, BatchNorm on the minibatch's statistics everywhere",
            ),
            "sweep-eval": (
                "block-admm",
                OLD,
                "block-admm as it was: every row swept 4× an epoch, BatchNorm in eval mode in sweeps",
            ),
            "sweep-train": ("block-admm", {**OLD, "bn_mode": "train"}, "+ BatchNorm on the swept rows' statistics"),
            "sweep-train-scaled": (
                "block-admm",
                {**OLD, "bn_mode": "train", "z_step": "scaled", "z_lr": 1.0},
                "+ curvature-scaled Z step, ζ = 1",
            ),
            "gotmare-sweep-train": (
                "gotmare",
                {**OLD, "bn_mode": "train"},
                "gotmare (U ≡ 0), sweep schedule, BatchNorm train",
            ),
            "mb": ("block-admm", MB, "minibatch schedule: each minibatch's rows updated just before its Θ-step"),
            "mb-z1": ("block-admm", {**MB, "z_lr": 1.0}, "minibatch schedule, fixed ζ = 1"),
            "mb-adamz": (
                "block-admm",
                {**MB, "z_optimizer": "adam", "z_lr": 0.01},
                "minibatch schedule, Adam on Z (per-row moments), ζ = 0.01",
            ),
            "mb-scaled": (
                "block-admm",
                {**MB, "z_step": "scaled", "z_lr": 1.0},
                "minibatch schedule, scaled Z step ζ = 1",
            ),
            "mb-fwd": (
                "block-admm",
                {**MB, "z_start": "forward"},
                "minibatch schedule, Z-update started at the forward pass (fixed ζ = 0.5)",
            ),
            "mb-fwd-z1": ("block-admm", {**MB, "z_start": "forward", "z_lr": 1.0}, "… fixed ζ = 1"),
            "mb-fwd-scaled": ("block-admm", FWD_SCALED, "… scaled Z step, ζ = 1"),
            "mb-fwd-scaled-a0.1": ("block-admm", {**FWD_SCALED, "dual_lr": 0.1}, "… dual step α = 0.1"),
            "mb-fwd-scaled-a0.01": ("block-admm", {**FWD_SCALED, "dual_lr": 0.01}, "… dual step α = 0.01"),
            "mb-fwd-scaled-old": (
                "block-admm",
                {**FWD_SCALED, "dual_theta": "old"},
                "… α = 1, dual residual read off the Θ-step's forward pass (Θ before the step)",
            ),
            "mb-fwd-scaled-old-a0.1": (
                "block-admm",
                {**FWD_SCALED, "dual_theta": "old", "dual_lr": 0.1},
                "… and α = 0.1",
            ),
            "gotmare-mb": ("gotmare", MB, "gotmare, minibatch schedule"),
            "gotmare-mb-fwd": (
                "gotmare",
                {**MB, "z_start": "forward"},
                "gotmare, minibatch schedule, forward start, fixed ζ = 0.5",
            ),
            "gotmare-mb-fwd-scaled": (
                "gotmare",
                FWD_SCALED,
                "gotmare, minibatch schedule, forward start, scaled ζ = 1",
            ),
        },
    },
    "resnet-cpu": {
        "args": ["--preset", "cifar10-resnet18-cpu"],
        "rows": {
            "sgd": ("sgd", {"lr": 0.05, "momentum": 0.9}, "backprop, SGD momentum 0.9, η = 0.05"),
            "adam-1e-3": ("adam", {"lr": 1e-3}, "backprop, Adam η = 1e-3"),
            "adam-2e-3": ("adam", {"lr": 2e-3}, "backprop, Adam η = 2e-3"),
            "adam-4e-3": ("adam", {"lr": 4e-3}, "backprop, Adam η = 4e-3"),
            "adam": ("adam", {"lr": 5e-3}, "backprop, Adam η = 5e-3 (the paper's η)"),
            "online-z1-lr1e-3": ("online-admm", {"lr": 1e-3, "z_lr": 1.0}, "online-admm, scaled ζ = 1, η = 1e-3"),
            "online-admm": ("online-admm", {"lr": 5e-3, "z_lr": 0.1}, "online-admm, scaled ζ = 0.1, η = 5e-3"),
            "gotmare-z1-lr1e-3": (
                "gotmare",
                {**GOT, "lr": 1e-3, "z_lr": 1.0},
                "gotmare (U ≡ 0), forward start, scaled ζ = 1, η = 1e-3",
            ),
            "gotmare": ("gotmare", GOT, "gotmare, the recipe's ζ = 0.1, η = 5e-3"),
            "block-z1-lr1e-3": (
                "block-admm",
                {**RECIPE, "lr": 1e-3, "z_lr": 1.0, "dual_lr": 1.0},
                "block-admm, forward start, scaled ζ = 1, α = 1, η = 1e-3",
            ),
            "block-a1": ("block-admm", {**RECIPE, "dual_lr": 1.0}, "block-admm, ζ = 0.1, η = 5e-3, α = 1"),
            "block-a0.1": ("block-admm", {**RECIPE, "dual_lr": 0.1}, "… α = 0.1"),
            "block": ("block-admm", RECIPE, "block-admm, the recipe: ζ = 0.1, η = 5e-3, α = 0.01"),
            "block-pe10": (
                "block-admm",
                {**RECIPE, "power_every": 10},
                "the recipe with L_t re-estimated every 10 minibatches (a third of the epoch was the power iteration)",
            ),
            "gotmare-seed1": ("gotmare", GOT, "gotmare, the recipe, seed 1", ["--seed", "1"]),
            "block-seed1": ("block-admm", RECIPE, "block-admm, the recipe, seed 1", ["--seed", "1"]),
            "block-start": (
                "block-admm",
                {**RECIPE, "theta_input": "start", "power_every": 10},
                "… Θ-steps at the forward pass's inputs (no Θ forward pass), L_t every 10 minibatches",
            ),
        },
    },
    # Time to 95% on MNIST by Block-ADMM's own knobs (the paper's 784-128-128-10, MSE), against
    # Adam measured in the same study; 50 epochs for the final accuracy (the preset's η is constant).
    "mnist-final": {"args": ["--preset", "mnist-mlp-mse", "--epochs", "50"], "target": 0.95, "rows": MNIST_ROWS},
    "deep20": {
        # Full MNIST (60,000 images), 4 epochs under a cosine η: the 10,000-image proxy was too short
        # for anything to learn in 8 epochs, Adam backprop included (38.6%).
        "args": ["--preset", "mnist-deep20", "--epochs", "4", "--lr-schedule", "cosine"],
        "rows": {
            "sgd": ("sgd", {"lr": 5e-3}, "backprop, SGD η = 5e-3 (the paper's)"),
            "adam": ("adam", {"lr": 1e-3, "fused": True}, "backprop, Adam η = 1e-3"),
            "online-admm": ("online-admm", {"lr": 1e-3, "z_lr": 0.1, "fused": True}, "online-admm, scaled ζ = 0.1"),
            "sweep": ("block-admm", {**OLD, "fused": True}, "block-admm, Alg. 1's sweep schedule, fixed ζ = 0.5"),
            "z0.5": ("block-admm", {**DEEP, "z_lr": 0.5}, "the recipe with ζβ = 0.5"),
            "persistent": (
                "block-admm",
                {**DEEP, "z_start": "previous", "theta_input": "new"},
                "the recipe with Z started from its stored value (Θ at the moved inputs)",
            ),
            "moved-input": ("block-admm", {**DEEP, "theta_input": "new"}, "the recipe with Θ at the moved inputs"),
            "block": ("block-admm", DEEP, "block-admm, the recipe: ζβ = 1, forward start, Θ at the start's inputs"),
        },
    },
}

# The duals on ResNet-18. Screened on the small proxy (5,000 / 2,000 images, 5 epochs, constant η)
# from the recipe of the presets: a growing β (the minibatch schedule, β ×1.5 an epoch, U rescaled so βU
# stays), several Z-steps per visit, a dual reset (U ← 0 every epoch) that lets the duals take full steps.
SMALL_ARGS = [*SMALL, "--epochs", "5", "--batch-size", "128", "--lr-schedule", "constant"]
STUDIES["resnet-duals-small"] = {
    "args": SMALL_ARGS,
    "rows": {
        "gotmare": ("gotmare", GOT, "gotmare (U ≡ 0), the recipe"),
        "block": ("block-admm", RECIPE, "block-admm, the recipe (α = 0.01)"),
        "beta-grow": ("block-admm", {**RECIPE, "beta_growth": 1.5}, "… β × 1.5 after every epoch"),
        "beta-grow-a1": ("block-admm", {**RECIPE, "beta_growth": 1.5, "dual_lr": 1.0}, "… β × 1.5 an epoch, α = 1"),
        "zsweeps3": ("block-admm", {**RECIPE, "z_sweeps": 3}, "… 3 Z sweeps per visit"),
        "zsweeps3-a1": ("block-admm", {**RECIPE, "z_sweeps": 3, "dual_lr": 1.0}, "… 3 Z sweeps per visit, α = 1"),
        # a row's U is read once an epoch, before its dual step: a reset every epoch is gotmare exactly
        "reset-a1": ("block-admm", {**RECIPE, "dual_reset": 1, "dual_lr": 1.0}, "… U ← 0 every epoch, α = 1"),
        "reset2-a1": ("block-admm", {**RECIPE, "dual_reset": 2, "dual_lr": 1.0}, "… U ← 0 every 2nd epoch, α = 1"),
        "reset2-a0.1": (
            "block-admm",
            {**RECIPE, "dual_reset": 2, "dual_lr": 0.1},
            "… U ← 0 every 2nd epoch, α = 0.1",
        ),
    },
}

# … three seeds of gotmare and of the screen's best variant of each kind (β growth, Z sweeps, reset; the
# α = 1 ones fell behind) on the same small proxy: seed 0 is the screen's own row (the same run), seeds 1
# and 2 are trained here. The full proxy's 12 runs (below) did not fit the time this had on 2 shared cores.
SEEDED_SMALL = {
    "gotmare": "gotmare (U ≡ 0), the recipe",
    "zsweeps3": "block-admm, the recipe, 3 Z sweeps per visit",
    "beta-grow": "block-admm, the recipe, β × 1.5 an epoch",
    "reset2-a0.1": "block-admm, the recipe, U ← 0 every 2nd epoch, α = 0.1",
}
STUDIES["resnet-duals-seeds-small"] = {
    "args": SMALL_ARGS,
    "epochs": 5,
    # gotmare and the screen's best (reset2-a0.1) first, seed by seed: a study stopped early has those two
    # at every seed (this one was: the machine's load doubled the rows' time)
    "rows": {
        f"{k}-s{seed}": (*STUDIES["resnet-duals-small"]["rows"][k][:2], f"{what}, seed {seed}", ["--seed", str(seed)])
        for first in (True, False)
        for seed in (1, 2)
        for k, what in SEEDED_SMALL.items()
        if (k in ("gotmare", "reset2-a0.1")) == first
    },
    "groups": {what: [("resnet-duals-small", k), f"{k}-s1", f"{k}-s2"] for k, what in SEEDED_SMALL.items()},
}

# … and three seeds each of the screened variants on the cifar10-resnet18-cpu proxy, gotmare beside them.
DUAL_VARIANTS = {
    "gotmare": ("gotmare", GOT, "gotmare (U ≡ 0), the recipe"),
    "beta-grow": ("block-admm", {**RECIPE, "beta_growth": 1.5}, "block-admm, the recipe, β × 1.5 an epoch"),
    "zsweeps3": ("block-admm", {**RECIPE, "z_sweeps": 3}, "block-admm, the recipe, 3 Z sweeps per visit"),
    # the screen's better reset (α = 1 fell to 17.6% after its first dual steps, α = 0.1 did not)
    "reset": ("block-admm", {**RECIPE, "dual_reset": 2, "dual_lr": 0.1}, "block-admm, U ← 0 every 2nd epoch, α = 0.1"),
}
STUDIES["resnet-duals"] = {
    "args": ["--preset", "cifar10-resnet18-cpu"],
    "epochs": 8,
    "rows": {
        f"{k}-s{seed}": (m, p, f"{what}, seed {seed}", ["--seed", str(seed)])
        for seed in (0, 1, 2)
        for k, (m, p, what) in DUAL_VARIANTS.items()
    },
    "groups": {what: [f"{k}-s{seed}" for seed in (0, 1, 2)] for k, (_, _, what) in DUAL_VARIANTS.items()},
}

# The paper's regime. Every Linear weight ~ N(0, σ²), biases 0 (model.init = normal), all 60,000
# MNIST images, 20 epochs at a constant η (the -paper presets' length): where does Adam backprop sit near
# the paper's 58% on the 10-layer MLP while SGD stays at chance?
_BP = {
    "adam": ({"lr": 1e-3, "fused": True}, "backprop, Adam η = 1e-3"),
    "sgd": ({"lr": 5e-3, "fused": True}, "backprop, SGD η = 5e-3"),
}
# deep20: 10 epochs of mnist-deep20 at a constant η (its table was measured so). deep10: the mnist-deep10-paper
# preset itself (10 epochs, batch 64, constant η) with only σ changed, so its σ = 0.01 rows are the preset's runs.
for _net, _args, _grid in (
    # SGD at chance at σ = 0.015 and 0.01: not run in between
    ("deep10", ["--preset", "mnist-deep10-paper"], {"adam": (0.01, 0.0105, 0.011, 0.012, 0.015), "sgd": (0.01, 0.015)}),
    (
        "deep20",
        ["--preset", "mnist-deep20", "--epochs", "10", "--lr-schedule", "constant"],
        {"adam": (0.02, 0.03, 0.05), "sgd": (0.05,)},
    ),
):
    STUDIES[f"sigma-{_net}"] = {
        "args": _args,
        "rows": {
            f"{m}-s{sig}": (m, _BP[m][0], f"{_BP[m][1]}, σ = {sig}", ["--init-std", str(sig)])
            for sig in sorted({v for vs in _grid.values() for v in vs})
            for m in ("adam", "sgd")
            if sig in _grid[m]
        },
    }
# Adam's edge on deep10 is a cliff near σ = 0.01: a second seed at σ = 0.01 and 0.0105, where the paper's 58%
# could be a mean of runs that escape and runs that do not
for _sig in (0.01, 0.0105):
    STUDIES["sigma-deep10"]["rows"][f"adam-s{_sig}-seed1"] = (
        "adam",
        _BP["adam"][0],
        f"{_BP['adam'][1]}, σ = {_sig}, seed 1",
        ["--init-std", str(_sig), "--seed", "1"],
    )
# at σ = 0.01 Adam's seed 1 escapes chance (its seed 0 does not): a third seed, and block-admm's seed 1
STUDIES["sigma-deep10"]["rows"]["adam-s0.01-seed2"] = (
    "adam",
    _BP["adam"][0],
    f"{_BP['adam'][1]}, σ = 0.01, seed 2",
    ["--init-std", "0.01", "--seed", "2"],
)
STUDIES["sigma-deep10"]["rows"]["block-s0.01-seed1"] = (
    "block-admm",
    {},
    "block-admm (the preset's settings), σ = 0.01, seed 1",
    ["--init-std", "0.01", "--seed", "1"],
)
# below the edge: does Adam stay at chance on every seed, and does block-admm still learn?
for _seed in (0, 1):
    STUDIES["sigma-deep10"]["rows"]["adam-s0.005" + (f"-seed{_seed}" if _seed else "")] = (
        "adam",
        _BP["adam"][0],
        f"{_BP['adam'][1]}, σ = 0.005" + (f", seed {_seed}" if _seed else ""),
        ["--init-std", "0.005", "--seed", str(_seed)],
    )
# block-admm (the preset's settings) on either side of the preset's σ
for _sig in (0.005, 0.015):
    STUDIES["sigma-deep10"]["rows"][f"block-s{_sig}"] = (
        "block-admm",
        {},
        f"block-admm (the preset's settings), σ = {_sig}",
        ["--init-std", str(_sig)],
    )

# Block-ADMM in that regime, on a 10,000-image proxy (2,000 test images), σ = 0.01 (Adam and SGD
# backprop at chance on all 60,000 images for 20 epochs), batch 64 for every row, 8 epochs, constant η.
# Alg. 1 as the paper prints it: persistent Z, Adam on Z and Θ, β = 1, 3 primal steps, duals on (U
# uniform at the start, as its §MNIST says), the sweep schedule.
PAPER_ALG1 = {
    "lr": 1e-3,
    "z_optimizer": "adam",
    "z_lr": 0.01,
    "z_step": "fixed",
    "beta": 1.0,
    "primal_steps": 3,
    "iters_per_epoch": 7,
    "u_init": "uniform",
    "dual_lr": 1.0,
}
DEEP_NORM = {**DEEP, "z_norm": "top"}
DEEP_UP = {**DEEP, "z_norm": "up"}
DEEP_SIGNAL = {**DEEP, "z_norm": "signal"}
_T10 = 10
PROXY10 = [
    *("--preset", "mnist-deep10", "--init-std", "0.01", "--train-limit", "10000", "--test-limit", "2000"),
    *("--epochs", "8", "--lr-schedule", "constant", "--batch-size", "64"),
]
STUDIES["paper10"] = {
    "args": PROXY10,
    "steps": True,
    "rows": {
        "adam": ("adam", {"lr": 1e-3, "fused": True}, "backprop, Adam η = 1e-3"),
        "sgd": ("sgd", {"lr": 5e-3, "fused": True}, "backprop, SGD η = 5e-3"),
        "paper": ("block-admm", {**PAPER_ALG1, "fused": True}, "block-admm, Alg. 1 as printed (Adam on Z, ζ = 0.01)"),
        "paper-sgdz": (
            "block-admm",
            {**PAPER_ALG1, "z_optimizer": "sgd", "z_lr": 0.5, "fused": True},
            "… with a plain gradient Z-step, ζ = 0.5",
        ),
        "fwd": ("block-admm", DEEP, "the deep20 recipe: ζβ = 1, forward start, Θ at the start's inputs"),
        "fwd-norm": ("block-admm", DEEP_NORM, "… each Z_t-step rescaled to the Z_T-step's RMS (z_norm = top)"),
        "fwd-newton": ("block-admm", {**DEEP, "z_step": "newton"}, "… Newton Z-step (CG, 5 steps), β = 1"),
        "fwd-newton-b4": (
            "block-admm",
            {**DEEP, "z_step": "newton", "beta": [4.0 ** (t - _T10 + 1) for t in range(_T10)]},
            "… Newton Z-step, β_{t+1}/β_t = 4 (β_T = 1)",
        ),
        "fwd-adamz": (
            "block-admm",
            {**DEEP, "z_optimizer": "adam", "z_lr": 0.01},
            "the deep20 recipe with Adam on Z (per-row moments), ζ = 0.01",
        ),
        "norm-persist": (
            "block-admm",
            {**DEEP_NORM, "z_start": "previous", "theta_input": "new"},
            "z_norm = top with persistent Z (Θ at the moved inputs)",
        ),
        "norm-sweeps3": ("block-admm", {**DEEP_NORM, "z_sweeps": 3}, "z_norm = top, 3 Z sweeps per visit"),
        "adam-eps": (
            "adam",
            {"lr": 1e-3, "fused": True, "eps": 1e-30},
            "backprop, Adam with ε = 1e-30 (is the failure Adam's ε?)",
        ),
        "norm-up": ("block-admm", {**DEEP, "z_norm": "up"}, "z_norm = up: a Z_t-step only scaled up to the top's size"),
        "norm-lr3e-4": ("block-admm", {**DEEP_NORM, "lr": 3e-4}, "z_norm = top, η = 3e-4"),
        "gotmare-norm": ("gotmare", DEEP_NORM, "gotmare (U ≡ 0) with z_norm = top"),
        "gotmare-up": ("gotmare", DEEP_UP, "gotmare (U ≡ 0) with z_norm = up"),
        "up-dualstart4": ("block-admm", {**DEEP_UP, "dual_start": 4}, "z_norm = up, duals from epoch 5 on"),
        "up-bgrow1.2": ("block-admm", {**DEEP_UP, "beta_growth": 1.2}, "z_norm = up, β × 1.2 an epoch"),
        "up-eps": ("block-admm", {**DEEP_UP, "eps": 1e-30}, "z_norm = up, the Θ-Adam's ε = 1e-30"),
        "signal": ("block-admm", DEEP_SIGNAL, "block-admm, z_norm = signal: only block t+1's pull raised (U cancels)"),
        "up-newton-b10": (
            "block-admm",
            {**DEEP_UP, "z_step": "newton", "beta": [10.0 ** (t - _T10 + 1) for t in range(_T10)]},
            "z_norm = up, Newton Z-step with β_{t+1}/β_t = 10",
        ),
    },
}

STUDIES["paper20"] = {
    "args": ["--preset", "mnist-deep20", *PROXY10[2:]],
    "steps": True,
    "rows": {
        "adam": ("adam", {"lr": 1e-3, "fused": True}, "backprop, Adam η = 1e-3"),
        "adam-eps": ("adam", {"lr": 1e-3, "fused": True, "eps": 1e-30}, "backprop, Adam with ε = 1e-30"),
        "fwd": ("block-admm", DEEP, "block-admm, the deep20 recipe (Adam backprop block by block)"),
        "up": ("block-admm", DEEP_UP, "… with z_norm = up"),
        "online-up": (
            "online-admm",
            {"lr": 1e-3, "z_lr": 1.0, "z_step": "fixed", "theta_input": "start", "z_norm": "up", "fused": True},
            "online-admm, fixed ζ = 1, Θ at the start's inputs, z_norm = up",
        ),
        "gotmare-up": ("gotmare", DEEP_UP, "gotmare (U ≡ 0) with z_norm = up"),
        "signal": ("block-admm", DEEP_SIGNAL, "block-admm, z_norm = signal: only block t+1's pull raised (U cancels)"),
        "up-a0.01": ("block-admm", {**DEEP_UP, "dual_lr": 0.01}, "… z_norm = up, α = 0.01"),
    },
}

# The proxy's findings on all 60,000 images for 20 epochs (the -paper presets' length), σ = 0.01.
STUDIES["paper10-full"] = {
    "args": [*PROXY10[:4], "--epochs", "20", "--lr-schedule", "constant", "--batch-size", "64"],
    "steps": True,
    "rows": {
        "adam": ("adam", {"lr": 1e-3, "fused": True}, "backprop, Adam η = 1e-3"),
        "sgd": ("sgd", {"lr": 5e-3, "fused": True}, "backprop, SGD η = 5e-3"),
        "adam-eps": ("adam", {"lr": 1e-3, "fused": True, "eps": 1e-30}, "backprop, Adam with ε = 1e-30"),
        "fwd": ("block-admm", DEEP, "block-admm, the deep20 recipe (Adam backprop block by block)"),
        "up": ("block-admm", DEEP_UP, "… with z_norm = up"),
        "gotmare-up": ("gotmare", DEEP_UP, "gotmare (U ≡ 0) with z_norm = up"),
    },
}

# Defaults by measurement: per MLP preset, block-admm and online-admm as the preset had them (Alg. 1's
# sweep schedule; online with L_t every minibatch), the minibatch recipe of speed.md (mnist-final's mb-start,
# online-pe10-start), and the paper's Alg. 1 / Alg. 2 as printed (recipe = paper); Adam beside them.
MB_START = {**MNIST_MB, "lr": 2e-3, "theta_input": "start"}
ONLINE_START = {"power_every": 10, "dual_theta": "old", "theta_input": "start"}
# the presets' settings before the measured recipes, written out in full (a row stays the same run whatever the presets say)
_SWEEP_KEYS = {"z_schedule": "sweep", "z_start": "previous", "dual_theta": "new", "theta_input": "new"}
_ONLINE_KEYS = {"power_every": 1, "dual_theta": "new", "theta_input": "new"}
_OLD = {  # preset: (epochs, block-admm, online-admm)
    "digits-mlp": (30, {**MNIST_SWEEP, "iters_per_epoch": 3}, {"lr": 1e-3, "z_lr": 0.5}),
    "mnist5k-mlp": (30, {**MNIST_SWEEP, "iters_per_epoch": 3}, {"lr": 1e-3, "z_lr": 0.5}),
    "mnist-500-ce": (5, MNIST_SWEEP, {"lr": 1e-3, "z_lr": 1.0, "z_step": "scaled", "lr_decay": 0.93}),
    "fmnist-mlp-ce": (5, {**MNIST_SWEEP, "z_lr": 0.3}, {"lr": 1e-3, "z_lr": 0.3}),
    "mnist-deep10": (4, MNIST_SWEEP, {"lr": 1e-3, "z_lr": 0.1, "z_step": "scaled"}),
}
for _preset, (_epochs, _block, _online) in _OLD.items():
    STUDIES[f"defaults-{_preset}"] = {
        "args": ["--preset", _preset, "--epochs", str(_epochs)],
        "rows": {
            "adam": ("adam", {}, "backprop, Adam (the preset's η)"),
            "block-preset": (
                "block-admm",
                {**_block, **_SWEEP_KEYS},
                "block-admm as the preset had it (Alg. 1's sweep)",
            ),
            "block-mb-start": ("block-admm", MB_START, "block-admm, the minibatch recipe (speed.md's mb-start)"),
            "block-paper": ("block-admm", {"recipe": "paper"}, "block-admm, Alg. 1 as printed (recipe = paper)"),
            "online-preset": ("online-admm", {**_online, **_ONLINE_KEYS}, "online-admm as the preset had it"),
            "online-start": (
                "online-admm",
                {**_online, **ONLINE_START},
                "online-admm, L_t every 10 minibatches, Θ at the start's inputs",
            ),
            "online-paper": ("online-admm", {"recipe": "paper"}, "online-admm, Alg. 2 as printed (recipe = paper)"),
            # gotmare (U ≡ 0) takes block-admm's settings in every preset: both of its candidates are measured too
            "gotmare-preset": (
                "gotmare",
                {**_block, **_SWEEP_KEYS},
                "gotmare (U ≡ 0) as the preset had it (Alg. 1's sweep)",
            ),
            "gotmare-mb-start": ("gotmare", MB_START, "gotmare (U ≡ 0), the minibatch recipe"),
        },
    }
# … and the digits and mnist5k studies at two more seeds (seed 0 is its own row), before a default is switched or kept.
SEEDED_DEFAULTS = (
    "adam",
    "block-preset",
    "block-mb-start",
    "online-preset",
    "online-start",
    "gotmare-preset",
    "gotmare-mb-start",
)
for _preset in ("digits-mlp", "mnist5k-mlp"):  # mnist5k-mlp's the same way (2026-12-02)
    STUDIES[f"defaults-{_preset}-seeds"] = {
        "args": STUDIES[f"defaults-{_preset}"]["args"],
        "epochs": 30,
        "rows": {
            f"{k}-s{seed}": (*STUDIES[f"defaults-{_preset}"]["rows"][k][:3], ["--seed", str(seed)])
            for seed in (1, 2)
            for k in SEEDED_DEFAULTS
        },
        "groups": {
            STUDIES[f"defaults-{_preset}"]["rows"][k][2]: [(f"defaults-{_preset}", k), f"{k}-s1", f"{k}-s2"]
            for k in SEEDED_DEFAULTS
        },
    }
STUDIES["defaults-mnist-deep10"]["rows"]["block-deep"] = (
    "block-admm",
    DEEP,
    "block-admm, the deep20 recipe (batch 64)",
    ["--batch-size", "64"],
)


def row_config(study: str, name: str | tuple[str, str], out: Path) -> tuple[list[str], Path]:
    """A row's ``admm train`` arguments and run folder; ``name`` may be ``(other study, row)``: a row
    borrowed from another study (the same run, not trained twice)."""
    if isinstance(name, tuple):
        study, name = name
    method, settings, _, *extra = STUDIES[study]["rows"][name]
    args = [*STUDIES[study]["args"], *(extra[0] if extra else []), "--method", method]
    for k, v in settings.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args, out / f"{study}-{name}"


def wanted_config(args: list[str]) -> RunConfig:
    from admm_core.cli import make_parser
    from admm_core.cli.train import config_from_args

    return config_from_args(make_parser().parse_args(["train", *args]))


def same_run(have: RunConfig, want: RunConfig) -> bool:
    """The same training: data, model, train settings and the method's full settings (defaults filled
    in, so a setting written out equals the same value left to its default)."""
    parts = ("method", "data", "model", "train")
    if any(getattr(have, k) != getattr(want, k) for k in parts if k != "train"):
        return False
    return have.train == want.train and have.method_settings == want.method_settings


def run_row(args: list[str], run_dir: Path) -> str:
    """Train one row in its own process (one thread) unless a finished run of the same config is there."""
    want = wanted_config(args)
    have = read_json(run_dir / "config.json")
    status = read_json(run_dir / "status.json", {}) or {}
    if have is not None and same_run(RunConfig.from_dict(have), want) and status.get("state") == "finished":
        return "reused"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "admm_core", "train", *args, "--out", str(run_dir), "--quiet"]
    load = os.getloadavg()[0]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if run_dir.exists():  # the machine's 1-minute load average at the row's start and end, beside its seconds
        write_json(run_dir / LOAD_FILE, {"load": (load + os.getloadavg()[0]) / 2})
    return "trained" if r.returncode == 0 else f"failed: {r.stderr.strip().splitlines()[-1:]}"


def fmt(vals, digits=2) -> str:
    return " / ".join(f"{v:.{digits}g}" for v in vals) if vals else "—"


def table(study: str, names: list[str], out: Path) -> str:
    target = STUDIES[study].get("target")
    steps = STUDIES[study].get("steps", False)  # the per-block Z- and Θ-step sizes
    to = f" time to {100 * target:.0f}% (s) |" if target else ""
    to += " Z-step / ‖Z‖ per block | ‖ΔΘ‖/‖Θ‖ per epoch, per block |" if steps else ""
    extra = ("---|" if target else "") + ("---|---|" if steps else "")
    lines = [
        "| row | what it changes | test accuracy after each epoch (%) | final | RMS residual per block "
        f"| dual norm per block | cos to backprop per block | s/epoch |{to}",
        "|---|---|---|---|---|---|---|---|" + extra,
    ]
    for name in names:
        if isinstance(name, tuple):  # borrowed from another study
            what = f"{STUDIES[name[0]]['rows'][name[1]][2]} (the row of `ablation-{name[0]}`)"
            run_dir, name = row_config(study, name, out)[1], "/".join(name)
        else:
            what = STUDIES[study]["rows"][name][2]
            run_dir = row_config(study, name, out)[1]
        ms = read_metrics(run_dir) if run_dir.exists() else []
        if len(ms) < 2:
            lines.append(
                f"| {name} | {what} | not run | | | | | |" + (" |" if target else "") + (" | |" if steps else "")
            )
            continue
        last = ms[-1]
        state = (read_json(run_dir / "status.json", {}) or {}).get("state", "finished")
        ended = "" if state == "finished" else f" ({state})"
        shown = ms[1:] if len(ms) <= 11 else [m for m in ms[1:] if m["epoch"] <= 3 or m["epoch"] % 10 == 0 or m is last]
        accs = ", ".join(
            f"{100 * m['test_accuracy']:.1f}" if len(ms) <= 11 else f"{m['epoch']}: {100 * m['test_accuracy']:.1f}"
            for m in shown
        )
        per_epoch = last["wall_time_s"] / max(1, last["epoch"])
        load = (read_json(run_dir / LOAD_FILE, {}) or {}).get("load")
        at = "" if load is None else f" (load {load:.0f})"
        cell = ""
        if target:
            hit = next((m["wall_time_s"] for m in ms if m["test_accuracy"] >= target), None)
            cell = f" {'—' if hit is None else f'{hit:.1f}'} |"
        if steps:
            cell += f" {fmt(last.get('z_step_rel'))} | {fmt(last.get('theta_step_rel'))} |"
        lines.append(
            f"| {name} | {what} | {accs} | **{100 * last['test_accuracy']:.1f}**{ended} | {fmt(last.get('residuals'))} | "
            f"{fmt(last.get('dual_norms'))} | {fmt(last.get('backprop_cosine'))} | {per_epoch:.{1 if per_epoch < 10 else 0}f}{at} |{cell}"
        )
    return "\n".join(lines)


def seeds_table(study: str, out: Path) -> str:
    """Per configuration of ``STUDIES[study]['groups']`` ({label: [row names, one per seed]}; a name may be
    ``(other study, row)``, a row borrowed from another study): each seed's
    final test accuracy, their mean ± sample standard deviation and range, and the mean's difference from
    the first group's (the baseline)."""
    rows, base = [], None
    lines = [
        "| configuration | final test accuracy per seed (%) | mean ± std | range | Δ mean vs the first row |",
        "|---|---|---|---|---|",
    ]
    for label, names in STUDIES[study]["groups"].items():
        accs = []
        for name in names:
            ms = read_metrics(row_config(study, name, out)[1]) if row_config(study, name, out)[1].exists() else []
            done = ms and ms[-1]["epoch"] == STUDIES[study].get("epochs", ms[-1]["epoch"])
            accs.append(100 * ms[-1]["test_accuracy"] if done else None)
        got = [a for a in accs if a is not None]
        cells = ", ".join("—" if a is None else f"{a:.1f}" for a in accs)
        if len(got) < 2:
            lines.append(f"| {label} | {cells} | — | — | — |")
            continue
        mean = sum(got) / len(got)
        std = (sum((a - mean) ** 2 for a in got) / (len(got) - 1)) ** 0.5
        base = mean if base is None else base
        rows.append(mean)
        lines.append(
            f"| {label} | {cells} | **{mean:.2f} ± {std:.2f}** | {min(got):.1f}–{max(got):.1f} | {mean - base:+.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", choices=list(STUDIES))
    p.add_argument("--rows", help="comma-separated row names (default: all)")
    p.add_argument("--out", default="bench_out/ablation")
    p.add_argument("--jobs", type=int, default=2, help="rows trained at once, one thread each")
    p.add_argument("--markdown", help="write the table into this page (section ablation-<study>)")
    p.add_argument("--collect", action="store_true", help="only tabulate the runs already in --out")
    a = p.parse_args(argv)
    names = a.rows.split(",") if a.rows else list(STUDIES[a.study]["rows"])
    bad = [n for n in names if n not in STUDIES[a.study]["rows"]]
    if bad:
        p.error(f"--rows: unknown {bad}; choose from {list(STUDIES[a.study]['rows'])}")
    out = Path(a.out)
    version = code_version()
    if not a.collect:
        with ThreadPoolExecutor(a.jobs) as pool:
            for name, how in zip(names, pool.map(lambda n: run_row(*row_config(a.study, n, out)), names)):
                print(f"{name}: {how}", flush=True)
    groups = STUDIES[a.study].get("groups", {})
    borrowed = list(dict.fromkeys(n for ns in groups.values() for n in ns if isinstance(n, tuple)))
    text = table(a.study, [*borrowed, *names] if not a.rows else names, out)
    if STUDIES[a.study].get("groups"):
        text += "\n\nOver seeds:\n\n" + seeds_table(a.study, out)
    print(text)
    if a.markdown:
        cmd = command_line(argv, prog="python experiments/deep_ablation.py")
        write_section(a.markdown, f"ablation-{a.study}", text, cmd, version)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
