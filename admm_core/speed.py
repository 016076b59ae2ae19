"""``admm profile``: train each method a few epochs with :mod:`admm_core.profile` on and print
(or write into a docs page) where an epoch's seconds went, phase by phase.

    python -m admm_core profile --preset mnist-deep20 --methods block-admm,adam --epochs 1 --train-limit 6400

The timing module itself stays a leaf (every method imports it); this command sits above the
run loop.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from .device import machine
from .docs import code_version, command_line, write_section
from .network import train
from .profile import PhaseTimes, profiling
from .spec.presets import preset_config
from .spec.settings import parse_sets

# Phases in the order the table lists them (others follow, by time), with what each covers.
PHASES = {
    "epoch": "unmarked time inside the epoch (Python, minibatch draws, progress, indexing)",
    "forward_start": "forward pass a Z-update starts from (block-admm z_start=forward, online-admm)",
    "lipschitz": "power iteration behind the scaled Z step",
    "z_sweep": "Z-update outside the per-block work (gathers, write-back)",
    "theta": "Θ-step outside forward/backward and optimizer (gathers of inputs and targets)",
    "theta.forward_backward": "Θ-step: forward and backward of every block",
    "theta.optimizer": "Θ-step: the optimizer's update",
    "dual": "dual step U ← U + α r (and the residuals)",
    "eval": "evaluation (train and test accuracy, diagnostics), per call",
    "metrics": "appending metrics.jsonl, per call",
    "checkpoint": "writing checkpoint.pt, per call",
    "status": "writing status.json, per call",
    "tensorboard": "TensorBoard event files (the first call imports the writer), per call",
}
PER_CALL = ("eval", "metrics", "checkpoint", "status", "tensorboard")


def phase_table(results: dict[str, tuple["PhaseTimes", int]]) -> str:
    """Markdown: one row per phase, one column per method; seconds per epoch (per call for the
    phases in PER_CALL). ``results``: method -> (times, epochs). A per-call phase's row is its
    inclusive time (the Z-updates of the evaluation's diagnostics are the evaluation's); every other
    row counts only the time spent inside the epoch, so those rows add up to the epoch's total."""
    names = list(results)
    seen = {p for times, _ in results.values() for p in times.exclusive}

    def order(p: str):
        blocks = p.startswith("z_sweep.block")
        return (0, list(PHASES).index(p)) if p in PHASES else (1, int(p[13:]) if blocks else 0, p)

    rows = sorted(seen, key=order)
    lines = ["| phase | " + " | ".join(names) + " | what |", "|---|" + "---|" * len(names) + "---|"]
    for p in rows:
        cells = []
        for m in names:
            times, epochs = results[m]
            v = times.inclusive.get(p) if p in PER_CALL else times.within["epoch"].get(p)
            per = times.calls.get(p, 1) if p in PER_CALL else epochs
            cells.append("—" if v is None else f"{v / max(per, 1):.3f}")
        what = PHASES.get(p, "Z-update of this block: vjp through the next block, its own step" if "block" in p else "")
        lines.append(f"| {p} | " + " | ".join(cells) + f" | {what} |")
    total = []
    for m in names:
        times, epochs = results[m]
        total.append(f"**{times.inclusive.get('epoch', 0.0) / max(epochs, 1):.3f}**")
    lines.append(
        "| **epoch, all phases** | " + " | ".join(total) + " | wall seconds of one epoch (the rows above it) |"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    """``admm profile``: train each method a few epochs with profiling on; print where the time went."""
    p = argparse.ArgumentParser(prog="python -m admm_core profile", description=main.__doc__)
    p.add_argument("--preset", default="mnist-mlp-mse")
    p.add_argument("--methods", default="block-admm,online-admm,adam")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-limit", type=int)
    p.add_argument("--test-limit", type=int)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--set", action="append", default=[], metavar="METHOD:NAME=VALUE", help="a method setting")
    p.add_argument("--markdown", help="write the table into this page")
    p.add_argument("--section", help="section name (default: profile-<preset>)")
    p.add_argument("--title", default="", help="a line above the table")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    version = code_version()
    results = {}
    for method in a.methods.split(","):
        cfg = preset_config(a.preset, method).shortened(a.epochs, a.train_limit, a.test_limit)
        sets = {k.split(":", 1)[1]: v for k, v in parse_sets(a.set).items() if k.startswith(method + ":")}
        cfg = cfg.replace(train__device=a.device, train__eval_every=1, train__checkpoint_every=1)
        if sets:
            cfg = cfg.replace(method_params={**cfg.method_params, **sets})
        with tempfile.TemporaryDirectory() as d, profiling() as times:
            summary = train(cfg, Path(d))
        results[method] = (times, cfg.train.epochs)
        print(f"{method}: {(summary.get('test_accuracy') or 0) * 100:.2f}% after {cfg.train.epochs} epochs", flush=True)
    head = (
        f"Preset `{a.preset}`, {a.epochs} epoch(s)"
        + (f" on {a.train_limit:,} training images" if a.train_limit else "")
        + f"; {machine(a.device if a.device != 'auto' else ('cuda' if torch.cuda.is_available() else 'cpu'))}. "
        "Seconds per epoch (per call for eval, metrics, checkpoint, status), each phase without the phases "
        "nested in it."
    )
    text = (a.title + "\n\n" if a.title else "") + head + "\n\n" + phase_table(results)
    print(text)
    if a.markdown:
        section = a.section or f"profile-{a.preset}"
        write_section(a.markdown, section, text, command_line(["profile", *(argv or [])]), version)
    return 0
