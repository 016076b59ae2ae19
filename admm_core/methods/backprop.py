"""End-to-end backpropagation baselines (SGD, Adam) on the same network, data and metrics.

Θ ← Θ − η ∇_Θ J(y_i, f_Θ(x_i)) / |i| on shuffled minibatches; the block split is ignored
(the composed network is trained as one).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..profile import phase
from .base import Engine, MethodState, TrainBatch, set_epoch_lr
from .zsweep import minibatches


@dataclass
class BackpropState(MethodState):
    opt: torch.optim.Optimizer
    gen: torch.Generator
    iteration: int = 0
    epoch: int = 0  # epochs done: this epoch's step size is η·γ^epoch


class Backprop(Engine):
    """End-to-end backprop on the whole network; a subclass names its optimizer (see SGD, Adam)
    and may give ``lr`` its own default (its record: :class:`~admm_core.spec.methods.backprop.BackpropSettings`)."""

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


class SGD(Backprop):
    """Minibatch SGD with backpropagation through the whole network."""

    def make_optimizer(self, params):
        impl = {"fused": True} if self.fused else {}
        return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay, **impl)


class Adam(Backprop):
    """Adam with backpropagation through the whole network."""

    def make_optimizer(self, params):
        impl = {"fused": True} if self.fused else {}
        return torch.optim.Adam(params, lr=self.lr, eps=self.eps, **impl)
