"""Plotly figures and tables from metrics.jsonl lines (lists of dicts). No Streamlit here."""

from __future__ import annotations

import math
import time

import plotly.graph_objects as go

COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f", "#7c3aed", "#0f766e"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
LIVE_HEIGHT = 250


def _layout(
    fig: go.Figure, title: str, xtitle: str, ytitle: str, log_y: bool = False, height: int = LIVE_HEIGHT
) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 14}},
        height=height,
        margin={"l": 50, "r": 10, "t": 56, "b": 40},
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom", "font": {"size": 10}},
        uirevision="keep",  # keep zoom / hidden traces across live refreshes
        template="plotly_white",
    )
    fig.update_xaxes(title_text=xtitle)
    fig.update_yaxes(title_text=ytitle, type="log" if log_y else "linear", **({"dtick": "D2"} if log_y else {}))
    return fig


def _col(metrics: list[dict], key: str, scale: float = 1.0) -> list:
    out = []
    for m in metrics:
        v = m.get(key)
        out.append(None if v is None or not _finite(v) else v * scale)
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def accuracy_figure(metrics: list[dict]) -> go.Figure:
    ep = _col(metrics, "epoch")
    fig = go.Figure()
    fig.add_scatter(
        x=ep, y=_col(metrics, "train_accuracy", 100), name="train", mode="lines+markers", line={"color": COLOURS[0]}
    )
    fig.add_scatter(
        x=ep, y=_col(metrics, "test_accuracy", 100), name="test", mode="lines+markers", line={"color": COLOURS[1]}
    )
    return _layout(fig, "Accuracy (%)", "epoch", "%")


def loss_figure(metrics: list[dict], log_y: bool = True) -> go.Figure:
    ep = _col(metrics, "epoch")
    fig = go.Figure()
    fig.add_scatter(x=ep, y=_col(metrics, "train_loss"), name="train", mode="lines+markers", line={"color": COLOURS[0]})
    fig.add_scatter(x=ep, y=_col(metrics, "test_loss"), name="test", mode="lines+markers", line={"color": COLOURS[1]})
    return _layout(fig, "Loss per sample", "epoch", "loss", log_y)


def n_blocks(metrics: list[dict], key: str) -> int:
    return max((len(m.get(key) or []) for m in metrics), default=0)


def per_block_figure(metrics: list[dict], key: str, title: str, log_y: bool = False) -> go.Figure:
    """One trace per block of a per-block list column (residuals, dual_norms, betas)."""
    ep = _col(metrics, "epoch")
    fig = go.Figure()
    for t in range(n_blocks(metrics, key)):
        ys = []
        for m in metrics:
            vals = m.get(key) or []
            v = vals[t] if t < len(vals) else None
            ys.append(v if _finite(v) and (not log_y or v > 0) else None)
        fig.add_scatter(
            x=ep, y=ys, name=f"block {t + 1}", mode="lines+markers", line={"color": COLOURS[t % len(COLOURS)]}
        )
    if not fig.data:
        fig.add_annotation(
            text="no blocks: end-to-end method", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5
        )
    return _layout(fig, title, "epoch", "", log_y)


def seconds_per_epoch(metrics: list[dict]) -> tuple[list, list]:
    xs, ys = [], []
    for a, b in zip(metrics, metrics[1:]):
        de = b.get("epoch", 0) - a.get("epoch", 0)
        if de > 0 and _finite(b.get("wall_time_s")) and _finite(a.get("wall_time_s")):
            xs.append(b["epoch"])
            ys.append((b["wall_time_s"] - a["wall_time_s"]) / de)
    return xs, ys


def seconds_figure(metrics: list[dict]) -> go.Figure:
    xs, ys = seconds_per_epoch(metrics)
    fig = go.Figure()
    fig.add_bar(x=xs, y=ys, name="s / epoch", marker_color=COLOURS[2])
    return _layout(fig, "Seconds per epoch (training only)", "epoch", "s")


def live_figures(metrics: list[dict], log_residuals: bool = True, run: str | None = None) -> dict[str, go.Figure]:
    """The Train page's six charts; ``run`` is recorded in each figure's layout.meta."""
    figs = {
        "accuracy": accuracy_figure(metrics),
        "loss": loss_figure(metrics),
        "residuals": per_block_figure(
            metrics, "residuals", "Primal residual ‖Z_t − block_t(Z_{t−1})‖ per block", log_residuals
        ),
        "dual_norms": per_block_figure(metrics, "dual_norms", "Dual norm ‖U_t‖ per block", log_residuals),
        "betas": per_block_figure(metrics, "betas", "Penalty β per block"),
        "seconds": seconds_figure(metrics),
    }
    if run:
        for f in figs.values():
            f.update_layout(meta={"run": run})
    return figs


def eta_seconds(status: dict, now: float | None = None) -> float | None:
    """Remaining seconds from the worker's own progress and elapsed time (None if unknown)."""
    p, started = status.get("progress") or 0.0, status.get("started")
    if status.get("state") != "running" or not started or p <= 0.0 or p >= 1.0:
        return None
    elapsed = (now or time.time()) - started
    return elapsed / p * (1.0 - p)


def fmt_duration(s: float | None) -> str:
    if s is None:
        return "—"
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


# --- Compare -------------------------------------------------------------------------------


def smooth(ys: list, weight: float) -> list:
    """Exponential moving average (TensorBoard style); gaps stay gaps."""
    if weight <= 0:
        return list(ys)
    out, last = [], None
    for y in ys:
        if y is None:
            out.append(None)
            continue
        last = y if last is None else weight * last + (1 - weight) * y
        out.append(last)
    return out


def compare_figure(
    series: list[tuple[str, list[dict]]],
    key: str,
    x_key: str = "epoch",
    smoothing: float = 0.0,
    log_y: bool = False,
    title: str = "",
    percent: bool = False,
    height: int = 420,
) -> go.Figure:
    """Overlay one column of several runs; per-block columns get one dash style per block."""
    fig = go.Figure()
    xtitle = "wall time (s)" if x_key == "wall_time_s" else "epoch"
    for i, (label, metrics) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        xs = _col(metrics, x_key)
        if metrics and isinstance(metrics[0].get(key), list):
            for t in range(n_blocks(metrics, key)):
                ys = [(m.get(key) or [None] * (t + 1))[t] if t < len(m.get(key) or []) else None for m in metrics]
                ys = [y if _finite(y) and (not log_y or y > 0) else None for y in ys]
                fig.add_scatter(
                    x=xs,
                    y=smooth(ys, smoothing),
                    name=f"{label} · block {t + 1}",
                    mode="lines",
                    line={"color": colour, "dash": DASHES[t % len(DASHES)]},
                    legendgroup=label,
                )
        else:
            ys = _col(metrics, key, 100.0 if percent else 1.0)
            ys = [y if y is None or not log_y or y > 0 else None for y in ys]
            fig.add_scatter(
                x=xs,
                y=smooth(ys, smoothing),
                name=label,
                mode="lines+markers",
                marker={"size": 4},
                line={"color": colour},
            )
    fig = _layout(fig, title, xtitle, "%" if percent else "", log_y, height=height)
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -0.18, "yanchor": "top"}, margin={"t": 40, "b": 20}
    )
    return fig


def run_row(name: str, cfg: dict, status: dict, metrics: list[dict], paper: dict, size: int | None = None) -> dict:
    """One line of the Compare table: final / best accuracy, wall time, memory, paper's figure."""
    last = metrics[-1] if metrics else {}
    best = max(metrics, key=lambda m: m.get("test_accuracy") or -1) if metrics else {}
    preset, method = cfg.get("preset"), cfg.get("method")
    paper_acc = (paper.get(preset) or {}).get(method)
    epochs = last.get("epoch")
    final = last.get("test_accuracy")
    return {
        "run": name,
        "method": method,
        "data": (cfg.get("data") or {}).get("name"),
        "preset": preset,
        "status": status.get("state"),
        "epochs": epochs,
        "final test %": None if final is None else round(100 * final, 2),
        "best test %": None if best.get("test_accuracy") is None else round(100 * best["test_accuracy"], 2),
        "best epoch": best.get("epoch"),
        "paper test %": paper_acc,
        "Δ vs paper": None if (paper_acc is None or final is None) else round(100 * final - paper_acc, 2),
        "wall time s": None if last.get("wall_time_s") is None else round(last["wall_time_s"], 2),
        "s / epoch": round(last["wall_time_s"] / epochs, 3) if epochs else None,
        "Z/U memory MB": None if last.get("state_bytes") is None else round(last["state_bytes"] / 2**20, 3),
    }
