"""Taylor et al. 2016, "Training neural networks without gradients: a scalable ADMM approach"
(ICML), Algorithm 1 — closed-form updates, a Bregman-style multiplier on the output only.

Their problem (eq. 3 + the Lagrangian term of §4), here with the engine's loss J and the
bias folded into W; rows = samples, A_0 = X:

    min  J(Y, Z_L) + ⟨Z_L, λ⟩ + β_L/2 ‖Z_L − A_{L−1}W_Lᵀ − b_L‖²
         + Σ_{ℓ<L} [ γ/2 ‖A_ℓ − relu(Z_ℓ)‖² + β/2 ‖Z_ℓ − A_{ℓ−1}W_ℓᵀ − b_ℓ‖² ]

The hidden constraints are only penalised (no multipliers); only the output constraint has
one. Written in scaled form λ = β U_L. One outer iteration of their Alg. 1 (= one epoch):

    for ℓ = 1..L−1:
        W_ℓ ← Z_ℓ [A_{ℓ−1} 1]^†                                  # least squares
        A_ℓ ← (β W_{ℓ+1}ᵀW_{ℓ+1} + γ I)⁻¹ (β W_{ℓ+1}ᵀ(Z_{ℓ+1} − b_{ℓ+1}) + γ relu(Z_ℓ))
        Z_ℓ ← argmin_z γ/2 ‖A_ℓ − relu(z)‖² + β/2 ‖z − A_{ℓ−1}W_ℓᵀ − b_ℓ‖²   # case split
    W_L ← Z_L [A_{L−1} 1]^†
    Z_L ← argmin_z J(Y, z) + β/2 ‖z − A_{L−1}W_Lᵀ − b_L + U_L‖²
    U_L ← U_L + Z_L − A_{L−1}W_Lᵀ − b_L         # λ ← λ + β(Z_L − W_L A_{L−1}); skipped while warm-starting

Their §6 warm-starts with iterations that skip the multiplier update; ``warm_start_iters``
sets how many.

Deviations, stated:
- Penalties are written β/2‖·‖² (the engine's convention) where Taylor et al. write β‖·‖²:
  their β is our β/2. Defaults β = γ = 10 are the seed paper's settings for this baseline
  (its MNIST experiment), and W, b start from U(0, 1e-4) as there.
- Biases are kept (Taylor et al. have none); the pseudo-inverse is computed as a ridge
  solve with a tiny relative jitter ``solve_eps`` (counted when ill-conditioned) instead
  of an SVD; their data-parallel (one core per data shard) transposes are not needed on
  one machine — the Gram/cross products are chunked by rows instead.
- As printed in Alg. 1, W_L is fitted to Z_L alone (the multiplier does not enter it).
"""

from __future__ import annotations

import torch

from .base import TrainBatch
from .lifted import (
    ClosedFormADMM,
    LiftedState,
    activation_solve,
    cross,
    linear,
    output_prox,
    read_weights,
    relu_argmin,
    solve_weights,
    sq_norm,
    write_weights,
)


class Taylor(ClosedFormADMM):
    """Taylor et al. 2016 (Alg. 1). See the module docstring."""

    def init_vars(self, net, lins, x, batch: TrainBatch, gen):
        z, a = self.start_vars(lins, x, gen)
        return {"z": z, "a": a, "u": [torch.zeros_like(z[-1])]}, {}

    def sweep(self, lins, state: LiftedState, x: torch.Tensor, batch: TrainBatch) -> None:
        z, a, (u,) = state.vars["z"], state.vars["a"], state.vars["u"]
        L, n, beta, gamma, ch = len(lins), x.shape[0], self.beta, self.gamma, self.chunk_size
        inputs = lambda l: x if l == 0 else a[l - 1]
        res, act = [], []
        for l in range(L - 1):
            # W-update: least squares Z_ℓ ≈ [A_{ℓ−1} 1] W̃ᵀ
            g = self.layer_gram(state, x, inputs(l), l)
            w, b = solve_weights(state.solver, g, cross(inputs(l), z[l], ch), ridge=0.0)
            write_weights(lins[l], w, b)
            # A-update (uses W_{ℓ+1}, Z_{ℓ+1} of the previous iteration)
            w_next, b_next = read_weights(lins[l + 1])
            a[l] = activation_solve(
                state.solver, w_next, b_next, z[l + 1], lambda rows, l=l: torch.relu(z[l][rows]), beta, gamma, n, ch
            )
            # Z-update: elementwise case split
            m = linear(inputs(l), w, b)
            for s in range(0, n, ch):
                rows = slice(s, s + ch)
                z[l][rows] = relu_argmin(m[rows], a[l][rows], beta, gamma)
            res.append(sq_norm(z[l] - m))
            act.append(sq_norm(a[l] - torch.relu(z[l])))
            del m
        # output layer: W_L (least squares), Z_L (loss + penalty + multiplier), multiplier
        g = self.layer_gram(state, x, inputs(L - 1), L - 1)
        w, b = solve_weights(state.solver, g, cross(inputs(L - 1), z[-1], ch), ridge=0.0)
        write_weights(lins[-1], w, b)
        m = linear(inputs(L - 1), w, b)
        z[-1] = output_prox(batch.loss, batch.y, m - u, beta, start=z[-1])
        r = z[-1] - m
        if state.scalars["iteration"] >= self.warm_start_iters:
            u += r  # λ ← λ + β (Z_L − W_L A_{L−1})
        res.append(sq_norm(r))
        state.scalars["residuals"] = [(q / n) ** 0.5 for q in res]
        state.scalars["act_residuals"] = [(q / n) ** 0.5 for q in act]

    def extra_diagnostics(self, state):
        return {
            "gammas": [self.gamma] * (len(state.vars["z"]) - 1),
            "warm_start": state.scalars["iteration"] < self.warm_start_iters,
        }
