"""The one place tests reach into Streamlit's AppTest internals: AppTest (1.5x) has no public way to
set a ``st.plotly_chart`` selection (what a browser click on a chart sends), so a click is the
widget state added by hand to the page's states and the script rerun with them. Everything here is
private Streamlit API (``AppTest._tree``, ``._run``, the state's protobuf); ``check_internals`` (run
by tests/test_apptest_adapter.py) fails loudly when an upgrade changes them."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest


def check_internals(at: AppTest) -> None:
    """Raise AssertionError naming what is gone when Streamlit's internals this module uses change."""
    assert callable(getattr(at, "_run", None)), "AppTest._run is gone: rewrite select_points"
    tree = getattr(at, "_tree", None)
    assert tree is not None and callable(getattr(tree, "get_widget_states", None)), (
        "AppTest._tree.get_widget_states is gone: rewrite select_points"
    )
    states = tree.get_widget_states()
    assert hasattr(states, "widgets") and callable(getattr(states.widgets, "add", None)), (
        "the widget states protobuf has no widgets.add: rewrite select_points"
    )


def select_points(at: AppTest, points: list[dict]) -> AppTest:
    """Rerun the page as after a browser click selecting ``points`` (plotly's point dicts, e.g.
    ``{"customdata": [...], "curve_number": 1, "point_number": 0}``) on its one plotly chart."""
    (chart,) = at.get("plotly_chart")
    states = at._tree.get_widget_states()
    sel = {"points": points, "point_indices": [p.get("point_number", 0) for p in points], "box": [], "lasso": []}
    states.widgets.add(id=chart.proto.id, string_value=json.dumps({"selection": sel}))
    return at._run(states)
