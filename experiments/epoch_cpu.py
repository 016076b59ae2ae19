"""CPU seconds of one training epoch per method on the zoo's MNIST-sized rows, one torch thread.

    ADMM_DATA=/work/shared/data python experiments/epoch_cpu.py --rows lenet5-bn mnist-net \
        --methods adam block-admm online-admm --repeats 3 --out bench_out/epoch-cpu.json

On a shared machine the wall clock measures the neighbours as much as the run, so this reads the
process's CPU time (``time.process_time``: every thread of the process, and with one torch
thread that is the epoch's own work) around each call of the run loop's epoch (evaluation,
metrics and checkpoints excluded). Each repeat trains every (row, method) in turn, so the methods'
runs interleave and a slow window of the machine falls on all of them alike. Prints one line per
run and the median per (row, method) with its ratio to Adam's; ``--out`` keeps every reading.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from zoo_models import BY_NAME, train_own  # beside this script (its folder is on the path)

from admm_core.network import NetworkTask


def epoch_seconds(row, method: str, seed: int, epochs: int, settings: dict | None = None) -> dict:
    """Train ``row`` by ``method`` for ``epochs`` epochs; the CPU and wall seconds of each epoch
    and the final metrics line (for a before/after check of the numbers)."""
    cpu, wall = [], []
    plain = NetworkTask.run_epoch

    def timed(self, epoch, progress):
        c0, w0 = time.process_time(), time.perf_counter()
        plain(self, epoch, progress)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)

    NetworkTask.run_epoch = timed
    try:
        torch.manual_seed(seed)
        with tempfile.TemporaryDirectory() as d:
            run = train_own(row, row.factory(), method, seed, settings, Path(d) / "run", epochs)
            from admm_core.rundir import read_metrics

            last = read_metrics(run.dir)[-1]
    finally:
        NetworkTask.run_epoch = plain
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "test_accuracy": last.get("test_accuracy"),
        "train_loss": last.get("train_loss"),
    }


def medians(runs: list[dict]) -> dict[tuple[str, str], float]:
    """(row, method) -> the median of every epoch's CPU seconds of its runs."""
    cells: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        cells.setdefault((r["row"], r["method"]), []).extend(r["cpu_s"])
    return {k: statistics.median(v) for k, v in cells.items()}


def compare_table(before: list[dict], after: list[dict]) -> str:
    """Markdown: per (row, method), the median CPU s/epoch of two reading files (``--out`` of a run of
    the code before a change and of the code after it, run side by side), each × its own Adam, the
    readings, and the final test accuracy and train loss before → after (a speed change keeps them)."""

    def cells(runs):
        out = {}
        for r in runs:
            out.setdefault((r["row"], r["method"]), []).append(r)
        return out

    b, a = cells(before), cells(after)
    med_b, med_a = medians(before), medians(after)
    lines = [
        "| network | method | before: CPU s/epoch | × Adam | after: CPU s/epoch | × Adam | readings (before/after) "
        "| final test acc. before → after | final train loss before → after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key in [k for k in b if k in a]:
        row, method = key
        ratio = []
        for m in (med_b, med_a):
            base = m.get((row, "adam"))
            ratio.append(f"{m[key] / base:.2f}×" if base else "—")
        n_b = sum(len(r["cpu_s"]) for r in b[key])
        n_a = sum(len(r["cpu_s"]) for r in a[key])
        acc = f"{b[key][-1]['test_accuracy']} → {a[key][-1]['test_accuracy']}"
        loss = f"{b[key][-1]['train_loss']:.4f} → {a[key][-1]['train_loss']:.4f}"
        lines.append(
            f"| {row} | {method} | {med_b[key]:.2f} | {ratio[0]} | {med_a[key]:.2f} | {ratio[1]} | {n_b}/{n_a} "
            f"| {acc} | {loss} |"
        )
    return "\n".join(lines) + "\n\nCPU seconds per epoch, one torch thread, median of all readings of a cell.\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", nargs="+", default=["quickstart-mlp", "lenet5-bn", "mnist-net"], choices=list(BY_NAME))
    p.add_argument("--methods", nargs="+", default=["adam", "block-admm", "online-admm"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2, help="epochs per run (every epoch is one reading)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write every reading here (JSON)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="a setting given to every method over its defaults (repeatable; a JSON value, else a string)",
    )
    p.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("BEFORE", "AFTER"),
        help="no training: the before/after table of two --out files (into --markdown's --section)",
    )
    p.add_argument("--markdown", type=Path, help="with --compare: the docs page to write the table into")
    p.add_argument("--section", default="epoch-cpu", help="with --compare: the page's generated section")
    a = p.parse_args(argv)
    if a.compare:
        before, after = (json.loads(f.read_text()) for f in a.compare)
        text = compare_table(before, after)
        if a.markdown:
            from admm_core.docs import command_line, write_section

            write_section(
                a.markdown, a.section, text, command=command_line(argv, prog="python experiments/epoch_cpu.py")
            )
        print(text)
        return 0
    torch.set_num_threads(1)
    settings = {}
    for item in a.set:
        key, _, value = item.partition("=")
        try:
            settings[key] = json.loads(value)
        except ValueError:
            settings[key] = value
    runs = []
    for rep in range(a.repeats):
        for name in a.rows:
            for method in a.methods:
                r = epoch_seconds(BY_NAME[name], method, a.seed, a.epochs, settings or None)
                r.update(row=name, method=method, repeat=rep, settings=settings)
                runs.append(r)
                cpu = " ".join(f"{c:.2f}" for c in r["cpu_s"])
                print(
                    f"{rep} {name:15s} {method:12s} cpu/epoch {cpu}  test {r['test_accuracy']}  loss {r['train_loss']}",
                    flush=True,
                )
    print("\nmedian CPU s per epoch (all epochs of all repeats), × adam")
    med = medians(runs)
    for name in a.rows:
        per = {m: med[(name, m)] for m in a.methods}
        base = per.get("adam")
        for m, v in per.items():
            ratio = f"{v / base:.2f}×" if base else "—"
            print(f"{name:15s} {m:12s} {v:.3f} s  {ratio}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
