"""Helpers of the Streamlit dashboard that need no Streamlit (so tests import them directly).

- :mod:`.form`    Train form values <-> :class:`admm_core.spec.config.RunConfig` <-> URL query
- :mod:`.workers` launch / stop / resume / delete worker processes and read their run dirs
- :mod:`.charts`  plotly figures from metrics.jsonl lines
- :mod:`.faces`   image upload checks, face detection and crop, heatmap overlays

The dashboard holds no training math: configs, validation, training and run directories
all come from :mod:`admm_core`.
"""

from pathlib import Path

APP_DIR = Path(__file__).resolve().parent.parent
PROJECT_ROOT = APP_DIR.parent
