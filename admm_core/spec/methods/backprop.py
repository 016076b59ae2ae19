"""End-to-end backprop's settings (the paper's SGD and Adam baselines). The updates are
:mod:`admm_core.methods.backprop`'s."""

from __future__ import annotations

from dataclasses import dataclass

from .base import MethodBase, lr_decay_setting, setting


@dataclass(frozen=True)
class BackpropSettings(MethodBase):
    """End-to-end backprop on the whole network; a subclass names its optimizer (see SGD, Adam)
    and may give ``lr`` its own default."""

    lr: float = setting(1e-3, "η: learning rate", label="η — learning rate")
    lr_decay: float = lr_decay_setting()

    uses_blocks = False
    supports_augment = True
    supports_lr_schedule = True
    live_metrics = ()  # no blocks: nothing per block to chart


@dataclass(frozen=True)
class SGDSettings(BackpropSettings):
    """Minibatch SGD with backpropagation through the whole network."""

    name = "sgd"
    summary = "End-to-end backprop, minibatch SGD"
    implementation = "admm_core.methods.backprop:SGD"
    lr: float = setting(5e-3, "η: learning rate (paper: 5e-3)", label="η — learning rate")
    momentum: float = setting(0.0, "heavy-ball momentum", positive=False, max=0.999, label="Momentum")
    weight_decay: float = setting(0.0, "L2 weight decay", positive=False, label="Weight decay")
    fused: bool = setting(False, "fused optimizer kernel (GPU speed option; same update)", label="Fused kernel")

    def theta_moments(self) -> int:
        return 1 if self.momentum > 0 else 0


@dataclass(frozen=True)
class AdamSettings(BackpropSettings):
    """Adam with backpropagation through the whole network."""

    name = "adam"
    summary = "End-to-end backprop, Adam"
    implementation = "admm_core.methods.backprop:Adam"
    lr: float = setting(1e-3, "η: learning rate", label="η — learning rate")
    lr_decay: float = lr_decay_setting()
    fused: bool = setting(False, "fused optimizer kernel (GPU speed option; same update)", label="Fused kernel")
    eps: float = setting(
        1e-8,
        "ε of Adam's denominator √v + ε (PyTorch's 1e-8 hides gradients far below it)",
        label="ε — Adam's denominator floor",
    )

    def theta_moments(self) -> int:
        return 2
