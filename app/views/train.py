"""Train: configure a run, launch it as a worker process, watch it live.

The form mirrors into the URL (st.query_params), so a setup is a shareable link; a run's
config.json can be loaded back into the form. Validation is the engine's (RunConfig and
friends); each message is shown under the field it is about.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import streamlit as st

from admm_core.config import DEVICES, LOSSES, RunConfig
from admm_core.data import available
from admm_core.methods import METHODS
from admm_core.presets import PRESETS
from admm_core.runs import read_json, read_metrics
from app import ui
from app.dashboard import charts as C
from app.dashboard import form as F
from app.dashboard import workers as W

REFRESH_S = float(os.environ.get("ADMM_DASH_REFRESH", "0.5"))  # live panel poll period (st.fragment run_every), s
K = "f."  # prefix of the form's widget keys
MAIN_SETTINGS = 8  # method settings shown at once; the rest sit in an expander
ss = st.session_state


def wkey(field: str, method: str | None = None) -> str:
    """Widget key of a form field; method settings are keyed per method."""
    if field.startswith(F.MP):
        return f"{K}{F.MP}{method or ss.get(K + 'method', F.DEFAULT_METHOD)}.{field[len(F.MP) :]}"
    return K + field


def set_form(form: dict) -> None:
    method = form.get("method", F.DEFAULT_METHOD)
    for k, v in form.items():
        ss[wkey(k, method)] = list(v) if isinstance(v, (list, tuple)) else v


def read_form() -> dict:
    method = ss.get(K + "method", F.DEFAULT_METHOD)
    out = {k: ss[K + k] for k in F.STR_FIELDS + F.INT_FIELDS + ("split",) if K + k in ss}
    for s in METHODS[method].settings():
        key = wkey(F.MP + s["name"], method)
        if key in ss:
            out[F.MP + s["name"]] = ss[key]
    return out


# --- callbacks (run before the page script, so they may set widget values) -----------------


def on_preset():
    preset, method = ss[K + "preset"], ss[K + "method"]
    if preset != F.NO_PRESET:
        set_form(F.default_form(preset, method))


def on_method():
    preset, method = ss[K + "preset"], ss[K + "method"]
    if preset != F.NO_PRESET:
        fresh = F.default_form(preset, method)
        set_form({k: v for k, v in fresh.items() if k.startswith(F.MP) or k == "batch_size"})
    else:
        set_form({"method": method, **F.method_fields(method)})


def on_shape():
    try:
        hidden = F.parse_widths(ss[K + "hidden"])
        ss[K + "split"] = F.split_options(ss[K + "arch"], hidden)[1]
    except Exception:
        pass


def on_load_run():
    name = ss.get("load_run")
    if name:
        cfg = read_json(ui.runs_root() / name / "config.json", {}) or {}
        _load_config(cfg)


def _load_config(cfg: dict):
    try:
        form = F.form_from_config(RunConfig.from_dict(cfg))
    except Exception as e:  # an old or foreign config: say so, keep the form
        ss["form_notice"] = f"Could not load that config: {e}"
        return
    set_form(form)
    ss["form_notice"] = "Loaded the run's configuration into the form."


# --- initial values: a loaded run, else the URL, else the last form, else digits defaults ----

if "load_config" in ss:
    _load_config(ss.pop("load_config"))
elif K + "method" not in ss:
    qp = st.query_params.to_dict()
    if any(k in qp for k in F.query_keys()):
        form, warnings = F.from_query(qp)
        if warnings:
            ss["form_notice"] = " · ".join(warnings)
    else:
        form = ss.get("train_form") or F.default_form()
    set_form(form)
    if qp.get("run"):
        ss.setdefault("watch", qp["run"])

st.title("Train")
st.caption(
    "Configure a network, its split into blocks and a training method; each run is a separate worker "
    "process writing a run directory, so it keeps going if you close this tab."
)
if ss.get("form_notice"):
    st.info(ss.pop("form_notice"))

slots: dict[str, st.delta_generator.DeltaGenerator] = {}
datasets = available()
if ss.get(K + "data") not in datasets:
    datasets = datasets + [ss[K + "data"]]  # from a link or a loaded run: validation says why it is missing

with st.container(border=True):
    st.markdown("**Data and network**")
    c = st.columns([1.3, 1.1, 0.9, 0.8])
    with c[0]:
        st.selectbox(
            "Preset",
            [F.NO_PRESET, *PRESETS],
            key=K + "preset",
            on_change=on_preset,
            help="Start from one of the paper's setups (fills every field); 'none' keeps your values.",
        )
        slots["preset"] = st.empty()
    with c[1]:
        st.selectbox(
            "Data set",
            datasets,
            key=K + "data",
            help="Bundled sets are always here; MNIST, Fashion-MNIST, CIFAR-10 appear when ADMM_DATA holds them.",
        )
        slots["data"] = st.empty()
    with c[2]:
        st.number_input("Training samples (0 = all)", key=K + "train_limit", step=100, min_value=0)
        slots["train_limit"] = st.empty()
    with c[3]:
        st.selectbox("Device", list(DEVICES), key=K + "device", help="auto picks CUDA when there is one")
        slots["device"] = st.empty()
    c = st.columns([0.8, 1.2, 2.0])
    with c[0]:
        st.radio(
            "Network",
            ["mlp", "resnet18"],
            key=K + "arch",
            horizontal=True,
            on_change=on_shape,
            format_func=lambda a: {"mlp": "MLP", "resnet18": "ResNet-18"}[a],
        )
        slots["arch"] = st.empty()
    is_mlp = ss[K + "arch"] == "mlp"
    with c[1]:
        st.text_input(
            "MLP hidden widths",
            key=K + "hidden",
            on_change=on_shape,
            disabled=not is_mlp,
            help="Comma-separated widths; depth = number of widths + 1 (e.g. 128,128 is 784-128-128-10).",
        )
        slots["hidden"] = st.empty()
    try:
        hidden_now = F.parse_widths(ss[K + "hidden"]) if is_mlp else (128,)
        split_allowed, _ = F.split_options(ss[K + "arch"], hidden_now)
    except Exception:
        hidden_now, split_allowed = None, list(ss.get(K + "split") or [])
    ss[K + "split"] = [s for s in (ss.get(K + "split") or []) if s in split_allowed]
    with c[2]:
        st.multiselect(
            "Split after layers (block boundaries)",
            split_allowed,
            key=K + "split",
            help="A block ends after each chosen layer; no split = one block. Backprop never crosses a boundary.",
        )
        slots["split"] = st.empty()
    diagram = st.empty()

with st.container(border=True):
    st.markdown("**Method and training**")
    c = st.columns([1.4, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8])
    with c[0]:
        st.selectbox(
            "Method", list(METHODS), key=K + "method", on_change=on_method, help="From the engine's method registry."
        )
        slots["method"] = st.empty()
    for col, (field, label, kw) in zip(
        c[1:],
        [
            ("loss", "Loss", None),
            ("epochs", "Epochs", 1),
            ("batch_size", "Batch size", 1),
            ("seed", "Seed", 1),
            ("eval_every", "Evaluate every", 1),
            ("checkpoint_every", "Checkpoint every", 1),
        ],
    ):
        with col:
            if kw is None:
                st.selectbox(label, list(LOSSES), key=K + field, help="mse: ½‖z − onehot(y)‖²; ce: cross-entropy")
            else:
                st.number_input(label, key=K + field, step=kw)
            slots[field] = st.empty()
    method = ss[K + "method"]
    cls = METHODS[method]
    st.caption(f"**{method}** — {cls.summary}" + ("" if cls.uses_blocks else " (end-to-end: the split is ignored)"))
    settings = cls.settings()
    main_settings, more_settings = settings[:MAIN_SETTINGS], settings[MAIN_SETTINGS:]
    for s in settings:
        key = wkey(F.MP + s["name"], method)
        if key not in ss:
            ss[key] = F.method_fields(method)[F.MP + s["name"]]
    # open "more settings" when one of them is wrong, so its message is seen
    _, pre_errors = F.config_from_form(read_form(), available())
    more_open = any(F.MP + s["name"] in pre_errors for s in more_settings)
    grid = st.columns(4)
    if more_settings:
        more = st.expander(f"More {method} settings ({len(more_settings)})", expanded=more_open)
        with more:
            more_grid = st.columns(4)
    for i, s in enumerate(settings):
        key = wkey(F.MP + s["name"], method)
        cols = grid if i < MAIN_SETTINGS else more_grid
        with cols[(i if i < MAIN_SETTINGS else i - MAIN_SETTINGS) % 4]:
            label = f"{s['name']}"
            help_text = f"{s['help']} (default {s['default']!r})"
            if s["choices"] is not None:
                st.selectbox(label, list(s["choices"]), key=key, help=help_text)
            elif s["type"] == "bool":
                st.checkbox(label, key=key, help=help_text)
            elif s["type"] == "int":
                st.number_input(label, key=key, step=1, help=help_text)
            else:
                st.text_input(
                    label,
                    key=key,
                    help=help_text
                    + ("; one value per block, comma-separated, is allowed" if s["name"] == "beta" else ""),
                )
            slots[F.MP + s["name"]] = st.empty()

# --- validate, mirror into the URL, draw the blocks -------------------------------------------
form = read_form()
form["split"] = sorted(form.get("split") or [], key=lambda s: split_allowed.index(s) if s in split_allowed else 99)
cfg, errors = F.config_from_form(form, available())
ss["train_form"] = form
for field, msg in errors.items():
    (slots.get(field) or st).error(msg, icon="⚠️")
query = F.to_query(form)
if ss.get("watch"):
    query["run"] = ss["watch"]
if st.query_params.to_dict() != query:
    st.query_params.from_dict(query)

if hidden_now is not None and "split" not in errors:
    try:
        blocks = F.describe_blocks(ss[K + "arch"], hidden_now, form["split"], form["data"])
        diagram.graphviz_chart(F.block_diagram_dot(blocks, cls.uses_blocks), width="stretch")
    except Exception as e:  # a diagram is a nicety; never a traceback
        diagram.caption(f"(no block diagram: {e})")

c = st.columns([1, 1, 4])
start = c[0].button("Start run", icon=":material/play_arrow:", type="primary", disabled=cfg is None, key="start")
with c[2]:
    if cfg is None:
        st.caption(f"Fix {len(errors)} field(s) above to start.")
    else:
        T = len(cfg.model.split) + 1 if cls.uses_blocks else 1
        st.caption(
            f"{cfg.data.name} · {cfg.model.arch} {'-'.join(map(str, cfg.model.hidden)) if cfg.model.arch == 'mlp' else ''} · "
            f"T = {T} block(s) · {cfg.method} · {cfg.train.epochs} epochs. The page URL holds this setup."
        )
with c[1].popover("Load a run's config"):
    names = [r["name"] for r in W.runs(ui.runs_root())]
    if names:
        st.selectbox("Run", names, key="load_run")
        st.button("Load into the form", on_click=on_load_run, key="load_btn")
    else:
        st.caption("No runs yet.")
if start and cfg is not None:
    run_dir = W.start_run(cfg, ui.runs_root())
    ss["watch"] = run_dir.name
    st.toast(f"Started {run_dir.name}")


# --- live view of one run ------------------------------------------------------------------------


def _stop(name):
    W.stop_run(ui.runs_root() / name)


def _resume(name, epochs):
    try:
        W.resume_run(ui.runs_root() / name, epochs)
    except RuntimeError as e:
        ss["live_notice"] = str(e)


def _stamp(run_dir: Path) -> tuple:
    """Size and mtime of metrics.jsonl: the figures only change when it does."""
    try:
        s = (run_dir / "metrics.jsonl").stat()
        return (s.st_size, s.st_mtime_ns)
    except OSError:
        return (0, 0)


def _metrics(run_dir: Path) -> list[dict]:
    return _cached_metrics(str(run_dir), _stamp(run_dir))


@st.cache_resource(max_entries=32, show_spinner=False)
def _cached_metrics(run_dir: str, stamp: tuple) -> list[dict]:
    return read_metrics(Path(run_dir))


@st.cache_resource(max_entries=32, show_spinner=False)
def _figures(run_dir: str, stamp: tuple, log_res: bool):
    """The six live figures, rebuilt only when metrics.jsonl changed (polls stay cheap)."""
    return C.live_figures(_cached_metrics(run_dir, stamp), log_res, run=Path(run_dir).name)


@st.fragment(run_every=REFRESH_S)
def live_panel():
    runs = W.runs(ui.runs_root())
    st.subheader("Live")
    if not runs:
        st.info("No runs yet — press **Start run** above (or start one with `python -m admm_core train ...`).")
        return
    by_name = {r["name"]: r for r in runs}
    names = sorted(by_name, reverse=True)  # stable order (names start with the launch time)
    if ss.get("watch") not in by_name:
        running = [n for n in names if by_name[n]["status"].get("state") in ("running", "starting")]
        ss["watch"] = (running or names)[0]
    c = st.columns([3, 1.2, 1])
    with c[0]:
        # "watch" is plain session state; the menu only edits it (a widget's own state would be
        # reset whenever the list of runs changes)
        st.selectbox(
            "Run",
            names,
            index=names.index(ss["watch"]),
            key=f"watch_sel_{len(names)}",
            on_change=lambda: ss.update(watch=ss[f"watch_sel_{len(names)}"]),
            format_func=lambda n: f"{n}  ·  {ui.state_label(by_name[n]['status'].get('state'))}",
        )
    r = by_name[ss["watch"]]
    run_dir, status = r["dir"], r["status"]
    state = status.get("state", "unknown")
    metrics = _metrics(run_dir)
    with c[1]:
        if state in ("running", "starting"):
            st.button("Stop", icon=":material/stop:", key="stop", on_click=_stop, args=(r["name"],), width="stretch")
        elif state in ("stopped", "crashed", "finished"):
            epochs = st.number_input(
                "Resume to epoch",
                min_value=1,
                key="resume_epochs",
                value=int((r["config"].get("train") or {}).get("epochs", 1)),
            )
            st.button(
                "Resume",
                icon=":material/play_arrow:",
                key="resume",
                on_click=_resume,
                args=(r["name"], epochs),
                width="stretch",
            )
    with c[2]:
        st.markdown(ui.state_md(state))
        if metrics and metrics[-1].get("test_accuracy") is not None:
            st.caption(f"test {100 * metrics[-1]['test_accuracy']:.2f}% at epoch {metrics[-1].get('epoch', '?')}")
    if ss.get("live_notice"):
        st.warning(ss.pop("live_notice"))
    progress = float(status.get("progress") or 0.0)
    epochs = status.get("epochs") or (r["config"].get("train") or {}).get("epochs") or 0
    eta = C.eta_seconds(status)
    text = f"{state} · epoch {status.get('epoch', 0)}/{epochs} · {100 * progress:.0f}%"
    if eta is not None:
        text += f" · ETA {C.fmt_duration(eta)}"
    st.progress(min(max(progress, 0.0), 1.0), text=text)
    if state == "crashed":
        st.error(f"The worker crashed: {status.get('error')}")
        tail = (
            (run_dir / "error.txt").read_text(errors="replace")[-3000:]
            if (run_dir / "error.txt").exists()
            else W.log_tail(run_dir)
        )
        if tail:
            with st.expander("Last error output"):
                st.code(tail)
    if not metrics:
        st.caption("Waiting for the first evaluation…")
        return
    log_res = st.toggle("log scale for residuals and dual norms", value=True, key="live_log")
    figs = _figures(str(run_dir), _stamp(run_dir), log_res)
    for row in (("accuracy", "loss", "seconds"), ("residuals", "dual_norms", "betas")):
        cols = st.columns(3)
        for col, name in zip(cols, row):
            col.plotly_chart(figs[name], key=f"live-{name}-{r['name']}", config=ui.PLOTLY_CONFIG)
    st.caption(
        f"Last evaluation {time.time() - metrics[-1].get('time', time.time()):.1f} s ago · "
        f"refreshes every {REFRESH_S:g} s · run dir `{run_dir}`"
    )


live_panel()
