"""The worker's system metrics (``RUN/system.jsonl``, written by the engine's heartbeat thread,
:class:`admm_core.status.SystemSampler`) as a figure, and the end-of-run notice text (no Streamlit here).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import plotly.graph_objects as go

MB = 1024 * 1024
ENDED = ("finished", "stopped", "diverged", "crashed")  # a watched run entering one gets a notice in the tab


def read_system(run_dir: str | Path, last: int = 2000) -> list[dict]:
    """The ``last`` samples of ``system.jsonl`` (a cut or foreign line is skipped; [] when absent)."""
    try:
        with open(Path(run_dir) / "system.jsonl") as f:
            recs = [_json(line) for line in f]
    except OSError:
        return []
    return [r for r in recs if isinstance(r, dict) and isinstance(r.get("time"), (int, float))][-last:]


def _json(line: str):
    try:
        return json.loads(line)
    except ValueError:
        return None


def system_figure(samples: list[dict], run: str | None = None) -> go.Figure:
    """CPU % of the worker process (left axis; 100 = one core) and its memory in MB (right axis):
    RSS, and GPU memory allocated / peak allocated when the run uses CUDA. x = wall clock."""
    x = [dt.datetime.fromtimestamp(s["time"]) for s in samples]
    mb = lambda key: [s[key] / MB if isinstance(s.get(key), (int, float)) else None for s in samples]
    cpu = [s.get("cpu_percent") for s in samples]
    traces = [
        go.Scatter(x=x, y=cpu, name="CPU %", mode="lines+markers", line={"color": "#2563eb"}, connectgaps=True),
        go.Scatter(
            x=x, y=mb("rss_bytes"), name="RSS (MB)", mode="lines+markers", yaxis="y2", line={"color": "#16a34a"}
        ),
    ]
    if any("gpu_allocated_bytes" in s for s in samples):
        for key, name, colour in (
            ("gpu_allocated_bytes", "GPU allocated (MB)", "#dc2626"),
            ("gpu_max_allocated_bytes", "GPU peak (MB)", "#ea580c"),
        ):
            dot = {"color": colour, "dash": "dot"}
            traces.append(go.Scatter(x=x, y=mb(key), name=name, mode="lines", yaxis="y2", line=dot))
    fig = go.Figure(traces)
    fig.update_layout(
        title={"text": "Worker: CPU and memory", "font": {"size": 14}, "x": 0, "xanchor": "left"},
        height=280,
        margin={"l": 56, "r": 56, "t": 40, "b": 40},
        hovermode="x unified",
        legend={"orientation": "h", "x": 0, "y": -0.25, "font": {"size": 10}},
        uirevision="keep",
        yaxis={"title": {"text": "CPU % (100 = one core)"}, "rangemode": "tozero", "hoverformat": ".1f"},
        yaxis2={
            "title": {"text": "MB"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "hoverformat": ".0f",
            "showgrid": False,
        },
        meta={"run": run} if run else None,
    )
    return fig


def notice_text(run: str, state: str, status: dict) -> str:
    """The one line said when the watched run ends: its state, epoch and, if any, the error."""
    epoch, epochs = status.get("epoch"), status.get("epochs")
    at = f" at epoch {epoch}/{epochs}" if epoch is not None and epochs else ""
    err = f": {status['error']}" if state in ("diverged", "crashed") and status.get("error") else ""
    return f"Run {run} {state}{at}{err}"


def next_notice(seen: dict, run: str | None, state: str | None) -> bool:
    """Record ``state`` of ``run`` in ``seen`` (run id → last state this tab saw); True when this
    is a change into an ended state. The first sight of a run only records it, so a run that
    had ended before the tab opened (or before it was watched) gives no notice."""
    if not run or not state:
        return False
    before = seen.get(run)
    seen[run] = state
    return before is not None and before != state and state in ENDED
