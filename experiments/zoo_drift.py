"""How far a split method's weights drift from Adam backprop's, against floating-point noise alone.

    python experiments/zoo_drift.py --rows resnet18 --minibatches 8 --markdown docs/results/zoo.md

For each row of the zoo, the same network (same seed, same first ``--minibatches`` minibatches,
same order) is trained for those minibatches by Adam backprop on one torch thread (the reference),
by Adam backprop on two threads (same arithmetic in another summation order: the noise floor), and
by each split method at its defaults. Each run is a subprocess; its weights come back as a
safetensors file. The table gives, for every run, the weights' distance to the reference relative to
the distance the reference moved, ‖Θ − Θ_adam‖ / ‖Θ_adam − Θ_0‖ over the parameters, the same
over BatchNorm's running statistics apart, and how many times each BatchNorm module updated its
running statistics (``num_batches_tracked``; backprop: once per minibatch).

With dropout on (no ``--no-dropout``) the reference and the floor are Adam drawing its masks as the
split methods hold them (``adam-held``, see :func:`hold_backprop_masks`), and Adam with its own
masks is one more row: how far a different mask stream alone moves the weights.

A split method whose distance sits at the noise floor takes backprop's steps up to rounding; after
that, their runs part the way any two runs of the same chaotic training part, and a difference in
final accuracy is that noise, not the method.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from zoo_models import BY_NAME, train_own  # beside this script

ROOT = Path(__file__).resolve().parent.parent
RUNS = (("adam", 1), ("adam", 2), ("online-admm", 1), ("block-admm", 1), ("gotmare", 1))
HELD = "adam-held"  # with dropout on, the reference (first) and the floor: see the module's docstring
RUNS_DROPOUT = ((HELD, 1), (HELD, 2), ("adam", 1), ("online-admm", 1), ("block-admm", 1), ("gotmare", 1))


def hold_backprop_masks() -> None:
    """Make Adam draw its dropout masks as the split methods do (:func:`~admm_core.methods.masks.held_masks`).

    Backprop draws each mask from the global generator as its forward reaches the dropout layer;
    the split methods draw one seed per stochastic block at the start of each minibatch and run the
    block's forwards under it. The two streams give different masks (the same distribution), so
    with dropout on the distance below would measure the masks, not the method. Here every forward
    of the split network, in Adam's training too, runs inside ``held_masks(net.blocks)``: one
    forward per minibatch, so Adam sees the masks a split method holds for that minibatch.
    """
    from admm_core.methods.backprop import Backprop
    from admm_core.methods.masks import held_masks

    init = Backprop.init_state

    def init_state(self, net, batch, gen):
        open_ = []

        def enter(module, args) -> None:  # evaluation passes (eval mode) draw no masks, and no seeds
            open_.append(held_masks(net.blocks) if module.training else None)
            if open_[-1] is not None:
                open_[-1].__enter__()

        def leave(module, args, out) -> None:  # None: the output stays as it is
            held = open_.pop()
            if held is not None:
                held.__exit__(None, None, None)

        net.register_forward_pre_hook(enter)
        net.register_forward_hook(leave, always_call=True)
        return init(self, net, batch, gen)

    Backprop.init_state = init_state


def child(row: str, method: str, threads: int, n: int, seed: int, dest: Path, dropout: bool) -> None:
    """Train ``row`` by ``method`` on its first ``n`` samples (one epoch), save Θ_0 and Θ."""
    torch.set_num_threads(threads)
    r = BY_NAME[row]
    torch.manual_seed(seed)
    model = r.factory()
    if not dropout:  # backprop and a split method draw their masks from different RNG streams
        for m in model.modules():
            if isinstance(m, torch.nn.modules.dropout._DropoutNd):
                m.p = 0.0
    if method == HELD:
        hold_backprop_masks()
        method = "adam"
    w0 = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    r = dataclasses.replace(r, train_limit=n, test_limit=200)
    train_own(r, model, method, seed, None, dest.parent / f"run-{dest.stem}", epochs=1)
    save_file(w0, str(dest.with_suffix(".w0.safetensors")))
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(dest))


STATS = ("running_mean", "running_var")  # BatchNorm's running statistics: buffers, not Θ


def distance(a: dict, b: dict, ref: dict, w0: dict, stats: bool = False) -> float:
    """‖a − b‖ / ‖ref − w0‖ over the floating tensors of Θ (``stats``: over the running statistics)."""
    keys = [k for k in ref if ref[k].is_floating_point() and k.endswith(STATS) == stats]
    if not keys:
        return float("nan")
    num = sum(float((a[k] - b[k]).double().norm() ** 2) for k in keys) ** 0.5
    den = sum(float((ref[k] - w0[k]).double().norm() ** 2) for k in keys) ** 0.5
    return num / den


def measure(row: str, minibatches: int, seed: int, workdir: Path, dropout: bool = True) -> list[dict]:
    n = minibatches * BY_NAME[row].batch_size
    got = {}
    runs = RUNS_DROPOUT if dropout else RUNS  # the first is the reference
    for method, threads in runs:
        dest = workdir / f"{row}-{method}-t{threads}.safetensors"
        cmd = [
            sys.executable,
            __file__,
            "--child",
            row,
            method,
            str(threads),
            str(n),
            str(seed),
            str(dest),
            str(int(dropout)),
        ]
        print(f"zoo_drift: {row} {method} on {threads} thread(s), {minibatches} minibatches", flush=True)
        subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
        got[(method, threads)] = load_file(str(dest))
    first = runs[0][0]
    w0 = load_file(str(workdir / f"{row}-{first}-t1.w0.safetensors"))
    ref = got[(first, 1)]
    rows = []
    for (method, threads), w in got.items():
        counts = sorted({int(v) for k, v in w.items() if k.endswith("num_batches_tracked")})
        rows.append(
            {
                "row": row + ("" if dropout else " (dropout p = 0)"),
                "run": f"{method} ({threads} thread{'s' if threads > 1 else ''})",
                "distance": distance(w, ref, ref, w0),
                "stats_distance": distance(w, ref, ref, w0, stats=True),
                "bn_updates": ", ".join(map(str, counts)) or "no BatchNorm",
            }
        )
    return rows


def table(rows: list[dict], minibatches: int) -> str:
    lines = [
        f"| model | run | ‖Θ − Θ_adam‖ / ‖Θ_adam − Θ_0‖ after {minibatches} minibatches "
        "| the same for BatchNorm's running statistics | BatchNorm updates |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['row']} | {r['run']} | {r['distance']:.4f} | "
        f"{'—' if r['stats_distance'] != r['stats_distance'] else format(r['stats_distance'], '.4f')} | {r['bn_updates']} |"
        for r in rows
    ]
    return "\n".join(lines) + f"\n\nMachine: {os.cpu_count()} CPU cores, torch {torch.__version__}.\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", default=["resnet18"], choices=sorted(BY_NAME))
    p.add_argument("--minibatches", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-dropout", action="store_true", help="set every dropout layer's p to 0 (same masks: none)")
    p.add_argument(
        "--markdown",
        type=Path,
        help="write the table into this page's section zoo-drift (zoo-drift-dropout with dropout on)",
    )
    a = p.parse_args(argv)
    from admm_core.docs import code_version, write_section

    version = code_version()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for row in a.rows for r in measure(row, a.minibatches, a.seed, Path(tmp), not a.no_dropout)]
    text = table(rows, a.minibatches)
    print(text)
    if a.markdown:
        cmd = "python experiments/zoo_drift.py " + " ".join(sys.argv[1:] if argv is None else argv)
        section = "zoo-drift" if a.no_dropout else "zoo-drift-dropout"
        write_section(a.markdown, section, text, command=cmd, version=version)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, row, method, threads, n, seed, dest, dropout = sys.argv
        child(row, method, int(threads), int(n), int(seed), Path(dest), dropout == "1")
    else:
        main()
