"""Benchmarks: run methods on a preset and print a markdown table beside the paper's numbers.

    python -m admm_core bench --preset mnist-mlp-mse --methods block-admm,online-admm,adam,sgd --epochs 50
    python -m admm_core bench --preset mnist-deep10 --methods block-admm,sgd,adam --epochs 20
    python -m admm_core bench --methods block-admm,online-admm,admm-closed,taylor,dladmm,bcd,sgd,adam,gotmare \
        --epochs 20 --epochs-for online-admm=12,taylor=60,dladmm=60  # the paper's MNIST comparison

Runs go one after another (never in parallel, so timings are not disturbed) into
``--out`` (default bench_out/), and the table is also written to ``<out>/<preset>.md``.
``--markdown docs/results/mnist.md`` puts it into a docs page as a generated section
(:mod:`admm_core.docs`); ``--reuse`` rebuilds the table from finished runs without training.

Time to accuracy is only comparable on an equally loaded machine: every trained row records the
machine's mean 1-minute load average during its run (``load``; the run itself counts about one per
thread), beside its time to 95% as a multiple of Adam's in the same table (``× adam to 95%``).

Seeds and setting sweeps make rows too; ``--markdown FILE`` writes the table into FILE
between ``<!-- bench:SECTION -->`` markers (replacing that section only), and ``--collect``
tabulates the runs already in ``--out`` (finished, stopped, diverged or still running) without
training, so several benches started side by side can be written up by one command::

    python -m admm_core bench --preset mnist-mlp-mse --methods online-admm --seeds 0,1,2 --epochs 50
    python -m admm_core bench --preset mnist-mlp-mse --methods online-admm \
        --vary online-admm:dual=additive,feature,literal,damped --epochs 50 \
        --markdown docs/results/online.md --section duals
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import torch

from .device import machine
from .docs import code_version, command_line, write_section
from .network import summarize, train
from .rundir import read_json, read_metrics, write_json
from .spec.presets import PAPER, preset_config
from .spec.resources import human
from .spec.settings import parse_sets
from .status import install_stop_handlers, run_status

# a trained run's mean 1-minute load average (sampled at its start and after each epoch; this run counts 1)
LOAD_FILE = "bench_load.json"

# Said beside every table of these presets (the data here differ from the paper's).
NOTES = {
    "cifar10": "CIFAR-10 here is a JPEG copy (quality ≈ 75, lossy; ../shared/data/cifar10-jpeg/README): "
    "its accuracies are not directly comparable with published numbers on the original images.",
}


def machines_line(rows: list[dict]) -> str:
    """Where the rows' runs were measured, as each run recorded it (``--collect`` may read runs
    made elsewhere); runs from before that record get this process's machine, said so."""
    seen = list(dict.fromkeys(r["machine"] for r in rows if r.get("machine")))
    if not seen:
        here = machine("cuda" if torch.cuda.is_available() else "cpu")
        return f"machine (not recorded by the runs; this process): {here}"
    missing = sum(1 for r in rows if not r.get("machine"))
    line = ("machine: " if len(seen) == 1 else "machines: ") + " | ".join(seen)
    return line + (f" ({missing} of the {len(rows)} runs did not record theirs)" if missing else "")


def fmt_pct(v):
    return "—" if v is None else f"{100 * v:.2f}"


def fmt_s(v):
    return "—" if v is None else f"{v:.1f}"


def curve_stats(metrics: list[dict], after: int = 3) -> dict:
    """Lowest test accuracy after epoch ``after`` and the last logged backprop cosine per block."""
    late = [m["test_accuracy"] for m in metrics if m.get("epoch", 0) > after]
    cos = next((m["backprop_cosine"] for m in reversed(metrics) if m.get("backprop_cosine")), None)
    return {"lowest_after": min(late) if late else None, "backprop_cosine": cos}


def table(preset: str, rows: list[dict]) -> str:
    adam = next((r for r in rows if r["method"] == "adam"), None)
    paper = PAPER.get(preset, {})
    out = [
        "| method | epochs | final test % | best test % | lowest after epoch 3 % | paper % | wall s | s/epoch | × adam s/epoch "
        "| time to 90% (s) | time to 95% (s) | × adam to 95% | load | Z/U state | cos to backprop (per block) | state |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = (r["seconds_per_epoch"] / adam["seconds_per_epoch"]) if adam and adam.get("seconds_per_epoch") else None
        t95, adam95 = r.get("time_to_95_s"), (adam or {}).get("time_to_95_s")
        to95 = "—" if t95 is None or not adam95 else f"{t95 / adam95:.2f}"
        load = "—" if r.get("load") is None else f"{r['load']:.1f}"
        cos = r.get("backprop_cosine")
        cos = "—" if not cos else " / ".join(f"{c:.3f}" for c in cos)
        out.append(
            f"| {r.get('label', r['method'])} | {r['epochs']} | {fmt_pct(r['test_accuracy'])} | {fmt_pct(r['best_test_accuracy'])} | "
            f"{fmt_pct(r.get('lowest_after'))} | {paper.get(r['method'], '—')} | {fmt_s(r['wall_time_s'])} | {fmt_s(r['seconds_per_epoch'])} | "
            f"{'—' if ratio is None else f'{ratio:.2f}'} | {fmt_s(r.get('time_to_90_s'))} | {fmt_s(r.get('time_to_95_s'))} | "
            f"{to95} | {load} | "
            f"{human(r['state_bytes'])} | {cos} | {r.get('status', '—')} |"
        )
    return "\n".join(out)


def run_jobs(a, jobs, out: Path, per_method: dict, vary_name, should_stop) -> list[dict]:
    """Train (or, with --collect, read) each (method, seed, value) job; one table row each."""
    rows = []
    for method, seed, value in jobs:
        cfg = preset_config(a.preset, method).replace(train__device=a.device, train__seed=seed)
        cfg = cfg.shortened(per_method.get(method) or a.epochs, a.train_limit, a.test_limit)
        if a.data_root:
            cfg = cfg.replace(data__root=a.data_root)
        aug = a.augment_pad is not None or a.no_flip
        cfg = cfg.augmented(pad=a.augment_pad, flip=False if a.no_flip else None)
        extra = parse_sets(s.split(":", 1)[1] for s in a.set if s.split(":", 1)[0] == method)
        label = method
        if value is not None:
            extra[vary_name] = value
            label = f"{method} {vary_name}={value}"
        if a.seeds:
            label += f" seed {seed}"
        if extra:
            cfg = cfg.replace(method_params={**cfg.method_params, **extra})
        name = f"{a.preset}-{method}" + (f"-{vary_name}={value}" if value is not None else "")
        if aug:
            suffix = f"shift{cfg.data.augment_pad}" + ("-flip" if cfg.data.augment_flip else "")
            name, label = f"{name}-{suffix}", f"{label}, {suffix}"
        run_dir = out / (name + (f"-s{seed}" if a.seeds else ""))
        done = read_json(run_dir / "summary.json")
        if a.collect:
            metrics = read_metrics(run_dir)
            if not metrics:
                print(f"[bench] {run_dir}: no metrics, skipped", file=sys.stderr)
                continue
            st = run_status(run_dir)
            state = st.get("state") or "?"
            if state == "crashed" and "killed" in (st.get("error") or ""):
                state = "killed"  # its worker was ended from outside; the metrics so far stand
            summary = summarize(cfg, metrics, state)
        elif a.reuse and done and done.get("status") == "finished" and done.get("epochs") == cfg.train.epochs:
            summary = done
        else:
            print(
                f"[bench] {a.preset} / {method} for {cfg.train.epochs} epochs -> {run_dir}", file=sys.stderr, flush=True
            )

            loads = [os.getloadavg()[0]]

            def prog(e, m, method=method, loads=loads):
                if m is not None:
                    loads.append(os.getloadavg()[0])
                    print(
                        f"[bench]   {method} epoch {m['epoch']}: test {m['test_accuracy']:.4f} at {m['wall_time_s']:.1f}s",
                        file=sys.stderr,
                        flush=True,
                    )

            summary = train(cfg, run_dir, on_progress=prog, should_stop=should_stop)
            write_json(run_dir / LOAD_FILE, {"load": sum(loads) / len(loads), "samples": len(loads)})
        load = (read_json(run_dir / LOAD_FILE) or {}).get("load")
        row = {**summary, **curve_stats(read_metrics(run_dir)), "label": label, "load": load}
        rows.append({**row, "machine": run_status(run_dir).get("machine")})
        if summary["status"] == "stopped":
            break  # a stop request ends the bench, not just this run
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m admm_core bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", default="mnist-mlp-mse")
    p.add_argument("--methods", default="block-admm,online-admm,adam,sgd")
    p.add_argument("--epochs", type=int, help="override the preset's epochs")
    p.add_argument(
        "--epochs-for",
        default="",
        metavar="M=N,...",
        help="per-method epochs, e.g. taylor=60,dladmm=60 (beats --epochs)",
    )
    p.add_argument("--data-root", help="data root (default: $ADMM_DATA, ../shared/data)")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench_out")
    p.add_argument("--reuse", action="store_true", help="reuse finished runs already in --out")
    p.add_argument("--set", action="append", default=[], metavar="METHOD:NAME=VALUE", help="override a method setting")
    p.add_argument("--markdown", metavar="FILE", help="also write the table into this docs page (a generated section)")
    p.add_argument("--section", help="name of that section (default: the preset)")
    p.add_argument("--train-limit", type=int, help="use only the first N training samples (overrides the preset)")
    p.add_argument("--test-limit", type=int, help="use only the first N test samples (overrides the preset)")
    p.add_argument("--seeds", help="comma-separated seeds, one row each (beats --seed)")
    p.add_argument("--augment-pad", type=int, metavar="N", help="augment: random shifts of up to ± N pixels")
    p.add_argument("--no-flip", action="store_true", help="augment without horizontal flips (digits)")
    p.add_argument(
        "--vary",
        metavar="METHOD:NAME=V1,V2,...",
        help="one row per value of one setting of METHOD (e.g. online-admm:dual=additive,feature)",
    )
    p.add_argument("--title", default="", help="a line written above the table in --markdown FILE")
    p.add_argument(
        "--collect", action="store_true", help="train nothing: tabulate the runs already in --out, in any state"
    )
    a = p.parse_args(argv)
    version = code_version()
    for s in a.set:
        if ":" not in s:
            p.error(f"--set {s!r}: expected METHOD:NAME=VALUE")
    out = Path(a.out)
    seeds = [a.seed]
    if a.seeds:
        try:
            seeds = [int(x) for x in a.seeds.split(",") if x]
        except ValueError:
            p.error(f"--seeds: {a.seeds!r} is not a comma-separated list of integers")
    vary_method, vary_name, vary_values = None, None, [None]
    if a.vary:
        head, _, vals = a.vary.partition("=")
        vary_method, _, vary_name = head.partition(":")
        if not vary_name or not vals:
            p.error(f"--vary: {a.vary!r} is not METHOD:NAME=V1,V2,...")
        vary_values = [parse_sets([f"v={v}"])["v"] for v in vals.split(",") if v]  # JSON where it parses
    per_method = {}
    for item in [x for x in a.epochs_for.split(",") if x]:
        m, _, n = item.partition("=")
        if not n.isdigit() or int(n) < 1:
            p.error(f"--epochs-for: {item!r} is not METHOD=N with N ≥ 1")
        per_method[m.strip()] = int(n)
    jobs = [
        (method, seed, value)
        for method in [m for m in a.methods.split(",") if m]
        for value in (vary_values if method == vary_method else [None])
        for seed in seeds
    ]
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    should_stop = install_stop_handlers()  # SIGTERM / SIGINT: the current run ends as 'stopped'
    try:
        rows = run_jobs(a, jobs, out, per_method, vary_name, should_stop)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    text = f"Preset `{a.preset}`; {machines_line(rows)}\n\n" + table(a.preset, rows)
    note = NOTES.get(preset_config(a.preset, rows[0]["method"]).data.name) if rows else None
    if note:
        text += f"\n\n{note}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.preset}.md").write_text(text + "\n")
    if a.markdown:
        cmd = command_line(["bench", *(sys.argv[2:] if argv is None else argv)])
        body = (a.title + "\n\n" if a.title else "") + text
        write_section(a.markdown, a.section or a.preset, body, command=cmd, version=version)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
