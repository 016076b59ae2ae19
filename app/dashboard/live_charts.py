"""The live panel's charts: one Streamlit component whose iframe, under a stable key, persists
across the panel's redraws, so a new point mounts nothing. Its page (``live_charts.html``) fetches
the run's lines (:mod:`app.dashboard.tail`) and draws the charts of
:func:`app.dashboard.charts.live_spec` with the rules of ``live_series.js``.

The component's folder is made at runtime (``~/.cache/admm_core/``, else the temporary folder) with
the installed plotly's ``plotly.min.js``: nothing is fetched and no copy of plotly.js is kept here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

HTML = Path(__file__).with_name("live_charts.html")
SERIES_JS = Path(__file__).with_name("live_series.js")
FOLLOW_JS = Path(__file__).with_name("follow") / "follow.js"
NAME = "admm_live_charts"
SELECTOR = f"iframe[src*='{NAME}']"  # the charts' frame, as a page script finds it
FILES = ("index.html", "live_series.js", "follow.js", "plotly.min.js")

_component = None


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def asset_dir(bases: list[Path] | None = None) -> Path | None:
    """The component's folder, made once per version of its files; None when none can be written."""
    import plotly

    pages = {
        "index.html": HTML.read_bytes(),
        "live_series.js": SERIES_JS.read_bytes(),
        "follow.js": FOLLOW_JS.read_bytes(),
    }
    tag = hashlib.sha256(b"".join(pages.values()) + plotly.__version__.encode()).hexdigest()[:12]
    if bases is None:
        bases = [Path.home() / ".cache" / "admm_core", Path(tempfile.gettempdir()) / "admm_core"]
    for base in bases:
        out = base / f"live_charts-{tag}"
        if all((out / f).is_file() for f in FILES):
            return out
        tmp = base / f".live_charts-{tag}-{os.getpid()}"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            for name, text in pages.items():
                (tmp / name).write_bytes(text)
            shutil.copyfile(_plotly_js(), tmp / "plotly.min.js")
            os.replace(tmp, out)  # whole or not at all; another server may have made it meanwhile
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if all((out / f).is_file() for f in FILES):
                return out
            continue
        return out
    return None


NO_FOLDER = "The live charts cannot be drawn: neither ~/.cache/admm_core nor the temporary folder can be written."


def component():
    """The declared component, or None where its folder cannot be made (:data:`NO_FOLDER`)."""
    global _component
    if _component is None and (path := asset_dir()) is not None:
        from streamlit.components.v1 import declare_component

        _component = declare_component(NAME, path=str(path))
    return _component
