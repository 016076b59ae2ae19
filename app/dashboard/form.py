"""The Train form as plain data: form values <-> RunConfig <-> URL query parameters.

A *form* is a flat dict of what the widgets hold::

    preset, data, train_limit (0 = all), augment (none / crop-flip / shift), augment_pad,
    processes (worker processes under torchrun; not part of the RunConfig), arch, hidden ("128,128"), split (list of layer
    names), method, loss, device, lr_schedule, epochs, batch_size, seed, eval_every, checkpoint_every,
    "mp.<setting>" for each setting of the chosen method (floats as text, so a per-block
    β can be written "1,0.5,1").

:func:`config_from_form` validates through :class:`admm_core.config.RunConfig` and the
engine's split / per-block checks, and returns the messages keyed by form field, so the
page can show each one next to its widget.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache

from admm_core import data as data_mod
from admm_core import resources
from admm_core.config import ConfigError, RunConfig
from admm_core.methods import METHODS
from admm_core.presets import PRESETS, preset_config
from admm_core.resources import DATA_SHAPES, check_fits, estimate_memory, layer_table

NO_PRESET = "none"
DEFAULT_PRESET = "digits-mlp"
DEFAULT_METHOD = "block-admm"
INT_FIELDS = (
    "train_limit",
    "augment_pad",
    "epochs",
    "batch_size",
    "seed",
    "eval_every",
    "checkpoint_every",
    "processes",
)
MAX_PROCESSES = 64  # worker processes of one run on this machine (torchrun --nproc-per-node)
MULTI_PROCESS_METHODS = ("block-admm", "gotmare")  # sample-sharded Z/U (admm_core.distributed)
STR_FIELDS = ("preset", "data", "augment", "arch", "hidden", "method", "loss", "device", "lr_schedule")
# augmentation menu -> (data.augment, data.augment_flip)
AUGMENTS = {"none": (False, True), "crop-flip": (True, True), "shift": (True, False)}
MP = "mp."  # prefix of method-setting fields


def max_run_bytes() -> int:
    """Largest estimated run memory Start accepts: ``$ADMM_DASH_MAX_RUN_GB``, else 80% of this machine's RAM."""
    gb = os.environ.get("ADMM_DASH_MAX_RUN_GB")
    return int(float(gb) * 2**30) if gb else int(0.8 * resources.physical_memory())


# --- small parsers -----------------------------------------------------------------------


def parse_widths(text: str) -> tuple[int, ...]:
    """'128, 128' -> (128, 128); raises ConfigError naming model.hidden."""
    parts = [p.strip() for p in str(text).replace(";", ",").split(",") if p.strip()]
    try:
        vals = tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(
            f"model.hidden = {text!r}: write positive integers separated by commas, e.g. 128,128"
        ) from None
    if any(v <= 0 for v in vals):
        raise ConfigError(f"model.hidden = {text!r}: widths must be positive integers")
    return vals


def parse_number(text: str, name: str):
    """'5e-4' -> 0.0005; '1, 0.5' -> [1.0, 0.5] (per-block); raises ConfigError."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{name} = {text!r}: not a number") from None
    if not vals:
        raise ConfigError(f"{name} = {text!r}: give a number")
    return vals[0] if len(vals) == 1 else vals


def fmt_number(v) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(fmt_number(x) for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


# --- the network's layers and blocks -------------------------------------------------------


def layer_names(arch: str, hidden: tuple[int, ...]) -> list[str]:
    """Named layers of the network, from the engine's architecture record (no layer is built)."""
    from admm_core.config import ModelConfig
    from admm_core.models import layer_names as names

    return names(ModelConfig(arch, tuple(hidden)))


def split_options(arch: str, hidden: tuple[int, ...]) -> tuple[list[str], list[str]]:
    """(allowed split points, default split) from the engine's architecture registry."""
    from admm_core.config import ModelConfig
    from admm_core.models import default_split, split_points

    names = layer_names(arch, hidden)
    cfg = ModelConfig(arch, tuple(hidden))
    return list(split_points(cfg, names)), list(default_split(cfg, names))


@lru_cache(maxsize=8)
def data_shape(name: str) -> tuple[tuple[int, ...], int, int]:
    """(input shape, classes, training samples) of a data set: the engine's table, else loaded once."""
    if name in DATA_SHAPES:
        return DATA_SHAPES[name][:3]
    ds = data_mod.load(name)
    return ds.input_shape, ds.n_classes, len(ds.x_train)


def describe_blocks(arch: str, hidden: tuple[int, ...], split: list[str], data: str) -> list[dict]:
    """[{block, layers, params, out}] of the split network, by the engine's arithmetic
    (:func:`admm_core.resources.layer_table`; no layer is built). ``out`` is the size of Z_t per sample."""
    shape, n_out, _ = data_shape(data)
    if arch == "resnet18" and len(shape) != 3:
        raise ConfigError(f"model.arch = 'resnet18': needs image inputs (C, H, W), got shape {shape}")
    rows = layer_table(arch, tuple(hidden), tuple(shape), n_out)
    blocks, cur = [], []
    for r in rows:
        cur.append(r)
        if r[0] in split or r is rows[-1]:
            blocks.append(
                {
                    "block": len(blocks) + 1,
                    "layers": [name for name, _, _ in cur],
                    "params": sum(p for _, _, p in cur),
                    "out": math.prod(cur[-1][1]),
                }
            )
            cur = []
    return blocks


def block_diagram_dot(blocks: list[dict], uses_blocks: bool = True, dark: bool = False) -> str:
    """Graphviz DOT of X -> [block 1] -> Z_1 -> … -> Z_T -> loss.

    The background is transparent, so arrows, Z circles and the plain labels take the page's
    text colour (``dark``: light grey on Streamlit's dark theme); the pastel blocks keep dark text.
    """
    fg = "#e5e7eb" if dark else "#111827"
    lines = [
        'digraph G { rankdir=LR; bgcolor="transparent"; '
        f'node [fontname="Helvetica", fontsize=11, color="{fg}", fontcolor="{fg}"]; edge [color="{fg}"];',
        'x [label="X = Z₀", shape=plaintext];',
    ]
    prev = "x"
    palette = ["#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe", "#cffafe"]
    T = len(blocks)
    for b in blocks:
        t = b["block"]
        name = f"block {t}" if uses_blocks else "network (end-to-end)"
        label = f"{name}\\n{' · '.join(b['layers'])}\\n{b['params']:,} params"
        colour = palette[(t - 1) % len(palette)]
        lines.append(
            f'b{t} [label="{label}", shape=box, style="rounded,filled", fillcolor="{colour}", fontcolor="#111827"];'
        )
        lines.append(f"{prev} -> b{t};")
        if uses_blocks and t < T:
            lines.append(f'z{t} [label="Z{_sub(t)}", shape=circle, width=0.3];')
            lines.append(f"b{t} -> z{t};")
            prev = f"z{t}"
        else:
            prev = f"b{t}"
    lines.append('loss [label="J(Y, Z_T)", shape=plaintext];')
    lines.append(f"{prev} -> loss; }}")
    return "\n".join(lines)


def _sub(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


# --- form <-> config ---------------------------------------------------------------------


def method_fields(method: str, params: dict | None = None) -> dict:
    """``mp.*`` form values of ``method``: its settings' defaults overridden by ``params``."""
    params = params or {}
    out = {}
    for s in METHODS[method].settings():
        v = params.get(s["name"], s["default"])
        if s["choices"] is None and s["type"] == "float":
            v = fmt_number(v)  # floats are edited as text (per-block lists allowed)
        out[MP + s["name"]] = v
    return out


def form_from_config(cfg: RunConfig) -> dict:
    hidden = tuple(cfg.model.hidden)
    split = list(cfg.model.split) if cfg.model.split is not None else split_options(cfg.model.arch, hidden)[1]
    return {
        "preset": cfg.preset or NO_PRESET,
        "data": cfg.data.name,
        "train_limit": cfg.data.train_limit or 0,
        "augment": "none" if not cfg.data.augment else ("crop-flip" if cfg.data.augment_flip else "shift"),
        "augment_pad": cfg.data.augment_pad,
        "arch": cfg.model.arch,
        "hidden": ",".join(map(str, hidden)),
        "split": split,
        "method": cfg.method,
        "loss": cfg.train.loss,
        "device": cfg.train.device,
        "lr_schedule": cfg.train.lr_schedule,
        "epochs": cfg.train.epochs,
        "batch_size": cfg.train.batch_size,
        "seed": cfg.train.seed,
        "eval_every": cfg.train.eval_every,
        "checkpoint_every": cfg.train.checkpoint_every,
        "processes": 1,  # how a run is launched, not part of its config
        **method_fields(cfg.method, cfg.method_params),
    }


def default_form(preset: str = DEFAULT_PRESET, method: str = DEFAULT_METHOD) -> dict:
    cfg = preset_config(preset, method) if preset != NO_PRESET else RunConfig(method=method)
    return form_from_config(cfg)


def _field_of(message: str, method: str) -> str:
    """Which form field a ConfigError message ('train.epochs = 0: …') is about."""
    head = message.split(" = ", 1)[0].split(":", 1)[0].strip()
    if head.startswith(f"{method}."):
        return MP + head.split(".", 1)[1]
    mapping = {
        "data.name": "data",
        "data.train_limit": "train_limit",
        "data.augment": "augment",
        "data.augment_flip": "augment",
        "data.augment_pad": "augment_pad",
        "model.arch": "arch",
        "model.hidden": "hidden",
        "model.split": "split",
        "method": "method",
        "preset": "preset",
        "train.device": "device",
    }
    if head in mapping:
        return mapping[head]
    if head.startswith("train."):
        return head.split(".", 1)[1]
    return "_form"


def processes_errors(
    value, method: str, T: int | None = None, device: str = "cpu", parallel: str | None = None, n_gpus=None
) -> dict[str, str]:
    """{"processes": message} when ``value`` worker processes cannot run ``method``; {} when they can.

    Checked here, before launch, what the workers would otherwise fail on: one block per
    process with ``parallel = 'blocks'`` (T blocks), and one GPU per process when the run uses
    CUDA (``device`` cuda, or auto on a machine with a GPU). ``n_gpus`` defaults to this machine's.
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PROCESSES
    if not ok:
        return {"processes": f"processes = {value!r}: must be a whole number from 1 to {MAX_PROCESSES}"}
    if value == 1:
        return {}
    if method not in MULTI_PROCESS_METHODS:
        return {
            "processes": f"processes = {value}: only {' and '.join(MULTI_PROCESS_METHODS)} run on several "
            f"processes (method {method!r})"
        }
    if parallel == "blocks" and T is not None and value != T:
        return {"processes": f"processes = {value}: parallel = 'blocks' runs one block per process; this split has {T}"}
    if device != "cpu":
        if n_gpus is None:
            from admm_core.runs import cuda_device_count

            n_gpus = cuda_device_count()
        if (device == "cuda" or n_gpus > 0) and value > n_gpus:
            return {
                "processes": f"processes = {value}: device = {device!r} runs each process on a GPU of its own and "
                f"this machine has {n_gpus}; choose device cpu or at most {n_gpus} processes"
            }
    return {}


def config_from_form(form: dict, available: list[str] | None = None) -> tuple[RunConfig | None, dict[str, str]]:
    """Validate ``form`` -> (RunConfig or None, {field: message}).

    All checks are the engine's: RunConfig (data, model, train, the method's settings),
    the split against the architecture, a per-block β against the number of blocks, the
    device, and whether the data set is under the data root.
    """
    errors: dict[str, str] = {}
    method = form.get("method", DEFAULT_METHOD)

    def err(exc: Exception, default_field: str | None = None):
        msg = str(exc)
        key = default_field or _field_of(msg, method)
        errors.setdefault(key, msg)

    hidden: tuple[int, ...] = (128,)  # stand-in while the text does not parse
    try:
        hidden = parse_widths(form.get("hidden", ""))
    except ConfigError as e:
        err(e, "hidden")
    params = {}
    if method in METHODS:
        for s in METHODS[method].settings():
            key = MP + s["name"]
            if key not in form:
                continue
            v = form[key]
            if s["choices"] is None and s["type"] == "float":
                try:
                    v = parse_number(v, f"{method}.{s['name']}")
                except ConfigError as e:
                    err(e, key)
                    continue
            params[s["name"]] = v
    else:
        errors["method"] = f"method = {method!r}: unknown method; choose from {sorted(METHODS)}"
    preset = form.get("preset") or NO_PRESET
    if preset != NO_PRESET and preset not in PRESETS:
        errors["preset"] = f"preset = {preset!r}: unknown preset; choose from {sorted(PRESETS)}"
    if errors.get("method"):
        return None, errors
    train_limit = form.get("train_limit") or None
    augment = form.get("augment", "none")
    if not isinstance(augment, str) or augment not in AUGMENTS:
        errors["augment"] = f"data.augment = {augment!r}: choose from {list(AUGMENTS)}"
        return None, errors
    cfg = None
    try:
        data = {"name": form.get("data", "digits"), "train_limit": int(train_limit) if train_limit else None}
        data["augment"], data["augment_flip"] = AUGMENTS[augment]
        if "augment_pad" in form:
            data["augment_pad"] = form["augment_pad"]
        cfg = RunConfig.from_dict(
            {
                "method": method,
                "data": data,
                "model": {
                    "arch": form.get("arch", "mlp"),
                    "hidden": list(hidden),
                    "split": list(form.get("split") or []),
                },
                "train": {
                    k: form[k]
                    for k in (
                        "epochs",
                        "batch_size",
                        "seed",
                        "eval_every",
                        "checkpoint_every",
                        "loss",
                        "device",
                        "lr_schedule",
                    )
                    if k in form
                },
                "method_params": params,
                "preset": None if preset == NO_PRESET else preset,
            }
        )
    except ConfigError as e:
        err(e)
    except (TypeError, ValueError) as e:
        errors.setdefault("_form", str(e))
    if cfg is None or errors:
        return None, errors

    # the split must be made of this network's split points, in order
    from admm_core.methods.base import per_block
    from admm_core.models import validate_split

    try:
        validate_split(cfg.model, layer_names(cfg.model.arch, cfg.model.hidden), tuple(cfg.model.split))
    except ConfigError as e:
        err(e, "split")
    T = len(cfg.model.split) + 1
    method_cls = METHODS[method]
    beta = cfg.method_params.get("beta")
    if beta is not None and method_cls.uses_blocks and isinstance(beta, (list, tuple)):
        try:
            per_block(beta, T, f"{method}.beta")
        except ConfigError as e:
            err(e, MP + "beta")
    try:
        from admm_core.runs import device_name

        device_name(cfg.train.device)
    except RuntimeError as e:
        errors["device"] = str(e)
    avail = data_mod.available() if available is None else available
    if cfg.data.name not in avail:
        roots = ", ".join(str(r) for r in data_mod.candidate_roots(None))
        errors["data"] = (
            f"data.name = {cfg.data.name!r}: not found under the data root (looked in {roots}); set ADMM_DATA"
        )
    errors.update(
        processes_errors(
            form.get("processes", 1), method, T, cfg.train.device, cfg.method_params.get("parallel", "samples")
        )
    )
    if cfg.data.augment and "data" not in errors:
        shape = data_shape(cfg.data.name)[0]
        if len(shape) != 3:
            errors["augment"] = f"data.augment = {augment!r}: needs images; {cfg.data.name} gives flat vectors {shape}"
        elif not method_cls.supports_augment:
            errors["augment"] = f"data.augment = {augment!r}: method {method!r} does not support augmentation"
    if cfg.model.arch == "resnet18" and "data" not in errors:
        try:
            shape, _, _ = data_shape(cfg.data.name)
            if len(shape) != 3:
                raise ConfigError(
                    f"model.arch = 'resnet18': needs image inputs (C, H, W); {cfg.data.name} gives flat vectors {shape}"
                )
        except ConfigError as e:
            err(e, "arch")
    if not errors:  # memory by arithmetic (no network is built): the page's limit, then what is free here
        mem = memory_of(cfg)
        if mem["total_bytes"] > max_run_bytes():
            errors["memory"] = memory_message(cfg, mem)
        else:
            try:
                check_fits(cfg)
            except ConfigError as e:
                errors["memory"] = str(e)
        n_proc = form.get("processes", 1)
        if "memory" not in errors and n_proc > 1 and device_name(cfg.train.device) == "cpu":
            errors.update(processes_memory_errors(n_proc, mem))
    return (None if errors else cfg), errors


def processes_memory_errors(n_proc: int, mem: dict, free: int | None = None) -> dict[str, str]:
    """{"processes": message} when ``n_proc`` CPU worker processes would not fit together.

    Each process holds the data set, the network and its optimizer state; the Z/U variables are
    sharded, so they count once in all: N (data + parameters + optimizer) + Z/U.
    """
    need = n_proc * (mem["data_bytes"] + mem["param_bytes"] + mem["optimizer_bytes"]) + mem["state_bytes"]
    free = resources.available_memory("cpu")[0] if free is None else free
    limit = min(max_run_bytes(), free)
    if need <= limit:
        return {}
    return {
        "processes": f"processes = {n_proc}: each process holds the data, the network and its optimizer, so the "
        f"run needs about {resources.human(need)} in all, over the {resources.human(limit)} available "
        "(free memory or the page's limit); use fewer processes"
    }


def memory_of(cfg: RunConfig) -> dict:
    """The engine's estimate (:func:`admm_core.resources.estimate_memory`) of a valid config."""
    return estimate_memory(cfg)


def memory_message(cfg: RunConfig, mem: dict) -> str:
    n = min(cfg.data.train_limit or data_shape(cfg.data.name)[2], data_shape(cfg.data.name)[2])
    what = (
        f"model.hidden = {','.join(map(str, cfg.model.hidden))!r}"
        if cfg.model.arch == "mlp"
        else f"model.arch = {cfg.model.arch!r}"
    )
    advice = (
        "Use fewer or narrower layers, or fewer training samples."
        if cfg.model.arch == "mlp"
        else "Use fewer training samples or a later split."
    )
    return (
        f"{what}: this run needs about {resources.human(mem['total_bytes'])} (parameters {resources.human(mem['param_bytes'])}, "
        f"optimizer {resources.human(mem['optimizer_bytes'])}, Z/U {resources.human(mem['state_bytes'])} for {n:,} "
        f"{cfg.data.name} samples, data {resources.human(mem['data_bytes'])}), over the {resources.human(max_run_bytes())} "
        f"limit (set ADMM_DASH_MAX_RUN_GB to change it). {advice}"
    )


# --- form <-> URL query ----------------------------------------------------------------------


def to_query(form: dict) -> dict[str, str]:
    """Flat str -> str mapping for st.query_params (only the chosen method's settings)."""
    q = {}
    for k in STR_FIELDS + INT_FIELDS:
        if k in form:
            q[k] = str(form[k])
    q["split"] = ",".join(form.get("split") or []) or "-"
    method = form.get("method")
    for k, v in form.items():
        if k.startswith(MP):
            q["m." + k[len(MP) :]] = json.dumps(v) if isinstance(v, bool) else str(v)
    if method not in METHODS:
        q = {k: v for k, v in q.items() if not k.startswith("m.")}
    return q


def from_query(query: dict, base: dict | None = None) -> tuple[dict, list[str]]:
    """Form values from a query mapping (unknown keys ignored); returns (form, warnings)."""
    warnings: list[str] = []
    q = {k: (v[-1] if isinstance(v, list) else v) for k, v in dict(query).items()}
    preset = q.get("preset", (base or {}).get("preset", DEFAULT_PRESET))
    method = q.get("method", (base or {}).get("method", DEFAULT_METHOD))
    if preset not in PRESETS and preset != NO_PRESET:
        warnings.append(f"preset = {preset!r} in the link is unknown; using {DEFAULT_PRESET}")
        preset = DEFAULT_PRESET
    if method not in METHODS:
        warnings.append(f"method = {method!r} in the link is unknown; using {DEFAULT_METHOD}")
        method = DEFAULT_METHOD
    form = dict(base) if base else default_form(preset, method)
    if form.get("method") != method:
        form = {k: v for k, v in form.items() if not k.startswith(MP)}
        form.update(method_fields(method, preset_config(preset, method).method_params if preset != NO_PRESET else {}))
    form["preset"], form["method"] = preset, method
    for k in STR_FIELDS:
        if k in q and k not in ("preset", "method"):
            form[k] = q[k]
    for k in INT_FIELDS:
        if k in q:
            try:
                form[k] = int(q[k])
            except ValueError:
                warnings.append(f"{k} = {q[k]!r} in the link is not an integer; kept {form.get(k)}")
    if "split" in q:
        form["split"] = [] if q["split"] in ("-", "") else [s for s in q["split"].split(",") if s]
    settings = {s["name"]: s for s in METHODS[method].settings()}
    for k, v in q.items():
        if not k.startswith("m."):
            continue
        name = k[2:]
        s = settings.get(name)
        if s is None:
            warnings.append(f"{method} has no setting {name!r} (from the link); ignored")
            continue
        if s["choices"] is not None or s["type"] == "str":
            form[MP + name] = v
        elif s["type"] == "bool":
            form[MP + name] = v.lower() in ("true", "1", "yes")
        elif s["type"] == "int":
            try:
                form[MP + name] = int(v)
            except ValueError:
                warnings.append(f"{method}.{name} = {v!r} in the link is not an integer; ignored")
        else:
            form[MP + name] = v
    return form, warnings


def query_keys(method: str | None = None) -> set[str]:
    keys = set(STR_FIELDS + INT_FIELDS) | {"split"}
    if method in METHODS:
        keys |= {"m." + s["name"] for s in METHODS[method].settings()}
    return keys


STEP_WARN = 10.0  # a learning rate or step size this large makes the run diverge (it ends 'diverged')


def step_size_warnings(cfg: RunConfig) -> dict[str, str]:
    """Warnings, not refusals, for absurd learning rates / step sizes (``lr`` and every ``*_lr``
    setting of the method, as the method will use it) at or above :data:`STEP_WARN`: the run is
    allowed but would end 'diverged'. Keyed by form field (``mp.<name>``)."""
    try:
        params = vars(cfg.build_method())
    except Exception:  # noqa: BLE001 - an invalid config has its own messages
        return {}
    out = {}
    for name, v in params.items():
        if (name == "lr" or name.endswith("_lr")) and isinstance(v, (int, float)) and not isinstance(v, bool):
            if v >= STEP_WARN:
                out[MP + name] = (
                    f"{cfg.method}.{name} = {fmt_number(v)} is very large (≥ {fmt_number(STEP_WARN)}): the run will "
                    "probably diverge (it then ends 'diverged' with the epoch and the quantity)"
                )
    return out
