"""The live panel's charts as one Streamlit component drawn in the browser (issue 33).

Drawn as seven ``st.plotly_chart`` elements, every new point made Streamlit mount seven fresh
plots in each tab, and with eight tabs open the points were 20 s behind the disk. Here the panel
is one component (``streamlit.components.v1.declare_component``) with a stable key, so its
iframe persists across the panel's redraws. Its page (``live_charts.html``) builds the charts
itself from the charts' declarations (:func:`app.dashboard.charts.live_spec`) and the raw metrics
lines (``live_series.js``, the browser's twin of ``charts.spec_traces``), which it fetches from
the dashboard's route (:mod:`app.dashboard.tail`) or, where that route is not served, receives
in its arguments. It updates every chart in place with ``Plotly.react``, keeping the user's zoom,
pan and hidden legend entries, and carries the controls: smoothing, x by epoch / step / wall
time and linked x axes for the panel; log scale, CSV and PNG for each chart.

The component's folder is made at runtime (``~/.cache/admm_core/``, else the temporary folder):
the page as ``index.html`` and ``live_series.js`` beside the ``plotly.min.js`` of the installed
plotly package, so nothing is fetched from the network and no copy of plotly.js is kept in the
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
SERIES_JS = Path(__file__).with_name("live_series.js")
NAME = "admm_live_charts"
FILES = ("index.html", "live_series.js", "plotly.min.js")

_component = None
_tried = False


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def asset_dir(bases: list[Path] | None = None) -> Path | None:
    """The component's folder (index.html, live_series.js, plotly.min.js), made once per version of
    the page and of plotly; None when a file is missing or no folder can be written."""
    js = _plotly_js()
    if not js.is_file() or not HTML.is_file() or not SERIES_JS.is_file():
        return None
    import plotly

    html, series = HTML.read_bytes(), SERIES_JS.read_bytes()
    tag = hashlib.sha256(html + series + plotly.__version__.encode()).hexdigest()[:12]
    if bases is None:
        bases = [Path.home() / ".cache" / "admm_core", Path(tempfile.gettempdir()) / "admm_core"]
    for base in bases:
        out = base / f"live_charts-{tag}"
        if all((out / f).is_file() for f in FILES):
            return out
        tmp = base / f".live_charts-{tag}-{os.getpid()}"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / "index.html").write_bytes(html)
            (tmp / "live_series.js").write_bytes(series)
            shutil.copyfile(js, tmp / "plotly.min.js")
            os.replace(tmp, out)  # whole or not at all; another server may have made it meanwhile
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if all((out / f).is_file() for f in FILES):
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
