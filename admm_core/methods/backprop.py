"""End-to-end backpropagation baselines (SGD, Adam) on the same network, data and metrics.

Θ ← Θ − η ∇_Θ J(y_i, f_Θ(x_i)) / |i| on shuffled minibatches; the block split is ignored
(the composed network is trained as one).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from ..profile import phase
from .base import MethodBase, MethodState, TrainBatch, lr_decay_setting, set_epoch_lr, setting
from .zsweep import minibatches


@dataclass
class BackpropState(MethodState):
    opt: torch.optim.Optimizer
    gen: torch.Generator
    iteration: int = 0
    epoch: int = 0  # epochs done: this epoch's step size is η·γ^epoch


@dataclass(frozen=True)
class Backprop(MethodBase):
    """End-to-end backprop on the whole network; a subclass names its optimizer (see SGD, Adam)
    and may give ``lr`` its own default."""

    lr: float = setting(1e-3, "η: learning rate")
    lr_decay: float = lr_decay_setting()

    uses_blocks = False
    supports_augment = True
    supports_lr_schedule = True
    live_metrics = ()  # no blocks: nothing per block to chart

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        raise NotImplementedError

    def init_state(self, net, batch: TrainBatch, gen: torch.Generator) -> BackpropState:
        return BackpropState(opt=self.make_optimizer(net.parameters()), gen=gen)

    def run_epoch(self, net, state: BackpropState, batch: TrainBatch, progress=None) -> dict:
        net.train()
        batches = minibatches(batch.n, batch.batch_size, state.gen)
        for b, idx in enumerate(batches):
            set_epoch_lr(state.opt, self.lr, self.lr_decay, state.epoch, batch.lr_factor(state.epoch, b / len(batches)))
            idx = idx.to(batch.x.device)
            with phase("theta"):
                state.opt.zero_grad(set_to_none=True)
                with phase("theta.forward_backward"):
                    (batch.loss(net(batch.inputs(idx)), batch.y[idx]) / len(idx)).backward()
                with phase("theta.optimizer"):
                    state.opt.step()
            state.iteration += 1
            if progress and (b % 50 == 0 or b == len(batches) - 1):
                progress((b + 1) / len(batches))
        state.epoch += 1
        return {}

    def diagnostics(self, net, state, batch) -> dict:
        return {"residuals": [], "dual_norms": [], "betas": [], "iteration": state.iteration}

    def state_bytes(self, state: BackpropState) -> int:
        return 0  # no auxiliary variables; optimizer moments are O(|Θ|)


@dataclass(frozen=True)
class SGD(Backprop):
    """Minibatch SGD with backpropagation through the whole network."""

    name = "sgd"
    summary = "End-to-end backprop, minibatch SGD"
    lr: float = setting(5e-3, "η: learning rate (paper: 5e-3)")
    momentum: float = setting(0.0, "heavy-ball momentum", positive=False, max=0.999)
    weight_decay: float = setting(0.0, "L2 weight decay", positive=False)
    fused: bool = setting(False, "fused optimizer kernel (GPU speed option; same update)")

    def theta_moments(self) -> int:
        return 1 if self.momentum > 0 else 0

    def make_optimizer(self, params):
        impl = {"fused": True} if self.fused else {}
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay, **impl)


@dataclass(frozen=True)
class Adam(Backprop):
    """Adam with backpropagation through the whole network."""

    name = "adam"
    summary = "End-to-end backprop, Adam"
    lr: float = setting(1e-3, "η: learning rate")
    lr_decay: float = lr_decay_setting()
    fused: bool = setting(False, "fused optimizer kernel (GPU speed option; same update)")
    eps: float = setting(1e-8, "ε of Adam's denominator √v + ε (PyTorch's 1e-8 hides gradients far below it)")

    def theta_moments(self) -> int:
        return 2

    def make_optimizer(self, params):
        impl = {"fused": True} if self.fused else {}
        return torch.optim.Adam(params, lr=self.lr, eps=self.eps, **impl)
