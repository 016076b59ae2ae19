"""Sweeps: Optuna studies over a method's settings (a background ``python -m admm_core sweep``
worker); every trial is a run directory. Optuna's figures, a trial's run, the best config into Train.
"""

from __future__ import annotations

import datetime as dt
import json
import warnings

import optuna
import pandas as pd
import streamlit as st

from admm_core import sweep as S
from admm_core.errors import ConfigError
from admm_core.spec.kinds import NETWORK
from admm_core.spec.methods import METHODS, names_for
from admm_core.spec.presets import PRESETS, preset_config
from app import ui
from app.dashboard import form as F
from app.dashboard.storage import confine_storage_url

ss = st.session_state
optuna.logging.set_verbosity(optuna.logging.WARNING)
st.title("Sweeps")
root = ui.runs_root()
storage_url = st.text_input(
    "Study storage",
    value=S.default_storage(root),
    key="sweeps_storage_url",
    help="Optuna RDB URL. Default: the SQLite file sweeps.db in the runs folder; a PostgreSQL/MySQL URL "
    "lets workers on several machines share one study (`admm sweep --name NAME --storage URL`).",
)


@st.cache_resource(show_spinner=False)
def _storage(url: str):
    return S.open_storage(url)


try:
    storage = _storage(confine_storage_url(storage_url))  # a SQLite file only inside the runs root
except ConfigError as e:
    st.error(str(e))
    st.stop()


# --- new study ------------------------------------------------------------------------------------

DEFAULT_ROWS = [
    {"setting": "beta", "kind": "log", "range": "0.1:10"},
    {"setting": "z_lr", "kind": "log", "range": "0.01:1"},
    {"setting": "lr", "kind": "log", "range": "1e-4:3e-3"},
]

# the menus in words (their code names, as `admm sweep` takes them, in the help)
OBJECTIVE_LABELS = {"best_test_accuracy": "best test accuracy", "time_to_95_s": "seconds to 95% test accuracy"}
PRUNER_LABELS = {"median": "median (stop laggards)", "hyperband": "hyperband", "none": "none (run every trial out)"}
LABELS = {
    "trials": "Trials",
    "epochs": "Epochs per trial",
    "jobs": "Worker processes",
    "train_limit": "Training samples",
}


def space_rows(rows: pd.DataFrame, labels: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """The table's rows as ``NAME=KIND:RANGE`` texts, their names in messages ("Row 2 (η — Θ step
    size, log-uniform)"), and the messages of rows with an empty cell."""
    texts, names, empty = [], [], []
    for i, r in enumerate(rows.itertuples(), start=1):
        cells = [("" if pd.isna(v) else str(v).strip()) for v in (r.setting, r.kind, r.range)]
        shown = labels.get(cells[0], cells[0]) or "?", S.KINDS.get(cells[1], cells[1]) or "?"
        name = f"Row {i} ({shown[0]}, {shown[1]})"
        if not all(cells):
            empty.append(f"{name}: give its setting, its kind and its range")
            continue
        texts.append(f"{cells[0]}={cells[1]}:{cells[2]}")
        names.append(name)
    return texts, names, empty


def launch_problems(preset, method, trials, epochs, jobs, train_limit, name, rows) -> tuple[list[str], list[str]]:
    """(space texts, every message at once): the budget, the name, each row of the space (tried on the preset)."""
    budget = S.budget_problems(trials, epochs, train_limit, jobs, names=LABELS)
    out = list(budget.values())
    name = name.strip()
    if why := S.name_problem(name, "Study name"):
        out.append(why)
    elif name in S.study_names(storage):
        out.append(f"Study name = {name!r}: exists already (pick another name)")
    texts, names, empty = space_rows(rows, F.setting_labels(method))
    out += empty
    if not texts and not empty:
        out.append("Search space: add at least one row (a setting, its kind and its range)")
    base = preset_config(preset, method).shortened(
        None if "epochs" in budget else epochs, None if "train_limit" in budget else train_limit or None
    )
    out += list(S.space_problems(texts, base, names)[1].values())
    return texts, out


with st.expander("New study", expanded=not S.study_names(storage), icon=":material/add:"):
    c = st.columns(4)
    preset = c[0].selectbox("Preset", list(PRESETS), key="sweeps_preset")
    method = c[1].selectbox("Method", list(names_for(NETWORK)), key="sweeps_method")
    objective = c[2].selectbox(
        "Objective",
        list(S.OBJECTIVES),
        key="sweeps_objective",
        format_func=OBJECTIVE_LABELS.get,
        help="What each trial is scored by (`best_test_accuracy`: maximised; `time_to_95_s`: minimised).",
    )
    pruner = c[3].selectbox(
        "Pruner",
        list(S.PRUNERS),
        key="sweeps_pruner",
        format_func=PRUNER_LABELS.get,
        help="Stops a trial early when its evaluations trail the others' (Optuna's `median`, `hyperband`; `none`).",
    )
    c = st.columns(4)
    # no min_value: a browser keeps the old value of a number typed below it without telling the page;
    # 0 trials is sent and said below, and Launch waits
    trials = c[0].number_input(LABELS["trials"], value=12, step=1, key="sweeps_trials")
    epochs = c[1].number_input(LABELS["epochs"], value=5, step=1, key="sweeps_epochs")
    jobs = c[2].number_input(LABELS["jobs"], value=1, step=1, key="sweeps_jobs")
    train_limit = c[3].number_input(
        "Training samples (0 = all)", value=0, step=100, key="sweeps_train_limit", help="small mode"
    )
    name = st.text_input("Study name", value=f"{preset}-{method}-{dt.datetime.now():%Y%m%d-%H%M}", key="sweeps_name")
    st.caption(
        "Each row searches one setting of the method (or the split, hidden widths, loss or batch size): how its "
        "values are drawn, and its range — LOW:HIGH, or the values A|B|C for “one of”."
    )
    labels = F.setting_labels(method)
    rows = st.data_editor(
        pd.DataFrame(ss.get("sweeps_rows") or DEFAULT_ROWS),  # sweeps_rows: the table's first rows
        num_rows="dynamic",
        key="sweeps_space",
        column_config={
            # the form's labels, the code name (what `admm sweep --space` takes) after each
            "setting": st.column_config.SelectboxColumn(
                "setting",
                # not the settings the method ignores (gotmare has no duals: no u_init)
                options=[n for n in S.space_names(method) if n not in METHODS[method].not_applicable],
                format_func=lambda n: F.labelled(n, labels),
                required=True,
                help="a setting of the method, or the split, hidden widths, loss or batch size; "
                "its code name after the ·",
            ),
            "kind": st.column_config.SelectboxColumn(
                "kind",
                options=list(S.KINDS),
                format_func=lambda k: S.KINDS.get(k, k),
                required=True,
                help="how values are drawn; on the command line: "
                + ", ".join(f"{k} = {v}" for k, v in S.KINDS.items()),
            ),
            "range": st.column_config.TextColumn("range", help="LOW:HIGH, or A|B|C for choice", required=True),
        },
        width="stretch",
    )
    space, problems = launch_problems(preset, method, trials, epochs, jobs, train_limit, name, rows)
    for message in problems:  # every one at once, as typed
        st.error(message, icon="⚠️")
    launch = st.button(
        "Launch study", icon=":material/rocket_launch:", key="sweeps_launch", type="primary", disabled=bool(problems)
    )
    if launch:
        name = name.strip()
        try:
            budget = {"trials": int(trials), "epochs": int(epochs), "train_limit": int(train_limit) or None}
            spec = S.SweepSpec(
                name=name, preset=preset, method=method, space=space, objective=objective, pruner=pruner, **budget
            )
            S.create_or_resume(spec, name, storage)  # listed at once; the worker resumes it
            pid, log = S.launch(spec, None if storage_url == S.default_storage(root) else storage_url, root, int(jobs))
            ss["sweeps_study"] = name
            ss["sweeps_notice"] = f"Launched study {name} (worker pid {pid}, log `{log}`)."
        except ConfigError as e:
            st.error(str(e))

if ss.get("sweeps_notice"):
    st.info(ss.pop("sweeps_notice"))


# --- studies ----------------------------------------------------------------------------------------


PLOTS = {
    "Optimisation history": optuna.visualization.plot_optimization_history,
    "Parallel coordinates": optuna.visualization.plot_parallel_coordinate,
    "Parameter importances": optuna.visualization.plot_param_importances,
    "Slice": optuna.visualization.plot_slice,
}


@st.cache_resource(show_spinner=False, max_entries=16)
def _make_figures(url: str, name: str, finished: tuple) -> dict:
    """Optuna's figures, rebuilt only when a trial finishes (importances fit a forest)."""
    study = optuna.load_study(study_name=name, storage=_storage(url))
    # the objective in the page's units and words (Optuna's public target / target_name), not "Objective Value" 0.93
    objective = (study.user_attrs.get("sweep") or {}).get("objective")
    unit = {"target": lambda t: 100 * t.value, "target_name": "best test accuracy (%)"}
    if objective != "best_test_accuracy":
        unit = {"target_name": OBJECTIVE_LABELS.get(objective, objective or "objective")}
    labels = F.setting_labels((study.user_attrs.get("sweep") or {}).get("method"))
    out = {}
    for title, plot in PLOTS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[title] = relabel(plot(study, **unit), labels)
        except (RuntimeError, ValueError, ZeroDivisionError) as e:
            out[title] = f"{title}: not enough finished trials yet ({e})."
    return out


def symbol(label: str) -> str:  # "β" of "β — penalty weight", for a narrow place
    return label.split(" — ")[0]


def relabel(fig, labels: dict[str, str]):
    """Optuna's figure with each searched setting named as the form names it ("β — penalty weight",
    not ``beta``; Optuna has no option for it): axis titles, tick texts (narrow parallel axes: the
    symbol), the importances' bars and hover data."""
    full = lambda t: labels.get(t, t) if isinstance(t, str) else t
    short = lambda t: symbol(full(t)) if isinstance(t, str) else t
    for axis in (*fig.select_xaxes(), *fig.select_yaxes()):
        if axis.title.text in labels:
            axis.title.text = full(axis.title.text)
        if axis.ticktext is not None:
            axis.ticktext = [short(t) for t in axis.ticktext]
    for tr in fig.data:
        if tr.type == "bar" and tr.orientation == "h" and tr.y is not None:
            tr.y = [full(v) for v in tr.y]
        if getattr(tr, "customdata", None) is not None:
            tr.customdata = [
                [full(v) for v in row] if isinstance(row, (list, tuple)) else full(row) for row in tr.customdata
            ]
    return fig


FEW_TRIALS = 10  # importances fitted on fewer complete trials than this are mostly noise


def _figures(study):
    trials = study.get_trials(deepcopy=False)
    finished = tuple(t.number for t in trials if t.state.is_finished())
    complete = sum(t.state.name == "COMPLETE" for t in trials)
    figs = _make_figures(storage_url, study.study_name, finished)
    for tab, (title, fig) in zip(st.tabs(list(figs)), figs.items()):
        with tab:
            if isinstance(fig, str):
                st.caption(fig)
                continue
            if title == "Parameter importances" and complete < FEW_TRIALS:
                st.warning(
                    f"Fitted on {complete} complete trial{'s' * (complete != 1)}: with fewer than {FEW_TRIALS}, "
                    "these importances are mostly noise — run more trials before reading them."
                )
            st.plotly_chart(fig, key=f"sweeps_fig_{title}", config=ui.PLOTLY_CONFIG)


def dim_text(text: str, labels: dict[str, str]) -> str:
    """A study's search dimension as the page names it: "β — penalty weight: log-uniform 0.1 … 10 (`beta`)"."""
    name, kind, _, values = S.split_dim(text)
    span = (" | " if kind == "choice" else " … ").join(values)
    return f"{labels.get(name, name)}: {S.KINDS.get(kind, kind)} {span} (`{name}`)"


def objective_text(objective: str | None, value) -> str:
    if value is None:
        return "–"
    if objective == "best_test_accuracy":
        return f"{100 * value:.2f} %"
    return f"{value:.1f} s" if (objective or "").endswith("_s") else f"{value:.4g}"


names = S.study_names(storage)
if not names:
    st.info("No studies yet. Launch one above or run `admm sweep --preset digits-mlp --method block-admm "
            "--trials 8 --epochs 3 --space 'beta=log:0.1:10'`.")  # fmt: skip
    st.stop()
if ss.get("sweeps_study") not in names:
    ss["sweeps_study"] = names[-1]
study_name = st.selectbox("Study", names, key="sweeps_study")


@st.fragment(run_every=3.0)
def study_view(study_name: str):
    study = optuna.load_study(study_name=study_name, storage=storage)
    spec = study.user_attrs.get("sweep") or {}
    c = S.counts(study)
    live = c["running"] > 0 or c["waiting"] > 0
    # the actions below the fragment (load the best config, open a trial's run) are drawn by the
    # full page: when a trial ends or the study finishes, redraw the page so they follow
    sig = (study_name, c["complete"], c["pruned"], c["fail"], live)
    before, ss["sweeps_sig"] = ss.get("sweeps_sig", sig), sig
    if before != sig:
        st.rerun()
    labels = F.setting_labels(spec.get("method"))
    objective = spec.get("objective")
    said = OBJECTIVE_LABELS.get(objective, objective)
    st.markdown(
        f"`{spec.get('preset')}` · `{spec.get('method')}` · {', '.join(dim_text(s, labels) for s in spec.get('space', []))} · "
        f"objective: {said} "
        f"({study.direction.name.lower()}) · pruner: {PRUNER_LABELS.get(spec.get('pruner'), spec.get('pruner'))}"
    )
    st.markdown(
        f"{ui.state_md('running' if live else 'finished')} {c['complete']} complete · {c['pruned']} pruned · "
        f"{c['fail']} failed · {c['running']} running of a budget of {spec.get('trials')} · "
        f"{S.wall_time_s(study) / 60:.1f} min"
    )
    try:
        best = study.best_trial
    except ValueError:
        best = None
    if best is not None:
        params = ", ".join(f"{labels.get(k, k)} = {S.fmt_value(v)}" for k, v in best.params.items())
        st.markdown(f"best trial **{best.number}**: {said} = **{objective_text(objective, best.value)}** ({params})")
    rows = S.trials_table(study)
    if rows:
        df = pd.DataFrame(rows).drop(columns=["run_dir"])
        df["run"] = df["run"].map(lambda r: ui.short_id(r) if isinstance(r, str) else r)  # its trial number in view
        columns = {
            "seconds": st.column_config.NumberColumn("seconds", format="%.1f"),
            "preset": st.column_config.CheckboxColumn(
                "preset", help="the trial of the preset's own values (queued first)"
            ),
            "run": st.column_config.TextColumn("run", help="the trial's run (below: open it on the Runs page)"),
        }
        fixed = ("trial", "state", "value", "epochs", "seconds", "preset", "run")
        # a searched setting: headed by its symbol ("β"; whole labels pushed the table past a 1280-px window),
        # its label and code name in the help, to 3 significant digits (lr = 1.49e-4, not "0.0001")
        for k in (k for k in df.columns if k not in fixed):
            label = labels.get(k, k)
            what = {"label": symbol(label), "help": f"{label} · setting `{k}`"}
            float_ = pd.api.types.is_float_dtype(df[k])
            columns[k] = (
                st.column_config.NumberColumn(**what, format="%.3g") if float_ else st.column_config.Column(**what)
            )
        if objective == "best_test_accuracy":  # the page's unit for accuracy: %
            df["value"] = df["value"] * 100
            columns["value"] = st.column_config.NumberColumn("test %", format="%.2f")
        st.dataframe(df, hide_index=True, width="stretch", key="sweeps_trials", column_config=columns)
        _figures(study)
    else:
        st.caption("No trials yet; the worker is starting.")


study_view(study_name)

# actions on one study (outside the fragment: they switch pages)
study = optuna.load_study(study_name=study_name, storage=storage)
rows = [r for r in S.trials_table(study) if r["run"]]
c = st.columns(3)
try:
    best_cfg = S.best_config(study)
except ValueError:
    best_cfg = None
if c[0].button("Load best trial's config into Train", key="sweeps_load_best", disabled=best_cfg is None):
    ui.load_into_train(json.loads(best_cfg.to_json()))
if rows:
    pick = c[1].selectbox("Trial", [r["trial"] for r in rows], key="sweeps_pick", format_func=lambda n: f"trial {n}")
    r = next(x for x in rows if x["trial"] == pick)
    if c[2].button("Open its run on the Runs page", key="sweeps_open_run"):
        ui.watch(r["run"])
        st.switch_page("views/runs.py")
log = root / ".sweeps" / f"{study_name}.log"
if log.exists():
    with st.expander("worker log"):
        st.code("\n".join(log.read_text(errors="replace").splitlines()[-30:]))
