"""The AppTest adapter's private Streamlit API still exists, and a selection set through it reaches
the page's ``on_select`` callback (a Streamlit upgrade that breaks either fails here, by name)."""

from __future__ import annotations

from apptest_adapter import check_internals, select_points
from streamlit.testing.v1 import AppTest


def _page():
    import plotly.graph_objects as go
    import streamlit as st

    def clicked():
        st.session_state["got"] = [p["customdata"][0] for p in st.session_state["chart"].selection.points]

    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 0], mode="markers", customdata=[["a"], ["b"]]))
    st.plotly_chart(fig, key="chart", on_select=clicked, selection_mode="points")
    st.write("got", st.session_state.get("got"))


def test_the_adapter_s_internals_exist_and_a_selection_reaches_on_select():
    at = AppTest.from_function(_page, default_timeout=30).run()
    assert not at.exception, [e.value for e in at.exception]
    check_internals(at)
    at = select_points(at, [{"customdata": ["b"], "curve_number": 0, "point_number": 1}])
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["got"] == ["b"]
