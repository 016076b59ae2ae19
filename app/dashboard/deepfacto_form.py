"""The DeepFacto form of the Train page, without Streamlit: widget values <-> DeepFactoConfig <-> URL.

Every :class:`~admm_core.deepfacto.DeepFactoConfig` field is a form field generated from its
declaration as the network form's are (:func:`app.dashboard.form._fields_of`: label, help, choices)
and drawn by the same renderer. Integers are number inputs, choices menus; the rest are text read
like the CLI's ``--set NAME=VALUE`` (JSON where it parses, else a string), so a list such as
``svm_c = [0.001, 0.01]`` or ``data_limit = null`` is typed the same way in both places. Validation
is the engine's: each field is checked alone against the defaults, so every wrong field gets its
own message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

from admm_core.rundir import write_atomic
from admm_core.spec.config import ConfigError
from admm_core.spec.datasets import cache_dir
from admm_core.spec.deepfacto import RENAMED, DeepFactoConfig, saved_fields
from admm_core.spec.methods.deepfacto import DeepFacto
from app.dashboard import form as F
from app.dashboard import workers as W

MODE = "deepfacto"  # ?mode=deepfacto opens the Train page on this form
PREFIX = "df."  # widget keys and URL keys: df.<field>
MAIN = ("rank", "warmup_epochs", "finetune_epochs", "admm_images", "seed", "device")
# "All DeepFacto settings" by what they set; the algorithm's are the method's own (its record DeepFacto)
GROUPS = {
    "The algorithm (the method's settings)": tuple(f.name for f in dataclasses.fields(DeepFacto)),
    "Data": ("image_size", "test_fraction", "data_limit", "admm_images"),
    "Backbone training (when it is trained here)": (
        "backbone_source",
        "backbone_epochs",
        "backbone_width",
        "backbone_lr",
        "backbone_id_weight",
    ),
    "The run": ("warmup_epochs", "finetune_epochs", "batch_size", "seed", "device"),
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
OWN_WIDGETS = ("backbone_weights", "data_root")  # the backbone choice / the environment set these
UPLOAD_LIMIT = (
    50 * 10**6
)  # bytes of an uploaded backbone: the server's per-file cap (.streamlit/config.toml maxUploadSize = 50 MB)
# 0 labelled images stands for None (all of them)
LAYOUT = {"deepfacto.data_limit": {"none": 0}}
FIELDS = {
    ff.key: ff for ff in F._fields_of(DeepFactoConfig, "deepfacto.", LAYOUT, OWN_WIDGETS, as_set=("float", "text"))
}


def label_of(name: str) -> str:
    """A field's name on screen: its record's ``label`` (admm_core/spec/deepfacto.py and the method
    record), else the name in words."""
    return FIELDS[name].label if name in FIELDS else name.replace("_", " ").capitalize()


def grouped(names: list[str]) -> list[tuple[str, list[str]]]:
    """``names`` under the titles of :data:`GROUPS`, in its order (a name no group holds: "Other")."""
    out = [(title, [n for n in members if n in names]) for title, members in GROUPS.items()]
    held = {n for _, members in out for n in members}
    out.append(("Other", [n for n in names if n not in held]))
    return [(title, members) for title, members in out if members]


def fields() -> list[str]:
    return list(FIELDS)


def help_of(name: str) -> str:
    return f"{FIELDS[name].help}. Setting `{name}`, default {F.query_text(FIELDS[name], FIELDS[name].default)}."


def default_values() -> dict:
    return {name: ff.default for name, ff in FIELDS.items()}


def values_from_config(cfg: dict) -> dict:
    """Widget values of a run's config.json["deepfacto"] (unknown keys are ignored)."""
    cfg = saved_fields(cfg)  # old names renamed; a field the run predates: the value it ran with
    return {**default_values(), **{k: F._to_widget(FIELDS[k], v) for k, v in cfg.items() if k in FIELDS}}


def config_from_values(values: dict, backbone_weights: str | None = None) -> tuple[DeepFactoConfig | None, dict]:
    """(config, {}) or (None, {field: message}); each field is validated on its own first."""
    base = DeepFactoConfig().to_dict()
    kw, errors = {}, {}
    for name, ff in FIELDS.items():
        if name not in values:
            continue
        try:
            kw[name] = F._from_widget(ff, values[name])
            DeepFactoConfig.from_dict({**base, name: kw[name]})
        except (ConfigError, TypeError, ValueError) as e:
            errors[name] = _message(e, name)
    if errors:
        return None, errors
    try:
        return DeepFactoConfig.from_dict({**kw, "backbone_weights": backbone_weights}), {}
    except (ConfigError, TypeError, ValueError) as e:  # a combination of fields
        m = re.search(r"deepfacto\.(\w+)", str(e))
        return None, {m.group(1) if m else "deepfacto": _message(e, m.group(1) if m else "deepfacto")}


def _message(e: Exception, name: str) -> str:
    text = str(e)
    return text if name in text else f"{name}: {text}"


def to_query(values: dict) -> dict:
    """The URL of the form: ``mode=deepfacto`` and the fields that differ from the defaults."""
    d = default_values()
    changed = {k: v for k, v in values.items() if k in d and v != d[k]}
    return {"mode": MODE, **{PREFIX + k: F.query_text(FIELDS[k], v) for k, v in changed.items()}}


def from_query(qp: dict) -> tuple[dict, list[str]]:
    """Widget values from a URL (defaults for the rest) and a warning per value that was not taken."""
    values, warnings = default_values(), []
    for key, text in qp.items():
        if not key.startswith(PREFIX):
            continue
        name = RENAMED.get(key[len(PREFIX) :], key[len(PREFIX) :])  # a link made before the renames
        if name not in FIELDS:
            warnings.append(f"{key}: not a DeepFacto setting (ignored)")
            continue
        try:
            values[name] = F.read_text(FIELDS[name], text)
        except ValueError as e:
            warnings.append(f"{key} = {text!r}: {e} (ignored)")
    return values, warnings


# --- backbone files --------------------------------------------------------------------------------


def uploads_dir() -> Path:
    p = cache_dir() / "uploaded-backbones"
    p.mkdir(parents=True, exist_ok=True)
    return p


def saved_backbones() -> list[Path]:
    """Backbone files this machine has: trained and cached here, or uploaded (newest first)."""
    files = [*cache_dir().glob("lfw-backbone-*.pt"), *uploads_dir().glob("*.pt")]
    return sorted(files, key=lambda p: p.stat().st_mtime, reverse=True)


def save_upload(name: str, data: bytes) -> Path:
    """Keep an uploaded backbone file if it loads as plain tensors into the face backbone.

    It is written under a name made from its content (never the uploader's name), loaded with
    ``weights_only=True`` (in a subprocess: :func:`~app.dashboard.workers.check_backbone`) and
    removed again when it is refused; raises ValueError with the reason.
    """
    if len(data) > UPLOAD_LIMIT:
        raise ValueError(f"{name}: {len(data) / 10**6:.0f} MB, over the {UPLOAD_LIMIT // 10**6} MB limit")
    path = uploads_dir() / f"{hashlib.sha256(data).hexdigest()[:16]}.pt"

    def check(tmp: Path) -> None:
        try:
            W.check_backbone(tmp)
        except Exception as e:  # noqa: BLE001 - whatever the file is, it is refused with its reason
            raise ValueError(str(e).replace(str(tmp), name)) from None

    if not path.exists():  # the temporary is checked, then renamed (removed when refused)
        write_atomic(path, lambda f: f.write(data), durable=False, check=check)
    return path
