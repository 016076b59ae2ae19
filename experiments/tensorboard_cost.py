"""Answers: what do the TensorBoard event files cost a run (``train.tensorboard``, on by default)?

Trains the same small run twice, the option on and off (on first, so the writer's one-time import
is charged to it), profiled (:mod:`admm_core.profile`): the seconds spent in the ``tensorboard``
phase (opening the writer, importing it, and writing + flushing each metrics line), each run's
wall time, and the event files' size beside metrics.jsonl's. Writes the table into
docs/results/tensorboard.md.

    python experiments/tensorboard_cost.py                       # digits-mlp, block-admm, 20 epochs
    python experiments/tensorboard_cost.py --preset mnist-mlp-mse --epochs 3 --train-limit 10000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from admm_core import network
from admm_core.device import machine, resolve_device
from admm_core.profile import profiling
from admm_core.rundir import read_metrics
from admm_core.spec.presets import preset_config
from admm_core.tboard import event_files, scalars

ROOT = Path(__file__).resolve().parent.parent


def one(cfg, run_dir: Path) -> dict:
    with profiling() as times:
        t0 = time.perf_counter()
        network.train(cfg, run_dir)
        wall = time.perf_counter() - t0
    lines = read_metrics(run_dir)
    return {
        "wall": wall,
        "tb": times.inclusive.get("tensorboard", 0.0),
        "lines": len(lines),
        "values": sum(len(scalars(m)) for m in lines),
        "jsonl": (run_dir / "metrics.jsonl").stat().st_size,
        "events": sum(p.stat().st_size for p in event_files(run_dir)),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="digits-mlp")
    p.add_argument("--method", default="block-admm")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--train-limit", type=int)
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "tensorboard.md"))
    a = p.parse_args(argv)
    cfg = preset_config(a.preset, a.method).shortened(epochs=a.epochs, train_limit=a.train_limit)
    with tempfile.TemporaryDirectory() as tmp:
        on = one(cfg, Path(tmp) / "on")
        off = one(cfg.replace(train__tensorboard=False), Path(tmp) / "off")
    where = machine(resolve_device(cfg.train.device))
    rows = [
        "| train.tensorboard | run wall time (s) | in the writer (s) | share of the run | metrics lines | values | metrics.jsonl | event files |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in (("on", on), ("off", off)):
        share = f"{100 * r['tb'] / r['wall']:.2f} %" if r["tb"] else "-"
        events = f"{r['events'] / 1024:.1f} KiB" if r["events"] else "-"
        tb = f"{r['tb']:.3f}" if r["tb"] else "-"
        rows.append(
            f"| {name} | {r['wall']:.2f} | {tb} | {share} | {r['lines']} | {r['values']} "
            f"| {r['jsonl'] / 1024:.1f} KiB | {events} |"
        )
    cmd = f"python experiments/tensorboard_cost.py --preset {a.preset} --method {a.method} --epochs {a.epochs}"
    if a.train_limit:
        cmd += f" --train-limit {a.train_limit}"
    text = "\n".join(
        [
            "# What TensorBoard's event files cost a run",
            "",
            f"Written by `{cmd}`; machine: {where}.",
            "",
            f"Preset `{a.preset}`, method `{a.method}`, {a.epochs} epochs, the same run with the option on and off "
            "(on first: the writer's one-time import is in its column). *In the writer*: the profiled "
            "`tensorboard` phase (opening the writer, writing and flushing every metrics line). The two wall "
            "times differ by the machine's noise as much as by the writer; the writer's own seconds are the "
            "measurement.",
            "",
            *rows,
            "",
        ]
    )
    Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
