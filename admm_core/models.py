"""Network builders. A network is an ordered list of *named layers*; the splitter in
:mod:`admm_core.blocks` groups consecutive layers into blocks.

- MLP: layers ``fc1 … fcL``; ``fc_l`` = Linear (+ ReLU unless last). ``fc1`` flattens its input.
- ResNet-18 for 32×32 inputs (torchvision's, 3×3 stride-1 first conv, no max-pool):
  layers ``stem``, ``conv2_x``, ``conv3_x``, ``conv4_x``, ``conv5_x``, ``head``; base width
  ``model.width`` (64 = the standard net; 16 = the CPU-sized one).
- ``face-resnet18s``, DeepFacto's face backbone, is registered by :mod:`admm_core.faces.backbone`
  (its network lives there).

Weights keep PyTorch's default initialisation (seeded) unless ``model.init = 'normal'``
(N(0, σ²) weights, zero biases: :func:`init_layers`), the paper's vanishing-gradient regime.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import ConfigError
from .lazy import nn

if TYPE_CHECKING:
    from .config import ModelConfig


def mlp_layers(in_dim: int, hidden: tuple[int, ...], n_out: int) -> "OrderedDict[str, nn.Module]":
    widths = [in_dim, *hidden, n_out]
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    for l in range(1, len(widths)):
        mods: list[nn.Module] = [nn.Flatten()] if l == 1 else []
        mods.append(nn.Linear(widths[l - 1], widths[l]))
        if l < len(widths) - 1:
            mods.append(nn.ReLU())
        layers[f"fc{l}"] = nn.Sequential(*mods)
    return layers


def resnet18_layers(in_shape: tuple[int, ...], n_out: int, width: int = 64) -> "OrderedDict[str, nn.Module]":
    """ResNet-18 (He et al. 2016) with stage widths (w, 2w, 4w, 8w); w = 64 is the standard net.

    torchvision's BasicBlock and initialisation (Kaiming-normal convs, BN γ = 1, β = 0); only the
    widths are free, so w = 64 has torchvision's ``resnet18`` shapes with the CIFAR stem.
    """
    from torchvision.models.resnet import BasicBlock

    if len(in_shape) != 3:
        raise ConfigError(f"model.arch = 'resnet18': needs image inputs (C, H, W), got shape {in_shape}")

    def stage(c_in: int, c_out: int, stride: int) -> nn.Sequential:
        down = None
        if stride != 1 or c_in != c_out:
            down = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))
        return nn.Sequential(BasicBlock(c_in, c_out, stride, down), BasicBlock(c_out, c_out))

    w = width
    # CIFAR-style stem: 3×3 stride-1 conv, no max-pool (32×32 inputs would vanish otherwise).
    layers = OrderedDict(
        stem=nn.Sequential(nn.Conv2d(in_shape[0], w, 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU()),
        conv2_x=stage(w, w, 1),
        conv3_x=stage(w, 2 * w, 2),
        conv4_x=stage(2 * w, 4 * w, 2),
        conv5_x=stage(4 * w, 8 * w, 2),
        head=nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, n_out)),
    )
    for m in nn.ModuleList(layers.values()).modules():  # torchvision's init
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
    return layers


def _numel(shape) -> int:
    return int(math.prod(shape))


def mlp_table(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> list:
    widths = [_numel(in_shape), *cfg.hidden, n_out]
    return [(f"fc{i}", (widths[i],), widths[i - 1] * widths[i] + widths[i]) for i in range(1, len(widths))]


def basic_block_params(cin: int, cout: int, stride: int) -> int:
    """Parameters of torchvision's BasicBlock: two 3×3 convs + BN, a 1×1 conv + BN where the shape changes."""
    down = cin * cout + 2 * cout if (stride != 1 or cin != cout) else 0
    return cin * cout * 9 + 2 * cout + cout * cout * 9 + 2 * cout + down


def resnet18_table(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> list:
    """:func:`resnet18_layers` by arithmetic: BasicBlocks (:func:`basic_block_params`), stride-2 stages
    halve H and W (⌈H/2⌉: 3×3, padding 1)."""
    if len(in_shape) != 3:
        raise ConfigError(f"model.arch = 'resnet18': needs image inputs (C, H, W), got shape {in_shape}")
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


@dataclass(frozen=True)
class Arch:
    """One architecture, declared once.

    ``build(in_shape, cfg, n_out)`` makes its named layers; ``table(in_shape, cfg, n_out)`` gives
    [(layer name, output shape per sample, parameter count)] by arithmetic, without torch, for the
    memory estimate and the dashboard's block diagram (a server that never imports torch);
    tests/test_archs.py checks it against the network built on torch's meta device for every
    architecture and several widths. ``splits``: the layers a split may follow (None: any but the
    last); ``default_split(names)``: the split when the config gives none; ``label``: its name on
    screen; ``image_input``: it needs (C, H, W) inputs (a flat data set is refused before a run);
    ``kind``: the kind of run it serves (:data:`admm_core.kinds.KINDS`): "network" architectures
    are trained by the network methods (the Train form's menu, presets, sweeps), the face backbone
    is DeepFacto's block 1.
    """

    build: Callable
    table: Callable
    splits: tuple[str, ...] | None
    default_split: Callable
    label: str = ""
    image_input: bool = False
    kind: str = "network"


ARCHS: dict[str, Arch] = {
    "mlp": Arch(
        build=lambda shape, cfg, n_out: mlp_layers(_numel(shape), cfg.hidden, n_out),
        table=mlp_table,
        splits=None,
        default_split=lambda names: tuple(names[:-1]),  # one block per layer
        label="MLP",
    ),
    "resnet18": Arch(
        build=lambda shape, cfg, n_out: resnet18_layers(shape, n_out, cfg.width),
        table=resnet18_table,
        splits=("stem", "conv2_x", "conv3_x", "conv4_x"),
        default_split=lambda names: ("conv3_x",),  # T = 2, as in the paper's CIFAR-10 experiment
        label="ResNet-18",
        image_input=True,
    ),
}


def archs_for(kind: str) -> tuple[str, ...]:
    """The registered architectures that serve runs of ``kind`` (:data:`admm_core.kinds.KINDS`)."""
    return tuple(name for name, a in ARCHS.items() if a.kind == kind)


def register_arch(name: str, arch: Arch) -> Arch:
    """Add an architecture to the registry (the one line a new architecture needs); the name must be new."""
    if name in ARCHS:
        raise ValueError(f"architecture {name!r} is registered already")
    ARCHS[name] = arch
    return arch


def build_layers(cfg: ModelConfig, in_shape: tuple[int, ...], n_out: int) -> "OrderedDict[str, nn.Module]":
    """The architecture's named layers, initialised as ``cfg.init`` says (:func:`init_layers`)."""
    layers = ARCHS[cfg.arch].build(in_shape, cfg, n_out)
    init_layers(layers, cfg.init, cfg.init_std)
    return layers


def init_layers(layers: "OrderedDict[str, nn.Module]", init: str = "default", std: float = 0.01) -> int:
    """Re-initialise ``layers`` in place; returns how many weights were drawn.

    ``default``: as built (PyTorch's layer defaults, torchvision's for ResNet-18), nothing drawn.
    ``normal``: every Linear and convolution weight ~ N(0, σ²), every bias of those layers 0, from
    torch's global generator (seeded by the caller); normalisation layers keep γ = 1, β = 0. The
    paper initialises "using the normal distribution" without a σ; with width n and ReLU each layer
    scales a signal by about σ√(n/2), so a small σ makes a deep MLP's forward pass and gradients
    vanish (docs/results/deep-networks.md, "The paper's regime").
    """
    if init == "default":
        return 0
    if init != "normal":
        raise ConfigError(f"model.init = {init!r}: choose from ['default', 'normal']")
    drawn = 0
    for m in nn.ModuleList(layers.values()).modules():
        if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
            drawn += 1
    return drawn


def layer_names(cfg: ModelConfig, in_shape: tuple[int, ...] = (3, 32, 32), n_out: int = 10) -> list[str]:
    """The named layers (they do not depend on the input shape or classes)."""
    return [name for name, _, _ in ARCHS[cfg.arch].table(in_shape, cfg, n_out)]


def split_points(cfg: ModelConfig, layer_names: list[str]) -> tuple[str, ...]:
    """Allowed split points for this architecture (a split falls *after* the named layer)."""
    allowed = ARCHS[cfg.arch].splits
    return allowed if allowed is not None else tuple(layer_names[:-1])


def default_split(cfg: ModelConfig, layer_names: list[str]) -> tuple[str, ...]:
    return ARCHS[cfg.arch].default_split(layer_names)


# in models, not blocks: the dashboard checks a split without building (or importing) an nn.Module
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
