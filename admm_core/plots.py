"""Test accuracy versus wall time of every run in a benchmark folder (one line per method).

    python -m admm_core.plots bench_out/all9 --out assets/mnist-accuracy-vs-time.png

Reads ``<folder>/*/metrics.jsonl`` and ``config.json`` as written by ``python -m admm_core bench``;
the x axis is training wall time (evaluation excluded), log-scaled so the fast and the
full-batch methods both show. Matplotlib is imported inside :func:`plot` only: importing this module
(or any of the engine) loads no plotting library.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .spec.presets import PAPER  # paper figures (%), drawn as ticks on the right edge


def load_curves(folder: Path) -> dict[str, list[tuple[float, float]]]:
    """{method: [(wall_time_s, test_accuracy), ...]} for each run folder with metrics."""
    curves = {}
    for run in sorted(p for p in folder.iterdir() if (p / "metrics.jsonl").is_file()):
        cfg = json.loads((run / "config.json").read_text())
        pts = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        # epoch 0 (the untrained net, t = 0) has no place on a log axis
        pts = [
            (m["wall_time_s"], m["test_accuracy"]) for m in pts if m.get("test_accuracy") is not None and m["epoch"] > 0
        ]
        if pts:
            curves[cfg["method"]] = pts
    return curves


def plot(curves: dict, out: Path, title: str = "", preset: str = "mnist-mlp-mse") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    paper = PAPER.get(preset, {})
    for i, (method, pts) in enumerate(curves.items()):
        t = [p[0] for p in pts]
        a = [100 * p[1] for p in pts]
        (line,) = ax.plot(t, a, marker="o", ms=3, lw=1.6, label=f"{method} ({a[-1]:.1f}%)", color=plt.cm.tab10(i % 10))
        if method in paper:
            ax.annotate(
                "",
                xy=(1.0, paper[method]),
                xycoords=("axes fraction", "data"),
                xytext=(1.03, paper[method]),
                textcoords=("axes fraction", "data"),
                arrowprops={"arrowstyle": "-", "color": line.get_color(), "lw": 3},
            )
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    ax.axhline(90, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("training wall time (s, log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(
        title or "MNIST 784-128-128-10, MSE: test accuracy vs wall time (ticks at the right: paper's final figures)"
    )
    ax.title.set_fontsize(10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="lower right", fontsize=8, ncol=2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path)
    p.add_argument("--out", type=Path, default=Path("assets/mnist-accuracy-vs-time.png"))
    p.add_argument("--preset", default="mnist-mlp-mse")
    p.add_argument("--title", default="")
    a = p.parse_args(argv)
    if not a.folder.is_dir():
        p.error(f"folder = {str(a.folder)!r}: not a directory")
    curves = load_curves(a.folder)
    if not curves:
        p.error(f"folder = {str(a.folder)!r}: no run folders with metrics.jsonl inside")
    print(plot(curves, a.out, a.title, a.preset))
    return 0


if __name__ == "__main__":
    sys.exit(main())
