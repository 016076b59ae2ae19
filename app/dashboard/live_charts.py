"""The live panel's charts as one Streamlit component drawn in the browser (issue 33).

Drawn as seven ``st.plotly_chart`` elements, every new point made Streamlit mount seven fresh
plots in each tab (a chart element gets a new id when its figure changes), and with eight tabs
open the browsers' redraws, not the server, put the points 20 s behind the disk. Here the panel
is one component (``streamlit.components.v1.declare_component``) with a stable key, so its
iframe persists across the panel's redraws; each redraw (the server push) sends the figures and
the page (``live_charts.html``) updates every chart in place with ``Plotly.react``, keeping the
user's zoom, pan and hidden legend entries. Its controls: smoothing, x by epoch / step / wall
time and linked x axes for the panel; log scale, CSV and PNG for each chart.

The component's folder is made at runtime (``~/.cache/admm_core/``, else the temporary folder):
``live_charts.html`` as ``index.html`` beside the ``plotly.min.js`` of the installed plotly
package, so nothing is fetched from the network and no copy of plotly.js is kept in the
project. Where that folder cannot be made, or with ``ADMM_DASH_LIVE_CHARTS=server``, the caller
draws the server-rendered figures instead (:func:`component` returns None).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

HTML = Path(__file__).with_name("live_charts.html")
NAME = "admm_live_charts"
SMOOTHED = {"loss", "residuals", "dual_norms", "backprop_cosine", "nmf"}  # what the old "smooth" toggle smoothed
LOG_BY_DEFAULT = {"loss", "residuals", "dual_norms", "nmf"}  # the old "log scale" toggle's default, on

_component = None
_tried = False


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def asset_dir(bases: list[Path] | None = None) -> Path | None:
    """The component's folder (index.html + plotly.min.js), made once per page version and plotly
    version; None when plotly.js is missing or no folder can be written."""
    js = _plotly_js()
    if not js.is_file() or not HTML.is_file():
        return None
    import plotly

    html = HTML.read_bytes()
    tag = hashlib.sha256(html + plotly.__version__.encode()).hexdigest()[:12]
    if bases is None:
        bases = [Path.home() / ".cache" / "admm_core", Path(tempfile.gettempdir()) / "admm_core"]
    for base in bases:
        out = base / f"live_charts-{tag}"
        if (out / "index.html").is_file() and (out / "plotly.min.js").is_file():
            return out
        tmp = base / f".live_charts-{tag}-{os.getpid()}"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / "index.html").write_bytes(html)
            shutil.copyfile(js, tmp / "plotly.min.js")
            os.replace(tmp, out)  # whole or not at all; another server may have made it meanwhile
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if (out / "index.html").is_file() and (out / "plotly.min.js").is_file():
                return out
            continue
        return out
    return None


def component():
    """The declared component, or None (``ADMM_DASH_LIVE_CHARTS=server``, or no folder for it):
    then the live panel draws the server-rendered figures."""
    global _component, _tried
    if os.environ.get("ADMM_DASH_LIVE_CHARTS", "browser") == "server":
        return None
    if not _tried:
        _tried = True
        path = asset_dir()
        if path is not None:
            try:
                from streamlit.components.v1 import declare_component

                _component = declare_component(NAME, path=str(path))
            except Exception:  # noqa: BLE001 - a Streamlit without v1 components: the figures
                _component = None
    return _component


def payload(figs: dict, metrics: list[dict], run: str, order: list[str]) -> dict:
    """The component's arguments: the figures (plotly JSON, unsmoothed), their order, per chart
    whether it is smoothed and log by default, and per metrics line its epoch, step (the
    method's ``iteration``) and wall time (seconds since the first line) — the page maps each
    point's epoch to the x the user picked."""
    t0 = next((m["time"] for m in metrics if isinstance(m.get("time"), (int, float))), None)
    x = {
        "epoch": [m.get("epoch") for m in metrics],
        "step": [m.get("iteration") for m in metrics],
        "wall": [
            round(m["time"] - t0, 3) if t0 is not None and isinstance(m.get("time"), (int, float)) else None
            for m in metrics
        ],
    }
    meta = {}
    figures = {}
    for name in order:
        fig = figs[name].to_plotly_json()
        figures[name] = {"data": fig["data"], "layout": fig["layout"]}
        xt = ((fig["layout"].get("xaxis") or {}).get("title") or {}).get("text") or "epoch"
        meta[name] = {"smooth": name in SMOOTHED, "log": name in LOG_BY_DEFAULT, "xtitle": xt}
    return {"run": run, "order": list(order), "figures": figures, "meta": meta, "x": x}
