"""The dashboard as a user sees it, in a real Chromium: what AppTest cannot see, since it
has no layout (a cut label, a column past a table's edge) or no browser (the page's URL, a reload).

- a link's bad values are each named and hold Start (AppTest sets query parameters; here the page
  reads them from the address bar);
- Compare at 1280 × 800: the method filter's chips and the log toggles show their whole labels
  (they read "block-adm…" and "log-scale loss / resid…"); grouped by method, the legend says
  "block-admm (n = 2)";
- Compare's pick, made by the user, survives a reload and a visit without the link;
- the Runs table's columns fit a 1440-px and a 1280-px window with a sweep trial's 56-character id and
  its preset ("updated" lay past the right edge: 52 px at 1440, before its fix; 134 px at 1280, before
  its own) and "Training samples (0 = all)" stays on one line at 1280 px;
- a study's trials table, three settings searched, fits a 1280-px window with its trials' 56-character ids;
- at 1280 × 800 no widget label and no select's chosen value is cut short on Train (ResNet-18 and a torchvision
  VGG, every settings expander open) or Sweeps ("Calibrate BatchNor…", "median (stop the trailin" once).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from helpers import dashboard, needs_chromium, tiny

pytestmark = needs_chromium
ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_MS = int(float(os.environ.get("DASH_BROWSER_TIMEOUT_S", "240")) * 1000)
BIG = "99999999999999999999"
# two methods, two seeds: run ids as long as the dashboard's own ("digits-block-admm-s0")
RUNS = ["tiny-block-admm-s0", "tiny-block-admm-s1", "tiny-online-admm-s0", "tiny-online-admm-s1"]
# a sweep trial's id as the dashboard names it (56 characters): at full length "updated" lay past the edge
LONG = "20261202-052512-digits-mlp-block-admm-20261202-052506-t9"
# block-admm runs of other widths and lengths: grouped by method, their legend names what it pools
POOLED = {"tiny-block-admm-wide-s2": ((128, 128, 64), 60), "tiny-block-admm-long-s3": ((64, 64, 64, 32), 20)}


@pytest.fixture(scope="module")
def server(tmp_path_factory, finished_run):
    from admm_core.network import train

    root = tmp_path_factory.mktemp("layout-runs")
    online = tmp_path_factory.mktemp("layout-online") / "run"
    train(tiny("online-admm"), online)
    for name in RUNS:
        d = root / name
        shutil.copytree(online if "online" in name else finished_run, d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["train"]["seed"] = int(name[-1])  # the seed differs: a legend and a group say so
        (d / "config.json").write_text(json.dumps(cfg))
    for name, (hidden, epochs) in POOLED.items():
        shutil.copytree(finished_run, root / name)
        cfg = json.loads((root / name / "config.json").read_text())
        cfg["model"]["hidden"], cfg["train"]["epochs"], cfg["train"]["seed"] = hidden, epochs, int(name[-1])
        (root / name / "config.json").write_text(json.dumps(cfg))
    shutil.copytree(online, root / LONG)  # the widest method name beside the longest id
    cfg = json.loads((root / LONG / "config.json").read_text())
    cfg["preset"] = "digits-mlp"  # a sweep trial's: its preset column is shown
    (root / LONG / "config.json").write_text(json.dumps(cfg))
    _study(root)
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONPATH": str(ROOT)}
    with dashboard(env, root / "server.log") as (url, _):
        yield url, root


def _study(root: Path) -> None:
    """A finished 12-trial study of three settings, added directly (nothing trained), its trials' runs
    named as a sweep names them (56 characters)."""
    import optuna

    from admm_core import sweep as S

    space = ["beta=log:0.1:10", "lr=log:1e-4:3e-3", "z_lr=log:0.01:1"]
    spec = S.SweepSpec(name="wide", preset="digits-mlp", method="block-admm", space=space, trials=12)
    study = S.create_or_resume(spec, "wide", S.open_storage(S.default_storage(root)))[0]
    log = optuna.distributions.FloatDistribution
    dists = {"beta": log(0.1, 10, log=True), "lr": log(1e-4, 3e-3, log=True), "z_lr": log(0.01, 1, log=True)}
    for i in range(12):
        params = {"beta": 0.1 * 1.4**i, "lr": 1e-4 * 1.3**i, "z_lr": 0.01 * 1.5**i}
        run = f"20261202-0552{i + 10}-digits-mlp-block-admm-20261202-055234-t{i}"
        trial = optuna.trial.create_trial(
            params=params, distributions=dists, value=0.9 + i / 200, intermediate_values={1: 0.5, 2: 0.8, 3: 0.9},
            user_attrs={"run_dir": str(root / ".none" / run)},
        )  # fmt: skip
        study.add_trial(trial)


def _page(browser, width: int, height: int):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(TIMEOUT_MS)
    return page


# how much of an element's text is hidden: scrolled or cut off with an ellipsis (0 when it all shows)
HIDDEN_JS = "el => el.scrollWidth - el.clientWidth"


def test_a_links_bad_values_are_each_named_and_hold_start(server, browser):
    url, _ = server
    page = _page(browser, 1440, 1000)
    try:
        page.goto(f"{url}/?preset=digits-mlp&method=block-admm&epochs=0&batch_size={BIG}&split=fc9")
        start = page.get_by_role("button", name=re.compile("Start run"))
        start.wait_for()
        for said in ("Epochs = 0", f"Batch size = {BIG}", "Split after layers (block boundaries) = 'fc9'"):
            page.get_by_text(said, exact=False).first.wait_for()
        page.get_by_text(re.compile(r"Fix 3 fields below to start")).wait_for()
        assert start.is_disabled()
        assert "epochs=0" in page.url  # the link's value stays in it, not silently dropped
    finally:
        page.close()


def test_compare_at_1280_shows_whole_labels_and_names_groups_by_method(server, browser):
    url, _ = server
    page = _page(browser, 1280, 800)
    try:
        page.goto(f"{url}/compare?runs={','.join(RUNS)}")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 4")
        methods = page.locator("[data-testid='stMultiSelect']").filter(has_text="Method / kind")
        box = methods.bounding_box()
        chips = methods.locator("[data-tag]")
        assert chips.count() == 2
        for i in range(chips.count()):
            chip = chips.nth(i)
            text = chip.inner_text().strip()
            assert text in ("block-admm", "online-admm"), text
            b = chip.bounding_box()
            assert b["x"] + b["width"] <= box["x"] + box["width"], f"{text!r} chip past the filter's edge"
            cut = chip.locator("span[title]").evaluate(HIDDEN_JS)
            assert cut <= 0, f"{text!r} cut by {cut} px"
        for label in ("log-scale loss / residuals", "log-scale accuracy"):
            el = page.get_by_text(label, exact=True)
            assert el.evaluate(HIDDEN_JS) <= 0, f"{label!r} cut"
        page.get_by_role("combobox", name="Group runs by").click()
        page.get_by_role("option", name="method", exact=True).click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot')].some(d => (d.data || []).some(t => t.fill === 'tonexty'))"
        )
        legend = page.evaluate(
            "() => [...document.querySelectorAll('.js-plotly-plot')][0].data"
            ".filter(t => t.showlegend !== false).map(t => t.name)"
        )
        assert legend == ["block-admm (n = 2)", "online-admm (n = 2)"], legend
        shown = page.locator(".js-plotly-plot").first.locator(".legendtext").all_text_contents()
        assert shown == legend, shown  # drawn whole, not only in the figure's data
    finally:
        page.close()


# each grouped chart's (a chart with bands) legend entries' text boxes and its outer svg box (plotly draws a
# long entry past the svg's edge, where the page cuts it)
GROUPED_JS = (
    "[...document.querySelectorAll('.js-plotly-plot')].filter(d => (d.data || []).some(t => t.fill === 'tonexty'))"
)
LEGENDS_JS = f"""() => {GROUPED_JS}.map(d => {{
    const svg = d.querySelector('svg.main-svg').getBoundingClientRect();
    return {{svg: [svg.left, svg.top, svg.right, svg.bottom], title: d.layout.title.text,
             entries: [...d.querySelectorAll('g.legend .legendtext')].map(t => {{
                const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom]; }})}}; }})"""


def test_compare_grouped_legends_fit_1280(server, browser):
    """Grouped by method, block-admm's group pools runs of other widths and lengths and its legend says so
    at length ("… · pools hidden widths …, epochs …"): at 1280 px every grouped chart has a legend and each
    entry lies whole inside its chart (the entry ran 200 px past the chart's right edge, cut there)."""
    url, _ = server
    page = _page(browser, 1280, 800)
    try:
        page.goto(f"{url}/compare?runs={','.join(RUNS + list(POOLED))}")
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 4")
        page.get_by_role("combobox", name="Group runs by").click()
        page.get_by_role("option", name="method", exact=True).click()
        page.wait_for_function(f"() => {GROUPED_JS}.length === 4")
        page.wait_for_timeout(1000)
        charts = page.evaluate(LEGENDS_JS)
        assert len(charts) == 4, charts
        for c in charts:
            text = " ".join(e[0] for e in c["entries"])
            assert "pools" in text and "online-admm" in text, c  # every grouped chart has its legend
            left, top, right, bottom = c["svg"]
            out = [
                e for e in c["entries"] if e[1] < left - 1 or e[2] < top - 1 or e[3] > right + 1 or e[4] > bottom + 1
            ]
            assert not out, f"{c['title']!r}: legend entries past the chart's box {c['svg']}: {out}"
    finally:
        page.close()


def _picked(page) -> list[str]:
    runs = page.locator("[data-testid='stMultiSelect']").filter(has_text="Runs")
    return [t.split(" · ")[0].strip() for t in runs.locator("[data-tag] span[title]").all_inner_texts()]


def test_compare_pick_survives_a_reload_and_a_visit_without_the_link(server, browser):
    url, root = server
    page = _page(browser, 1440, 1000)
    try:
        page.goto(f"{url}/compare?runs={','.join(RUNS)}")
        page.get_by_text("Group runs by").wait_for()
        assert _picked(page) == RUNS
        runs = page.locator("[data-testid='stMultiSelect']").filter(has_text="Runs")
        runs.get_by_role("button", name=re.compile(f"^Remove {RUNS[-1]}")).click()  # the user's own pick
        page.wait_for_function("last => !location.search.includes(last)", arg=RUNS[-1])
        page.reload()  # the link now holds the pick
        page.get_by_text("Group runs by").wait_for()
        assert _picked(page) == RUNS[:-1]
    finally:
        page.close()
    page = _page(browser, 1440, 1000)  # a new tab, a new session, the bare address
    try:
        page.goto(f"{url}/compare")
        page.get_by_text("Group runs by").wait_for()
        assert _picked(page) == RUNS[:-1]
        assert page.get_by_text("Nothing picked yet").count() == 0  # the user's pick, not the newest runs
    finally:
        page.close()


def test_runs_table_fits_1440_and_1280_and_train_labels_stay_on_one_line_at_1280(server, browser):
    url, _ = server
    for width, height in ((1440, 1000), (1280, 800)):
        page = _page(browser, width, height)
        try:
            page.goto(f"{url}/runs")
            grid = page.locator("[data-testid='stDataFrame']").first
            grid.wait_for()
            # the data grid's scroller (glide-data-grid's, the grid Streamlit draws with) is wider inside than
            # its box when the columns are: the table then scrolls sideways and the last ones are out of view
            scroller = grid.locator(".dvn-scroller")
            scroller.wait_for()
            page.wait_for_function("el => el.scrollWidth > 400", arg=scroller.element_handle())
            hidden = scroller.evaluate(HIDDEN_JS)
            assert hidden <= 0, f"the runs table's columns run {hidden} px past its right edge at {width} px"
        finally:
            page.close()
    page = _page(browser, 1280, 800)
    try:
        page.goto(f"{url}/")
        label = page.get_by_text("Training samples (0 = all)", exact=True)
        label.wait_for()
        height, line = label.evaluate(
            "el => [el.getBoundingClientRect().height, parseFloat(getComputedStyle(el).lineHeight) || 21]"
        )
        assert height < 1.5 * line, f"'Training samples (0 = all)' on {height / line:.1f} lines at 1280 px"
        # no label of the form cut short ("Aug…": a checkbox beside four fields once non-applicable ones were
        # no longer drawn)
        page.get_by_text("Augment", exact=True).wait_for()
        cut = page.evaluate(
            """() => [...document.querySelectorAll('[data-testid="stWidgetLabel"] [data-testid="stMarkdownContainer"]')]
                .filter(el => el.offsetParent && el.scrollWidth - el.clientWidth > 1).map(el => el.textContent)"""
        )
        assert not cut, f"labels cut at 1280 px: {cut}"
    finally:
        page.close()


def test_sweeps_trials_table_fits_1280_with_three_settings(server, browser):
    """A study of three settings (β, η, ζ) with its trials' 56-character run ids: the trials table's columns,
    its run column last, fit a 1280-px window (91 px past it before the fix; 13 px with the shorter ids alone,
    before the settings' headers became their symbols)."""
    url, _ = server
    page = _page(browser, 1280, 800)
    try:
        page.goto(f"{url}/sweeps")
        # the trials' table by its header (the grid's accessible copy of its cells), not the new-study form's
        scroller = page.locator("[data-testid='stDataFrame']").filter(has_text="seconds").locator(".dvn-scroller")
        scroller.wait_for()
        page.wait_for_function("el => el.scrollWidth > 400", arg=scroller.element_handle())
        hidden = scroller.evaluate(HIDDEN_JS)
        assert hidden <= 0, f"the trials table's columns run {hidden} px past its right edge at 1280 px"
    finally:
        page.close()


# every widget label, a select's chosen value (the text of its input), and every text drawn with an ellipsis
# (a chip) whose text is wider than its box: what the page cuts ("Calibrate BatchNor…", "median (stop the
# trailin")
CUT_JS = """() => {
  const seen = new Set([
    ...document.querySelectorAll('[data-testid="stWidgetLabel"], [data-testid="stWidgetLabel"] *'),
    ...document.querySelectorAll('[data-testid="stSelectbox"] input[role="combobox"]'),
    ...[...document.querySelectorAll('[data-testid="stMain"] *')].filter(
      el => getComputedStyle(el).textOverflow === 'ellipsis'),
  ]);
  const text = el => (el.tagName === 'INPUT' ? el.value : el.textContent).trim();
  return [...seen].filter(el => el.offsetParent && text(el) && el.scrollWidth - el.clientWidth > 1)
    .map(el => `${text(el)} (${el.scrollWidth - el.clientWidth} px)`);
}"""


def _unfold(page, names: tuple[str, ...]) -> None:
    """Opens the page's folded expanders named ``names``, one by one: each a rerun that draws its widgets."""
    for name in names:
        summary = page.locator("[data-testid='stExpander'] summary", has_text=name)
        summary.wait_for()
        summary.click()
        box = page.locator("[data-testid='stExpander']", has=page.locator("details[open]", has_text=name))
        box.locator("[data-testid='stWidgetLabel']").first.wait_for()


@pytest.mark.parametrize(
    "path, unfold, longest",
    [
        ("/?preset=none&data=cifar10&arch=resnet18&method=block-admm", ("More training", "More block"),
         "Calibrate BN first"),
        ("/?preset=none&data=cifar10&arch=tv-vgg11-bn&method=online-admm", ("More training", "More online"),
         "BatchNorm in Z steps"),
        ("/sweeps", ("New study",), "median (stop laggards)"),
    ],
    ids=["train-resnet18-block-admm", "train-vgg11-online-admm", "sweeps"],
)  # fmt: skip
def test_no_label_or_chosen_value_is_cut_at_1280(server, browser, path, unfold, longest):
    """Train under ResNet-18 and a torchvision VGG (the forms with the longest labels), their settings
    unfolded, and Sweeps' new-study form at 1280 × 800: no widget label and no select's chosen value is cut
    short (each page's once-cut text among them)."""
    url, _ = server
    page = _page(browser, 1280, 800)
    try:
        page.goto(f"{url}{path}")
        _unfold(page, unfold)
        page.get_by_role("button", name=re.compile("Start run|Launch study")).first.wait_for()
        shown = page.locator("[data-testid='stWidgetLabel']", has_text=longest).or_(
            page.locator(f"input[role='combobox'][value='{longest}']")
        )
        shown.first.wait_for()
        page.wait_for_timeout(500)  # the last rerun's widgets laid out
        cut = page.evaluate(CUT_JS)
        assert not cut, f"cut at 1280 px on {path}: {cut}"
    finally:
        page.close()
