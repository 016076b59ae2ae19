"""ui.KEEP_VIEW_JS in Chromium: a chart Streamlit remounts with a new figure (each redraw of a live
Compare chart) keeps the zoom and the hidden legend entries the user set on the one it replaces, and
a double-click still resets the zoom (the script re-applied the old zoom over it before)."""

from __future__ import annotations

import plotly
import pytest
from helpers import needs_chromium

from app import ui

PLOTLY_JS = f"{plotly.__path__[0]}/package_data/plotly.min.js"

MOUNT = """([title, n]) => {
  document.querySelectorAll('.js-plotly-plot').forEach(d => { if (d.layout.title.text === title) d.remove(); });
  const gd = document.createElement('div');
  document.body.appendChild(gd);
  const xs = [...Array(n).keys()];
  return Plotly.newPlot(gd, [{x: xs, y: xs, name: 'a'}, {x: xs, y: xs.map(x => 2 * x), name: 'b'}],
                        {title: {text: title}, width: 400, height: 300}).then(() => true);
}"""
VIEW = """(title) => new Promise(done => setTimeout(() => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')].find(d => d.layout.title.text === title);
  done({range: gd._fullLayout.xaxis.range, auto: gd._fullLayout.xaxis.autorange, hidden: gd.data.map(t => t.visible === 'legendonly')});
}, 300))"""
GD = "(title) => [...document.querySelectorAll('.js-plotly-plot')].find(d => d.layout.title.text === title)"


@needs_chromium
def test_a_remounted_chart_keeps_the_users_zoom_and_hidden_entries(browser):
    page = browser.new_page()
    page.set_content("<html><body></body></html>")
    page.add_script_tag(path=PLOTLY_JS)
    page.add_script_tag(content=ui.KEEP_VIEW_JS.removeprefix("<script>").removesuffix("</script>"))
    page.evaluate(MOUNT, ["Loss", 10])
    page.evaluate(MOUNT, ["Accuracy", 10])
    page.evaluate(VIEW, "Loss")  # the page script has hooked both
    page.evaluate(f"(t) => Plotly.relayout(({GD})(t), {{'xaxis.range': [2, 5]}})", "Loss")
    page.evaluate(f"(t) => Plotly.restyle(({GD})(t), {{visible: 'legendonly'}}, [1])", "Loss")
    page.evaluate(MOUNT, ["Loss", 20])  # a new figure: a new plot in its place
    page.evaluate(MOUNT, ["Accuracy", 20])
    kept, other = page.evaluate(VIEW, "Loss"), page.evaluate(VIEW, "Accuracy")
    assert kept["range"] == pytest.approx([2, 5]) and kept["hidden"] == [False, True]
    assert other["auto"] and other["hidden"] == [False, False]  # another chart's view is its own
    page.evaluate(f"(t) => Plotly.relayout(({GD})(t), {{'xaxis.autorange': true}})", "Loss")  # double-click
    page.evaluate(MOUNT, ["Loss", 30])
    assert page.evaluate(VIEW, "Loss")["range"] == pytest.approx([0, 29], abs=2)
    page.close()
