"""BCD — Zeng, Lau, Lin & Yao 2019, "Global convergence of block coordinate descent in deep
learning" (ICML), Algorithm 1 (ReLU, "two-splitting" formulation), as in the authors'
PyTorch re-implementation (github.com/timlautk/BCD-for-DNNs-PyTorch).

Their variables are U_ℓ (pre-activation, here ``z``) and V_ℓ (activation, here ``a``),
with V_L the network output; rows = samples, A_0 = X, bias folded into W:

    min  J(Y, A_L) + γ/2 ‖A_L − Z_L‖² + ρ/2 Σ_ℓ ‖Z_ℓ − A_{ℓ−1}W_ℓᵀ − b_ℓ‖²
         + γ/2 Σ_{ℓ<L} ‖A_ℓ − relu(Z_ℓ)‖²

No multipliers: a penalty method solved by cyclic proximal block updates (prox weight α),
backward over the layers. One iteration (= one epoch here):

    A_L ← argmin J(Y, A) + γ/2 ‖A − Z_L‖² + α/2 ‖A − A_L^old‖²
    Z_L ← argmin γ/2 ‖A_L − Z‖² + ρ/2 ‖Z − A_{L−1}W_Lᵀ − b_L‖²
    W_L ← argmin ρ/2 ‖Z_L − [A_{L−1} 1] W̃ᵀ‖² + α/2 ‖W̃ − W̃^old‖²
    for ℓ = L−1 … 1:
        A_ℓ ← argmin γ/2 ‖A − relu(Z_ℓ)‖² + ρ/2 ‖Z_{ℓ+1} − A W_{ℓ+1}ᵀ − b_{ℓ+1}‖²
        Z_ℓ ← argmin γ/2 ‖A_ℓ − relu(Z)‖² + ρ/2 ‖Z − A_{ℓ−1}W_ℓᵀ − b_ℓ‖² + α/2 ‖Z − Z_ℓ^old‖²
        W_ℓ ← argmin ρ/2 ‖Z_ℓ − [A_{ℓ−1} 1] W̃ᵀ‖² + α/2 ‖W̃ − W̃^old‖²

Every update is exact (linear solves, the ReLU proximal case split). Defaults are the
re-implementation's MNIST settings: γ = ρ = 1, α = 5; W ~ 0.01·N(0, 1), b = 0.1.

Deviations, stated: the re-implementation updates W from the old b and b from the old W
(a Jacobi step on (W, b)); here [W b] is one block solved jointly, which is the paper's
update with the intercept folded in. Inference uses the straight-through network (the
re-implementation does too); residuals report Z − A W̃ᵀ and A − relu(Z) per layer.
"""

from __future__ import annotations

import torch

from .base import TrainBatch
from .lifted import (
    LiftedMethod,
    LiftedState,
    activation_solve,
    cross,
    forward_vars,
    linear,
    normal_init,
    output_prox,
    read_weights,
    relu_argmin,
    solve_weights,
    write_weights,
)


class BCD(LiftedMethod):
    """Block coordinate descent (Zeng et al. 2019, Alg. 1). See the module docstring."""

    def init_vars(self, net, lins, x, batch: TrainBatch, gen):
        normal_init(lins, self.init_std, self.init_bias, gen)
        z, a = forward_vars(lins, x, self.chunk_size)
        a_out = z[-1].clone()  # V_L = U_L at the start
        return {"z": z, "a": a, "a_out": [a_out]}, {}

    def update_weights(self, lins, state, x, l: int) -> None:
        """[W b] ← argmin ρ/2 ‖Z_ℓ − [A 1]W̃ᵀ‖² + α/2 ‖W̃ − W̃^old‖²  (divided by ρ: ridge α/ρ toward the old W̃)."""
        a_in = x if l == 0 else state.vars["a"][l - 1]
        g = self.layer_gram(state, x, a_in, l)
        w_old, b_old = read_weights(lins[l])
        prior = torch.cat([w_old, b_old[:, None]], 1)
        r = self.alpha / self.rho
        w, b = solve_weights(
            state.solver, g, cross(a_in, state.vars["z"][l], self.chunk_size), ridge=r, ridge_bias=r, prior=prior
        )
        write_weights(lins[l], w, b)

    def sweep(self, lins, state: LiftedState, x: torch.Tensor, batch: TrainBatch) -> None:
        z, a, (a_out,) = state.vars["z"], state.vars["a"], state.vars["a_out"]
        L, n, ch = len(lins), x.shape[0], self.chunk_size
        gamma, rho, alpha = self.gamma, self.rho, self.alpha
        # output layer: V_L, U_L, W_L
        a_out.copy_(
            output_prox(
                batch.loss, batch.y, (gamma * z[-1] + alpha * a_out) / (gamma + alpha), gamma + alpha, start=a_out
            )
        )
        w, b = read_weights(lins[-1])
        z[-1] = (gamma * a_out + rho * linear(a[-1] if L > 1 else x, w, b)) / (gamma + rho)
        self.update_weights(lins, state, x, L - 1)
        # hidden layers, backward: V_ℓ, U_ℓ, W_ℓ
        for l in range(L - 2, -1, -1):
            w_next, b_next = read_weights(lins[l + 1])
            a[l] = activation_solve(
                state.solver, w_next, b_next, z[l + 1], lambda rows, l=l: torch.relu(z[l][rows]), rho, gamma, n, ch
            )
            w, b = read_weights(lins[l])
            a_in = x if l == 0 else a[l - 1]
            for s in range(0, n, ch):
                rows = slice(s, s + ch)
                center = (rho * linear(a_in[rows], w, b) + alpha * z[l][rows]) / (rho + alpha)
                z[l][rows] = relu_argmin(center, a[l][rows], rho + alpha, gamma)
            self.update_weights(lins, state, x, l)
        state.scalars["residuals_stale"] = True  # a forward pass per layer: computed when diagnostics ask (untimed)

    def report_betas(self, state, L):
        return [self.rho] * L

    def extra_diagnostics(self, state):
        return {"gammas": [self.gamma] * (len(state.vars["z"]) - 1), "alpha": self.alpha}
