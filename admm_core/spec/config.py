"""Run configuration: frozen dataclasses, validated on construction, JSON round-trip.

A :class:`RunConfig` is everything needed to re-run an experiment. The method's own
hyperparameters live in ``method_params`` and are validated by the method's record (see
:mod:`admm_core.spec.methods`), so a new method brings its own fields. Every field is a
:func:`~admm_core.spec.settings.setting` (default and help); how the dashboard lays the form out
is the dashboard's (app/dashboard/form.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, check
from .archs import ARCHS, DEFAULT_ARCH, OWN
from .datasets import DATASETS, OWN_DATA
from .kinds import KINDS
from .methods import DEFAULT_METHOD, METHODS, make_settings
from .methods.base import LR_SCHEDULES
from .plugins import failure
from .settings import check_fields, setting

__all__ = ["ConfigError", "check", "DataConfig", "ModelConfig", "TrainConfig", "RunConfig"]


LOSSES = ("mse", "ce")
INITS = ("default", "normal")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class DataConfig:
    name: str = setting(
        "digits", "Bundled sets are always here; MNIST, Fashion-MNIST, CIFAR-10 appear when ADMM_DATA holds them."
    )
    root: str | None = setting(None, "data root; None -> $ADMM_DATA, ./data, ../shared/data")
    train_limit: int | None = setting(None, "keep only this many training samples (small mode)", type=int, none=True)
    test_limit: int | None = setting(None, "keep only this many test samples", type=int, none=True)
    augment: bool = setting(
        False,
        "A new random view of every training image each epoch (random crop after padding, and a horizontal "
        "flip unless turned off), on the device. Images only; block-admm, gotmare, online-admm, backprop.",
    )
    augment_pad: int = setting(
        4,
        "Padding of the crop: each image moves by up to this many pixels each way.",
        min=0,
        max=16,
        when={"augment": True},
    )
    augment_flip: bool = setting(
        True, "Flip horizontally with probability ½ (off for digits: a flipped 2 is no 2).", when={"augment": True}
    )

    def __post_init__(self):
        check(
            isinstance(self.name, str) and (self.name in DATASETS or self.name == OWN_DATA),
            "data.name",
            self.name,
            f"unknown data set; choose from {sorted(DATASETS)}{failure('admm_core.datasets', self.name)}",
        )
        check(
            self.root is None or (isinstance(self.root, str) and "\x00" not in self.root),
            "data.root",
            self.root,
            "must be a folder path or null",
        )
        check_fields(self, "data")


@dataclass(frozen=True)
class ModelConfig:
    arch: str = setting(
        DEFAULT_ARCH, "The network to train; the size fields beside it are the ones it reads (an MLP its widths)."
    )
    hidden: tuple[int, ...] = setting(
        (128, 128), "Comma-separated widths; depth = number of widths + 1 (e.g. 128,128 is 784-128-128-10)."
    )
    split: tuple[str, ...] | None = setting(
        None,
        "A block ends after each chosen layer; no split = one block. Backprop never crosses a boundary. None: the architecture's default split.",
    )
    width: int = setting(
        64, "ResNet base width w: stages of w, 2w, 4w, 8w channels (64 = standard; MLPs ignore it)", min=1
    )
    init: str = setting(
        "default",
        "Θ's initial values: the framework's (PyTorch's layer defaults; torchvision's for ResNet-18), or normal: "
        "every Linear and convolution weight drawn from N(0, σ²) and every bias 0 (the paper's 'normal "
        "distribution'; a small σ makes a deep MLP's signals vanish).",
        choices=INITS,
    )
    init_std: float = setting(0.01, "σ of the normal initialisation (init = normal)", when={"init": "normal"})

    def __post_init__(self):
        check(
            isinstance(self.arch, str) and (self.arch in ARCHS or self.arch == OWN),
            "model.arch",
            self.arch,
            f"unknown architecture; choose from {sorted(ARCHS)}{failure('admm_core.archs', self.arch)}",
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
        check_fields(self, "model")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = setting(10, "passes over the training data", min=1)
    batch_size: int = setting(64, "minibatch size of Θ-steps (and of online-admm's Z)", min=1)
    loss: str = setting("mse", "mse: ½‖z − onehot(y)‖²; ce: cross-entropy", choices=LOSSES)
    seed: int = setting(0, "fixes init, data order and every random draw", min=0, check=False)
    device: str = setting("auto", "auto picks CUDA when there is one", choices=DEVICES)
    eval_every: int = setting(1, "evaluate (and log a metrics line) every this many epochs", min=1)
    checkpoint_every: int = setting(1, "write a resumable checkpoint every this many epochs", min=1)
    # GPU speed options (off by default; on a CPU they are slower): bf16 autocast of the network's
    # compute (Z, U, Θ stay float32), channels_last memory layout of images and convolutions
    precision: str = setting(
        "fp32",
        "bf16: autocast of the network's compute on a GPU (Z, U, Θ stay float32); slower on a CPU",
        choices=PRECISIONS,
    )
    channels_last: bool = setting(False, "channels_last memory layout of images and convolutions (a GPU speed option)")
    diverge_factor: float = setting(
        100.0, "training loss above this × its best (and its start) ends the run; 0: off", min=0.0, check=False
    )
    lr_schedule: str = setting(
        "constant",
        "η over the run, the same for every method: constant, or cosine down to 0 at the last epoch",
        choices=LR_SCHEDULES,
    )
    tensorboard: bool = setting(
        True, "also write each metrics line as TensorBoard event files in the run folder (docs/tensorboard.md)"
    )

    def __post_init__(self):
        check_fields(self, "train")
        ok = isinstance(self.seed, int) and not isinstance(self.seed, bool) and 0 <= self.seed < 2**63
        check(ok, "train.seed", self.seed, "must be a non-negative integer below 2**63")
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
    method: str = setting(
        DEFAULT_METHOD, "How the network is trained: Block-ADMM (batch or online), or a baseline to compare with."
    )
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # the method's hyperparameters (see its settings class); the form shows the method's settings
    method_params: dict = field(default_factory=dict, metadata={"help": "the method's settings"})
    preset: str | None = setting(
        None, "Start from one of the paper's setups (fills every field); 'none' keeps your values."
    )

    def __post_init__(self):
        check(
            isinstance(self.method, str) and self.method in METHODS,
            "method",
            self.method,
            f"unknown method; choose from {sorted(METHODS)}{failure('admm_core.methods', self.method)}",
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
        object.__setattr__(self, "_settings", make_settings(self.method, mp))  # checks method_params, once

    @property
    def method_settings(self):
        """The method's settings: its record with ``method_params``, checked when the config was made.
        The engine's method object is made from them once per run (:func:`admm_core.methods.make_method`)."""
        return self._settings

    # --- JSON round-trip -------------------------------------------------------------
    def to_dict(self) -> dict:
        """The config as JSON data, with the run's ``kind`` (the method's, :mod:`admm_core.spec.kinds`):
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

    def augmented(self, on: bool = False, pad: int | None = None, flip: bool | None = None) -> "RunConfig":
        """Augmentation asked for (``--augment``, ``--augment-pad N``, ``--no-flip``): any of them turns
        it on; ``pad`` and ``flip`` set the shift and the flip where given, the rest keep the
        configuration's values. Nothing asked: the config itself."""
        ch: dict = {}
        if on or pad is not None or flip is not None:
            ch["data__augment"] = True
        if pad is not None:
            ch["data__augment_pad"] = pad
        if flip is not None:
            ch["data__augment_flip"] = flip
        return self.replace(**ch) if ch else self
