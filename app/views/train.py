"""Train: configure a run, launch it as a worker process, watch it live.

The form (:func:`form_section`, :func:`method_section`) mirrors into the URL, with the watched run
(``?run=<id>``), so a setup is a shareable link; each of the engine's messages is shown under the
field it is about. :func:`live_panel` follows the watched run.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import streamlit as st

from admm_core.errors import CheckpointError, ConfigError, DataError
from admm_core.spec.archs import OWN, OWN_MESSAGE
from admm_core.spec.config import RunConfig
from admm_core.spec.datasets import DATASETS
from admm_core.spec.deepfacto import DeepFactoConfig
from admm_core.spec.faces import find_lfw
from admm_core.spec.kinds import DEEPFACTO, NETWORK, run_kind, run_method
from admm_core.spec.methods import METHODS
from admm_core.spec.presets import PRESETS
from admm_core.spec.resources import human as human_bytes
from admm_core.spec.resources import split_of, state_of_cuts
from app import ui
from app.dashboard import charts as C
from app.dashboard import follow as FL
from app.dashboard import form as F
from app.dashboard import live as L
from app.dashboard import live_charts as LC
from app.dashboard import models as M
from app.dashboard import tail as T
from app.dashboard import workers as W
from app.worker_panel import worker_panel

LIVE_KEY = "live"  # the live panel's fragment key
START_DEDUP_S = 3.0  # the same config started again within this many seconds is the same click
K = "f."  # prefix of the form's widget keys
MAIN_SETTINGS = 8  # method settings shown at once; the rest sit in an expander
LINK_NOTICE = "link_notice"  # the link's values not applied, each with its reason (F.from_query)
ss = st.session_state


def wkey(field: str, method: str | None = None) -> str:
    """Widget key of a form field; method settings are keyed per method, DeepFacto's by their own."""
    if field.startswith(F.DF):
        return field
    if field.startswith(F.MP):
        return f"{K}{F.MP}{method or ss.get(K + 'method', F.DEFAULT_METHOD)}.{field[len(F.MP) :]}"
    return K + field


def set_form(form: dict) -> None:
    method = form.get("method", F.DEFAULT_METHOD)
    for k, v in form.items():
        ss[wkey(k, method)] = list(v) if isinstance(v, (list, tuple)) else v


def read_form() -> dict:
    method = ss.get(K + "method", F.DEFAULT_METHOD)
    keys = [f.key for f in F.FIELDS] + [F.GIVEN, F.LINK] + list(F.method_fields(method))
    return {k: ss[wkey(k, method)] for k in keys if wkey(k, method) in ss}


# --- callbacks (run before the page script, so they may set widget values) -----------------


def on_preset():
    preset, method = ss[K + "preset"], ss[K + "method"]
    if preset != F.NO_PRESET:
        set_form(F.default_form(preset, method))
        ss.pop(K + F.LINK, None)  # every field filled again: a link's errors about them are gone


def method_defaults(preset: str = F.NO_PRESET) -> None:
    """The method's fields at the preset's values, else at its defaults (the recipe measured across
    the zoo: what ``admm train --model`` gives a network no preset knows); the split's mark stays."""
    method = ss.get(K + "method", F.DEFAULT_METHOD)
    given = [k for k in ss.get(K + F.GIVEN) or [] if not k.startswith(F.MP)]
    if preset == F.NO_PRESET or M.is_entry(ss.get(K + "arch")):
        set_form({"method": method, **F.method_fields(method), F.GIVEN: given})
        return
    fresh = F.default_form(preset, method)  # with "method": set_form files them under the new method's widgets
    mine = {k: v for k, v in fresh.items() if k.startswith(F.MP) or k == "batch_size"}
    set_form({"method": method, **mine, F.GIVEN: given + [k for k in fresh[F.GIVEN] if k.startswith(F.MP)]})


def on_method():
    link = ss.get(K + F.LINK) or {}  # the old method's settings are not the form's any more
    ss[K + F.LINK] = {k: v for k, v in link.items() if not k.startswith(F.MP)}
    method_defaults(ss[K + "preset"])


def on_shape():
    if M.is_entry(ss.get(K + "arch")):  # a model file's network: no cut until one is picked
        ss[K + "split"] = []
        method_defaults()
        return
    try:
        network = F.network_of({k: ss[K + k] for k in ("arch", "hidden", "width") if K + k in ss})
    except ConfigError:
        return  # the field shows the message
    ss[K + "split"] = F.split_options(*network)[1]
    ss[K + F.GIVEN] = [k for k in ss.get(K + F.GIVEN) or [] if k != "split"]  # the default split again


def on_split():
    """The split's tags in network order, whatever order they were clicked in (unknown ones last)."""
    ss[K + "split"] = _ordered_form()["split"]


def edited(field: str, then=None):
    """The on_change of a field: a link's error about it goes (the user has edited it), then ``then``."""

    def callback():
        ss.pop(LINK_NOTICE, None)  # the user has taken the form over from the link
        if field in (link := ss.get(K + F.LINK) or {}):
            ss[K + F.LINK] = {k: v for k, v in link.items() if k != field}

        if then is not None:
            then()

    return callback


def on_start():
    """Launch the form's run once per click: the same config again within START_DEDUP_S is the same click."""
    form = _ordered_form()
    got = checked_form(form, click=True)
    if (cfg := got.cfg) is None:
        ss["notice"] = f"Not started: fix {ui.count(len(got.errors), 'field')}."
        return
    if M.is_entry(form["arch"]):  # the worker imports the file: admm train --model FILE.py:Name --split …
        spec, split = form["arch"], list(form["split"])
        launch_once(f"{spec}\n{split}\n{cfg.to_json()}", lambda: W.start_model_run(spec, split, cfg, ui.runs_root()))
        return
    n = int(form.get("processes", 1))  # > 1: the worker runs under torchrun (sample-sharded Z/U)
    # the form's check above was the preflight of this start: the launch does not run it again
    launch_once(f"{cfg.to_json()}\nprocesses={n}", lambda: W.start_run(cfg, ui.runs_root(), n, checked=True))


def launch_once(text: str, launch) -> None:
    """Run ``launch()`` (it returns the run directory) unless the same config ``text`` was started
    within START_DEDUP_S (a double click), then watch the new run. Train and DeepFacto share it."""
    last = ss.get("last_start") or {}
    if last.get("config") == text and time.time() - last.get("time", 0) < START_DEDUP_S:
        ss["start_toast"] = f"Already started {last['run']}"
        return
    try:
        run_dir = launch()
    except (ConfigError, DataError, CheckpointError, ValueError, FileNotFoundError) as e:
        ss["notice"] = f"Not started: {e}"
        return
    except OSError as e:
        ss["notice"] = f"Could not start the run in {ui.runs_root()}: {e}"
        return
    ss["last_start"] = {"config": text, "time": time.time(), "run": run_dir.name}
    ss["start_toast"] = f"Started {run_dir.name}"
    ss["show_live"] = True  # the live panel scrolls into view
    ui.watch(run_dir.name)


def _load_config(cfg: dict) -> None:
    if run_kind(cfg) == DEEPFACTO:
        df = cfg.get("deepfacto") if isinstance(cfg.get("deepfacto"), dict) else {}
        set_form(F.deepfacto_form(df))
        if df.get("backbone_weights"):
            ss["df_backbone"], ss["df_saved"] = "saved", str(df["backbone_weights"])
        ss["train_mode"] = DEEPFACTO
        ss["form_notice"] = "Loaded the DeepFacto run's settings into the DeepFacto form."
        return
    if (cfg.get("model") or {}).get("arch") == OWN:  # no record to rebuild its network from: the form stays
        ss["form_notice"] = f"Not loaded into the form: {OWN_MESSAGE}."
        return
    # valid or not: a wrong value goes into its field, whose message says why (Start waits for it);
    # what no widget can hold is said here too
    form, problems = F.form_from_dict(cfg)
    set_form({F.LINK: {}, **form})  # the loaded config replaces what a link gave
    ss.pop(LINK_NOTICE, None)
    not_loaded = " Not loaded: " + " · ".join(problems) if problems else ""
    ss["form_notice"] = "Loaded the run's configuration into the form." + not_loaded


def _ordered_form() -> dict:
    """The form with the split in layer order (unknown entries last)."""
    form = read_form()
    allowed = F.allowed_splits(form)
    form["split"] = sorted(form.get("split") or [], key=lambda s: allowed.index(s) if s in allowed else len(allowed))
    return form


# --- the page's parts ---------------------------------------------------------------------------


def init_form() -> None:
    """Initial values: a loaded run, else the URL, else the last form, else digits defaults."""
    ui.take_load_link()
    if "load_config" in ss:
        _load_config(ss.pop("load_config"))
    qp = st.query_params.to_dict()
    fresh = K + "method" not in ss or K + "data" not in ss
    if fresh or "train_mode" not in ss:
        form, notes = None, []
        if set(qp) - {"run"}:  # a link: every value applied or named (F.from_query), whatever else it holds
            form, notes = F.from_query(qp)
        if notes:
            ss[LINK_NOTICE] = notes
        if fresh:
            set_form(form or ss.get("train_form") or F.default_form())
        if "train_mode" not in ss:
            ss["train_mode"] = DEEPFACTO if qp.get("mode") == DEEPFACTO else NETWORK
            set_form(F.deepfacto_form() | {k: v for k, v in (form or {}).items() if k.startswith(F.DF)})
    ui.watched()  # ?run= in a link picks the watched run


ON_CHANGE = {"preset": on_preset, "method": on_method, "arch": on_shape, "hidden": on_shape, "split": on_split}


def note(notes: dict, field: str) -> None:
    """The field's message (from the validation that ran before the form was drawn), under its widget."""
    if field in notes:
        kind, msg = notes.pop(field)
        msg = F.on_page(msg, field, ss.get(K + "method", F.DEFAULT_METHOD))  # by its label, as the page shows it
        (st.error if kind == "error" else st.warning)(msg, icon="⚠️")


@functools.lru_cache(maxsize=64)
def _reference_form(preset: str | None, method: str) -> dict:
    """The form a preset gives (its measured method settings marked given): what a field's help
    compares with; {} for no preset."""
    try:
        return F.default_form(preset, method) if preset in PRESETS else {}
    except (ConfigError, KeyError):
        return {}


def field_help(ff: F.FormField, form: dict) -> str:
    """A field's help: what it is, the value in force and where it comes from (the preset's value,
    the default, or set here by hand, a link or a loaded run), and its code name."""
    if ff.key.startswith(F.MP):
        return setting_help(ff, form)
    said = ""
    if ff.key not in ("preset", "method") and ff.key in form:
        value, preset, default = form[ff.key], form.get("preset"), ff.default
        shown = ", ".join(map(str, value)) or "none" if isinstance(value, list) else F.label_of(ff, value)
        if ff.kind == "split":
            try:
                default = F.split_options(*F.network_of(form))[1]
                source = "the network's default split" if value == default else "set here"
            except (ConfigError, KeyError, TypeError):
                source = None
        elif preset in PRESETS and _reference_form(preset, form.get("method", F.DEFAULT_METHOD)).get(ff.key) == value:
            source = f"the preset {preset}'s" + (
                "" if value == default else f" (the default: {F.label_of(ff, default)})"
            )
        else:
            source = "the default" if value == default else "set here"
        said = f"In force: {shown}, {source}. " if source else ""
    code = f"{said}Setting `{ff.path or ff.key}`."  # the code name: messages use the label
    return f"{ff.help.rstrip('.')}. {code}" if ff.help else code


def field_widget(ff: F.FormField, form: dict, notes: dict) -> None:
    """The widget of one form field, as its metadata declares it, with its message below: every
    form of the page (the network's, the method's settings, DeepFacto's) draws with it."""
    kw = {"key": wkey(ff.key), "help": field_help(ff, form), "disabled": not ff.enabled(form)}
    if kw["key"].startswith(K):  # the network form's: a link's error about the field goes once it is edited
        kw["on_change"] = edited(ff.key, ON_CHANGE.get(ff.key))
    if ff.menu == "archs":
        kw["help"] = f"with your own networks: the nn.Module classes and no-argument functions in {M.models_dir()}/*.py"
    if ff.kind == "select":
        changed = ff.menu == "presets" and ss.get("preset_edited")  # its values changed since it was picked
        fmt = lambda v: F.label_of(ff, v) + (" (edited)" if changed and v == form.get(ff.key) else "")
        st.selectbox(ff.label, F.choices(ff, form), format_func=fmt, **kw)
    elif ff.kind == "split":  # the options keep a wrong entry of a link or a loaded config: its message says why
        labels = F.split_labels(form)  # layer3 (= layer3.1): typing either name finds it
        st.multiselect(ff.label, F.choices(ff, form), format_func=lambda v: labels.get(v, v), wrap=True, **kw)
    elif ff.kind == "check":
        st.checkbox(ff.label, **kw)
    elif ff.kind in ("int", "float"):
        # no min_value / max_value: a browser refuses a typed value outside them without telling the page
        # (a red outline, the old value kept), so 0 epochs is sent as typed and the field's message says why
        st.number_input(ff.label, step=(int if ff.kind == "int" else float)(ff.step or 1), **kw)
    else:
        st.text_input(ff.label, **kw)
    if ff.menu == "presets" and ss.get("preset_edited") and form.get(ff.key) != F.NO_PRESET:
        # said in words too: the menu's "(edited)" is easily missed, and does not say what changed
        st.caption(f"Edited since picked: {', '.join(ss['preset_edited'])} differ from {form.get(ff.key)}.")
    note(notes, ff.key)


def keep_undrawn(keys) -> None:
    """Streamlit drops the value of a widget a run does not draw; set again as plain session state,
    which it keeps, the widget takes it back when next drawn."""
    for k in keys:
        if k in ss:
            ss[k] = ss[k]


def field_row(fields: list[F.FormField], form: dict, notes: dict, most: int = F.ROW_MAX) -> None:
    """Fields in rows of at most ``most``, each row's messages below it at the row's width. A field
    that does not apply (the other network's size field, Init σ under the default initialisation, the
    split of an end-to-end method) is not drawn unless it has a message; its value is kept."""
    shown = [ff for ff in fields if ff.enabled(form) or ff.key in notes]
    keep_undrawn(wkey(ff.key) for ff in fields if ff not in shown)
    for row in F.rows(shown, most):
        mine = {ff.key: notes.pop(ff.key) for ff in row if ff.key in notes}
        # each field's share of its row, in characters: its label (a checkbox's box beside it), a menu's
        # value with its arrow, and room for a number box's − / + (12 at least)
        menu = lambda ff: len(F.label_of(ff, form.get(ff.key))) + 6 if ff.kind == "select" else 0
        widths = [max(len(ff.label) + 7 * (ff.kind == "check"), menu(ff), 12) for ff in row]
        for col, ff in zip(st.columns(widths), row):
            with col:
                field_widget(ff, form, notes)
        notes.update(mine)
        for key in mine:
            note(notes, key)


def checked_form(form: dict, *, click: bool = False) -> F.FormCheck:
    """:func:`dashboard.form.check_form` of ``form``, once per click: Start's callback (``click``)
    checks afresh (what is free now) and the drawing that follows reuses that check while the form
    is the same."""
    last = ss.pop("form_check", None)
    if not click and last is not None and last[0] == form:
        return last[1]
    got = F.check_form(form)
    if click:
        ss["form_check"] = (form, got)
    return got


def validate() -> tuple[dict, F.FormCheck, dict]:
    """The form as the widgets will show it, checked before any widget is drawn, so each message is
    drawn under its field -> (form, :func:`dashboard.form.check_form`'s findings, notes: field ->
    (kind, message))."""
    method = ss[K + "method"]
    for k, v in F.method_fields(method).items():  # a method's settings default to its own
        ss.setdefault(wkey(k, method), v)
    form = _ordered_form()  # every value as given: a wrong one is said under its field, never dropped
    got = checked_form(form)
    ss["preset_edited"] = F.preset_changes(form, got.cfg)  # the fields that differ from the preset
    # allowed, but said: an absurd learning rate / step size, more processes than cores
    notes = {k: ("warning", m) for k, m in got.warnings.items()} | {k: ("error", m) for k, m in got.errors.items()}
    return form, got, notes


def form_section(form: dict, got: F.FormCheck, notes: dict) -> None:
    """Data set, network and split, from the config's fields, then the block diagram."""
    groups = F.groups()
    with st.container(border=True):
        st.markdown("**Data and network**")
        field_row(groups["data"], form, notes)
        field_row(groups["network"], form, notes)
        for line in M.unreadable():  # a models-folder file the menu cannot list: said, with its line
            st.warning(line, icon="⚠️")
        if M.is_entry(form["arch"]):
            draw_cuts(form, got)
        else:
            draw_blocks(form, got, METHODS[form["method"]].uses_blocks)
        note(notes, "memory")


def folded(label: str, key: str, fields: list[F.FormField], form: dict, notes: dict) -> None:
    """``fields`` in an expander whose widgets exist only while it is open: closed, they are not sent
    at all (docs/reliability.md "First paint") and their values are kept. One with a message opens."""
    if any(ff.key in notes for ff in fields):
        ss[key] = True
    box = st.expander(label, key=key, on_change="rerun")
    if not box.open:
        keep_undrawn(wkey(ff.key) for ff in fields)
        return
    with box:
        field_row(fields, form, notes, most=4)


def setting_help(ff: F.FormField, form: dict) -> str:
    """A method setting's help, as :func:`field_help`'s (under a preset, the value measured for it;
    a models-folder network has none: the method's defaults are the recipe measured across the zoo),
    with the method's default beside any other and whether that default is a measured one (it
    differs from the paper's algorithm as printed: the record's ``PAPER``)."""
    method, name = form.get("method", F.DEFAULT_METHOD), ff.key[len(F.MP) :]
    s = next(x for x in METHODS[method].settings() if x["name"] == name)
    preset, paper = form.get("preset"), METHODS[method].PAPER
    ref = _reference_form(None if M.is_entry(form.get("arch")) else preset, method)
    text = lambda v: str(v) if isinstance(v, (bool, str)) else F.fmt_number(v)
    shown = text(form.get(ff.key))
    if ff.key in ref.get(F.GIVEN, ()) and text(ref[ff.key]) == shown:
        source = f"the value measured for the preset {preset}"
    elif text(s["default"]) == shown:
        source = "the method's default"
    else:
        source = "set here (or by the link or loaded run)"
    default = "" if source == "the method's default" else f"; the method's default is {text(s['default'])}"
    if name in paper and paper[name] != s["default"]:
        default += (
            f" (a measured default, docs/deviations.md: the paper's algorithm as printed has {text(paper[name])}, "
            "Recipe = paper)"
        )
    return f"{s['help']}. In force: {shown}, {source}{default}. Setting `{name}`."


def method_section(form: dict, notes: dict) -> None:
    """Method, training settings and the method's own settings (the rest in folded expanders)."""
    groups, method = F.groups(), ss[K + "method"]
    cls = METHODS[method]
    # the settings that apply now (the record says which: not the duals of gotmare, not power_steps
    # with a fixed Z step, ...), and any other with a message; the rest keep their values unseen
    values = {s["name"]: form.get(F.MP + s["name"]) for s in cls.settings()}
    applying = {s["name"] for s in cls.shown_settings(values)}
    settings = [s for s in cls.settings() if s["name"] in applying or F.MP + s["name"] in notes]
    keep_undrawn(wkey(F.MP + s["name"], method) for s in cls.settings() if s not in settings)
    fields = [F.setting_field(method, s) for s in settings]  # labelled by the paper's symbol and words
    with st.container(border=True):
        st.markdown("**Method and training**")
        field_row(groups.pop("method") + groups.pop("train"), form, notes)
        more = [f for g, fs in groups.items() if g not in ("data", "network") for f in fs]  # a new group lands here
        folded(f"More training settings ({len(more)})", "train_more_open", more, form, notes)
        end_to_end = "" if cls.uses_blocks else " (end-to-end: the split is ignored)"
        st.caption(f"**{method}** — {cls.summary}{end_to_end}")
        field_row(fields[:MAIN_SETTINGS], form, notes, most=4)
        if rest := fields[MAIN_SETTINGS:]:
            folded(f"More {method} settings ({len(rest)})", f"mp_more_open.{method}", rest, form, notes)


def draw_blocks(form: dict, got: F.FormCheck, uses_blocks: bool) -> None:
    """The block diagram with parameter counts and the memory estimate, by arithmetic on the config
    (while other fields are wrong too: the estimate does not depend on them)."""
    if {"hidden", "split", "data", "arch", "width"} & set(got.errors):
        return
    try:
        arch, hidden, width = F.network_of(form)
        split = form["split"] if uses_blocks else []  # end to end: one network, T = 1, as the caption says
        blocks = F.describe_blocks(arch, hidden, split, form["data"], width)
    except (ConfigError, DataError, OSError) as e:  # a diagram is a nicety; never a traceback
        st.caption(f"(no block diagram: {e})")
        return
    dark = (st.context.theme.type or "light") == "dark"  # the diagram's lines follow the theme
    st.graphviz_chart(F.block_diagram_dot(blocks, uses_blocks, dark), width="content")
    if got.memory is not None:
        mem = got.memory  # the form check's (preflight's) estimate: not made again here
        st.caption(
            f"{sum(b['params'] for b in blocks):,} parameters ({human_bytes(mem['param_bytes'])}); "
            f"Z/U state {human_bytes(mem['state_bytes'])}; about {human_bytes(mem['total_bytes'])} to train "
            f"(limit {human_bytes(F.max_run_bytes())})."
        )


CUTS = "cuts_graph"  # the drawn graph's key: its selection is the click on a cut point


def on_cut_click() -> None:
    """A click on the graph's cut point toggles it in the split (as the multiselect does), or says
    why that point is no cut. The graph is then drawn as a new chart (:data:`CUTS` ``.n`` counts the
    clicks into its figure): a chart that was clicked never comes back with its old selection, which
    would turn the next click on that point into an unselect (no event)."""
    form = read_form()
    ss[CUTS + ".n"] = ss.get(CUTS + ".n", 0) + 1
    for p in [q for q in ss[CUTS].selection.points if q.get("customdata")][:1]:  # a marker, not a skip's arc
        split, ss["cut_why"] = M.toggle_cut(
            M.cut_table(form["arch"], form["data"]), form.get("split") or [], p["customdata"][0]
        )
        if split != form.get("split"):
            ss[K + "split"] = split
            edited("split", on_split)()


def draw_cuts(form: dict, got: F.FormCheck) -> None:
    """A model file's traced layers in forward order with their output shapes, the cut points picked
    on it by a click (:func:`on_cut_click`); then the Z/U state the picked cuts make, by the method's
    own rule on those shapes."""
    try:
        rows = M.cut_table(form["arch"], form["data"])
    except ConfigError:
        return  # said once, under the network field
    shape = getattr(DATASETS.get(form["data"]), "input_shape", None)
    fig = M.cut_figure(rows, list(form["split"]), shape).update_layout(meta=ss.get(CUTS + ".n", 0))
    alt = "The network's layers in forward order; a click on a cut point picks or removes it"
    st.plotly_chart(
        fig, key=CUTS, on_select=on_cut_click, selection_mode="points", config={"displayModeBar": False}, alt=alt
    )
    st.caption(ss.pop("cut_why", "") or "Click a point to cut after its layer (or pick in the split menu).")
    if got.cfg is not None and METHODS[got.cfg.method].uses_blocks:
        state = state_of_cuts(rows, list(form["split"]), got.cfg)
        limit = F.max_run_bytes()
        said = f"Z/U state of these cuts: {human_bytes(state)} (limit {human_bytes(limit)})."
        st.warning(said + " Cut at narrower tensors or use fewer samples.") if state > limit else st.caption(said)


SET_UP = "The settings are below; the page URL holds this setup. [Live panel ↓](#live)"


def start_row(key: str, ready: bool, on_click, said: str, args: tuple = (), warn: bool = False) -> None:
    """Start, Load and a one-line summary of the setup (``said``: what to fix, else the setup), above
    a form, so they are in view without scrolling; the toast of the last start."""
    c = st.columns([1.1, 1.5, 3])
    c[0].button(
        "Start run",
        icon=":material/play_arrow:",
        type="primary",
        disabled=not ready,
        key=key,
        width="stretch",
        on_click=on_click,
        args=args,
    )
    with c[1].popover("Load a run's config", width="stretch"):
        if runs := ui.list_runs():
            by_name = {r["name"]: r for r in runs}
            help_ = f"the {ui.MENU_SIZE} newest runs and the live ones; any run: Runs page → Load into Train"
            st.selectbox(
                "Run", ui.menu_names(runs), key="load_run", format_func=lambda n: ui.run_label(by_name[n]), help=help_
            )
            load = lambda: ui.on_load(ss["load_run"]) if ss.get("load_run") else None
            st.button("Load into the form", on_click=load, key="load_btn")
        else:
            st.caption("No runs yet.")
    (c[2].warning if warn else c[2].caption)(said)
    if ss.get("start_toast"):
        st.toast(ss.pop("start_toast"))


def start_section(cfg: RunConfig | None, errors: dict, form: dict) -> None:
    """The network form's start row: what to fix, else the setup in one line."""
    if cfg is None:
        fields = {k: v for k, v in errors.items() if k not in ("memory", "_form")}  # "memory" is no field
        said = [
            f"Fix {ui.count(len(fields), 'field')} below to start: {', '.join(F.error_labels(fields, form['method']))}."
        ]
        if "memory" in errors:
            said.append("The run does not fit in memory: see the estimate under the block diagram.")
        if "_form" in errors:
            said.append("The setup as a whole is refused: see the message below the form.")
        return start_row("start", False, on_start, " ".join(said[0 if fields else 1 :]))
    own = M.is_entry(form["arch"])
    T = (len(form["split"]) if own else len(split_of(cfg))) + 1 if METHODS[cfg.method].uses_blocks else 1
    arch = M.label(form["arch"]) if own else F.network_caption(cfg.model)
    said = f"{cfg.data.name} · {arch} · T = {ui.count(T, 'block')} · {cfg.method} · {cfg.train.epochs} epochs. {SET_UP}"
    start_row("start", True, on_start, said)


# --- DeepFacto (LFWA faces) -------------------------------------------------------------------------

BACKBONES = {
    "train": "the shipped one, or one trained here",
    "saved": "a saved file",
    "upload": "upload a weights file",
}


def backbone_choice(fields: list[F.FormField], form: dict, notes: dict) -> tuple[str | None, bool]:
    """The backbone radio (``fields``: those of a backbone trained here): (weights file or None,
    whether the choice is complete)."""
    st.radio(
        "Face backbone (block 1)",
        list(BACKBONES),
        key="df_backbone",
        horizontal=True,
        format_func=BACKBONES.get,
        help="No pretrained weights are downloaded. The project ships a backbone trained on LFW with the default "
        "settings (assets/models); a run with other settings or images trains its own here (cached for the next "
        "run). Backbone source 'train' always uses one trained here.",
    )
    choice = ss["df_backbone"]
    if choice == "train":
        field_row(fields, form, notes, most=4)
        return None, True
    if choice == "saved":
        files = [str(p) for p in W.saved_backbones()]
        if ss.get("df_saved") and ss["df_saved"] not in files:
            files.insert(0, ss["df_saved"])  # from a loaded run
        if not files:
            st.info("No saved backbone on this machine yet: train one here or upload a file.")
            return None, False
        st.selectbox("Backbone file", files, key="df_saved", format_func=lambda f: Path(f).name)
        return ss["df_saved"], True
    what = "Backbone weights (.pt: a state_dict of the face backbone, loaded as plain tensors only)"
    if (up := st.file_uploader(what, key="df_upload", type=["pt", "pth"])) is None:
        return None, False
    try:
        path = W.save_upload(up.name, up.getvalue())
    except ValueError as e:
        st.error(f"backbone file {up.name!r}: {e}", icon="⚠️")
        return None, False
    st.caption(f"Kept as `{path.name}` (named by its content) in `{path.parent}`.")
    return str(path), True


def on_start_deepfacto(cfg_json: str) -> None:
    """Launch once per click (the same settings again within START_DEDUP_S are the same click)."""
    launch_once(cfg_json, lambda: W.start_deepfacto(DeepFactoConfig.from_dict(json.loads(cfg_json)), ui.runs_root()))


def deepfacto_section() -> dict:
    """DeepFacto on LFWA: backbone → NMF (rank r) → FC, trained by Block-ADMM; returns the URL query."""
    lfw_problem = None
    try:
        find_lfw()
    except DataError as e:
        lfw_problem = str(e)
    form = {k: ss[k] for k in F.DF_FIELDS if k in ss}
    cfg, errors = F.deepfacto_config(form)  # each field on its own first: its message under its widget
    notes = {k: ("error", m) for k, m in errors.items()}
    groups = {g: [F.DF_FIELDS[F.DF + n] for n in names] for g, names in F.DF_GROUPS.items()}
    top = st.container()  # Start's row, above the form (in view without scrolling), filled once the form is read
    with st.container(border=True):
        st.markdown("**DeepFacto on LFWA faces**")
        st.caption(
            "Block 1 is a face backbone, then an NMF module Z_1 ≈ M·S (rank r, M, S ≥ 0), then block 2, an FC "
            "embedding trained with a triplet loss. At the end, attribute SVMs read S (40 LFWA attributes) and the "
            "Heatmaps page draws the rows of S over faces. The paper's ranks: 4, 32, 256."
        )
        field_row(groups.pop("main"), form, notes, most=3)
        weights, backbone_ok = backbone_choice(groups.pop("backbone"), form, notes)
        rest = [ff.key for fields in groups.values() for ff in fields]
        with st.expander(f"All DeepFacto settings ({len(rest)})", expanded=bool(set(errors) & set(rest))):
            st.caption("Text fields read like `--set NAME=VALUE`: JSON where it parses (numbers, lists, null).")
            for title, fields in groups.items():
                st.markdown(f"**{title}**")
                field_row(fields, form, notes, most=4)
    for field in list(notes):  # a message about no one field (a combination of them)
        note(notes, field)
    if cfg is not None:  # the backbone file too
        cfg, errors = F.deepfacto_config(form, weights)
        for msg in errors.values():
            st.error(msg, icon="⚠️")
    if lfw_problem:
        said = f"LFWA is not here: {lfw_problem}"
    elif cfg is None:
        labels = [F.DF_FIELDS[f].label if f in F.DF_FIELDS else f for f in errors]
        said = f"Fix {ui.count(len(errors), 'field')} below to start: {', '.join(labels)}."
    elif not backbone_ok:
        said = "Choose the face backbone below to start."
    else:
        trained = f"trained here ({cfg.backbone_epochs} epochs) or cached"
        shipped = cfg.backbone_source == "shipped"
        backbone = (
            f"the shipped backbone if it fits these settings, else one {trained}" if shipped else f"backbone {trained}"
        )
        said = (
            f"r = {cfg.rank} · {cfg.warmup_epochs} + {cfg.finetune_epochs} epochs on {cfg.admm_images} images · "
            f"{'backbone ' + Path(weights).name if weights else backbone}. {SET_UP}"
        )
    with top:
        ready = cfg is not None and backbone_ok and lfw_problem is None
        cfg_json = json.dumps(cfg.to_dict()) if cfg is not None else ""
        start_row("start_df", ready, on_start_deepfacto, said, (cfg_json,), warn=bool(lfw_problem))
        ui.show_notice()  # "Not started: …", beside the button that was pressed
    return F.to_query(form, DEEPFACTO)


# --- live view of one run ------------------------------------------------------------------------

NO_ROUTE = (
    "This server has no live data route, so the panel does not follow the run: start the dashboard with "
    "`scripts/run.sh` (`streamlit run app/serve.py`). A reload shows what is on disk now."
)


@st.cache_resource(max_entries=64, show_spinner=False)
def _chart_decl(method: str | None, run: str) -> dict:
    spec = C.live_spec(method=method)
    frames = {n: C.spec_frame(c, run) for n, c in spec.items()}
    return {"spec": spec, "order": list(spec), "frames": frames, "style": C.STYLE}


def _chart_args(r: dict, drawn: tuple | None) -> dict:
    """The live charts component's arguments: the run, its charts' declarations and style
    (charts.live_spec, charts.STYLE), the route and token through which its page fetches the lines
    and the status, and the digest of what the panel drew (``drawn``; None: redraw once more)."""
    live = {"route": T.ROUTE, "token": T.grant(r["dir"])} if FL.available() else {"route": None, "missing": NO_ROUTE}
    decl = _chart_decl(run_method(r["config"], r.get("status")), r["name"])
    return {**decl, "run": r["name"], "drawn": "" if drawn is None else L.digest(drawn), "live": live}


@st.fragment(key=LIVE_KEY)
def live_panel():
    """The watched run, redrawn when what it shows changes: the browser asks, the page reruns.

    No timer, and nothing in the server pushes a rerun. The live charts' page fetches the run's new
    lines and the digest of :func:`dashboard.live.live_stamp` (the runs folder's listing, the run's
    launch and meta files, its state) and reruns this fragment when it is not the one drawn here
    (:mod:`dashboard.follow`); with no run watched, the follow component asks for the stamp alone.
    So an unchanged or ended run costs one small answer per tab every 2 s and no redraw, and a
    Resume from another tab or the CLI is still seen."""
    root, before = ui.runs_root(), ui.watched()
    drawn = L.live_stamp(root, before)  # before reading: a change while drawing redraws again
    st.subheader("Live", anchor="live")
    if ss.pop("show_live", False):  # just started: the panel is below the form
        ui.scroll_into_view("live", then=LC.SELECTOR)
    runs = ui.list_runs()
    picked = _watch_menu(runs)
    watched = ui.watched()
    if watched != before:  # picked, or a live run watched by itself, while drawing: once more
        drawn = None
    if picked is None:
        FL.follow(LIVE_KEY, lambda: L.live_stamp(root, watched), drawn)
        return
    _run_panel(*picked, drawn)


def _watch_menu(runs: list[dict]):
    """The run menu; returns (the watched run's record, the row's columns) or None (then a line says why)."""
    if not runs:
        st.info("No runs yet — press **Start run** above (or start one with `python -m admm_core train ...`).")
        return None
    by_name = {r["name"]: r for r in runs}
    watched = ui.watched()
    names = ui.menu_names(runs, watched)  # live + newest, stable order (ids start with the launch time)
    if watched is None and (live := [n for n in names if by_name[n]["status"].get("state") in ui.ACTIVE]):
        ui.watch(live[0])  # a fresh tab while runs are going: the newest live one
        watched = live[0]
    # the menu only mirrors the selection (by id). No on_change: a callback fired by a redraw with stale
    # values (2.5-5 s of them after Start) put the pick anywhere. Its key carries the selection's
    # generation (ui.watch bumps it), so after Start / Load / Resume the menu is a new widget whose
    # value is the new run, and a stale value of an old one is never read.
    pick_key = f"watch_pick.{ss.get(ui.WATCH_GEN, 0)}"
    c = st.columns([3, 1.3, 1])
    with c[0]:
        picked = st.selectbox(
            "Run",
            names,
            index=names.index(watched) if watched in by_name else None,
            key=pick_key,
            placeholder="Pick a run to watch",
            format_func=lambda n: ui.run_label(by_name[n]),
        )
    if picked is not None and picked != watched and picked in by_name:  # the user picked another run
        ui.watch(picked)
        watched = picked
    if watched is None:
        st.caption("Start a run above, or pick one to watch.")
        return None
    if watched not in by_name:
        st.warning(f"Run `{watched}` is not in `{ui.runs_root()}` (deleted or another folder). Pick another.")
        return None
    return by_name[watched], c


def _run_panel(r: dict, c: list, drawn: tuple | None) -> None:
    """The watched run: Stop or Resume, its state, its error, and the live charts component, which
    draws the progress bar and the charts and follows the run (it reruns this panel on a change)."""
    run_dir, status = r["dir"], r["status"]
    state = status.get("state", "unknown")
    with c[1]:
        ui.resume_controls(r, "live")
    with c[2]:
        st.markdown(ui.state_md(state))
    ui.show_notice()
    if state in ui.FAILED:
        st.error(f"{'The worker crashed' if state == 'crashed' else 'The run diverged'}: {status.get('error')}")
        if tail := W.error_tail(run_dir, 3000):
            with st.expander("Last error output"):
                st.code(tail)
    if run_kind(r["config"], r.get("status")) == DEEPFACTO and state == "finished":
        link = {
            "label": "Open its score maps in Heatmaps",
            "icon": ":material/face:",
            "query_params": {"run": r["name"]},
        }
        st.page_link(ui.HEATMAPS_PAGE, **link)
    charts = LC.component()
    if charts is None:
        st.warning(LC.NO_FOLDER)
        return
    # one iframe for all charts, kept across redraws (stable key): it fetches the lines and the progress,
    # updates the charts in place, carries their controls (smoothing, x by epoch/step/wall time, linked
    # x; log, CSV, PNG per chart) and reruns this panel when the run's state changes
    charts(**_chart_args(r, drawn), key="live-charts", default=None)
    st.caption(
        f"{'new points fetched twice a second' if state in ui.ACTIVE else 'ended: asked every 2 s for a Resume'}"
        f" · run dir `{run_dir}`"
    )


def main() -> None:
    ui.follow_goto()
    init_form()
    st.title("Train")
    st.caption(
        "Configure a network, its split into blocks and a training method; each run is a separate worker "
        "process writing a run directory, so it keeps going if you close this tab."
    )
    if ss.get("form_notice"):
        st.info(ss.pop("form_notice"))
    if ss.get(LINK_NOTICE):  # until a field is edited: a rerun does not take it away
        st.warning(f"Not applied from the link: {' · '.join(ss[LINK_NOTICE])}.", icon=":material/link_off:")
    st.segmented_control(
        "What to train",
        [NETWORK, DEEPFACTO],
        key="train_mode",
        format_func={NETWORK: "A network (Block-ADMM and baselines)", DEEPFACTO: "DeepFacto (LFWA faces)"}.get,
        required=True,
    )
    _form_part()
    live_panel()
    worker_panel()  # the end-of-run notice and the worker's CPU / memory (app/worker_panel.py)


def _form_part() -> None:
    """What to train, and how: the network form or DeepFacto's, the Start button, the URL mirror."""
    if ss["train_mode"] == DEEPFACTO:
        mirror(deepfacto_section())
        return
    form, got, notes = validate()
    ss["train_form"] = form
    # Start first, in view: validate() checked the form before any widget is drawn
    start_section(got.cfg, got.errors, form)

    ui.show_notice()
    form_section(form, got, notes)
    method_section(form, notes)
    for field in list(notes):  # a field without a widget of its own
        note(notes, field)
    mirror(F.to_query(form))


MIRRORED = "mirrored_query"  # the query this session last wrote into the URL


def mirror(query: dict) -> None:
    """The URL holds the form's setup (``query``) and the watched run: a shareable link.

    Written when the URL the browser sent differs, and also when this session last wrote another:
    a click soon after an edit reaches the server with the URL from before that edit's write, which
    then lands after this run's, and the link would stay one edit behind the form."""
    if ui.watched():
        query["run"] = ui.watched()
    if st.query_params.to_dict() != query or ss.get(MIRRORED) != query:
        st.query_params.from_dict(query)
        ss[MIRRORED] = query


main()
