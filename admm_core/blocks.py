"""Cutting a network into T blocks at named split points.

Blocks are consecutive groups of named layers; block_t maps Z_{t−1} -> Z_t with Z_0 = X.
Inference is the straight-through composition block_T ∘ … ∘ block_1.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from .models import build_layers
from .spec.archs import default_split, validate_split  # noqa: F401 - validate_split: re-exported
from .spec.config import ModelConfig


class BlockNet(nn.Module):
    """A network as T blocks. ``blocks[t-1]`` is block_t of the paper."""

    def __init__(self, layers: "OrderedDict[str, nn.Module]", split: tuple[str, ...]):
        super().__init__()
        names = list(layers)
        self.layer_names = names
        self.split = tuple(split)
        cuts = [names.index(s) + 1 for s in self.split] + [len(names)]
        groups, start = [], 0
        for end in cuts:
            groups.append(names[start:end])
            start = end
        self.block_layers = groups  # layer names in each block
        self.blocks = nn.ModuleList(nn.Sequential(OrderedDict((n, layers[n]) for n in g)) for g in groups)

    @property
    def T(self) -> int:
        return len(self.blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x

    def forward_all(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[Z_1, …, Z_T] from one forward pass (Alg. 1's initialisation)."""
        zs = []
        for block in self.blocks:
            x = block(x)
            zs.append(x)
        return zs

    def describe(self) -> list[dict]:
        """Per block: its layers and parameter count (the dashboard's block diagram)."""
        return [
            {"block": t + 1, "layers": g, "params": sum(p.numel() for p in b.parameters())}
            for t, (g, b) in enumerate(zip(self.block_layers, self.blocks))
        ]


def build_blocknet(cfg: ModelConfig, in_shape: tuple[int, ...], n_out: int, seed: int = 0) -> BlockNet:
    """Build the network with a seeded init and cut it at ``cfg.split`` (default per arch)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers = build_layers(cfg, in_shape, n_out)
    names = list(layers)
    split = cfg.split if cfg.split is not None else default_split(cfg, names)
    validate_split(cfg, names, split)
    return BlockNet(layers, split)
