"""The Train page's forms as plain data, generated from the settings records: form <-> config <-> URL.

Every field of :class:`~admm_core.spec.config.RunConfig` (and its ``data``, ``model``, ``train``) is a
form field (:data:`FIELDS`), described by its dataclass field (type, default, ``help``, rules) and laid
out by :data:`LAYOUT`; DeepFacto's (:data:`DF_FIELDS`) are generated the same way from
:class:`~admm_core.spec.deepfacto.DeepFactoConfig`. A *form* is the flat dict the widgets hold, by form
key, plus ``processes``, ``mp.<setting>`` for the chosen method's settings (floats as text: a
per-block β is "1,0.5,1") and ``_given`` (what a loaded config gave, so reading the form back gives the
same config). :func:`check_form` checks each field on its own, then the engine's preflight.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import types
import typing
from dataclasses import dataclass

from admm_core.spec import archs, resources
from admm_core.spec import datasets as data_mod
from admm_core.spec.archs import ARCHS, SIZE_FIELDS, archs_for
from admm_core.spec.config import ConfigError, DataConfig, ModelConfig, RunConfig, TrainConfig
from admm_core.spec.deepfacto import RENAMED, DeepFactoConfig, saved_fields
from admm_core.spec.device import device_name
from admm_core.spec.kinds import DEEPFACTO, NETWORK
from admm_core.spec.methods import DEFAULT_METHOD, METHODS, make_settings
from admm_core.spec.methods import names_for as methods_for
from admm_core.spec.methods.deepfacto import DeepFacto
from admm_core.spec.presets import PRESETS, preset_config
from admm_core.spec.resources import MemoryRefusal, preflight_report
from admm_core.spec.settings import applies, parse_numbers, parse_sets, parse_widths
from admm_core.sweep.space import STRUCTURAL
from app.dashboard import models

NO_PRESET = "none"
DEFAULT_PRESET = "digits-mlp"
MP = "mp."  # prefix of method-setting fields
GIVEN = "_given"  # the method settings and split a loaded config gave explicitly (not a widget)
LINK = "_link"  # {field: message} of a link's values no widget can hold: errors until that field is edited


@dataclass(frozen=True)
class FormField:
    """One field of a form: where it lives in the config and how it is edited.

    ``kind``: select, split (a multiselect of layer names), check, int, float, widths
    (comma-separated integers as text), set (text read like the CLI's ``--set NAME=VALUE``: JSON
    where it parses, else the text), text, or hidden (carried, not shown). ``none``: the widget value
    that stands for None (0 for "all samples"). ``menu``: the registry its choices are read from.
    """

    key: str
    path: str  # "data.train_limit"; "" for a launch setting outside the config (processes)
    kind: str
    group: str = ""
    label: str = ""
    help: str = ""
    default: typing.Any = None  # as the widget holds it
    choices: tuple | None = None
    menu: str | None = None  # "presets", "datasets", "archs", "methods": choices from that registry
    min: float | None = None  # the field's rule's, or the layout's where the widget's differs
    step: float | None = None
    none: typing.Any = None
    enabled_if: dict | None = None  # {form key: value}: the field's record's ``when=``

    def enabled(self, form: dict) -> bool:
        if (self.path or self.key) in NOT_FOR_MODEL_FILES and models.is_entry(form.get("arch")):
            return False  # the file builds and initialises its network; `admm train --model` runs one process
        if self.kind == "split":  # an end-to-end method has no blocks: its split is ignored
            rec = METHODS.get(form.get("method"))
            return rec is None or rec.uses_blocks
        if self.path in SIZE_PATHS:  # the architecture's record says which size fields it reads
            arch = ARCHS.get(form.get("arch"))
            return arch is not None and self.path.split(".", 1)[1] in arch.sizes
        return applies(self.enabled_if, form)


SIZE_PATHS = {f"model.{f}" for f in SIZE_FIELDS}
# what a network of the models folder does not read: its file builds and initialises it
NOT_FOR_MODEL_FILES = {
    "data.augment",
    "data.augment_pad",
    "data.augment_flip",
    "model.init",
    "model.init_std",
    "processes",
}

# How the form lays each config field out, by its path: group (a row of the form; "more" folds),
# label, widget, the widget's step, the widget value that stands for None, the form key (when not
# the field's name), the registry a menu reads. Fields not here are shown in "more" under their
# name; HIDDEN ones are carried through unchanged.
LAYOUT: dict[str, dict] = {
    "preset": dict(group="data", label="Preset", widget="select", none=NO_PRESET, menu="presets"),
    "data.name": dict(group="data", label="Data set", key="data", widget="select", menu="datasets"),
    "data.train_limit": dict(group="data", label="Training samples (0 = all)", none=0, min=0, step=100),
    "data.test_limit": dict(group="data", label="Test samples (0 = all)", none=0, min=0, step=100),
    "data.augment": dict(group="data", label="Augment"),
    "data.augment_pad": dict(group="data", label="Shift ± pixels", step=1),
    "data.augment_flip": dict(group="data", label="Flip"),
    "model.arch": dict(group="network", label="Network", widget="select", menu="archs"),
    "model.hidden": dict(group="network", label="MLP hidden widths"),
    "model.split": dict(group="network", label="Split after layers (block boundaries)", widget="split"),
    "model.width": dict(group="network", label="Base width", step=8),
    "model.init": dict(group="network", label="Initialisation"),
    "model.init_std": dict(group="network", label="Init σ", step=0.005),
    "method": dict(group="method", label="Method", widget="select", menu="methods"),
    "train.epochs": dict(group="train", label="Epochs", step=1),
    "train.batch_size": dict(group="train", label="Batch size", step=1),
    "train.loss": dict(group="train", label="Loss"),
    "train.seed": dict(group="train", label="Seed", step=1),
    "train.device": dict(group="train", label="Device"),
    "train.eval_every": dict(group="train", label="Evaluate every", step=1),
    "train.checkpoint_every": dict(group="train", label="Checkpoint every", step=1),
    "train.lr_schedule": dict(group="train", label="Θ schedule"),
    "train.tensorboard": dict(group="more", label="TensorBoard files"),
    "train.precision": dict(group="more", label="Precision"),
    "train.channels_last": dict(group="more", label="channels_last"),
    "train.diverge_factor": dict(group="more", label="Diverge factor", step=10.0),
}
HIDDEN = {"data.root"}  # carried through unchanged (method_params is the mp.* fields)


def _kind(tp, hints: dict, rules, as_set: tuple = ()) -> str:
    """The widget kind of a field by its hint, its choices or its type; ``as_set``: kinds drawn as
    "set" text instead (DeepFacto's floats and lists, typed as ``--set`` reads them)."""
    if hints.get("widget"):
        return hints["widget"]
    if rules.get("choices") is not None:
        return "select"
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    base = {a for a in typing.get_args(tp) if a is not type(None)} if union else {tp}
    (t,) = base if len(base) == 1 else (str,)
    kind = {bool: "check", int: "int", float: "float"}.get(t, "widths" if typing.get_origin(t) is tuple else "text")
    return "set" if kind in as_set else kind


def _fields_of(
    klass, prefix: str, layout: dict = LAYOUT, skip: tuple = ("method_params",), as_set: tuple = ()
) -> list[FormField]:
    """The form fields of a settings dataclass, by its fields' declarations (help, rules, label) and
    ``layout``'s hints per path (``prefix`` + name); ``skip``: fields no widget edits."""
    out = []
    types = typing.get_type_hints(klass)
    for f in dataclasses.fields(klass):
        if f.name in skip or f.type in ("DataConfig", "ModelConfig", "TrainConfig"):
            continue
        path = f"{prefix}{f.name}"
        default = f.default if f.default is not dataclasses.MISSING else None
        if path in HIDDEN:
            out.append(FormField(f.name, path, "hidden", default=default))
            continue
        hints, rules = layout.get(path, {}), f.metadata
        ff = FormField(
            key=hints.get("key", f.name),
            path=path,
            kind=_kind(types[f.name], hints, rules, as_set),
            group=hints.get("group", "more"),
            label=hints.get("label", rules.get("label", f.name)),
            help=rules.get("help", ""),
            choices=tuple(rules["choices"]) if rules.get("choices") is not None else None,
            menu=hints.get("menu"),
            min=hints.get("min", rules.get("min")),
            step=hints.get("step"),
            none=hints.get("none"),
            # the record's own rule (``when=``: while other fields of it hold these values), by form key
            enabled_if={layout.get(prefix + k, {}).get("key", k): v for k, v in rules.get("when", {}).items()},
        )
        out.append(dataclasses.replace(ff, default=_to_widget(ff, default)))
    return out


def setting_field(method: str, s: dict) -> FormField:
    """The form field of one of ``method``'s settings (``s``: one of its record's ``settings()``):
    floats are text, so a per-block value can be written "1,0.5,1"."""
    kind = {"bool": "check", "int": "int"}.get(s["type"], "text")
    return FormField(
        key=MP + s["name"],
        path=f"{method}.{s['name']}",
        kind="select" if s["choices"] is not None else kind,
        label=s["label"],
        help=s["help"],
        choices=tuple(s["choices"]) if s["choices"] is not None else None,
    )


PROCESSES = FormField(
    "processes",
    "",
    "int",
    group="train",
    label="Processes",
    help="Worker processes started through torchrun, each holding 1/N of the rows of Z and U "
    "(block-admm, gotmare; docs/results/distributed.md). Give each a core.",
    default=1,
    min=1,
    step=1,
)


def choices(ff: FormField, form: dict | None = None) -> list:
    """The menu of a select field now: presets from the preset table, data sets present here (and
    the form's own, so validation can say why it is missing), the split points of the form's
    network; else the field's declared choices."""
    form = form or {}
    if ff.menu == "presets":
        return [NO_PRESET, *PRESETS]
    if ff.menu == "datasets":
        here = list(data_mod.available(kind=NETWORK))

        cur = form.get(ff.key)
        return here + ([cur] if cur is not None and cur not in here else [])
    if ff.menu == "archs":
        return list(archs_for(NETWORK)) + models.discover()  # the face backbone is DeepFacto's block 1
    if ff.menu == "methods":
        return list(methods_for(NETWORK))  # deepfacto runs with its own task and form
    if ff.kind == "split":
        # the network's split points, and the form's own entries that are not among them: a link's or
        # a loaded config's fc9 stays in the widget, so its message says why (never silently dropped)
        allowed = allowed_splits(form)
        return allowed + [s for s in form.get(ff.key) or [] if s not in allowed]
    return list(ff.choices or ())


def label_of(ff: FormField, value) -> str:
    """What a menu shows for ``value``: an architecture's label from its record, else the value."""
    if ff.menu == "archs" and value in ARCHS:
        return ARCHS[value].label or str(value)
    if ff.menu == "archs" and models.is_entry(value):
        return models.label(value)
    return str(value)


def network_caption(model: ModelConfig) -> str:
    """The network in a few words: its name and the sizes its record reads (``mlp 128-128``,
    ``resnet18 width 16``)."""
    sizes = [
        "-".join(map(str, v)) if k == "hidden" else f"{k} {v}"
        for k in ARCHS[model.arch].sizes
        for v in [getattr(model, k)]
    ]
    return " ".join([model.arch, *sizes])


def network_of(form: dict) -> tuple[str, tuple[int, ...], int]:
    """(architecture, hidden widths, base width) of the form, with the size fields its
    architecture does not read at their defaults (a stale text there is no error)."""
    arch = form.get("arch", ModelConfig.arch)
    sizes = ARCHS[arch].sizes if arch in ARCHS else ()
    hidden = parse_widths(form.get("hidden", "")) if "hidden" in sizes else ModelConfig.hidden
    width = form.get("width", ModelConfig.width) if "width" in sizes else ModelConfig.width
    return arch, hidden, width


def groups() -> dict[str, list[FormField]]:
    """The shown fields by their group hint, in declaration order."""
    out: dict[str, list[FormField]] = {}
    for f in SHOWN:
        out.setdefault(f.group, []).append(f)
    return out


ROW_MAX = 5  # fields in one row of the form (more cut their labels)


def rows(fields: list, most: int = ROW_MAX) -> list[list]:
    """``fields`` in rows of at most ``most``, as even as can be (7 -> 4 + 3, 10 -> 5 + 5)."""
    if not fields:
        return []
    size = -(-len(fields) // -(-len(fields) // most))
    return [fields[i : i + size] for i in range(0, len(fields), size)]


PAGE_LIMIT = "set ADMM_DASH_MAX_RUN_GB to change it"  # how the page's cap on a run's memory is changed


def max_run_bytes() -> int:
    """Largest estimated run memory Start accepts: ``$ADMM_DASH_MAX_RUN_GB``, else 80% of this machine's RAM."""
    gb = os.environ.get("ADMM_DASH_MAX_RUN_GB")
    return int(float(gb) * 2**30) if gb else int(0.8 * resources.physical_memory())


# --- small parsers -----------------------------------------------------------------------


def _given_but(form: dict, key: str) -> list[str]:
    """The form's given marks (:data:`GIVEN`) without ``key``'s."""
    return [k for k in form.get(GIVEN) or () if k != key]


def fmt_number(v) -> str:
    """A number as the form's text: the shortest text that reads back to the same float."""
    if isinstance(v, (list, tuple)):
        return ",".join(fmt_number(x) for x in v)
    if isinstance(v, float):
        short = f"{v:g}"
        return short if float(short) == v else repr(v)  # exact: the text reads back to the same float
    return str(v)


def _to_widget(ff: FormField, v):
    """A config value as the widget holds it."""
    if v is None and ff.none is not None:
        return ff.none
    if ff.kind == "set":
        return v if isinstance(v, str) else json.dumps(list(v) if isinstance(v, tuple) else v)
    if ff.kind == "widths":
        return ",".join(map(str, v or ()))
    if ff.kind == "split":
        return list(v) if v is not None else None
    return v


_KIND_WORDS = {"int": "a whole number", "float": "a number"}


def _from_widget(ff: FormField, w):
    """The widget's value as the config takes it (ConfigError naming the field when it cannot)."""
    if ff.none is not None and w == ff.none:
        return None
    if ff.kind == "widths":
        return list(parse_widths(w, ff.path))
    if ff.kind == "set" and isinstance(w, str):
        return parse_sets([f"{ff.path}={w}"])[ff.path]
    if ff.kind == "split":
        if not isinstance(w, (list, tuple)):
            raise ConfigError(f"{ff.path} = {w!r}: must be a list of layer names")
        return list(w)
    if ff.kind in _KIND_WORDS and isinstance(w, str):
        try:
            return int(w.strip()) if ff.kind == "int" else float(w.strip())
        except ValueError:
            raise ConfigError(f"{ff.path} = {w!r}: not {_KIND_WORDS[ff.kind]}") from None
    if ff.kind == "float" and isinstance(w, int) and not isinstance(w, bool):
        return float(w)
    return w


FIELDS: tuple[FormField, ...] = (
    *_fields_of(RunConfig, ""),
    *_fields_of(DataConfig, "data."),
    *_fields_of(ModelConfig, "model."),
    *_fields_of(TrainConfig, "train."),
    PROCESSES,
)
SHOWN = tuple(f for f in FIELDS if f.kind != "hidden")
BY_PATH = {f.path: f for f in FIELDS if f.path}
BY_KEY = {f.key: f for f in FIELDS}
if len({f.key for f in FIELDS}) != len(FIELDS):
    raise RuntimeError("two config fields share a form key: give one a 'key' hint in its metadata")


# --- DeepFacto's form: its own kind of run, its fields generated from DeepFactoConfig ----------------

# ?mode=deepfacto opens the Train page on DeepFacto's form; its fields' keys (widgets, link): df.<setting>
DF = "df."
# where a DeepFacto field is drawn: the main rows, beside the backbone choice, else under its title in
# "All DeepFacto settings"; the algorithm's settings are the method's own (its record DeepFacto)
DF_GROUPS = {
    "main": ("rank", "warmup_epochs", "finetune_epochs", "admm_images", "seed", "device"),
    "backbone": ("backbone_source", "backbone_epochs", "backbone_width"),
    "The algorithm (the method's settings)": tuple(f.name for f in dataclasses.fields(DeepFacto) if f.name != "rank"),
    "Data": ("image_size", "test_fraction", "data_limit"),
    "Backbone training (when it is trained here)": ("backbone_lr", "backbone_id_weight"),
    "The run": ("batch_size",),
    "Evaluation (verification, attribute SVMs, test-time projection)": (
        "eval_images",
        "svm_train_limit",
        "svm_c",
        "svm_grid",
        "svm_solver",
        "nnls_tol",
        "nnls_max_iter",
    ),
}
DF_LAYOUT = {f"deepfacto.{n}": dict(group=g, key=DF + n) for g, names in DF_GROUPS.items() for n in names}
DF_LAYOUT["deepfacto.data_limit"]["none"] = 0  # 0 labelled images: all of them
# floats and lists are text read like the CLI's --set NAME=VALUE (JSON where it parses: "[0.001, 0.01]", null)
DF_FIELDS = {
    ff.key: ff
    for ff in _fields_of(
        DeepFactoConfig, "deepfacto.", DF_LAYOUT, ("backbone_weights", "data_root"), as_set=("float", "text")
    )
}


def deepfacto_form(saved: dict | None = None) -> dict:
    """DeepFacto's fields as the widgets hold them: a run's config.json["deepfacto"] (a field saved
    under an old name read under its new one, unknown keys ignored) over the defaults."""
    form = {key: ff.default for key, ff in DF_FIELDS.items()}
    for name, v in saved_fields(saved).items() if saved else ():
        if DF + name in DF_FIELDS:
            form[DF + name] = _to_widget(DF_FIELDS[DF + name], v)
    return form


def deepfacto_config(form: dict, backbone_weights: str | None = None) -> tuple[DeepFactoConfig | None, dict]:
    """(config, {}) or (None, {form key: message}) of the DeepFacto fields of ``form``; each field is
    checked alone first, so every wrong one gets its own message."""
    base, kw, errors = DeepFactoConfig().to_dict(), {}, {}
    for key, ff in DF_FIELDS.items():
        name = key[len(DF) :]
        if key not in form:
            continue
        try:
            kw[name] = _from_widget(ff, form[key])
            DeepFactoConfig.from_dict({**base, name: kw[name]})
        except (ConfigError, TypeError, ValueError) as e:
            errors[key] = str(e) if name in str(e) else f"{ff.path}: {e}"
    if errors:
        return None, errors
    try:
        return DeepFactoConfig.from_dict({**kw, "backbone_weights": backbone_weights}), {}
    except (ConfigError, TypeError, ValueError) as e:  # a combination of fields, or the backbone file
        named = re.search(r"deepfacto\.(\w+)", str(e))
        return None, {DF + named.group(1) if named else DEEPFACTO: str(e)}


# --- the network's layers and blocks -------------------------------------------------------


def layer_names(arch: str, hidden: tuple[int, ...], width: int = 64) -> list[str]:
    """Named layers of the network, from its architecture record (no layer is built)."""
    return archs.layer_names(ModelConfig(arch, tuple(hidden), width=width))


def split_options(arch: str, hidden: tuple[int, ...], width: int = 64) -> tuple[list[str], list[str]]:
    """(allowed split points, default split) from the architecture registry (``ARCHS``)."""
    names = layer_names(arch, hidden, width)
    cfg = ModelConfig(arch, tuple(hidden), width=width)
    return list(archs.split_points(cfg, names)), list(archs.default_split(cfg, names))


def _file_cut_rows(form: dict) -> list[dict] | None:
    """A model file's cut table (cached by the file's checksum); None for a built-in network or a
    file that cannot be read (the network field says why)."""
    if not models.is_entry(form.get("arch")):
        return None
    try:
        return models.cut_table(form["arch"], form.get("data", DataConfig.name))
    except (ConfigError, OSError):
        return None


def allowed_splits(form: dict) -> list[str]:
    """The split points of the form's network in forward order: a model file's valid cut points,
    else the architecture record's; [] when unknown."""
    if models.is_entry(form.get("arch")):
        return [r["name"] for r in _file_cut_rows(form) or [] if r["valid"]]
    try:
        return split_options(*network_of(form))[0]
    except (ConfigError, KeyError, TypeError, OSError):
        return []


def split_as_named(form: dict) -> dict:
    """The form with a model file's cut points under their menu names (:func:`models.canonical`):
    a link's or a run's ``layer3.1`` is the point the menu calls ``layer3``."""
    rows = _file_cut_rows(form) if isinstance(form.get("split"), list) else None
    return form if rows is None else {**form, "split": models.canonical(rows, form["split"])}


def split_labels(form: dict) -> dict[str, str]:
    """The split menu's label of each of a model file's cut points that has another name
    (``layer3`` -> ``layer3 (= layer3.1)``); {} for a built-in network or a file that cannot be read."""
    return {r["name"]: models.menu_label(r) for r in _file_cut_rows(form) or [] if r.get("also_blocks")}


def describe_blocks(arch: str, hidden: tuple[int, ...], split: list[str], data: str, width: int = 64) -> list[dict]:
    """[{block, layers, params, out}] of the split network, by the architecture record's arithmetic
    (``ARCHS[arch].table``; no layer is built). ``out`` is the size of Z_t per sample."""
    spec = data_mod.spec(data)
    if ARCHS[arch].image_input:
        archs.needs_image(arch, spec.input_shape)
    rows = resources.layer_table(arch, hidden, spec.input_shape, spec.n_classes, width)
    blocks, cur = [], []
    for r in rows:
        cur.append(r)
        if r[0] in split or r is rows[-1]:
            names, params = [n for n, *_ in cur], sum(p for *_, p in cur)
            blocks.append({"block": len(blocks) + 1, "layers": names, "params": params, "out": math.prod(r[1])})
            cur = []

    return blocks


def block_diagram_dot(blocks: list[dict], uses_blocks: bool = True, dark: bool = False) -> str:
    """Graphviz DOT of X -> [block 1] -> Z_1 -> … -> Z_T -> J(Y, Z_T).

    The background is transparent, so arrows, Z circles and the plain labels take the page's
    text colour (``dark``: light grey on Streamlit's dark theme); the pastel blocks keep dark text.
    """
    fg, sub = "#e5e7eb" if dark else "#111827", lambda n: str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))
    palette = ["#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe", "#cffafe"]
    lines = [
        'digraph G { rankdir=LR; bgcolor="transparent"; '
        f'node [fontname="Helvetica", fontsize=11, color="{fg}", fontcolor="{fg}"]; edge [color="{fg}"];',
        'x [label="X = Z₀", shape=plaintext];',
    ]
    prev, T = "x", len(blocks)
    for b in blocks:
        t = b["block"]
        name = f"block {t}" if uses_blocks else "network (end-to-end)"
        label, colour = f"{name}\\n{' · '.join(b['layers'])}\\n{b['params']:,} params", palette[(t - 1) % len(palette)]
        lines += [
            f'b{t} [label="{label}", shape=box, style="rounded,filled", fillcolor="{colour}", fontcolor="#111827"];',
            f"{prev} -> b{t};",
        ]
        prev = f"b{t}"
        if uses_blocks and t < T:
            lines += [f'z{t} [label="Z{sub(t)}", shape=circle, width=0.3];', f"b{t} -> z{t};"]
            prev = f"z{t}"
    lines += [f'loss [label="J(Y, Z{sub(T)})", shape=plaintext];', f"{prev} -> loss; }}"]  # T the count: "J(Y, Z₃)"
    return "\n".join(lines)


# --- form <-> config ---------------------------------------------------------------------


def method_fields(method: str, params: dict | None = None) -> dict:
    """``mp.*`` form values of ``method``: its settings' defaults overridden by ``params``; floats
    are edited as text (per-block lists allowed)."""
    out = {}
    for s in METHODS[method].settings():
        v = (params or {}).get(s["name"], s["default"])
        out[MP + s["name"]] = fmt_number(v) if s["choices"] is None and s["type"] == "float" else v
    return out


def form_from_config(cfg: RunConfig) -> dict:
    """The form that shows ``cfg``; :func:`config_from_form` of it gives ``cfg`` back."""
    form = {}
    for ff in FIELDS:
        if ff.path:
            part, _, name = ff.path.rpartition(".")
            form[ff.key] = _to_widget(ff, getattr(getattr(cfg, part) if part else cfg, name))
        else:
            form[ff.key] = ff.default
    if form["split"] is None:  # the widget shows the architecture's default split
        form["split"] = split_options(cfg.model.arch, cfg.model.hidden, cfg.model.width)[1]
    form.update(method_fields(cfg.method, cfg.method_params))
    form[GIVEN] = sorted(MP + k for k in cfg.method_params) + (["split"] if cfg.model.split is not None else [])
    return form


def form_from_dict(d: dict) -> tuple[dict, list[str]]:
    """The form of a config's JSON data (a run's config.json, a sweep's best trial), valid or not.

    A valid one is :func:`form_from_config`'s. Otherwise it is read as a link is (:func:`from_query`):
    each value goes into its field as it is, so the form's validation names every wrong one under
    its field; what no widget can hold (a name not in a menu, text for a number) is an error of its
    field, and it and every unknown key a message: -> (form, messages).
    """
    try:
        return split_as_named(form_from_config(RunConfig.from_dict(d))), []
    except (ConfigError, TypeError, ValueError):
        pass
    d = dict(d) if isinstance(d, dict) else {}
    q, carried, notes = {}, {}, []
    for part in ("", "data", "model", "train"):
        src = d.get(part, {}) if part else {k: v for k, v in d.items() if k not in ("kind", "method_params")}
        if not isinstance(src, dict):
            notes.append(f"{part} = {src!r}: must be an object of settings; its fields are the defaults")
            continue
        for name, v in src.items():
            ff = BY_PATH.get(f"{part}.{name}" if part else name)
            if ff is None and name not in ("data", "model", "train"):
                notes.append(f"{part + '.' if part else ''}{name} = {v!r}: not a setting of a run; ignored")
            elif ff is not None and ff.kind == "hidden":
                carried[ff.key] = v
            elif ff is not None and not (ff.kind == "split" and v is None):  # None: the network's default split
                listed = isinstance(v, (list, tuple))
                q[ff.key] = ",".join(map(str, v)) if listed else query_text(ff, _to_widget(ff, v))
    params = d.get("method_params") or {}
    for k, v in params.items() if isinstance(params, dict) else ():
        q["m." + k] = json.dumps(v) if isinstance(v, bool) else fmt_number(v)
    method = d.get("method") if d.get("method") in METHODS else DEFAULT_METHOD
    form, said = from_query(q, form_from_config(RunConfig(method=method)), "the run's config")
    return {**form, **carried}, notes + said


def preset_changes(form: dict, cfg: RunConfig | None) -> list[str]:
    """The labels of the fields where the form's run is no longer the preset it names (empty for no
    preset, or none changed); ["a field that is wrong"] while the form does not make a config. Both
    are compared as forms: the default split equals no split given, a method's explicit default an
    omitted one."""
    preset, method = form.get("preset"), form.get("method", DEFAULT_METHOD)
    if preset not in PRESETS or method not in METHODS:
        return []
    if cfg is None:
        return ["a field that is wrong"]
    ref = form_from_config(preset_config(preset, method))
    mine = {**form_from_config(cfg), "processes": form.get("processes", 1)}
    same = {"preset", *(ff.key for ff in FIELDS if ff.kind == "hidden")}
    return [label for k, label in field_labels(method).items() if k not in same and mine.get(k) != ref.get(k)]


def default_form(preset: str = DEFAULT_PRESET, method: str = DEFAULT_METHOD) -> dict:
    cfg = preset_config(preset, method) if preset != NO_PRESET else RunConfig(method=method)
    return form_from_config(cfg)


def _key_of(message: str, method: str) -> str:
    """Which form field a ConfigError message ('train.epochs = 0: …') is about."""
    head = message.split(" = ", 1)[0].split(":", 1)[0].strip()
    if head.startswith(("method_params.", f"{method}.")):
        return MP + head.split(".", 1)[1]
    return BY_PATH[head].key if head in BY_PATH else "_form"


def field_labels(method: str) -> dict[str, str]:
    """{form key: the label the form shows it under} of every field and ``method``'s settings."""
    return {f.key: f.label or f.key for f in FIELDS} | {MP + k: v for k, v in method_labels(method).items()}


def error_labels(errors: dict, method: str) -> list[str]:
    """The fields of ``errors`` ({form field: message}) by the labels the form shows them under."""
    labels = field_labels(method) | {"memory": "the run's memory (under the block diagram)", "_form": "the setup"}
    return [labels.get(k, k) for k in errors]


def on_page(message: str, key: str, method: str) -> str:
    """A field's message as the page says it: led by the field's label, not its code name
    ("Epochs = 0: …", not "train.epochs = 0: …"; the code name is in the field's help)."""
    head, sep, rest = message.partition(" = ")
    if not sep:
        return message
    name = key[len(MP) :] if key.startswith(MP) else None
    if name and head in (f"{method}.{name}", f"method_params.{name}", name):
        label = method_labels(method).get(name)
    else:
        label = BY_KEY[key].label if key in BY_KEY and head in (BY_KEY[key].path, key) else None
    return f"{label} = {rest}" if label else message


def method_labels(method: str) -> dict[str, str]:
    """{code name: the label the Train form shows it under} of ``method``'s settings (none for an
    unknown method): the paper's symbol first where it has one."""
    return {s["name"]: s["label"] for s in METHODS[method].settings()} if method in METHODS else {}


def setting_labels(method: str) -> dict[str, str]:
    """:func:`method_labels`, and the labels of the network and training fields a sweep may search."""
    # STRUCTURAL: the sweep's own table of them, name -> RunConfig field ("model__split")
    return method_labels(method) | {name: LAYOUT[f.replace("__", ".")]["label"] for name, f in STRUCTURAL.items()}


def labelled(name: str, labels: dict[str, str]) -> str:
    """A setting on screen with its code name after it, "β — penalty weight · beta", where the code
    name is not the label itself ("Loss", not "Loss · loss")."""
    label = labels.get(name, name)
    return label if label.lower().replace(" ", "_") == name.lower() else f"{label} · {name}"


NETWORK_KEYS = ("arch", "hidden", "width")  # the form fields the network's layers come from


@dataclass(frozen=True)
class FormCheck:
    """What :func:`check_form` found: ``cfg`` (None unless every field is right), ``errors``
    {form field: message}, ``warnings`` (allowed, but said), and ``memory``: the preflight's memory
    estimate (:func:`admm_core.spec.resources.estimate_memory`, made once per check), which still
    stands while some fields are wrong if they are not ones the memory depends on (those fields at
    their defaults; None when one the memory depends on is wrong)."""

    cfg: RunConfig | None
    errors: dict
    warnings: dict
    memory: dict | None


def read_config(form: dict) -> tuple[RunConfig | None, dict[str, str]]:
    """``form`` read back to a config, each field checked on its own by its settings dataclass
    (so every wrong field gets its message); nothing about this machine is checked (see
    :func:`config_from_form`). -> (RunConfig or None, {form field: message})."""
    cfg, errors, _ = _read(form)
    return (None if errors else cfg), errors


def _read(form: dict) -> tuple[RunConfig | None, dict[str, str], RunConfig | None]:
    """(config, errors, partial): the config with every wrong field left at its default
    (``partial``, or None where even that does not make one), for the checks that can still run."""
    errors: dict[str, str] = {}
    method = form.get("method", DEFAULT_METHOD)
    if not isinstance(method, str) or method not in METHODS:
        return None, {"method": f"method = {method!r}: unknown method; choose from {sorted(METHODS)}"}, None
    parts: dict[str, dict] = {"": {}, "data": {}, "model": {}, "train": {}}
    klass = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}
    for ff in FIELDS:
        if not ff.path or ff.key not in form:
            continue
        part, _, name = ff.path.rpartition(".")
        try:
            value = _from_widget(ff, form[ff.key])
            if part:  # this field alone, on its settings class: its own message
                klass[part](**{name: value})
        except ConfigError as e:
            errors.setdefault(ff.key, str(e))
            continue
        except (TypeError, ValueError) as e:
            errors.setdefault(ff.key, f"{ff.path} = {form[ff.key]!r}: {e}")
            continue
        parts[part][name] = value
    preset = parts[""].get("preset")
    if preset is not None and preset not in PRESETS:
        errors["preset"] = f"preset = {preset!r}: unknown preset; choose from {sorted(PRESETS)}"
        parts[""].pop("preset")
    # the method's settings: those the config gave (``_given``) and those that differ from the default
    params, given = {}, set(form.get(GIVEN) or ())
    for s in METHODS[method].settings():
        if (key := MP + s["name"]) not in form:
            continue
        v = form[key]
        if s["choices"] is None and s["type"] == "float":
            try:
                v = parse_numbers(v, f"{method}.{s['name']}")
            except ConfigError as e:
                errors.setdefault(key, str(e))
                continue
        if key in given or v != s["default"]:
            params[s["name"]] = v
    try:  # together: settings constrain each other (the message next to the setting it names)
        make_settings(method, params)
    except ConfigError as e:
        errors.setdefault(_key_of(str(e), method), str(e))
    model = parts["model"]
    if set(NETWORK_KEYS) & set(errors):  # the split names layers of a network this form does not give
        model.pop("split", None)
    if "split" not in given and "split" in model:  # the default split, not given: None
        try:
            arch, hidden = model.get("arch", ModelConfig.arch), tuple(model.get("hidden", ModelConfig.hidden))
            if model["split"] == split_options(arch, hidden, model.get("width", ModelConfig.width))[1]:
                model["split"] = None
        except (ConfigError, KeyError):
            pass
    if errors:  # a setting the method refused: the partial config takes its default
        params = {k: v for k, v in params.items() if MP + k not in errors}
    try:
        cfg = RunConfig.from_dict(
            {**parts[""], "data": parts["data"], "model": model, "train": parts["train"], "method_params": params}
        )
    except ConfigError as e:
        return None, errors or {_key_of(str(e), method): str(e)}, None
    return (None, errors, cfg) if errors else (cfg, {}, None)


def config_from_form(form: dict, available: list[str] | None = None) -> tuple[RunConfig | None, dict[str, str]]:
    """Validate ``form`` -> (RunConfig or None, {form field: message}): :func:`check_form`'s."""
    got = check_form(form, available)
    return got.cfg, got.errors


def check_form(form: dict, available: list[str] | None = None) -> FormCheck:
    """Every check of ``form``, every wrong field at once (typed values, links and loaded configs alike).

    :func:`read_config` (each field on its own), then the engine's
    :func:`admm_core.spec.resources.preflight_report` on the config with the wrong fields at their
    defaults, so a wrong epoch count does not hide a wrong split; its memory refusals wait until the
    other fields are right. ``available``: the data sets present (default: those under the data root).
    """
    link = dict(form.get(LINK) or {})
    if link:  # a link's values no widget could hold: their fields' errors, with the rest checked too
        got = check_form({k: v for k, v in form.items() if k != LINK}, available)
        return FormCheck(None, {**got.errors, **link}, got.warnings, got.memory)
    if models.is_entry(form.get("arch")):
        return _check_model_file(form, available)
    cfg, errors, partial = _read(form)
    target = cfg or partial
    if target is None:
        return FormCheck(None, errors, {}, None)
    method = target.method
    processes = form.get("processes", 1)
    # the one estimate of this check; the page's limit and the worker processes' memory are checked there too
    report = preflight_report(target, processes, datasets=available, limit=(max_run_bytes(), PAGE_LIMIT))
    for path, e in report.errors.items():
        key = path if path in ("memory", "processes") else _key_of(path + " = ", method)
        if partial is not None and (key == "memory" or isinstance(e, MemoryRefusal)):  # processes' memory too
            continue  # said once the other fields are right (the estimate is shown meanwhile)
        errors.setdefault(key, str(e))
    warnings = run_warnings(target, processes)
    sized_by = {*NETWORK_KEYS, "split", "data", "train_limit", "method", "batch_size"}  # what the memory depends on
    # a wrong number of the method (β, a step size: they size nothing) keeps the estimate, on its default
    floats = {MP + x["name"] for x in METHODS[method].settings() if x["type"] == "float" and x["choices"] is None}
    unsized = sized_by & set(errors) or any(k.startswith(MP) and k not in floats for k in errors)
    return FormCheck(None if errors else cfg, errors, warnings, None if unsized else report.estimate)


def _check_model_file(form: dict, available: list[str] | None) -> FormCheck:
    """A network from the models folder: its cut points checked against the file's table (computed
    in a child process), every other field on the default network (its cfg is what the worker's
    command line is made of: data, method, settings, training; no memory estimate)."""
    base = {**form, "arch": ModelConfig.arch, "hidden": _to_widget(BY_PATH["model.hidden"], ModelConfig.hidden)}
    base |= {"split": split_options(ModelConfig.arch, ModelConfig.hidden)[1], GIVEN: _given_but(form, "split")}
    got = check_form(base, available)
    errors = {k: v for k, v in got.errors.items() if k != "memory"}
    try:
        valid = [r["name"] for r in models.cut_table(form["arch"], form.get("data", DataConfig.name)) if r["valid"]]
        if bad := [s for s in form.get("split") or () if s not in valid]:
            errors["split"] = f"model.split = {', '.join(bad)}: not a valid cut point; choose from {', '.join(valid)}"
    except ConfigError as e:
        errors["arch"] = str(e)

    return FormCheck(None if errors else got.cfg, errors, got.warnings, None)


# --- form <-> URL query ----------------------------------------------------------------------

# the links of the one augment menu before its three fields
LEGACY_AUGMENT = {"none": (False, None), "crop-flip": (True, True), "shift": (True, False)}


def query_text(ff: FormField, v) -> str:
    """A widget's value as a link writes it (:func:`read_text` reads it back)."""
    if ff.kind == "split":
        return ",".join(v or []) or "-"
    if isinstance(v, bool):
        return json.dumps(v)
    return "" if v is None else str(v)


def to_query(form: dict, mode: str = NETWORK) -> dict[str, str]:
    """Flat str -> str mapping for st.query_params: every shown field and the chosen method's
    settings; DeepFacto's form: ``mode=deepfacto`` and its fields that differ from the defaults."""
    if mode == DEEPFACTO:
        changed = {k: ff for k, ff in DF_FIELDS.items() if k in form and form[k] != ff.default}
        return {"mode": DEEPFACTO, **{k: query_text(ff, form[k]) for k, ff in changed.items()}}
    q = {ff.key: query_text(ff, form[ff.key]) for ff in SHOWN if ff.key in form}
    for k, v in form.items() if form.get("method") in METHODS else ():
        if k.startswith(MP):
            q[SETTING_PREFIX + k[len(MP) :]] = json.dumps(v) if isinstance(v, bool) else str(v)
    return q


def read_text(ff: FormField, text: str, form: dict | None = None):
    """A link's text as the widget of ``ff`` holds it; ValueError saying why it cannot (the menu's
    choices of ``form``, or the kind of value it takes)."""
    if ff.kind == "split":
        return [] if text in ("-", "") else [s for s in text.split(",") if s]
    if ff.kind == "check":
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError("not true or false")
        return text.lower() in ("true", "1", "yes")
    if ff.kind in _KIND_WORDS:
        try:
            return int(text) if ff.kind == "int" else float(text)
        except ValueError:
            raise ValueError(f"not {_KIND_WORDS[ff.kind]}") from None
    if ff.kind == "select" and ff.menu != "datasets" and text not in choices(ff, form):
        raise ValueError(f"choose from {choices(ff, form)}")
    return str(text)


PAGE_KEYS = {"run", "load", "mode"}  # link keys the page reads itself (watched run, Runs → Load, the form shown)
MODES = (NETWORK, DEEPFACTO)
SETTING_PREFIX = "m."  # a method setting in a link: m.<name>


def _link_settings(q: dict, form: dict, method: str, shown: set, link: dict, where: str) -> list[str]:
    """The link's keys beyond the form's fields: method settings (m.<name>) applied to ``form`` or
    said wrong in ``link`` (by field), DeepFacto's (df.<name>, with mode=deepfacto) applied to
    ``form``; what is not applied as notes (returned)."""
    notes: list[str] = []
    settings = {s["name"]: s for s in METHODS[method].settings()}
    for k, v in q.items():
        name = k[len(SETTING_PREFIX) :]
        if k == "mode" and v not in MODES:
            notes.append(f"mode = {v!r}: choose from {list(MODES)}; the page shows the network form")
        elif k.startswith(DF) and q.get("mode") != DEEPFACTO:
            notes.append(f"{k} = {v!r}: a DeepFacto setting, read only with mode=deepfacto in the link; ignored")
        elif k.startswith(DF):
            key = DF + RENAMED.get(k[len(DF) :], k[len(DF) :])  # a link made before the renames
            try:
                form[key] = read_text(DF_FIELDS[key], v)
            except KeyError:
                notes.append(f"{k}: not a DeepFacto setting (ignored)")
            except ValueError as e:
                notes.append(f"{k} = {v!r}: {e} (ignored)")
        elif k in shown or k in PAGE_KEYS:
            pass
        elif not k.startswith(SETTING_PREFIX) and k in settings:  # the setting's name without its m.
            link[MP + k] = (
                f"{settings[k]['label']}: {k} = {v!r} in {where} is an unknown key; a method setting is "
                f"written m.{k}. The field shows {form.get(MP + k)!r} (edit it to go on)"
            )
        elif not k.startswith(SETTING_PREFIX):
            notes.append(f"{k} = {v!r}: unknown key (no field of this page reads it); ignored")
        elif name in settings:
            try:
                form[MP + name] = read_text(setting_field(method, settings[name]), v)
            except ValueError as e:
                shows = f"the field shows {form.get(MP + name)!r} (edit it to go on)"
                link[MP + name] = f"{method}.{name} = {v!r} in {where}: {e}; {shows}"
        elif owners := [m for m in METHODS if name in {x["name"] for x in METHODS[m].settings()}]:
            # meant for a method the link does not choose: Start waits on the method's field
            why = (
                f"{k} = {v!r} in {where} is not a setting of {method} (the method in force), but of "
                f"{', '.join(owners)}: add method={owners[0]} to the link, or pick that method"
            )
            link["method"] = f"{link['method']} · {why}" if "method" in link else f"Method: {why}"
        else:
            notes.append(f"{k} = {v!r}: no method has a setting {name!r}; ignored")
    return notes


def from_query(query: dict, base: dict | None = None, where: str = "the link") -> tuple[dict, list[str]]:
    """Form values from a link's query: every value is applied or accounted for -> (form, notes).

    ``notes`` name, each with its reason, the values not applied: an unknown key, an unknown method
    or preset, a method setting for another method than the one in force (the link's, else the
    default method), a value its field cannot hold. Those meant for a field are also errors of
    that field (``form[LINK]``), holding Start until it is edited; the field shows the default.
    The answer for a value does not depend on what else the link holds. ``where``: what the values
    are said to be in (a link, a loaded run's config).
    """
    notes: list[str] = []
    link: dict[str, str] = {}
    q = {k: (v[-1] if isinstance(v, list) else v) for k, v in dict(query).items()}
    if q.get("augment") in LEGACY_AUGMENT:  # augment=none|crop-flip|shift (the old one menu)
        on, flip = LEGACY_AUGMENT[q["augment"]]
        q["augment"] = json.dumps(on)
        if flip is not None:
            q.setdefault("augment_flip", json.dumps(flip))
    preset = q.get("preset", (base or {}).get("preset", DEFAULT_PRESET))
    method = q.get("method", (base or {}).get("method", DEFAULT_METHOD))
    if preset not in PRESETS and preset != NO_PRESET:
        link["preset"] = (
            f"Preset: preset = {preset!r} in {where} is an unknown preset; choose from "
            f"{[NO_PRESET, *sorted(PRESETS)]}. The field shows {DEFAULT_PRESET} (pick one to go on)"
        )
        preset = DEFAULT_PRESET
    if method not in METHODS:
        link["method"] = (
            f"Method: method = {method!r} in {where} is an unknown method; choose from {sorted(METHODS)}. "
            f"The field shows {DEFAULT_METHOD} (pick one to go on)"
        )
        method = DEFAULT_METHOD
    form = dict(base) if base else default_form(preset, method)
    if form.get("method") != method:
        form = {k: v for k, v in form.items() if not k.startswith(MP)}
        fresh = preset_config(preset, method).method_params if preset != NO_PRESET else {}
        form.update(method_fields(method, fresh))
        form[GIVEN] = sorted(MP + k for k in fresh) + [k for k in form.get(GIVEN, ()) if not k.startswith(MP)]
    form["preset"], form["method"] = preset, method
    if q.get("mode") == DEEPFACTO:  # its fields: the link's (below) over the defaults
        form |= deepfacto_form()
    # a value no widget can hold (text for a number, a name not in a menu) is an error of its field,
    # holding Start until that field is edited: never dropped for the widget's value without a word
    for ff in SHOWN:
        if ff.key in q and ff.key not in ("preset", "method"):
            try:
                form[ff.key] = read_text(ff, q[ff.key], form)
            except ValueError as e:
                link[ff.key] = (
                    f"{ff.path or ff.key} = {q[ff.key]!r} in {where}: {e}; the field shows "
                    f"{form.get(ff.key)!r} (edit it to go on)"
                )
    own = models.is_entry(form.get("arch"))
    if "split" not in q and (own or any(k in q for k in NETWORK_KEYS)):
        try:  # a model file's: no cut until one is picked; another network: its default split
            form["split"] = [] if own else split_options(*network_of(form))[1]
            form[GIVEN] = _given_but(form, "split")
        except (ConfigError, KeyError, TypeError):
            pass
    notes += _link_settings(q, form, method, {ff.key for ff in SHOWN}, link, where)
    form = split_as_named(form)
    if link:
        form[LINK] = link
    return form, notes + list(link.values())


STEP_WARN = 10.0  # a learning rate or step size this large makes the run diverge (it ends 'diverged')


def run_warnings(cfg: RunConfig, processes) -> dict[str, str]:
    """Warnings, not refusals, by form field: a learning rate or step size (``lr``, every ``*_lr``
    setting, as the method will use it) at or above :data:`STEP_WARN`, more CPU worker processes
    than cores (they take turns: slower than one per core), a batch larger than the training set."""
    out = {}
    try:
        params = vars(cfg.method_settings)
        device_name(cfg.train.device)
    except Exception:  # noqa: BLE001 - an invalid config, a device not here: their own messages
        return out
    for name, v in params.items():
        large = isinstance(v, (int, float)) and not isinstance(v, bool) and v >= STEP_WARN
        if (name == "lr" or name.endswith("_lr")) and large:
            out[MP + name] = (
                f"{cfg.method}.{name} = {fmt_number(v)} is very large (≥ {fmt_number(STEP_WARN)}): the run will "
                "probably diverge (it then ends 'diverged' with the epoch and the quantity)"
            )
    if said := resources.processes_note(cfg, processes):
        out["processes"] = said
    if said := resources.batch_note(cfg):
        out["batch_size"] = said
    return out
