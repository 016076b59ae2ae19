"""Network builders: the layers of the architectures the spec layer records
(:mod:`admm_core.spec.archs`: the tables, split points and sizes are there). A network is an
ordered list of *named layers*; :mod:`admm_core.blocks` groups consecutive layers into blocks.

- MLP: layers ``fc1 … fcL``; ``fc_l`` = Linear (+ ReLU unless last). ``fc1`` flattens its input.
- ResNet-18 for 32×32 inputs (torchvision's, 3×3 stride-1 first conv, no max-pool):
  layers ``stem``, ``conv2_x``, ``conv3_x``, ``conv4_x``, ``conv5_x``, ``head``; base width
  ``model.width`` (64 = the standard net; 16 = the CPU-sized one).
- ``face-resnet18s``, DeepFacto's face backbone, is built by :mod:`admm_core.faces.backbone`.

Weights keep PyTorch's default initialisation (seeded) unless ``model.init = 'normal'``
(N(0, σ²) weights, zero biases: :func:`init_layers`), the paper's vanishing-gradient regime.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import TYPE_CHECKING

from torch import nn
from torchvision.models.resnet import BasicBlock

from .errors import ConfigError
from .spec.archs import ARCHS, OWN, OWN_MESSAGE, needs_image
from .spec.refs import resolve

if TYPE_CHECKING:
    from .spec.config import ModelConfig


def mlp_layers(in_dim: int, hidden: tuple[int, ...], n_out: int) -> OrderedDict[str, nn.Module]:
    """Linear (+ ReLU) layers ``fc1 … fcL``: ``in_dim`` (flattened) -> ``hidden`` widths -> ``n_out``."""
    widths = [in_dim, *hidden, n_out]
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    for l in range(1, len(widths)):
        mods: list[nn.Module] = [nn.Flatten()] if l == 1 else []
        mods.append(nn.Linear(widths[l - 1], widths[l]))
        if l < len(widths) - 1:
            mods.append(nn.ReLU())
        layers[f"fc{l}"] = nn.Sequential(*mods)
    return layers


def resnet18_layers(in_shape: tuple[int, ...], n_out: int, width: int = 64) -> OrderedDict[str, nn.Module]:
    """ResNet-18 (He et al. 2016) with stage widths (w, 2w, 4w, 8w); w = 64 is the standard net.

    torchvision's BasicBlock and initialisation (Kaiming-normal convs, BN γ = 1, β = 0); only the
    widths are free, so w = 64 has torchvision's ``resnet18`` shapes with the CIFAR stem.
    """
    needs_image("resnet18", in_shape)

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


def build_mlp(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> OrderedDict[str, nn.Module]:
    """The ``mlp`` record's builder."""
    return mlp_layers(math.prod(in_shape), cfg.hidden, n_out)


def build_resnet18(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> OrderedDict[str, nn.Module]:
    """The ``resnet18`` record's builder."""
    return resnet18_layers(in_shape, n_out, cfg.width)


def build_layers(cfg: ModelConfig, in_shape: tuple[int, ...], n_out: int) -> OrderedDict[str, nn.Module]:
    """The named layers of ``cfg``'s network: its record's ``build``, initialised as ``cfg.init`` says
    (:func:`init_layers`)."""
    if cfg.arch == OWN:
        raise ConfigError(OWN_MESSAGE)
    build = resolve(ARCHS[cfg.arch].build, f"model.arch = {cfg.arch!r}")
    layers = build(tuple(in_shape), cfg, n_out)
    init_layers(layers, cfg.init, cfg.init_std)
    return layers


def init_layers(layers: OrderedDict[str, nn.Module], init: str = "default", std: float = 0.01) -> int:
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
