"""Run configuration: frozen dataclasses, validated on construction, JSON round-trip.

A :class:`RunConfig` is everything needed to re-run an experiment. The method's own
hyperparameters live in ``method_params`` and are validated by the method's settings
dataclass (see :mod:`admm_core.methods`), so a new method brings its own fields.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .data import DATASETS
from .data import names_for as datasets_for
from .errors import ConfigError, check
from .kinds import KINDS, NETWORK
from .methods import METHODS, make_method
from .methods import names_for as methods_for
from .methods.base import LR_SCHEDULES
from .models import ARCHS, archs_for

__all__ = [
    "ConfigError",
    "check",
    "parse_sets",
    "augment_changes",
    "DataConfig",
    "ModelConfig",
    "TrainConfig",
    "RunConfig",
]


def parse_sets(flags) -> dict:
    """``NAME=VALUE`` strings (the CLI's ``--set``) -> {name: value}.

    VALUE is read as JSON where it parses (numbers, lists, true/false, null), else kept as a
    string; a dash in NAME becomes an underscore. The one parser behind every ``--set``.
    """
    out = {}
    for kv in flags or []:
        if not isinstance(kv, str) or "=" not in kv:
            raise ConfigError(f"--set {kv!r}: expected NAME=VALUE")
        k, v = kv.split("=", 1)
        name = k.strip().replace("-", "_")
        check(bool(name), "--set", kv, "the setting name is empty")
        try:
            out[name] = json.loads(v)
        except json.JSONDecodeError:
            out[name] = v
    return out


def augment_changes(augment: bool = False, pad: int | None = None, no_flip: bool = False) -> dict:
    """The ``data.augment*`` changes that ``--augment``, ``--augment-pad N`` and ``--no-flip`` ask
    for, as ``RunConfig.replace`` keys ({} when none is given). Either of the last two turns
    augmentation on; the others keep the configuration's values."""
    ch: dict = {}
    if augment or pad is not None or no_flip:
        ch["data__augment"] = True
    if pad is not None:
        ch["data__augment_pad"] = pad
    if no_flip:
        ch["data__augment_flip"] = False
    return ch


LOSSES = ("mse", "ce")
INITS = ("default", "normal")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


def option(default, help: str = "", **form):
    """A config field: its default, its help and the form's layout hints (:func:`ui`)."""
    return field(default=default, metadata=ui(help, **form))


def ui(help: str = "", **form) -> dict:
    """Field metadata: ``help`` (CLI and form) and ``form``, the Train form's layout hints (group,
    label, widget, min, step, choices, key, none (the widget value that stands for None),
    enabled_if / disabled_if {form key: value}); ``form=False`` keeps a field off the form (its
    value is carried through unchanged). app/dashboard/form.py builds the form from these."""
    return {"help": help, "form": form if form.get("hidden") is None else False}


@dataclass(frozen=True)
class DataConfig:
    name: str = option(
        "digits",
        "Bundled sets are always here; MNIST, Fashion-MNIST, CIFAR-10 appear when ADMM_DATA holds them.",
        group="data",
        label="Data set",
        key="data",
        choices=datasets_for(NETWORK),  # the form's menu; LFWA serves DeepFacto (its own config)
    )
    root: str | None = option(None, "data root; None -> $ADMM_DATA, ./data, ../shared/data", hidden=True)
    train_limit: int | None = option(
        None,
        "keep only this many training samples (small mode)",
        group="data",
        label="Training samples (0 = all)",
        none=0,
        min=0,
        step=100,
    )
    test_limit: int | None = option(
        None, "keep only this many test samples", group="data", label="Test samples (0 = all)", none=0, min=0, step=100
    )
    augment: bool = option(
        False,
        "A new random view of every training image each epoch (random crop after padding, and a horizontal "
        "flip unless turned off), on the device. Images only; block-admm, gotmare, online-admm, backprop.",
        group="data",
        label="Augment",
    )
    augment_pad: int = option(
        4,
        "Padding of the crop: each image moves by up to this many pixels each way.",
        group="data",
        label="Shift ± pixels",
        min=0,
        max=16,
        step=1,
        enabled_if={"augment": True},
    )
    augment_flip: bool = option(
        True,
        "Flip horizontally with probability ½ (off for digits: a flipped 2 is no 2).",
        group="data",
        label="Flip",
        enabled_if={"augment": True},
    )

    def __post_init__(self):
        check(
            isinstance(self.name, str) and self.name in DATASETS,
            "data.name",
            self.name,
            f"unknown data set; choose from {sorted(DATASETS)}",
        )
        check(
            self.root is None or (isinstance(self.root, str) and "\x00" not in self.root),
            "data.root",
            self.root,
            "must be a folder path or null",
        )
        for f in ("train_limit", "test_limit"):
            v = getattr(self, f)
            ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0)
            check(ok, f"data.{f}", v, "must be a positive integer or null")
        check(isinstance(self.augment, bool), "data.augment", self.augment, "must be true or false")
        pad = self.augment_pad
        ok = isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad <= 16
        check(ok, "data.augment_pad", pad, "must be an integer from 0 to 16")
        check(isinstance(self.augment_flip, bool), "data.augment_flip", self.augment_flip, "must be true or false")


@dataclass(frozen=True)
class ModelConfig:
    arch: str = option(
        "mlp",
        "the network: a key of admm_core.models.ARCHS",
        group="network",
        label="Network",
        widget="radio",
        choices=archs_for(NETWORK),  # the face backbone is DeepFacto's block 1
        labels={"mlp": "MLP", "resnet18": "ResNet-18"},
    )
    hidden: tuple[int, ...] = option(
        (128, 128),
        "Comma-separated widths; depth = number of widths + 1 (e.g. 128,128 is 784-128-128-10).",
        group="network",
        label="MLP hidden widths",
        enabled_if={"arch": "mlp"},
    )
    split: tuple[str, ...] | None = option(
        None,
        "A block ends after each chosen layer; no split = one block. Backprop never crosses a boundary. None: the architecture's default split.",
        group="network",
        label="Split after layers (block boundaries)",
        widget="split",
    )
    width: int = option(
        64,
        "ResNet base width w: stages of w, 2w, 4w, 8w channels (64 = standard; MLPs ignore it)",
        group="network",
        label="Base width",
        min=1,
        step=8,
        disabled_if={"arch": "mlp"},
    )
    init: str = option(
        "default",
        "Θ's initial values: the framework's (PyTorch's layer defaults; torchvision's for ResNet-18), or normal: "
        "every Linear and convolution weight drawn from N(0, σ²) and every bias 0 (the paper's 'normal "
        "distribution'; a small σ makes a deep MLP's signals vanish).",
        group="network",
        label="Initialisation",
        choices=INITS,
    )
    init_std: float = option(
        0.01,
        "σ of the normal initialisation (init = normal)",
        group="network",
        label="Init σ",
        min=0.0,
        step=0.005,
        enabled_if={"init": "normal"},
    )

    def __post_init__(self):
        check(
            isinstance(self.arch, str) and self.arch in ARCHS,
            "model.arch",
            self.arch,
            f"unknown architecture; choose from {sorted(ARCHS)}",
        )
        check(isinstance(self.hidden, (list, tuple)), "model.hidden", self.hidden, "must be a list of widths")
        object.__setattr__(self, "hidden", tuple(self.hidden))
        if self.split is not None:
            check(isinstance(self.split, (list, tuple)), "model.split", self.split, "must be a list of layer names")
            check(all(isinstance(s, str) for s in self.split), "model.split", self.split, "layer names are strings")
            object.__setattr__(self, "split", tuple(self.split))
        for w in self.hidden:
            ok = isinstance(w, int) and not isinstance(w, bool) and w > 0
            check(ok, "model.hidden", self.hidden, "widths must be positive integers")
        check(
            isinstance(self.width, int) and not isinstance(self.width, bool) and self.width > 0,
            "model.width",
            self.width,
            "must be a positive integer",
        )
        ok = isinstance(self.init, str) and self.init in INITS
        check(ok, "model.init", self.init, f"choose from {list(INITS)}")
        std = self.init_std
        ok = isinstance(std, (int, float)) and not isinstance(std, bool) and math.isfinite(std) and std > 0
        check(ok, "model.init_std", std, "must be a positive number")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = option(10, "passes over the training data", group="train", label="Epochs", min=1, step=1)
    batch_size: int = option(
        64, "minibatch size of Θ-steps (and of online-admm's Z)", group="train", label="Batch size", min=1, step=1
    )
    loss: str = option("mse", "mse: ½‖z − onehot(y)‖²; ce: cross-entropy", group="train", label="Loss", choices=LOSSES)
    seed: int = option(0, "fixes init, data order and every random draw", group="train", label="Seed", min=0, step=1)
    device: str = option("auto", "auto picks CUDA when there is one", group="train", label="Device", choices=DEVICES)
    eval_every: int = option(
        1,
        "evaluate (and log a metrics line) every this many epochs",
        group="train",
        label="Evaluate every",
        min=1,
        step=1,
    )
    checkpoint_every: int = option(
        1, "write a resumable checkpoint every this many epochs", group="train", label="Checkpoint every", min=1, step=1
    )
    # GPU speed options (off by default; on a CPU they are slower): bf16 autocast of the network's
    # compute (Z, U, Θ stay float32), channels_last memory layout of images and convolutions
    precision: str = option(
        "fp32",
        "bf16: autocast of the network's compute on a GPU (Z, U, Θ stay float32); slower on a CPU",
        group="more",
        label="Precision",
        choices=PRECISIONS,
    )
    channels_last: bool = option(
        False,
        "channels_last memory layout of images and convolutions (a GPU speed option)",
        group="more",
        label="channels_last",
    )
    diverge_factor: float = option(
        100.0,
        "training loss above this × its best (and its start) ends the run; 0: off",
        group="more",
        label="Diverge factor",
        min=0.0,
        step=10.0,
    )
    lr_schedule: str = option(
        "constant",
        "η over the run, the same for every method: constant, or cosine down to 0 at the last epoch",
        group="train",
        label="Θ schedule",
        choices=LR_SCHEDULES,
    )

    def __post_init__(self):
        for f in ("epochs", "batch_size", "eval_every", "checkpoint_every"):
            v = getattr(self, f)
            check(
                isinstance(v, int) and not isinstance(v, bool) and v > 0, f"train.{f}", v, "must be a positive integer"
            )
        check(
            isinstance(self.loss, str) and self.loss in LOSSES, "train.loss", self.loss, f"choose from {list(LOSSES)}"
        )
        ok = isinstance(self.device, str) and self.device in DEVICES
        check(ok, "train.device", self.device, f"choose from {list(DEVICES)}")
        ok = isinstance(self.seed, int) and not isinstance(self.seed, bool) and 0 <= self.seed < 2**63
        check(ok, "train.seed", self.seed, "must be a non-negative integer below 2**63")
        check(self.precision in PRECISIONS, "train.precision", self.precision, f"choose from {list(PRECISIONS)}")
        check(isinstance(self.channels_last, bool), "train.channels_last", self.channels_last, "must be true or false")
        ok = isinstance(self.lr_schedule, str) and self.lr_schedule in LR_SCHEDULES
        check(ok, "train.lr_schedule", self.lr_schedule, f"choose from {list(LR_SCHEDULES)}")
        check(
            isinstance(self.diverge_factor, (int, float))
            and not isinstance(self.diverge_factor, bool)
            and (self.diverge_factor == 0 or self.diverge_factor > 1),
            "train.diverge_factor",
            self.diverge_factor,
            "must be 0 (off) or a number > 1",
        )


@dataclass(frozen=True)
class RunConfig:
    method: str = option(
        "block-admm",
        "From the engine's method registry.",
        group="method",
        label="Method",
        choices=methods_for(NETWORK),  # deepfacto runs with its own task and config
    )
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # the method's hyperparameters (see its settings class); the form shows the method's settings
    method_params: dict = field(default_factory=dict, metadata=ui("the method's settings", hidden=True))
    preset: str | None = option(
        None,
        "Start from one of the paper's setups (fills every field); 'none' keeps your values.",
        group="data",
        label="Preset",
        widget="select",
        none="none",
    )

    def __post_init__(self):
        check(
            isinstance(self.method, str) and self.method in METHODS,
            "method",
            self.method,
            f"unknown method; choose from {sorted(METHODS)}",
        )
        for key, klass in (("data", DataConfig), ("model", ModelConfig), ("train", TrainConfig)):
            check(isinstance(getattr(self, key), klass), key, getattr(self, key), "must be an object of settings")
        check(isinstance(self.method_params, dict), "method_params", self.method_params, "must be an object")
        # the preset name goes into the run directory's name: no path separators or odd characters
        ok = self.preset is None or (isinstance(self.preset, str) and _SAFE_NAME.fullmatch(self.preset) is not None)
        check(ok, "preset", self.preset, "must be a preset name (letters, digits, '.', '_', '-') or null")
        # tuples become lists, as JSON stores them: a config equals its own JSON round trip
        mp = {k: list(v) if isinstance(v, tuple) else v for k, v in dict(self.method_params).items()}
        object.__setattr__(self, "method_params", mp)
        self.build_method()  # validates method_params

    def build_method(self):
        """The method's settings object (validated)."""
        return make_method(self.method, self.method_params)

    # --- JSON round-trip -------------------------------------------------------------
    def to_dict(self) -> dict:
        """The config as JSON data, with the run's ``kind`` (the method's, :mod:`admm_core.kinds`):
        a run's config.json records what kind of run it is."""
        return {"kind": METHODS[self.method].kind, **dataclasses.asdict(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        """The config of :meth:`to_dict`'s data; ``kind`` may be absent (files written before it was recorded)."""
        d = dict(d)
        kind = d.pop("kind", None)
        check(kind is None or (isinstance(kind, str) and kind in KINDS), "kind", kind, f"choose from {sorted(KINDS)}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        check(not unknown, "config", sorted(unknown), "unknown keys")
        sub = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}
        for key, klass in sub.items():
            if key in d:
                check(isinstance(d[key], dict), key, d[key], "must be a JSON object")
                fields = {f.name for f in dataclasses.fields(klass)}
                bad = set(d[key]) - fields
                check(not bad, key, sorted(bad), "unknown keys")
                vals = dict(d[key])
                for k in ("hidden", "split"):
                    if isinstance(vals.get(k), list):
                        vals[k] = tuple(vals[k])
                d[key] = klass(**vals)
        cfg = cls(**d)
        made = METHODS[cfg.method].kind
        check(kind in (None, made), "kind", kind, f"method {cfg.method!r} makes runs of kind {made!r}")
        return cfg

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"config: not valid JSON ({e})") from None
        check(isinstance(d, dict), "config", type(d).__name__, "must be a JSON object")
        return cls.from_dict(d)

    def replace(self, **changes) -> "RunConfig":
        """Copy with changes; nested keys as ``train__epochs=5`` or whole sub-configs."""
        top: dict[str, Any] = {}
        nested: dict[str, dict] = {}
        for k, v in changes.items():
            if "__" in k:
                part, name = k.split("__", 1)
                nested.setdefault(part, {})[name] = v
            else:
                top[k] = v
        for part, vals in nested.items():
            if part == "method_params":
                top["method_params"] = {**self.method_params, **top.get("method_params", {}), **vals}
            else:
                top[part] = dataclasses.replace(top.get(part, getattr(self, part)), **vals)
        return dataclasses.replace(self, **top)

    def shortened(
        self, epochs: int | None = None, train_limit: int | None = None, test_limit: int | None = None
    ) -> "RunConfig":
        """The preset made smaller or longer: each value given (not None or 0) replaces the config's
        (``--epochs``, ``--train-limit``, ``--test-limit`` of train, bench and sweep)."""
        ch = {
            k: v
            for k, v in (
                ("train__epochs", epochs),
                ("data__train_limit", train_limit),
                ("data__test_limit", test_limit),
            )
            if v
        }
        return self.replace(**ch) if ch else self
