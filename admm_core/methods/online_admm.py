"""Online Stochastic Block-ADMM (paper Alg. 2): Z per minibatch, one *scalar* dual per block.

For each minibatch (x_i, y_i), with r_t = z_t − block_t(z_{t−1}) (z_0 = x_i) and ‖·‖ the
Frobenius norm over the minibatch:

    z_t ← forward pass                                   # re-initialised every minibatch
    z_T ← z_T − ζ ∇ (J(y_i, z_T) + T_T);  z_t ← z_t − ζ ∇ (T_t + T_{t+1}),  t = T−1 … 1
    Θ_t ← Θ_t − η ∇_{Θ_t} T_t / |i|
    u_t ← dual update

Three readings of the scalar dual (``dual=``), all measured on MNIST (README):

- ``literal``  — Alg. 2 as printed: T_t = β/2 (‖r_t‖ + u_t)², u_t ← u_t + ‖r_t‖.
  u only grows (it sums norms), so the effective penalty β(1 + u/‖r‖) grows without
  bound and the run diverges.
- ``additive`` — the paper's online objective (its eq. with u outside the square):
  T_t = β/2 (‖r_t‖² + u_t), u_t ← u_t + ‖r_t‖. u shifts the objective but not its
  gradients, so the updates are a pure quadratic-penalty method and u is a running
  record of the violation. Stable; the default.
- ``damped``   — the literal square with a leaky dual, u_t ← δ u_t + ‖r_t‖ (0 ≤ δ < 1),
  which bounds u by max‖r‖/(1 − δ).

‖r‖ is guarded as sqrt(‖r‖² + ε²): right after the forward pass r = 0 and ‖r‖ has no gradient.
Memory for z and u is O(batch): only the current minibatch's z exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .base import (
    MethodBase,
    MethodState,
    TrainBatch,
    adam_z_step,
    make_theta_optimizer,
    minibatches,
    per_block,
    reverse_z_sweep,
    setting,
    tensor_bytes,
    theta_step,
)


@dataclass
class OnlineADMMState(MethodState):
    u: list[float]  # scalar dual per block
    beta: list[float]
    opt: torch.optim.Optimizer  # one parameter group per block
    gen: torch.Generator
    iteration: int = 0  # minibatches so far
    residuals: list[float] = field(default_factory=list)  # RMS per sample, mean over the last epoch
    batch_bytes: int = 0  # bytes of the largest minibatch's z (and Adam moments)


@dataclass(frozen=True)
class OnlineADMM(MethodBase):
    """Online Stochastic Block-ADMM (Alg. 2). See the module docstring for the math."""

    name = "online-admm"
    summary = "Online Stochastic Block-ADMM (paper Alg. 2): Z per minibatch, scalar duals, O(batch) memory"

    lr: float = setting(1e-3, "η: step size of the Θ-updates")
    theta_optimizer: str = setting("adam", "optimizer of the Θ-updates", choices=("adam", "sgd"))
    z_lr: float = setting(0.5, "ζ: step size of the Z-updates")
    z_optimizer: str = setting(
        "sgd", "Z-update rule (Adam restarts every minibatch: sign steps)", choices=("sgd", "adam")
    )
    beta: float = setting(1.0, "β: penalty weight of the coupling terms (one value, or one per block)", per_block=True)
    primal_steps: int = setting(1, "Z/Θ passes per minibatch before the dual step")
    dual: str = setting(
        "additive",
        "scalar dual form: additive (stable), literal (Alg. 2 as printed; diverges), damped",
        choices=("additive", "literal", "damped"),
    )
    dual_decay: float = setting(0.9, "δ of the damped dual u ← δu + ‖r‖", positive=False, max=0.999999)
    eps: float = setting(1e-8, "ε guarding ‖r‖ at r = 0")

    def init_state(self, net, batch: TrainBatch, gen: torch.Generator) -> OnlineADMMState:
        T = net.T
        return OnlineADMMState(
            u=[0.0] * T,
            beta=per_block(self.beta, T, f"{self.name}.beta"),
            opt=make_theta_optimizer(net, self.theta_optimizer, self.lr),
            gen=gen,
            residuals=[0.0] * T,
        )

    def _norm(self, r: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(r.pow(2).sum() + self.eps**2)

    def coupling(self, beta: float, u: float, z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """T_t for the chosen dual form."""
        r = z - out
        if self.dual == "additive":
            return 0.5 * beta * (r.pow(2).sum() + u)
        return 0.5 * beta * (self._norm(r) + u) ** 2

    def run_epoch(self, net, state: OnlineADMMState, batch: TrainBatch, progress=None) -> dict:
        T = net.T
        batches = minibatches(batch.n, batch.batch_size, state.gen)
        sq = [0.0] * T
        for b, idx in enumerate(batches):
            idx = idx.to(batch.x.device)
            x, y = batch.x[idx], batch.y[idx]
            net.eval()
            with torch.no_grad():
                z = net.forward_all(x)  # z re-initialised in a forward pass (Alg. 2)
            moments = [[torch.zeros_like(zt), torch.zeros_like(zt)] for zt in z] if self.z_optimizer == "adam" else None
            state.batch_bytes = max(state.batch_bytes, tensor_bytes(z) * (3 if moments else 1))
            couplings = [(lambda zt, out, t=t: self.coupling(state.beta[t], state.u[t], zt, out)) for t in range(T)]
            for p in range(self.primal_steps):
                # Z-update (Alg. 2): z_T-step, then reverse sweep
                def z_step(t, zt, g, p=p):
                    if moments is None:
                        return zt - self.z_lr * g
                    return adam_z_step(zt, g, moments[t][0], moments[t][1], p + 1, self.z_lr)

                z = reverse_z_sweep(net.blocks, x, z, lambda zT: batch.loss(zT, y), couplings, z_step)
                # Θ-update
                net.train()
                theta_step(net, state.opt, [x, *z[:-1]], lambda t, out: couplings[t](z[t], out) / len(idx))
            # scalar dual update, with the new Θ
            net.eval()
            with torch.no_grad():
                inp = x
                for t, block in enumerate(net.blocks):
                    r = z[t] - block(inp)
                    rn = float(r.pow(2).sum().sqrt())
                    sq[t] += rn * rn
                    if self.dual == "damped":
                        state.u[t] = self.dual_decay * state.u[t] + rn
                    else:
                        state.u[t] = state.u[t] + rn
                    inp = z[t]
            state.iteration += 1
            if progress and (b % 20 == 0 or b == len(batches) - 1):
                progress((b + 1) / len(batches))
        state.residuals = [math.sqrt(v / batch.n) for v in sq]
        return {}

    def diagnostics(self, net, state: OnlineADMMState, batch: TrainBatch) -> dict:
        return {
            "residuals": list(state.residuals),
            "dual_norms": [abs(u) for u in state.u],
            "betas": list(state.beta),
            "iteration": state.iteration,
        }

    def state_bytes(self, state: OnlineADMMState) -> int:
        return state.batch_bytes + 8 * len(state.u)
