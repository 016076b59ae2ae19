"""``python -m admm_core.distributed {memory-table,bench}``: the tables of docs/results/distributed.md.

memory-table   Z/U bytes per rank of sample-sharded Block-ADMM for MNIST MLP, CIFAR-10
               ResNet-18 (split after conv3_x) and an ImageNet-sized ResNet-18, at 1, 8, 64 ranks
bench          real MNIST (mnist-mlp-mse): 1 vs 2 processes (sample-sharded, Gauss–Seidel) and
               serial Gauss–Seidel vs serial Jacobi vs 3 processes block-parallel (Jacobi),
               one thread per process; --report-only rebuilds the tables from the run folders

Each writes its section of the markdown file between ``<!-- NAME -->`` and ``<!-- /NAME -->``
(the rest of the file is kept), or prints it without --markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
import torchvision
from torch import nn

from ..blocks import build_blocknet
from ..docs import code_version, command_line, write_section
from ..rundir import PROJECT_ROOT, read_metrics
from ..spec.config import ModelConfig
from ..spec.resources import human
from . import shard_range

RANKS = (1, 8, 64)


def _z_floats_per_sample(blocks, in_shape) -> list[int]:
    """Floats per sample of each Z_t, from one forward pass of a single sample."""
    with torch.no_grad():
        x, out = torch.zeros(1, *in_shape), []
        for b in blocks:
            b.eval()
            x = b(x)
            out.append(x[0].numel())
    return out


def memory_rows() -> list[dict]:
    mnist = build_blocknet(ModelConfig("mlp", (128, 128)), (1, 28, 28), 10)
    cifar = build_blocknet(ModelConfig("resnet18", split=("conv3_x",)), (3, 32, 32), 10)
    # ImageNet-sized: torchvision's ResNet-18 as it is (7×7 stride-2 stem, max-pool, 224×224), cut after layer2 (conv3_x)
    r = torchvision.models.resnet18(num_classes=1000)
    imnet = [
        nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2),
        nn.Sequential(r.layer3, r.layer4, r.avgpool, nn.Flatten(), r.fc),
    ]
    cases = [
        ("MNIST MLP 784-128-128-10, T = 3", 60_000, _z_floats_per_sample(mnist.blocks, (1, 28, 28))),
        ("CIFAR-10 ResNet-18, split after conv3_x", 50_000, _z_floats_per_sample(cifar.blocks, (3, 32, 32))),
        ("ImageNet ResNet-18 (224²), split after conv3_x", 1_281_167, _z_floats_per_sample(imnet, (3, 224, 224))),
    ]
    rows = []
    for name, n, dims in cases:
        per_sample = 2 * 4 * sum(dims)  # Z and U, float32
        rows.append(
            {
                "model": name,
                "samples": n,
                "z_dims": dims,
                "bytes_per_sample": per_sample,
                # the largest shard (sizes differ by at most one row)
                "per_rank": {w: per_sample * (shard_range(n, 0, w)[1] - shard_range(n, 0, w)[0]) for w in RANKS},
            }
        )
    return rows


def memory_markdown() -> str:
    rows = memory_rows()
    out = [
        "| network | training samples N | floats per sample in Z_1…Z_T | Z + U per sample | "
        + " | ".join(f"per rank, {w} rank{'s' if w > 1 else ''}" for w in RANKS)
        + " |",
        "|---|---:|---|---:|" + "---:|" * len(RANKS),
    ]
    for r in rows:
        out.append(
            f"| {r['model']} | {r['samples']:,} | {' + '.join(f'{d:,}' for d in r['z_dims'])} | "
            f"{human(r['bytes_per_sample'])} | " + " | ".join(human(r["per_rank"][w]) for w in RANKS) + " |"
        )
    out.append("")
    out.append(
        "Z and U in float32, `z_optimizer=sgd` (Adam on Z adds two more arrays of the same size; `gotmare` has no U, "
        "half of this). Per rank = the largest shard, ⌈N/W⌉ rows. Shapes come from one forward pass of each network "
        "(`python -m admm_core.distributed memory-table`)."
    )
    return "\n".join(out)


# --- the MNIST measurements -------------------------------------------------------------
# Alg. 1's sweep schedule with the settings mnist-mlp-mse had before the measured recipes (its default is now the
# minibatch recipe, which block-parallel training does not run): the measurement stays the same
SWEEP = [
    f"--set={k}={v}"
    for k, v in (("z_schedule", "sweep"), ("z_start", "previous"), ("dual_theta", "new"), ("theta_input", "new"))
] + ["--set=lr=0.0005", "--set=primal_steps=3", "--set=iters_per_epoch=7", "--set=z_lr=0.5"]
RUNS = {
    # key: (label, processes, extra CLI flags)
    "gs1": ("1 process, Gauss–Seidel (serial, Alg. 1)", 1, SWEEP),
    "gs2": ("2 processes, sample-sharded, Gauss–Seidel", 2, SWEEP),
    "jac1": ("1 process, Jacobi (serial)", 1, [*SWEEP, "--set", "z_sweep=jacobi"]),
    "jac3": ("3 processes, block-parallel, Jacobi", 3, [*SWEEP, "--set", "z_sweep=jacobi", "--set", "parallel=blocks"]),
}


def launch(key: str, out: Path, epochs: int, extend: bool = False) -> subprocess.Popen:
    _, procs, extra = RUNS[key]
    if extend:  # continue the run from its last checkpoint up to ``epochs``
        train = ["-m", "admm_core", "train", "--resume", str(out / key), "--epochs", str(epochs), "--quiet"]
    else:
        train = ["-m", "admm_core", "train", "--preset", "mnist-mlp-mse", "--epochs", str(epochs), "--device", "cpu"]
        train += [*extra, "--out", str(out / key), "--quiet"]
    if procs == 1:
        cmd = [sys.executable, *train]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}", *train]
    if shutil.which("nice"):
        cmd = ["nice", "-n", "10", *cmd]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if not extend:
        shutil.rmtree(out / key, ignore_errors=True)
    print(f"[{key}] {' '.join(cmd)}", flush=True)
    return subprocess.Popen(cmd, env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL)


def run_group(keys: list[str], out: Path, epochs: int, extend: bool = False) -> None:
    """Start the runs side by side (they then share the machine's load alike) and wait for all.

    Each run's CPU seconds (its processes and, through torchrun, the workers) go to
    ``<run>/cpu.json`` from wait4's resource usage.
    """
    t0 = time.time()
    procs = {launch(k, out, epochs, extend).pid: k for k in keys}
    while procs:
        pid, status, ru = os.wait4(-1, 0)
        key = procs.pop(pid, None)
        if key is None:
            continue
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"[{key}] failed (exit {os.waitstatus_to_exitcode(status)}); see {out / key}")
        cpu, wall = ru.ru_utime + ru.ru_stime, time.time() - t0
        prev = json.loads((out / key / "cpu.json").read_text()) if extend and (out / key / "cpu.json").exists() else {}
        record = {
            "cpu_s": prev.get("cpu_s", 0.0) + cpu,
            "wall_s": prev.get("wall_s", 0.0) + wall,
            "load_avg_15min": [*prev.get("load_avg_15min", []), os.getloadavg()[2]],
        }
        (out / key / "cpu.json").write_text(json.dumps(record))
        print(f"[{key}] done: {time.time() - t0:.0f} s wall, {cpu:.0f} CPU s", flush=True)


def _per_epoch(ms: list[dict]) -> list[float]:
    return [b["wall_time_s"] - a["wall_time_s"] for a, b in zip(ms, ms[1:])]


def _load(out: Path, keys) -> str:
    vals = []
    for k in keys:
        try:
            vals += json.loads((out / k / "cpu.json").read_text()).get("load_avg_15min", [])
        except (OSError, ValueError):
            pass
    return f"{min(vals):.0f}–{max(vals):.0f}" if vals else "not recorded"


def _cpu(out: Path, key: str, epochs: int) -> str:
    try:
        return f"{json.loads((out / key / 'cpu.json').read_text())['cpu_s'] / epochs:.1f}"
    except (OSError, ValueError, KeyError):
        return "—"


def bench_markdown(out: Path) -> str:
    ms = {k: read_metrics(out / k) for k in RUNS}
    missing = [k for k, m in ms.items() if len(m) < 2]
    if missing:
        raise SystemExit(f"bench: no finished epochs in {', '.join(str(out / k) for k in missing)}")
    epochs = min(len(m) for m in ms.values()) - 1
    lines = [
        f"Real MNIST, preset `mnist-mlp-mse` (block-admm: Θ batch 256, 7 dual steps × 3 primal steps per epoch), "
        f"{epochs} epochs, seed 0, every process with one thread (`OMP_NUM_THREADS=1`, `nice -n 10`), "
        f"gloo on {platform.machine()} CPU: a 2-core machine shared with other jobs. Time per epoch is the training "
        "time the run loop measures (evaluation excluded), from `metrics.jsonl`; CPU s/epoch is the CPU time of "
        "all the run's processes (start-up and evaluation included, from wait4) over the epochs. Runs started "
        f"together ran side by side and met the same load (15-minute load average of the 2 cores when runs ended: "
        f"{_load(out, RUNS)}).",
        "",
        "**Sample-sharded, 2 processes vs 1 process (Gauss–Seidel sweep)**",
        "",
        "| epoch | test acc., 1 process | test acc., 2 processes | difference (points) | s/epoch, 1 process | s/epoch, 2 processes |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    a, b = ms["gs1"], ms["gs2"]
    ta, tb = _per_epoch(a), _per_epoch(b)
    worst = 0.0
    for e in range(1, epochs + 1):
        d = 100 * (b[e]["test_accuracy"] - a[e]["test_accuracy"])
        worst = max(worst, abs(d))
        lines.append(
            f"| {e} | {100 * a[e]['test_accuracy']:.2f} % | {100 * b[e]['test_accuracy']:.2f} % | {d:+.2f} | "
            f"{ta[e - 1]:.1f} | {tb[e - 1]:.1f} |"
        )
    per_rank = b[-1].get("state_bytes_per_rank", [])
    lines += [
        "",
        f"Largest accuracy difference over the {epochs} epochs: {worst:.2f} points. "
        f"Z/U bytes per process: {a[-1]['state_bytes']:,} with 1 process, "
        f"{' and '.join(f'{v:,}' for v in per_rank)} with 2 (ratio {max(per_rank) / a[-1]['state_bytes']:.3f}). "
        f"Mean time per epoch: {sum(ta[:epochs]) / epochs:.1f} s (1 process), {sum(tb[:epochs]) / epochs:.1f} s (2 processes); "
        f"CPU s per epoch: {_cpu(out, 'gs1', epochs)} (1 process), {_cpu(out, 'gs2', epochs)} (2 processes together).",
        "",
        "**Blocks in parallel (3 processes, one block each, Jacobi) vs the serial sweeps**",
        "",
        "| run | test acc. after epoch " + str(epochs) + " | s/epoch (mean) | CPU s/epoch | Z/U bytes per process |",
        "|---|---:|---:|---:|---:|",
    ]
    for k in ("gs1", "jac1", "jac3"):
        m = ms[k]
        t = _per_epoch(m)[:epochs]
        mem = m[-1].get("state_bytes_per_rank") or [m[-1]["state_bytes"]]
        lines.append(
            f"| {RUNS[k][0]} | {100 * m[epochs]['test_accuracy']:.2f} % | {sum(t) / len(t):.1f} | {_cpu(out, k, epochs)} | "
            f"{', '.join(f'{v:,}' for v in mem)} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m admm_core.distributed", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("memory-table", help="Z/U memory per rank at 1, 8, 64 ranks")
    m.add_argument("--markdown", metavar="FILE")
    b = sub.add_parser("bench", help="MNIST: 1 vs 2 processes; block-parallel vs serial sweeps")
    b.add_argument("--epochs", type=int, default=20)
    b.add_argument("--out", default=str(PROJECT_ROOT / "bench_out" / "distributed"), metavar="DIR")
    b.add_argument(
        "--runs",
        default="gs1,gs2;jac1,jac3",
        help=f"runs from {','.join(RUNS)}; ',' side by side, ';' one group after the other",
    )
    b.add_argument("--report-only", action="store_true", help="only rebuild the tables from the run folders")
    b.add_argument("--extend", action="store_true", help="resume the runs from their checkpoints up to --epochs")
    b.add_argument("--markdown", metavar="FILE")
    a = p.parse_args(argv)
    version = code_version()  # the code the numbers come from (the tree may change during a bench)
    if a.cmd == "memory-table":
        text = memory_markdown()
        name = "memory-table"
    else:
        out = Path(a.out)
        if not a.report_only:
            for group in [g for g in a.runs.split(";") if g]:  # groups run one after another
                keys = [k for k in group.split(",") if k]
                for key in keys:
                    if key not in RUNS:
                        raise SystemExit(f"--runs: {key!r} is not one of {','.join(RUNS)}")
                run_group(keys, out, a.epochs, a.extend)
        text = bench_markdown(out)
        name = "bench"
    if a.markdown:
        cmd = command_line(sys.argv[1:] if argv is None else argv, prog="python -m admm_core.distributed")
        print(f"wrote section {name!r} of {write_section(a.markdown, name, text, command=cmd, version=version)}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
