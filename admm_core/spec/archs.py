"""The architecture records: each network declared once, by arithmetic, without torch.

A network is an ordered list of *named layers*; a split groups consecutive layers into blocks
(a split falls *after* the named layer). The record :class:`Arch` says everything the rest of the
workbench reads without building the network: its layer table (name, output shape per sample,
parameters), where it may be split and its default split, its label, whether it needs image
inputs, which fields of the model config size it (``sizes``), whether its layers are a plain chain
of Linear + ReLU (``linear_chain``: the lifted baselines' closed-form layer solves apply), and the
cases tests/test_archs.py checks its table on. Its layers are built by ``build``, the engine's
function this record names (:mod:`admm_core.spec.refs`).

- ``mlp``: layers ``fc1 … fcL``; ``fc_l`` = Linear (+ ReLU unless last); ``fc1`` flattens its
  input; hidden widths ``model.hidden``.
- ``resnet18``: ResNet-18 for 32×32 inputs (torchvision's BasicBlocks, a 3×3 stride-1 first conv,
  no max-pool): ``stem``, ``conv2_x`` … ``conv5_x``, ``head``; base width ``model.width`` (64 = the
  standard net; 16 = the CPU-sized one).
- ``face-resnet18s``, DeepFacto's face backbone, is recorded with DeepFacto's records
  (:mod:`admm_core.spec.deepfacto`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .plugins import PluginRegistry

if TYPE_CHECKING:
    from .config import ModelConfig

SIZE_FIELDS = ("hidden", "width")  # the model config's fields that size a network (ModelConfig)


@dataclass(frozen=True)
class Arch:
    """One architecture, declared once.

    ``build(in_shape, cfg, n_out)`` makes its named layers (torch; a callable, or the import path of
    one, resolved by the engine); ``table(in_shape, cfg, n_out)`` gives [(layer name, output shape
    per sample, parameter count)] by arithmetic, for the memory estimate and the dashboard's block
    diagram; tests/test_archs.py checks it against the network built on torch's meta device for
    each of :meth:`test_cases`. ``splits``: the layers a split may follow (None: any but the last);
    ``default_split(names)``: the split when the config gives none; ``label``: its name on screen;
    ``image_input``: it needs (C, H, W) inputs (a flat data set is refused before a run);
    ``kind``: the kind of run it serves (:data:`admm_core.spec.kinds.KINDS`); ``sizes``: the
    model-config fields its table reads (of :data:`SIZE_FIELDS`: the form enables those);
    ``linear_chain``: its layers are Linear (+ ReLU) only; ``examples``: (input shape, model
    fields) its table is tested on (default: :meth:`test_cases`' own).
    """

    build: Callable | str
    table: Callable
    splits: tuple[str, ...] | None
    default_split: Callable
    label: str = ""
    image_input: bool = False
    kind: str = "network"
    sizes: tuple[str, ...] = ()
    linear_chain: bool = False
    examples: tuple = ()

    def test_cases(self) -> tuple:
        """((input shape, {model field: value}), …): ``examples``, else a small and a larger case
        of the inputs it takes, at small sizes of the fields it reads."""
        if self.examples:
            return self.examples
        shapes = ((3, 32, 32), (1, 28, 28)) if self.image_input else ((64,), (3, 8, 8))
        sized = ({"hidden": (16,), "width": 4}, {"hidden": (7, 7), "width": 8})
        return tuple((s, {k: v for k, v in z.items() if k in self.sizes}) for s, z in zip(shapes, sized))

    def describe(self, cfg: ModelConfig, fmt=None) -> str:
        """``cfg``'s network in its own fields: ``model.arch = 'mlp', model.hidden = [128, 128]``;
        ``fmt(field, value)`` writes a size field's value (default: a list or the number)."""
        fmt = fmt or (lambda k, v: repr(list(v) if isinstance(v, tuple) else v))
        return ", ".join(
            [f"model.arch = {cfg.arch!r}"] + [f"model.{k} = {fmt(k, getattr(cfg, k))}" for k in self.sizes]
        )


def _numel(shape) -> int:
    return int(math.prod(shape))


def needs_image(arch: str, in_shape: tuple[int, ...]) -> None:
    """ConfigError unless ``in_shape`` is an image (C, H, W), as ``arch`` needs."""
    if len(in_shape) != 3:
        raise ConfigError(f"model.arch = {arch!r}: needs image inputs (C, H, W), got shape {in_shape}")


def mlp_table(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> list:
    widths = [_numel(in_shape), *cfg.hidden, n_out]
    return [(f"fc{i}", (widths[i],), widths[i - 1] * widths[i] + widths[i]) for i in range(1, len(widths))]


def basic_block_params(cin: int, cout: int, stride: int) -> int:
    """Parameters of torchvision's BasicBlock: two 3×3 convs + BN, a 1×1 conv + BN where the shape changes."""
    down = cin * cout + 2 * cout if (stride != 1 or cin != cout) else 0
    return cin * cout * 9 + 2 * cout + cout * cout * 9 + 2 * cout + down


def resnet18_table(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> list:
    """``admm_core.models.resnet18_layers`` by arithmetic: BasicBlocks (:func:`basic_block_params`),
    stride-2 stages halve H and W (⌈H/2⌉: 3×3, padding 1)."""
    needs_image("resnet18", in_shape)
    c, h, w = in_shape
    basic = basic_block_params
    b = cfg.width
    out = [("stem", (b, h, w), c * b * 9 + 2 * b), ("conv2_x", (b, h, w), 2 * basic(b, b, 1))]
    cin = b
    for name, cout in (("conv3_x", 2 * b), ("conv4_x", 4 * b), ("conv5_x", 8 * b)):
        h, w = -(-h // 2), -(-w // 2)
        out.append((name, (cout, h, w), basic(cin, cout, 2) + basic(cout, cout, 1)))
        cin = cout
    out.append(("head", (n_out,), 8 * b * n_out + n_out))
    return out


DEFAULT_ARCH = "mlp"  # ModelConfig's default
# A network handed to the Python API (admm_core.own): no record, nothing to rebuild it from a config;
# its run directory's model.json lists its layers. Only admm_core.own trains or resumes such runs.
OWN = "own"
OWN_MESSAGE = (
    "this run trains a network handed to the Python API (model.arch = 'own'); resume or evaluate it "
    "from Python with the same module: admm_core.own.resume(model, RUN_DIR) or admm_core.own.evaluate(model, "
    "RUN_DIR) (docs/your-own-network.md)"
)


def split_model_spec(spec: str) -> tuple[str, str] | None:
    """``FILE.py:Name`` (the ``module:object`` habit of uvicorn and gunicorn) -> (FILE.py, Name), or
    None when ``spec`` is not of that shape: the one reading of ``admm train --model`` and of the
    dashboard's models menu (each then checks where the file may lie)."""
    path, sep, name = str(spec).rpartition(":")
    return (path, name) if sep and path and name.isidentifier() else None


def file_sha256(path) -> str:
    """The SHA-256 of a file's bytes (hex): what a run of ``admm train --model`` records of its file."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def model_file_problem(source: dict) -> str | None:
    """Why a run's model file cannot rebuild its network, or None. ``source`` is model.json's record
    {file, name, sha256} of ``admm train --model``: the file must still be there with the same bytes,
    since the checkpoint's Θ would otherwise meet a different network (one check, for the engine's
    resume and evaluate and for the dashboard before it launches them)."""
    path = Path(str(source.get("file", "")))
    if not path.is_file():
        return f"the run's model file {str(path)!r} is gone; restore it to resume or evaluate the run"
    now = file_sha256(path)
    if now != source.get("sha256"):
        return (
            f"the run's model file {str(path)!r} changed since the run started (sha256 "
            f"{str(source.get('sha256'))[:12]}… then, {now[:12]}… now): the checkpoint's Θ belongs to the old "
            "network; restore the file or start a new run"
        )
    return None


ARCHS: dict[str, Arch] = {
    "mlp": Arch(
        build="admm_core.models:build_mlp",
        table=mlp_table,
        splits=None,
        default_split=lambda names: tuple(names[:-1]),  # one block per layer
        label="MLP",
        sizes=("hidden",),
        linear_chain=True,
        examples=(((64,), {"hidden": ()}), ((1, 28, 28), {"hidden": (300, 100)}), ((3, 8, 8), {"hidden": (7,) * 19})),
    ),
    "resnet18": Arch(
        build="admm_core.models:build_resnet18",
        table=resnet18_table,
        splits=("stem", "conv2_x", "conv3_x", "conv4_x"),
        default_split=lambda names: ("conv3_x",),  # T = 2, as in the paper's CIFAR-10 experiment
        label="ResNet-18",
        image_input=True,
        sizes=("width",),
        examples=tuple(((3, 32, 32), {"width": w}) for w in (8, 16, 64)) + (((1, 28, 28), {"width": 16}),),
    ),
}
# the built-in records; an installed package's come from its "admm_core.archs" entry points (.plugins)
ARCHS = PluginRegistry("admm_core.archs", ARCHS)


def archs_for(kind: str) -> tuple[str, ...]:
    """The registered architectures that serve runs of ``kind`` (:data:`admm_core.spec.kinds.KINDS`)."""
    return tuple(name for name, a in ARCHS.items() if a.kind == kind)


def linear_chains(kind: str = "network") -> str:
    """The architectures of ``kind`` whose layers are Linear (+ ReLU) only, as a message names them
    (``'mlp'``): what the lifted baselines train."""
    return " or ".join(repr(name) for name in archs_for(kind) if ARCHS[name].linear_chain)


def register_arch(name: str, arch: Arch) -> Arch:
    """Add an architecture to the registry (the one line a new architecture needs); the name must be new."""
    if name in ARCHS:
        raise ValueError(f"architecture {name!r} is registered already")
    ARCHS[name] = arch
    return arch


def _add_plugin(name: str, arch) -> None:
    if not isinstance(arch, Arch):
        raise TypeError(f"{arch!r} is not an Arch record")
    register_arch(name, arch)


ARCHS.add = _add_plugin


def layer_names(cfg: ModelConfig, in_shape: tuple[int, ...] = (3, 32, 32), n_out: int = 10) -> list[str]:
    """The named layers (they do not depend on the input shape or classes)."""
    return [name for name, _, _ in ARCHS[cfg.arch].table(in_shape, cfg, n_out)]


def split_points(cfg: ModelConfig, layer_names: list[str]) -> tuple[str, ...]:
    """Allowed split points for this architecture (a split falls *after* the named layer)."""
    allowed = ARCHS[cfg.arch].splits
    return allowed if allowed is not None else tuple(layer_names[:-1])


def default_split(cfg: ModelConfig, layer_names: list[str]) -> tuple[str, ...]:
    return ARCHS[cfg.arch].default_split(layer_names)


def validate_split(cfg: ModelConfig, layer_names: list[str], split: tuple[str, ...]) -> None:
    allowed = split_points(cfg, layer_names)
    last = layer_names[-1]
    for s in split:
        if s == last:
            raise ConfigError(
                f"model.split = {s!r}: that is the last layer; a split must fall before it (allowed: {', '.join(allowed)})"
            )
        if s not in layer_names:
            raise ConfigError(f"model.split = {s!r}: no such layer in this {cfg.arch} (allowed: {', '.join(allowed)})")
        if s not in allowed:
            raise ConfigError(f"model.split = {s!r}: not a split point of {cfg.arch} (allowed: {', '.join(allowed)})")
    if len(set(split)) != len(split):
        raise ConfigError(f"model.split = {list(split)!r}: a split point appears twice")
    idx = [layer_names.index(s) for s in split]
    if idx != sorted(idx):
        raise ConfigError(f"model.split = {list(split)!r}: split points must follow the layer order")
