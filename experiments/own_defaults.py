"""Which settings should a network of one's own get when none are given? An ablation on a network
nobody tuned the workbench for: a LeNet-5 with BatchNorm and dropout on real MNIST, cut in four on
its traced graph, each method at its registry defaults and at the measured recipes of the presets.

    python experiments/own_defaults.py --markdown docs/deviations.md            # every row, seed 0
    python experiments/own_defaults.py --seeds 0 1 --rows block-mb,adam        # some rows, two seeds

Each (row, seed) writes bench_out/own_defaults/<row>-s<seed>.json when it finishes; a row whose
file exists is not run again, so the table fills over several sittings. The table (test accuracy
per epoch, final, seconds per epoch and × Adam's in the same sitting's machine) goes between the
``generated:own-defaults`` markers of the page.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from admm_core import own
from admm_core.docs import code_version, command_line, write_section
from admm_core.errors import ConfigError
from admm_core.rundir import read_metrics
from admm_core.spec.presets import _DEFAULTS_MEASURED_ON, _MB_RECIPE, _ONLINE_RECIPE, _RESNET_BLOCK

ROOT = Path(__file__).resolve().parent.parent


class LeNet5(nn.Module):
    """LeNet-5 as the common PyTorch tutorials write it, with BatchNorm after each convolution and
    dropout before the classifier: conv-BN-ReLU-pool twice, then
    Linear-ReLU-Dropout(0.1), Linear."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6)
        self.conv2, self.bn2 = nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = torch.flatten(x, 1)
        x = self.dropout(F.relu(self.fc2(F.relu(self.fc1(x)))))
        return self.fc3(x)


CUTS = ["bn1", "bn2", "fc2"]  # four blocks: conv1+bn1 | relu, pool, conv2+bn2 | …fc1, fc2 | dropout, fc3

# row -> (method, settings, what it is)
ROWS = {
    "adam": ("adam", {}, "backprop, Adam at its registry default η"),
    "block-registry": ("block-admm", {}, "block-admm, the registry's defaults (Alg. 1's sweep schedule)"),
    "block-mb": ("block-admm", dict(_MB_RECIPE), "block-admm, the MLP presets' minibatch recipe"),
    "block-mb-bn": (
        "block-admm",
        {**_MB_RECIPE, "bn_mode": "train"},
        "the minibatch recipe, BatchNorm on the minibatch",
    ),
    "block-mb-bn-a01": (
        "block-admm",
        {**_MB_RECIPE, "bn_mode": "train", "dual_lr": 0.01},
        "the same, dual step α = 0.01 (the ResNet recipe's; own.train's default)",
    ),
    "block-resnet": ("block-admm", dict(_RESNET_BLOCK), "block-admm, the ResNet-18 presets' recipe"),
    "gotmare-registry": ("gotmare", {}, "gotmare, the registry's defaults"),
    "gotmare-mb": ("gotmare", dict(_MB_RECIPE), "gotmare, the minibatch recipe"),
    "online-registry": ("online-admm", {}, "online-admm, the registry's defaults"),
    "online-recipe": (
        "online-admm",
        dict(_ONLINE_RECIPE),
        "online-admm, L_t every 10 minibatches, Θ at the start's inputs",
    ),
}


def run_row(row: str, seed: int, out: Path, epochs: int, n_train: int, n_test: int) -> dict:
    method, settings, _ = ROWS[row]
    torch.manual_seed(seed)
    net = LeNet5()
    # the row's settings over the registry's defaults of the time these rows were measured (Alg. 1's and Alg. 2's
    # schedules; the methods' defaults are this study's winners since), so every row means what its name says
    kw = {"settings": {**_DEFAULTS_MEASURED_ON.get(method, {}), **settings}}
    t = time.perf_counter()
    run = own.train(
        net, CUTS, "mnist", method, train_limit=n_train, test_limit=n_test, epochs=epochs, batch_size=64,
        loss="ce", seed=seed, out=out / "runs" / f"{row}-s{seed}", tensorboard=False, **kw,
    )  # fmt: skip
    lines = read_metrics(run.dir)
    return {
        "row": row,
        "seed": seed,
        "status": run.summary["status"],
        "acc": [m["test_accuracy"] for m in lines],
        "s_per_epoch": run.summary.get("seconds_per_epoch"),
        "wall_s": time.perf_counter() - t,
        "load": os.getloadavg()[0],
        "residuals": lines[-1].get("residuals", []),
    }


def table(results: list[dict]) -> str:
    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["row"], []).append(r)
    adam = [r["s_per_epoch"] for r in by.get("adam", []) if r["s_per_epoch"]]
    adam_s = statistics.mean(adam) if adam else None
    lines = [
        "| row | what it is | test accuracy after each epoch (%, seed 0) | final (mean over seeds) | seeds | s/epoch | × Adam |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, (_, _, what) in ROWS.items():
        rs = sorted(by.get(row, []), key=lambda r: r["seed"])
        if not rs:
            lines.append(f"| {row} | {what} | not run yet | | | | |")
            continue
        if not rs[0]["acc"]:
            lines.append(f"| {row} | {what} | {rs[0]['status']} | | | | |")
            continue
        first = ", ".join(f"{100 * a:.1f}" for a in rs[0]["acc"][1:])
        if rs[0]["status"] != "finished":
            first += f" ({rs[0]['status']})"
        finals = [100 * r["acc"][-1] for r in rs]
        spread = f" ± {statistics.pstdev(finals):.1f}" if len(finals) > 1 else ""
        s = statistics.mean(r["s_per_epoch"] or 0.0 for r in rs)
        x = f"{s / adam_s:.1f}" if adam_s else "—"
        load = statistics.mean(r["load"] for r in rs)
        lines.append(
            f"| {row} | {what} | {first} | **{statistics.mean(finals):.1f}**{spread} | {len(rs)} | {s:.1f} (load {load:.0f}) | {x} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-limit", type=int, default=10_000)
    p.add_argument("--test-limit", type=int, default=2_000)
    p.add_argument("--out", default=str(ROOT / "bench_out" / "own_defaults"))
    p.add_argument("--markdown", help="write the table into this page (section own-defaults)")
    a = p.parse_args(argv)
    rows = [r.strip() for r in a.rows.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        p.error(f"--rows: unknown {bad}; choose from {list(ROWS)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    version, command = code_version(), command_line(argv, prog="python experiments/own_defaults.py")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    for seed in a.seeds:
        for row in rows:
            f = out / f"{row}-s{seed}.json"
            if f.exists():
                print(f"[own-defaults] {row} seed {seed}: done before", file=sys.stderr)
                continue
            print(f"[own-defaults] {row} seed {seed} …", file=sys.stderr, flush=True)
            try:
                r = run_row(row, seed, out, a.epochs, a.train_limit, a.test_limit)
            except ConfigError as e:  # a recipe that cannot run on this network is a row too
                r = {
                    "row": row,
                    "seed": seed,
                    "status": f"refused: {e}",
                    "acc": [],
                    "s_per_epoch": None,
                    "load": os.getloadavg()[0],
                }
            f.write_text(json.dumps(r))
            print(
                f"[own-defaults] {row} seed {seed}: {r['status']}, accuracy {r['acc'][-1:]}, {r['s_per_epoch']} s/epoch",
                file=sys.stderr,
                flush=True,
            )
            if a.markdown:  # after every row: a sitting cut short still leaves its rows in the docs
                results = [json.loads(x.read_text()) for x in sorted(out.glob("*.json"))]
                body = (
                    f"MNIST {a.train_limit} / {a.test_limit} images, {a.epochs} epochs, batch 64, cross-entropy, "
                    f"LeNet-5 with BatchNorm and Dropout(0.1) cut after {', '.join(CUTS)} (four blocks); "
                    f"machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, beside other jobs (the load "
                    "average is shown).\n\n" + table(results)
                )
                write_section(a.markdown, "own-defaults", body, command=command, version=version)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
