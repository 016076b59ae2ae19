"""Streamlit helpers shared by the pages (the Streamlit-free ones are in :mod:`dashboard`).

Selection: the run a page shows is the one the user picked (or just started), held by its id in
``st.session_state["watch"]`` and in the URL (``?run=``), never by a position in a list, so it
survives reruns, other runs finishing and new runs. Train and Runs share the callbacks here.
"""

from __future__ import annotations

import faulthandler
import functools
import json
import signal
from pathlib import Path

import streamlit as st

from admm_core.errors import ConfigError
from admm_core.rundir import STAMPED, read_json
from admm_core.runs import run_done_epochs
from admm_core.spec.archs import OWN
from admm_core.spec.deepfacto import STATE_FILE, DeepFactoConfig
from admm_core.spec.kinds import DEEPFACTO, run_kind
from app.dashboard import charts as C
from app.dashboard import meta as M
from app.dashboard import models, workers

ss = st.session_state


@functools.cache  # once per process
def stacks_on_usr1() -> None:
    """``kill -USR1 <server pid>`` writes every thread's Python stack to the server's log: a tab that
    never finishes drawing can be told from a script run stuck in the server (tests/conftest.py
    sends it when a browser test fails)."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)


STATE_COLOURS = {"running": "green", "starting": "orange", "finished": "blue", "crashed": "red", "diverged": "red"}
FAILED = ("crashed", "diverged")  # shown with their error message
ACTIVE = workers.ACTIVE  # the one list of live states (app.dashboard.workers)
TRAIN_PAGE = "views/train.py"
HEATMAPS_PAGE = "views/heatmaps.py"

PLOTLY_CONFIG = C.CONFIG


# Streamlit remounts a plotly chart whose figure changed (its element id hashes the figure; no public
# option keeps it), so plotly's uirevision never sees the user's zoom. This page script keeps each
# chart's view by its page and title: the axis ranges a user set and the legend entries they hid,
# re-applied to the chart that replaces it. Constant text: no input reaches it.
KEEP_VIEW_JS = r"""<script>
(() => {
  if (window.__admmViews) return;
  const views = window.__admmViews = new Map(), AXIS = /^([xy]axis[0-9]*)\.(range|autorange)/;
  let applying = 0;
  const done = () => { applying--; };
  const title = gd => { const t = (gd.layout || {}).title; return String((t && (t.text || t)) || '').replace(/<[^>]*>/g, ' '); };
  const view = gd => views.get(gd.__admmKey) || views.set(gd.__admmKey, {axes: {}, hidden: {}}).get(gd.__admmKey);
  function apply(gd) {
    if (!gd._fullLayout || !gd.data) return false;
    const v = view(gd), upd = {}, hide = [], show = [];
    for (const [ax, r] of Object.entries(v.axes)) {
      if (gd._fullLayout[ax] && JSON.stringify(gd._fullLayout[ax].range) !== JSON.stringify(r)) upd[ax + '.range'] = r.slice();
    }
    gd.data.forEach((t, i) => {
      if (v.hidden[t.name] && t.visible !== 'legendonly') hide.push(i);
      if (v.hidden[t.name] === false && t.visible === 'legendonly') show.push(i);
    });
    if (!Object.keys(upd).length && !hide.length && !show.length) return true;
    applying++;
    Promise.all([Object.keys(upd).length && Plotly.relayout(gd, upd),
      hide.length && Plotly.restyle(gd, {visible: 'legendonly'}, hide),
      show.length && Plotly.restyle(gd, {visible: true}, show)]).then(done, done);
    return true;
  }
  function hook(gd) {
    const key = location.pathname + '|' + title(gd);
    if (!gd.on || !title(gd) || gd.__admmKey === key) return;
    gd.__admmKey = key;
    gd.__admmShown = apply(gd);  // once per figure: a later redraw (the user's double-click) is theirs
    if (gd.__admmHooked) return;
    gd.__admmHooked = true;
    gd.on('plotly_relayout', ev => {
      if (applying) return;
      for (const [k, val] of Object.entries(ev || {})) {
        const m = AXIS.exec(k), r = m && (gd._fullLayout[m[1]] || {}).range;
        if (m && m[2] === 'autorange') { if (val) delete view(gd).axes[m[1]]; } else if (r) view(gd).axes[m[1]] = r.slice();
      }
    });
    gd.on('plotly_restyle', ev => {
      if (!applying && ev && ev[0] && 'visible' in ev[0]) gd.data.forEach(t => { view(gd).hidden[t.name] = t.visible === 'legendonly'; });
    });
    gd.on('plotly_afterplot', () => { if (!gd.__admmShown) gd.__admmShown = apply(gd); });
  }
  new MutationObserver(() => document.querySelectorAll('.js-plotly-plot').forEach(hook))
    .observe(document.body, {childList: true, subtree: true});
})();
</script>"""


# A file Streamlit's uploader refuses in the browser (too large, a type it does not accept) never reaches
# the script, and no public option reports it: it got a red mark with the reason in a tooltip only, and
# the previous file stayed. This page script names the refused file and why in a line under the
# uploader, and removes the previous file (so the page's message about it goes).
REFUSED_UPLOAD_JS = r"""<script>
(() => {
  if (window.__admmUploads) return;
  window.__admmUploads = true;
  const fix = () => document.querySelectorAll('[data-testid="stFileUploader"]').forEach(up => {
    const chips = [...up.querySelectorAll('[data-testid="stFileChip"]')];
    const bad = chips.filter(c => c.getAttribute('aria-invalid') === 'true');
    let note = up.nextElementSibling;
    if (!(note && note.classList.contains('admm-upload-refused'))) note = null;
    if (!bad.length) { if (note) note.remove(); return; }
    chips.filter(c => !bad.includes(c)).forEach(c => {
      const del = c.querySelector('[data-testid="stFileChipDeleteBtn"] button');
      if (del) del.click();
    });
    const text = bad.map(c => {
      const name = (c.querySelector('[data-testid="stFileChipName"]') || {}).textContent || 'the file';
      const why = ((c.querySelector('[role="alert"]') || {}).textContent || 'refused').replace(/^Error:\s*/, '');
      return name + ': not uploaded. ' + why;
    }).join(' ');
    if (!note) {
      note = document.createElement('div');
      note.className = 'admm-upload-refused';
      note.setAttribute('role', 'alert');
      note.style.cssText = 'margin:.5rem 0;padding:.75rem 1rem;border-radius:.5rem;' +
        'background:rgba(255,43,43,.12);color:inherit;font-size:.95rem';
      up.after(note);
    }
    if (note.textContent !== text) note.textContent = text;
  });
  new MutationObserver(fix).observe(document.body, {childList: true, subtree: true, attributes: true,
    attributeFilter: ['aria-invalid']});
})();
</script>"""


def explain_refused_uploads() -> None:  # the scripts run once per tab
    st.html(REFUSED_UPLOAD_JS, unsafe_allow_javascript=True, width="content")


def keep_chart_views() -> None:
    st.html(KEEP_VIEW_JS, unsafe_allow_javascript=True, width="content")


def runs_root() -> Path:
    """The runs folder chosen in the sidebar (main.py), confined to the allowed root; else the default."""
    return workers.safe_runs_root(ss.get("runs_root") or None)


def runs_root_problem() -> str | None:
    return workers.runs_root_problem(ss.get("runs_root"))


def list_runs() -> list[dict]:
    """workers.runs of the sidebar's folder with each run's meta.json ([] when unreadable: the sidebar says why)."""
    runs = workers.runs(runs_root())  # list_runs reads an unreadable folder as empty
    for r in runs:
        r["meta"] = _meta(r)
    return runs


_METAS: dict[str, tuple[int, dict]] = {}


def _meta(r: dict) -> dict:
    """meta.json of a run, kept while its directory's ``stamp`` (from the runs index) stands."""
    key, stamp = str(r["dir"]), r.get("stamp")
    if stamp is not None and (hit := _METAS.get(key)) is not None and hit[0] == stamp:
        return hit[1]
    meta = M.read_meta(r["dir"])
    if stamp is not None:
        _METAS[key] = (stamp, meta)
    return meta


MENU_SIZE = 50  # runs offered in a menu at once (newest first; the Runs page pages through all)


def menu_names(runs: list[dict], keep: str | None = None) -> list[str]:
    """Ids for a run menu: live runs and the ``MENU_SIZE`` newest, plus ``keep`` (the watched run)."""
    names = [r["name"] for r in runs if r["status"].get("state") in ACTIVE]
    names += [r["name"] for r in runs[:MENU_SIZE] if r["name"] not in names]
    if keep and keep not in names and any(r["name"] == keep for r in runs):
        names.append(keep)
    return sorted(names, reverse=True)


def state_md(state: str | None) -> str:
    state = state or "unknown"
    return f":{STATE_COLOURS.get(state, 'gray')}-badge[{state}]"  # stopped, unknown: gray


# a longer run id is shortened in a table (Runs, a study's trials) to fit a 1280-px window beside the
# other columns; the details and menus give it whole
ID_CHARS = 23
LAST_CHARS = 6  # a last part up to this long is kept beside the stamp ("t11", "s0"); a longer one: middle cut


def short_id(name: str, most: int = ID_CHARS) -> str:
    """``name`` itself (``most`` characters or fewer); a stamped id as its stamp, "…" and last part
    ("20261202-052512…t9"); else its first and last characters around a "…" (``most`` in all)."""
    if len(name) <= most:
        return name
    last = name.rsplit("-", 1)[-1]
    stamp = STAMPED.match(name)  # the start time every run's name begins with (admm_core.rundir)
    if stamp and len(last) <= LAST_CHARS:
        return f"{name[: stamp.end() - 1]}…{last}"
    tail = (most - 1) // 2
    return f"{name[: most - 1 - tail]}…{name[-tail:]}"


def count(n: int, noun: str) -> str:
    """ "1 field", "3 fields", not "3 field(s)"."""
    return f"{n} {noun}{'s' * (n != 1)}"


def run_label(r: dict) -> str:
    """'<id>', or '<name> (<id>)' for a run the user named: the label of a run in menus.

    Never the state: Streamlit keeps a menu's pick by its label, so a label that changed while the
    run went ('… · starting' → '… · running') lost the watched run (seen in CI)."""
    name = (r.get("meta") or {}).get("name")
    return f"{name} ({r['name']})" if name else r["name"]


# --- the one selection ----------------------------------------------------------------------


def watched() -> str | None:
    """The run id being watched: session state, else ``?run=`` in the URL."""
    if not ss.get("watch") and (run := st.query_params.get("run")):
        ss["watch"] = run
    return ss.get("watch") or None


WATCH_GEN = "watch_gen"  # bumped by every watch(): the generation in the run menus' widget keys
WATCH_BOX = "watch_box"  # {"id": the watched run}: a plain dict a route's thread may read (session state may not)


def watch(name: str | None) -> None:
    """Pick ``name`` (a run id) on every page; mirrored into ``?run=``. Bumps ``ss[WATCH_GEN]``: the
    menus keyed by it are new widgets, so a refresh carrying a menu's old value cannot pick the old run."""
    ss["watch"] = name
    ss[WATCH_GEN] = ss.get(WATCH_GEN, 0) + 1
    ss.setdefault(WATCH_BOX, {})["id"] = name  # read by the worker panel's stamp, in the route's thread
    if name:
        st.query_params["run"] = name
    elif "run" in st.query_params:
        del st.query_params["run"]


# --- callbacks shared by Train and Runs (they run before the page script) -----------------------


def on_stop(name: str) -> None:
    if not workers.stop_run(runs_root() / name):
        ss["notice"] = f"{name}: no worker to stop (it has ended)."


def resume_refusal(run_dir: Path, status: dict, done: int, target: int) -> str | None:
    """Why resuming the run to ``target`` epochs cannot work (checked before its status is touched), or None.

    An engine run must go past the epochs done; a DeepFacto run follows
    :meth:`DeepFactoConfig.resumed_to` (an unfinished one may resume to the iterations done: it
    only finishes its evaluation)."""
    saved = read_json(run_dir / "config.json", {}) or {}
    deepfacto = run_kind(saved, status) == DEEPFACTO  # what the run recorded, not which keys it has
    if deepfacto and not (run_dir / STATE_FILE).is_file():
        return (
            f"{run_dir.name}: no {STATE_FILE} to resume from (a DeepFacto run drops its loop state when it "
            "finishes, and has none before its first iteration); start a new run instead."
        )
    if not deepfacto:
        if (saved.get("model") or {}).get("arch") == OWN:  # one's own network: its file, re-imported by the worker
            if why := models.resume_problem(run_dir):
                return why
        if target <= done:
            return f"Resume to epoch = {target}: {run_dir.name} has already done {done} epochs; choose a target above {done}."
        return None
    try:
        DeepFactoConfig.from_saved(saved.get("deepfacto") or {}).resumed_to(target, done, field_name="Resume to epoch")
    except ConfigError as e:
        return f"{run_dir.name}: {e}"
    return None


def on_resume(name: str, target_key: str) -> None:
    run_dir = runs_root() / name
    target = int(ss.get(target_key) or 0)
    status = workers.state_of(run_dir)
    done = run_done_epochs(run_dir, status)
    if why := resume_refusal(run_dir, status, done, target):
        ss["notice"] = why
        return
    try:
        workers.resume_run(run_dir, target)
    except (RuntimeError, OSError) as e:
        ss["notice"] = f"Could not resume {name}: {e}"
        return
    watch(name)


def on_load(name: str) -> None:
    """Put run ``name``'s config.json into the Train form and watch that run (the page then switches)."""
    cfg = read_json(runs_root() / name / "config.json", None)
    if not cfg:
        ss["notice"] = f"{name} has no readable config.json."
        return
    entry = models.entry_of_run(runs_root() / name) if (cfg.get("model") or {}).get("arch") == OWN else None
    if entry:  # a run of a models-folder network: the form shows that network and the run's cuts
        cfg = {**cfg, "model": {**cfg["model"], "arch": entry}}
    ss["load_config"] = cfg
    ss["goto_train"] = True
    watch(name)


LOAD_PARAM = "load"  # /?load=<run id>: the Train page opens with that run's config (Runs → Load into Train)


def take_load_link() -> None:
    """On the Train page: ``?load=<run id>`` (the Runs page's link) loads that run, then is dropped.
    Only a run listed in the sidebar's runs folder (a link cannot name a path)."""
    if (name := st.query_params.get(LOAD_PARAM)) is None:
        return
    del st.query_params[LOAD_PARAM]
    if name not in {r["name"] for r in list_runs()}:
        ss["notice"] = f"No run {name!r} in {runs_root()}: nothing was loaded."
        return
    on_load(name)
    ss.pop("goto_train", None)  # already on the Train page


def load_into_train(config: dict) -> None:
    """Open the Train page with ``config`` (a config.json dict) in its form."""
    ss["load_config"] = config
    st.switch_page(TRAIN_PAGE)


def follow_goto() -> None:
    """At the top of a page: a Load callback asked to open the Train page."""
    if ss.pop("goto_train", False):
        st.switch_page(TRAIN_PAGE, query_params={"run": ss.get("watch") or ""})


# Streamlit has no call to scroll the page: a page script, numbered so that a second one in a row runs too
SCROLL_JS = """<script>/* %d */ (() => {
  const [anchor, then] = %s;
  let tries = 0, waits = 0;
  const more = el => {  // what the reader came for below the anchor, once drawn (100 px: not an empty frame)
    const f = [...document.querySelectorAll(then)].find(x => el.compareDocumentPosition(x) & Node.DOCUMENT_POSITION_FOLLOWING);
    const r = f && f.getBoundingClientRect();
    if (!r || r.height < 100) { if (waits++ < 300) setTimeout(() => more(el), 100); return; }
    if (r.top > 0.6 * innerHeight || r.bottom > innerHeight) f.scrollIntoView({block: "start"});
  };
  const go = () => {
    const el = document.getElementById(anchor);
    if (!el) { if (tries++ < 50) setTimeout(go, 100); return; }
    el.scrollIntoView({block: "start", behavior: "smooth"});
    if (then) setTimeout(() => more(el), 600);
  };
  setTimeout(go, 0);
})();</script>"""


def scroll_into_view(anchor: str, then: str | None = None) -> None:
    """Scroll to the element with id ``anchor`` once; then to what CSS selector ``then`` finds below it
    (the live charts) when that lies low or past the window's bottom."""
    n = ss["scrolls"] = ss.get("scrolls", 0) + 1
    st.html(SCROLL_JS % (n, json.dumps([anchor, then])), unsafe_allow_javascript=True, width="content")


def show_notice() -> None:
    if ss.get("notice"):
        st.warning(ss.pop("notice"))


def resume_controls(r: dict, key: str) -> None:
    """Stop, or 'Resume to epoch' + Resume, for run record ``r`` (the same record the caller shows)."""
    name, state = r["name"], r["status"].get("state", "unknown")
    if state in ACTIVE:
        st.button("Stop", icon=":material/stop:", key=f"{key}_stop", on_click=on_stop, args=(name,), width="stretch")
        return
    if state == "diverged":  # resumed with the same settings it diverges again: a new run with new ones
        st.button(
            "Load into Train",
            icon=":material/edit:",
            key=f"{key}_load",
            on_click=on_load,
            args=(name,),
            help="A diverged run is not resumed (its settings would diverge again): load its config, "
            "lower the step sizes, and start a new run.",
            width="stretch",
        )
        return
    done = run_done_epochs(r["dir"], r["status"])
    cfg_epochs = int((r["config"].get("train") or {}).get("epochs", 1) or 1)
    target_key = f"{key}_resume_to.{name}"
    # a DeepFacto run stopped in its evaluation: the default only finishes that
    finish_only = run_kind(r["config"], r.get("status")) == DEEPFACTO and state != "finished" and cfg_epochs == done
    st.number_input(
        "Resume to epoch",
        min_value=1,
        value=cfg_epochs if cfg_epochs > done or finish_only else done + max(1, cfg_epochs // 2),
        key=target_key,
        help=f"{done} epochs done; the run continues from its last checkpoint",
    )
    st.button(
        "Resume",
        icon=":material/play_arrow:",
        key=f"{key}_resume",
        on_click=on_resume,
        args=(name, target_key),
        disabled=state == "unknown",
        width="stretch",
    )
