"""Network builders. A network is an ordered list of *named layers*; the splitter in
:mod:`admm_core.blocks` groups consecutive layers into blocks.

- MLP: layers ``fc1 … fcL``; ``fc_l`` = Linear (+ ReLU unless last). ``fc1`` flattens its input.
- ResNet-18 for 32×32 inputs (torchvision's, 3×3 stride-1 first conv, no max-pool):
  layers ``stem``, ``conv2_x``, ``conv3_x``, ``conv4_x``, ``conv5_x``, ``head``.

Weights keep PyTorch's default initialisation (seeded). Its variance shrinks activations
layer by layer, which is exactly what makes deep plain MLPs hard for backprop (the
paper's vanishing-gradient experiment).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from .errors import ConfigError

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


def resnet18_layers(in_shape: tuple[int, ...], n_out: int) -> "OrderedDict[str, nn.Module]":
    import torchvision

    if len(in_shape) != 3:
        raise ConfigError(f"model.arch = 'resnet18': needs image inputs (C, H, W), got shape {in_shape}")
    net = torchvision.models.resnet18(num_classes=n_out)
    # CIFAR-style stem: 3×3 stride-1 conv, no max-pool (32×32 inputs would vanish otherwise).
    net.conv1 = nn.Conv2d(in_shape[0], 64, kernel_size=3, stride=1, padding=1, bias=False)
    return OrderedDict(
        stem=nn.Sequential(net.conv1, net.bn1, net.relu),
        conv2_x=net.layer1,
        conv3_x=net.layer2,
        conv4_x=net.layer3,
        conv5_x=net.layer4,
        head=nn.Sequential(net.avgpool, nn.Flatten(), net.fc),
    )


# arch -> (builder(in_shape, cfg, n_out), allowed split points or None for "any but last", default split)
ARCHS: dict[str, tuple[Callable, tuple[str, ...] | None, Callable]] = {
    "mlp": (
        lambda shape, cfg, n_out: mlp_layers(int(torch.Size(shape).numel()), cfg.hidden, n_out),
        None,
        lambda names: tuple(names[:-1]),  # one block per layer
    ),
    "resnet18": (
        lambda shape, cfg, n_out: resnet18_layers(shape, n_out),
        ("stem", "conv2_x", "conv3_x", "conv4_x"),
        lambda names: ("conv3_x",),  # T = 2, as in the paper's CIFAR-10 experiment
    ),
}


def build_layers(cfg: ModelConfig, in_shape: tuple[int, ...], n_out: int) -> "OrderedDict[str, nn.Module]":
    builder, _, _ = ARCHS[cfg.arch]
    return builder(in_shape, cfg, n_out)


def split_points(cfg: ModelConfig, layer_names: list[str]) -> tuple[str, ...]:
    """Allowed split points for this architecture (a split falls *after* the named layer)."""
    _, allowed, _ = ARCHS[cfg.arch]
    return allowed if allowed is not None else tuple(layer_names[:-1])


def default_split(cfg: ModelConfig, layer_names: list[str]) -> tuple[str, ...]:
    return ARCHS[cfg.arch][2](layer_names)
