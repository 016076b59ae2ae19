"""Plotly figures and tables from metrics.jsonl lines (lists of dicts). No Streamlit here.

What tells runs apart (legends, groups, the table's settings) and the plotted data as CSV are the
engine's (:mod:`admm_core.compare`, also read by ``admm compare``); the figures are drawn here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import plotly.graph_objects as go

from admm_core.compare import finite, fmt_value, metric_values, setting_name

COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d", "#4d7c0f", "#7c3aed", "#0f766e"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
LIVE_HEIGHT = 250
# The legend's own band under the x axis: rows of about ROW_PX, each entry CHAR_PX a character + ENTRY_PX, its
# lines WRAP characters at most (plotly does not wrap: a grouped chart's "… · pools …" was cut at 1280 px).
LEGEND = {"char_px": 6.5, "entry_px": 40, "row_px": 450, "row_height": 22, "bottom": 48, "wrap": 56}
# Log-axis ticks: 1-2-5 per decade, decades only past MAX, finer ladders under a decade (log_ticks).
TICKS = {
    "max": 8,
    "ladder": [1, 2, 5],
    "finer": [[1, 1.5, 2, 3, 4, 5, 6, 8], [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9]],
}
# A title's lines: each adds LINE_PX to the figure and to its top margin (TOP_PX the first); CHAR_PX a
# character at 14 px, for the browser to wrap a title to a chart narrower than WRAP characters (a third of a
# 1280-px window: "Cosine with backprop's gradient" ran under the modebar).
# plotly lifts a title hung by its top (yanchor 'top') about SHIFT_PX a line past the first: its padding
# takes that back (the first line of "Seconds per epoch (training only)" was cut at the top; Chromium).
TITLE = {"wrap": 38, "char_px": 7.5, "line_px": 18, "top_px": 20, "pad_px": 8, "shift_px": 10}
# plotly's options for every chart, the live ones too
CONFIG = {
    "displayModeBar": True,
    "displaylogo": False,
    "responsive": True,
    "toImageButtonOptions": {"format": "png", "scale": 2},
    "modeBarButtonsToRemove": ["lasso2d", "select2d"],
}
# what the live charts' page draws with (live_series.js)
STYLE = {"colours": COLOURS, "legend": LEGEND, "ticks": TICKS, "title": TITLE, "config": CONFIG}


def wrap(title: str, width: int = TITLE["wrap"]) -> str:
    """Break a chart title into lines of at most ``width`` characters (plotly does not wrap)."""
    lines, cur = [], ""
    for word in title.split():
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    lines.append(cur)
    return "<br>".join(lines)


def log_ticks(values, max_ticks: int = TICKS["max"]) -> tuple[list[float], list[str]]:
    """Tick positions and full labels for a log axis over ``values`` (positive ones).

    1-2-5 per decade (…, 0.02, 0.05, 0.1, 0.2, …); when the data span less than a few of
    those, a finer 1-1.5-2-3-4-5-6-8 ladder; thinned to at most ``max_ticks``. Every label is
    the whole number (0.02, not '2'), so no decade is dropped.
    """
    vals = [float(v) for v in values if finite(v) and v > 0]
    if not vals:
        return [], []
    lo, hi = min(vals), max(vals)
    if hi / lo < 1.0001:
        lo, hi = lo / 1.5, hi * 1.5

    def ladder(mantissas) -> list[float]:
        out = []
        for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
            for m in mantissas:
                v = float(f"{m * 10.0**k:.6g}")
                if lo / 1.05 <= v <= hi * 1.05:
                    out.append(v)
        return out

    ticks = ladder(TICKS["ladder"])
    if len(ticks) > max_ticks:  # many decades: decades only, every n-th
        ticks = ladder((1,))
        ticks = ticks[:: math.ceil(len(ticks) / max_ticks)]
    for finer in TICKS["finer"]:
        if len(ticks) >= 3:
            break
        ticks = ladder(finer)
    if len(ticks) < 2:  # a range narrower than the finest ladder: its two ends
        ticks = sorted({float(f"{lo:.3g}"), float(f"{hi:.3g}")})
    return ticks, [_tick_label(v) for v in ticks]


def _tick_label(v: float) -> str:
    return f"{v:g}" if 1e-4 <= v < 1e6 else f"{v:.0e}".replace("e-0", "e-").replace("e+0", "e")


def _scatter(x, y, name: str, colour: str, mode: str = "lines+markers", **kw) -> dict:
    return {"type": "scatter", "x": x, "y": y, "name": name, "mode": mode, "line": {"color": colour}, **kw}


def _figure(
    traces: list[dict],
    title: str,
    xtitle: str,
    ytitle: str,
    log_y: bool = False,
    height: int = LIVE_HEIGHT,
    run: str | None = None,
    yaxis: dict | None = None,
    legend: bool = False,
) -> go.Figure:
    """The shared look, built as one dict and validated once (plotly's update_* calls validate
    on each call); ``run`` in layout.meta; ``legend``: a legend even for one entry. No template:
    Streamlit's theme (light or dark) styles the figure."""
    lines = wrap(title).count("<br>") + 1
    layout = {
        "title": {
            "text": wrap(title),
            "font": {"size": 14},
            "x": 0,
            "xanchor": "left",
            "xref": "paper",
            # hung from the top of the figure, growing down into the top margin (sized for its lines):
            # anchored at the plot's top with yanchor 'bottom', plotly placed a two-line title's
            # second line over the plot (seen in Chromium for the cosine and residual charts)
            "y": 1,
            "yanchor": "top",
            "yref": "container",
            "pad": {"t": TITLE["pad_px"] + TITLE["shift_px"] * (lines - 1)},
        },
        "height": height + TITLE["line_px"] * (lines - 1),
        "margin": {"l": 56, "r": 34, "t": TITLE["top_px"] * (1 + lines), "b": 40},
        # down the right edge: never over the (left-aligned) title; on a transparent paper plotly's own
        # modebar background is half-black (a dark bar beside every live chart), so it is none
        "modebar": {"orientation": "v", "bgcolor": "rgba(0,0,0,0)"},
        # legend in its own band at the bottom of the figure, under the x axis title
        "legend": {
            "orientation": "h",
            "x": 0,
            "xanchor": "left",
            "yref": "container",
            "y": 0,
            "yanchor": "bottom",
            "font": {"size": 10},
        },
        "uirevision": "keep",  # keep zoom / hidden traces across live refreshes
        "hovermode": "x unified",
        "xaxis": {"title": {"text": xtitle}, "hoverformat": ".2f"},
    }
    if log_y:
        vals, text = log_ticks([y for tr in traces for y in (tr.get("y") or ()) if y is not None])
        y = {"type": "log", "tickmode": "array", "tickvals": vals, "ticktext": text, "hoverformat": ".3~g"}
    else:
        y = {"type": "linear", "hoverformat": ".2f", "exponentformat": "none"}
    layout["yaxis"] = {"title": {"text": ytitle}, **y, **(yaxis or {})}
    band, named = LEGEND, lambda t: t.get("showlegend") is not False
    traces = [{**t, "name": wrap(t.get("name") or "", band["wrap"])} if named(t) else t for t in traces]
    shown = [t["name"].split("<br>") for t in traces if named(t)]
    if len(shown) > 1 or (legend and shown):  # room for the legend row(s) under the x axis title
        rows = math.ceil(sum(len(max(n, key=len)) * band["char_px"] + band["entry_px"] for n in shown) / band["row_px"])
        rows += sum(len(n) - 1 for n in shown)  # a wrapped entry's lines past its first
        layout["height"] += band["row_height"] * rows
        layout["margin"]["b"] = band["bottom"] + band["row_height"] * rows
        layout["showlegend"] = True  # plotly hides a legend of one entry by itself
    else:
        layout["showlegend"] = False
    if run:
        layout["meta"] = {"run": run}
    return go.Figure(data=traces, layout=layout)


# --- the live charts, declared once -----------------------------------------------------------
# The Train page's charts are data: a title, axis titles and the series read from each metrics line.
# The browser draws them from these declarations and the raw lines (live_series.js has the rules).
# Series: {"key", "name", "scale"}: one value per line; {"key", "per": True, "names"}: one trace per
# entry of a per-block list; {"seconds": True}: bars of training seconds per epoch. A scalar series
# with no data is left out unless "keep_empty" (then only while the run has no line yet).

NO_BLOCKS = "no blocks: end-to-end method"


def _ytitle(text: str) -> dict:  # the math on the y axis, so that chart titles fit one line
    return {"title": {"text": text, "font": {"size": 11}}}


# the per-block charts drawn for a method that declares no chart of its own (log and smooth: True unless
# False); a key in neither a method's ``live_charts`` nor here gets a plain chart
BLOCK_CHARTS = {
    "residuals": {"title": "Primal residual per block", "yaxis": _ytitle("‖Zₜ − blockₜ(Zₜ₋₁)‖")},
    "backprop_cosine": {
        "title": "Cosine with backprop's gradient",
        "log": False,
        "when": "backprop_cosine",
        "yaxis": {"range": [-1.05, 1.05], **_ytitle("cos(block update, ∇)")},
    },
    "dual_norms": {"title": "Dual norm ‖Uₜ‖ per block"},
    "betas": {"title": "Penalty β per block", "log": False, "smooth": False},
}


def _chart(title: str, series: list[dict], ytitle: str = "", log: bool = False, smooth: bool = False, **kw) -> dict:
    return {"title": title, "series": series, "ytitle": ytitle, "log": log, "smooth": smooth, **kw}


def live_spec(method: str | None = None) -> dict[str, dict]:
    """The live charts of a run of ``method``, in drawing order (three to a row). ``when``: drawn
    only once some line carries that key; ``log``: the y axis starts logarithmic.

    Past accuracy, loss and seconds, the charts are what the method's class declares (read from the
    registry without torch): ``live_metrics``, ``live_unit`` (the x axis), ``live_accuracy`` and
    ``live_charts``. ``method`` None or unknown: every chart of :data:`BLOCK_CHARTS`, by epoch."""
    from admm_core.spec.methods import METHODS

    cls = METHODS.get(method) if method else None
    acc = [
        {"key": k, "name": n, "scale": 100, "keep_empty": True}
        for k, n in (("train_accuracy", "train"), ("test_accuracy", "test"))
    ]
    loss = [{"key": k, "name": n, "keep_empty": True} for k, n in (("train_loss", "train"), ("test_loss", "test"))]
    out = {
        "accuracy": _chart(cls.live_accuracy if cls else "Accuracy (%)", acc, "%"),
        "loss": _chart("Loss per sample", loss, "loss", log=True, smooth=True),
        "seconds": _chart("Seconds per epoch (training only)", [{"seconds": True}], "s"),
    }
    plain = {"log": False, "smooth": False}
    for key in cls.live_metrics if cls else BLOCK_CHARTS:
        d = (
            (cls.live_charts if cls else {}).get(key)
            or BLOCK_CHARTS.get(key)
            or {"title": key.replace("_", " ").capitalize(), **plain}
        )
        if "lines" in d:
            series, kw = [{"key": k, "name": n} for k, n in d["lines"]], {}
        else:
            series, kw = [{"key": key, "per": True, "names": list(d.get("names") or [])}], {"note": NO_BLOCKS}
        kw.update({k: d[k] for k in ("when", "yaxis") if k in d})
        out[key] = _chart(d["title"], series, log=d.get("log", True), smooth=d.get("smooth", True), **kw)
    unit = cls.live_unit if cls else "epoch"
    return {name: {**chart, "xtitle": unit} for name, chart in out.items()}


def _has_data(ys: list) -> bool:
    return any(y is not None for y in ys)


def spec_frame(chart: dict, run: str | None = None) -> dict:
    """A declared chart's layout with no trace (plotly JSON), which the browser completes."""
    layout = _figure([], chart["title"], chart["xtitle"], chart["ytitle"], run=run, yaxis=chart.get("yaxis"))
    return {k: v for k, v in layout.to_plotly_json()["layout"].items() if k != "showlegend"}


def accuracy_figure(metrics: list[dict]) -> go.Figure:
    """Train and test accuracy (%) by epoch; a series the run never logs (DeepFacto: train) is left out."""
    ep = metric_values(metrics, "epoch")
    pairs = (("train_accuracy", "train"), ("test_accuracy", "test"))
    traces = [
        _scatter(ep, ys, name, COLOURS[i])
        for i, (k, name) in enumerate(pairs)
        if _has_data(ys := metric_values(metrics, k, 100))
    ]
    return _figure(traces, "Accuracy (%)", "epoch", "%")


def measured_seconds_per_epoch(metrics: list[dict], since: float | None = None) -> float | None:
    """Wall seconds per epoch (training and evaluation) between the evaluations logged after
    ``since`` (the current worker's start: a resumed run is not charged for the pause); None before
    one epoch is measured."""
    pts = [m for m in metrics if finite(m.get("time")) and (since is None or m["time"] >= since - 1e-3)]
    if len(pts) < 2:
        return None
    de = pts[-1].get("epoch", 0) - pts[0].get("epoch", 0)
    if de <= 0:
        return None
    return (pts[-1]["time"] - pts[0]["time"]) / de


def eta_seconds(status: dict, metrics: list[dict] | None = None, now: float | None = None) -> float | None:
    """Remaining seconds: epochs left × the measured s/epoch, less the time since the last evaluation;
    None (shown as "estimating…") until the current worker has finished one evaluated epoch."""
    spe = measured_seconds_per_epoch(metrics or [], status.get("started"))
    if status.get("state") != "running" or spe is None:
        return None
    last, total = metrics[-1], status.get("epochs") or 0
    return max(0.0, (total - last.get("epoch", 0)) * spe - ((now or time.time()) - last["time"]))


# --- Compare -------------------------------------------------------------------------------


def smooth(ys: list, weight: float) -> list:
    """Exponential moving average (TensorBoard style); gaps stay gaps."""
    if weight <= 0:
        return list(ys)
    out, last = [], None
    for y in ys:
        if y is not None:
            last = y if last is None else weight * last + (1 - weight) * y
        out.append(None if y is None else last)
    return out


def thin(traces: list[dict], max_points: int | None) -> list[dict]:
    """Traces of more than ``max_points`` points cut to about that many for drawing: per bucket
    of consecutive points, its first, lowest and highest (a spike stays drawn), and the last point.
    A 100,000-epoch run's curve has more points than the chart has pixels, and every point is
    validated, serialised and sent again on each redraw (TensorBoard samples 1,000 per curve)."""
    if not max_points:
        return traces
    out = []
    for t in traces:
        xs, ys = t.get("x"), t.get("y")
        n = len(xs) if xs is not None else 0
        if n <= max_points or ys is None or len(ys) != n:
            out.append(t)
            continue
        size = max(1, (3 * n) // max_points)
        keep = set()
        for a in range(0, n, size):
            idx = [i for i in range(a, min(a + size, n)) if ys[i] is not None]
            keep.add(a)
            if idx:
                keep.add(min(idx, key=ys.__getitem__))
                keep.add(max(idx, key=ys.__getitem__))
        keep.add(n - 1)
        order = sorted(keep)
        kept = {"x": [xs[i] for i in order], "y": [ys[i] for i in order]}
        if isinstance(t.get("customdata"), list) and len(t["customdata"]) == n:  # per point (a band's n)
            kept["customdata"] = [t["customdata"][i] for i in order]
        out.append({**t, **kept})
    return out


OVERLAY_HEIGHT = 420  # px, Compare's charts
PARALLEL_HEIGHT = 360  # px, its parallel coordinates


@dataclass(frozen=True)
class Overlay:
    """How Compare draws one column of several runs or groups (``max_points``: per curve, :func:`thin`)."""

    x_key: str = "epoch"
    smoothing: float = 0.0
    log_y: bool = False
    title: str = ""
    percent: bool = False
    height: int = OVERLAY_HEIGHT
    max_points: int | None = None

    def figure(self, traces: list[dict], legend: bool = False) -> go.Figure:
        xtitle = "wall time (s)" if self.x_key == "wall_time_s" else "epoch"
        traces = thin(traces, self.max_points)
        return _figure(traces, self.title, xtitle, "%" if self.percent else "", self.log_y, self.height, legend=legend)


def compare_figure(series: list[tuple[str, list[dict]]], key: str, look: Overlay = Overlay()) -> go.Figure:
    """Overlay one column of several runs; per-block columns get one dash style per block."""
    traces = []
    for i, (label, metrics) in enumerate(series):
        colour, xs = COLOURS[i % len(COLOURS)], metric_values(metrics, look.x_key)
        if metrics and isinstance(metrics[0].get(key), list):
            for t in range(max((len(v) for m in metrics if isinstance(v := m.get(key), list)), default=0)):
                ys = [
                    _gap(v[t] if isinstance(v := m.get(key), list) and t < len(v) else None, look.log_y)
                    for m in metrics
                ]
                trace = _scatter(xs, smooth(ys, look.smoothing), f"{label} · block {t + 1}", colour, "lines")
                trace["line"]["dash"] = DASHES[t % len(DASHES)]
                traces.append({**trace, "legendgroup": label, **_no_legend_if_empty(ys)})
        else:
            ys = [_gap(y, look.log_y) for y in metric_values(metrics, key, 100.0 if look.percent else 1.0)]
            trace = _scatter(xs, smooth(ys, look.smoothing), label, colour, marker={"size": 4})
            traces.append({**trace, **_no_legend_if_empty(ys)})
    return look.figure(traces)


def _gap(y, log_y: bool):
    """``y``, or None where it cannot be drawn (not a number, or ≤ 0 on a log axis)."""
    return y if finite(y) and (not log_y or y > 0) else None


def _no_legend_if_empty(ys: list) -> dict:
    """A series with nothing to draw keeps no legend entry (it vanished from the plot, not the legend)."""
    return {} if _has_data(ys) else {"showlegend": False}


LOG_NAMES = ("lr", "eps", "weight_decay", "dual_lr", "u_init_scale")  # settings read on a log scale
LOG_SPAN = 100.0  # any positive setting whose values span this factor or more gets a log axis too


def log_axis(key: str, vals: list) -> bool:
    """Whether a numeric setting is drawn on a log axis: positive values, and a learning-rate-like
    name (η spread over 1e-4…1e-1 crowds a linear axis at 0) or a span of two decades or more."""
    nums = [float(v) for v in vals]
    if not nums or min(nums) <= 0:
        return False
    name = setting_name(key)
    return name in LOG_NAMES or name.endswith("_lr") or max(nums) / min(nums) >= LOG_SPAN


PARALLEL_CHAR_PX = 7  # about a tick label character's width, for the left margin


def _parallel_axis(key: str, vals: list) -> tuple[dict, list[str]]:
    """One parcoords axis of a setting and its tick names. Parcoords has no log axis: a log one
    (:func:`log_axis`) is drawn as log10 with ticks named by value; whole numbers (a seed, a width)
    get ticks at their values only; other values are categories on evenly spaced ticks."""
    label = setting_name(key)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        cats = sorted({str(v) for v in vals})
        names = [c if len(c) <= 24 else c[:23] + "…" for c in cats]
        idx = [cats.index(str(v)) for v in vals]
        return {"label": label, "values": idx, "tickvals": list(range(len(cats))), "ticktext": names}, names
    values = [float(v) for v in vals]
    if log_axis(key, vals):
        ticks, text = log_ticks(vals)
        logs = [math.log10(v) for v in values]
        axis = {"values": logs, "tickvals": [math.log10(t) for t in ticks], "ticktext": text}
        return {"label": f"{label} (log)", **axis, "range": [min(logs), max(logs)]}, text
    if all(isinstance(v, int) for v in vals) and len(set(vals)) <= 12:
        ticks = sorted(set(vals))
        names = [str(t) for t in ticks]
        return {"label": label, "values": values, "tickvals": ticks, "ticktext": names}, names
    return {"label": label, "values": values, "tickformat": ".3~g"}, [fmt_value(v) for v in vals]


def parallel_figure(rows: list[dict], settings: list[dict], keys: list[str]) -> go.Figure:
    """Parallel coordinates: one axis per differing setting that every run has (:func:`_parallel_axis`),
    the last the final test accuracy. The left margin fits the first axis's tick names."""
    axes = [_parallel_axis(k, [s[k] for s in settings]) for k in keys if all(s.get(k) is not None for s in settings)]
    acc = [r.get("final test %") for r in rows]
    dims = [d for d, _ in axes]
    values = [float("nan") if a is None else a for a in acc]
    dims.append({"label": "final test %", "values": values, "tickformat": ".4~g"})
    line = {"color": [0 if a is None else a for a in acc], "colorscale": "Viridis", "showscale": True}
    fig = go.Figure(go.Parcoords(line={**line, "colorbar": {"title": {"text": "test %"}}}, dimensions=dims))
    # tick names are drawn left of their axis: the first axis's need room ("online-admm" was clipped)
    first = axes[0][1] if axes else []
    left = max(60, 20 + PARALLEL_CHAR_PX * max((len(n) for n in first), default=0))
    fig.update_layout(height=PARALLEL_HEIGHT, margin={"l": left, "r": 60, "t": 60, "b": 30})
    return fig


# --- Compare: groups with mean ± spread bands ------------------------------------------------------


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


GRID_MAX = 600  # grid points of a grouped curve (the union of the runs' x values, or evenly spaced past this)


def _grid(runs_xy: list[tuple[list[float], list[float]]]) -> list[float]:
    """The x values a group's mean is taken at: every run's own x values (epochs line up and stay
    exact), or GRID_MAX evenly spaced ones over their span when there are more."""
    xs = sorted({x for xr, _ in runs_xy for x in xr})
    if len(xs) <= GRID_MAX:
        return xs
    lo, hi = xs[0], xs[-1]
    return [lo + (hi - lo) * i / (GRID_MAX - 1) for i in range(GRID_MAX)]


def _interp(xr: list[float], yr: list[float], grid: list[float]) -> list[float | None]:
    """A run's curve linearly interpolated at ``grid``; None outside its own x range (no extrapolation)."""
    out: list[float | None] = []
    j = 0
    for g in grid:
        if not xr or g < xr[0] or g > xr[-1]:
            out.append(None)
            continue
        while j + 1 < len(xr) and xr[j + 1] < g:
            j += 1
        if xr[j] == g or j + 1 == len(xr):
            out.append(yr[j])
        else:
            x0, x1, y0, y1 = xr[j], xr[j + 1], yr[j], yr[j + 1]
            out.append(y0 + (y1 - y0) * (g - x0) / (x1 - x0))
    return out


def _run_xy(metrics: list[dict], key: str, look: Overlay):
    """A run's (x, y) points as ``look`` draws them, sorted by x, one y per x (the last logged: a
    resumed run may repeat an epoch), gaps dropped."""
    pts: dict[float, float] = {}
    ys = smooth(metric_values(metrics, key, 100.0 if look.percent else 1.0), look.smoothing)
    for x, y in zip(metric_values(metrics, look.x_key), ys):
        if x is not None and _gap(y, look.log_y) is not None:
            pts[float(x)] = y
    xr = sorted(pts)
    return xr, [pts[x] for x in xr]


def group_figure(
    groups: list[tuple[str, list[list[dict]]]], key: str, look: Overlay = Overlay(), spread: str = "std"
) -> go.Figure:
    """One line per group of runs (their mean at each x) inside a band: mean ± one standard
    deviation (``spread='std'``) or the runs' min to max (``'range'``).

    Each run is first interpolated linearly onto the group's common x grid (:func:`_grid`), so runs
    logged at different wall times are averaged point for point: matching raw x values left one
    run per point, and the mean jumped from run to run (a saw-tooth). At an x past the end of a run
    the mean is over the runs that reached it. Per-block columns are averaged over blocks."""
    traces = []
    for i, (label, runs) in enumerate(groups):
        colour = COLOURS[i % len(COLOURS)]
        xy = [_run_xy(m, key, look) for m in runs]
        grid = _grid(xy)
        cols = [_interp(xr, yr, grid) for xr, yr in xy]
        xs, mean, lo, hi, counts = [], [], [], [], []
        for j, x in enumerate(grid):
            vals = [c[j] for c in cols if c[j] is not None]
            if not vals:
                continue
            counts.append(len(vals))
            mu = sum(vals) / len(vals)
            if spread == "range":
                a, b = min(vals), max(vals)
            else:
                sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / len(vals))
                a, b = mu - sd, mu + sd
                if look.log_y:
                    a = max(a, mu / 10)  # a band below zero has no place on a log axis
            xs.append(x)
            mean.append(mu)
            lo.append(a)
            hi.append(b)
        # n: the runs at each x (a run that ended, or began later, does not count there): in the hover
        # per point, and in the legend as its range where it changes along the x axis
        few, most = (min(counts), max(counts)) if counts else (len(runs), len(runs))
        name = f"{label} (n = {most})" if few == most else f"{label} (n = {few}–{most} by x)"
        band = {"type": "scatter", "x": xs, "mode": "lines", "line": {"width": 0}, "hoverinfo": "skip"}
        band.update(legendgroup=label, showlegend=False)
        traces.append({**band, "y": hi, "name": f"{label} hi"})
        traces.append({**band, "y": lo, "name": f"{label} lo", "fill": "tonexty", "fillcolor": _rgba(colour, 0.18)})
        hover = f"%{{y}} (n = %{{customdata}}) · {label}<extra></extra>"
        line = _scatter(xs, mean, name, colour, "lines", legendgroup=label, customdata=counts, hovertemplate=hover)
        traces.append({**line, **_no_legend_if_empty(mean)})
    return look.figure(traces, legend=True)  # a legend even for one group: it says what is pooled, and n


def group_option_label(opt: str) -> str:
    if opt == "seeds":
        return "seeds (mean of runs alike but for the seed)"
    if opt.startswith("method × "):
        return f"method × {setting_name(opt[len('method × ') :])}"
    return opt if opt in ("nothing", "method", "tag") else setting_name(opt)
