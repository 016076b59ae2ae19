"""Streamlit helpers shared by the pages (the Streamlit-free ones are in :mod:`dashboard`)."""

from __future__ import annotations

import streamlit as st

from app.dashboard import workers

STATE_COLOURS = {
    "running": "green",
    "starting": "orange",
    "finished": "blue",
    "stopped": "gray",
    "crashed": "red",
    "unknown": "gray",
}


def runs_root():
    """The runs folder chosen in the sidebar (main.py), else $ADMM_RUNS / ./runs."""
    return workers.safe_runs_root(st.session_state.get("runs_root") or None)  # confined to the allowed root


def state_label(state: str | None) -> str:
    """Plain text (for menus and tables)."""
    return state or "unknown"


def state_md(state: str | None) -> str:
    """Coloured markdown badge (for headings and captions)."""
    state = state or "unknown"
    return f":{STATE_COLOURS.get(state, 'gray')}-badge[{state}]"


def load_into_train(config: dict) -> None:
    """Open the Train page with ``config`` (a config.json dict) in its form."""
    st.session_state["load_config"] = config
    st.switch_page("views/train.py")


PLOTLY_CONFIG = {"displayModeBar": False, "responsive": True}
