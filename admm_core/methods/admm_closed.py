"""Standard ADMM for DNNs with closed-form updates — the seed paper's supplementary Alg. 3.

Problem (supplement, eq. "obj"), rows = samples, A_0 = X, bias folded into W:

    min  J(Y, Z_L) + Σ_ℓ λ ‖W_ℓ‖²
    s.t. Z_ℓ = A_{ℓ−1} W_ℓᵀ + b_ℓ   (ℓ = 1..L),     A_ℓ = relu(Z_ℓ)   (ℓ = 1..L−1)

Augmented Lagrangian (supplement, eq. "augmented"), scaled multipliers U_ℓ, V_ℓ:

    L = J(Y, Z_L) + Σ_ℓ λ‖W_ℓ‖² + Σ_ℓ P_ℓ + Σ_{ℓ<L} Q_ℓ  − Σ β/2‖U_ℓ‖² − Σ γ/2‖V_ℓ‖²
    P_ℓ = β/2 ‖Z_ℓ − A_{ℓ−1}W_ℓᵀ − b_ℓ + U_ℓ‖²,   Q_ℓ = γ/2 ‖A_ℓ − relu(Z_ℓ) + V_ℓ‖²

(the −‖U‖², −‖V‖² constants make L the true augmented Lagrangian; they do not change any
primal update). One outer iteration of Alg. 3 (= one epoch here, ``iters_per_epoch`` = 1):

    for ℓ = 1..L:     W_ℓ ← argmin P_ℓ + λ‖W_ℓ‖²        # ridge least squares on [A_{ℓ−1} 1]
    for ℓ = 1..L−1:   Z_ℓ ← argmin P_ℓ + Q_ℓ            # elementwise ReLU case split
                      A_ℓ ← argmin P_{ℓ+1} + Q_ℓ        # linear solve with β WᵀW + γ I
    Z_L ← argmin J(Y, Z_L) + P_L                        # closed form for MSE
    U_ℓ ← U_ℓ + Z_ℓ − A_{ℓ−1}W_ℓᵀ − b_ℓ;  V_ℓ ← V_ℓ + A_ℓ − relu(Z_ℓ)

Every primal update is an exact minimiser of L in its block, so L does not increase over
the primal part of a sweep; the dual step then raises it by exactly Σβ‖r_ℓ‖² + Σγ‖s_ℓ‖²
(tested). Paper settings (MNIST experiment): β = γ = 10, λ = 5e-5, parameters drawn from
U(0, 1e-4) (``init='uniform'``); Z and A start from a forward pass, U = V = 0.

Implementation notes / deviations:
- Biases are kept (the paper drops them "for simplicity"); they are not weight-decayed.
- The dual step of layer ℓ is applied right after Z_ℓ (and A_ℓ) are updated: nothing later
  in the sweep reads U_ℓ or V_ℓ, so this equals Alg. 3's end-of-sweep dual step and saves
  recomputing A_{ℓ−1}W_ℓᵀ (``update_duals=False`` keeps the primal part only, for tests).
- Solves run in float64 with a relative jitter ``solve_eps`` and never crash; solves that
  needed more jitter or whose factor is badly conditioned are counted (``ill_conditioned``).
- For a non-MSE J (cross-entropy) the Z_L step is solved by FISTA instead of in closed form.
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


class ADMMClosed(ClosedFormADMM):
    """Standard ADMM with closed-form updates (supplement Alg. 3). See the module docstring."""

    def init_vars(self, net, lins, x, batch: TrainBatch, gen):
        z, a = self.start_vars(lins, x, gen)
        u = [torch.zeros_like(t) for t in z]
        v = [torch.zeros_like(t) for t in a]
        return {"z": z, "a": a, "u": u, "v": v}, {}

    def sweep(self, lins, state: LiftedState, x: torch.Tensor, batch: TrainBatch, update_duals: bool = True) -> None:
        z, a, u, v = (state.vars[k] for k in ("z", "a", "u", "v"))
        L, n, beta, gamma, ch = len(lins), x.shape[0], self.beta, self.gamma, self.chunk_size
        inputs = lambda l: x if l == 0 else a[l - 1]  # A_{ℓ−1} (the current one)
        # W-update, ℓ = 1..L: argmin P_ℓ + λ‖W_ℓ‖²  ->  (ÃᵀÃ + (2λ/β) I) W̃ᵀ = Ãᵀ(Z_ℓ + U_ℓ)
        for l, lin in enumerate(lins):
            g = self.layer_gram(state, x, inputs(l), l)
            rhs = cross(inputs(l), lambda rows, l=l: z[l][rows] + u[l][rows], ch)
            w, b = solve_weights(state.solver, g, rhs, ridge=2 * self.weight_decay / beta)
            write_weights(lin, w, b)
        res, act = [], []
        for l in range(L - 1):
            w, b = read_weights(lins[l])
            m = linear(inputs(l), w, b)  # A_{ℓ−1}W_ℓᵀ + b_ℓ, (N, d_ℓ)
            # Z-update (hidden): argmin P_ℓ + Q_ℓ, elementwise
            for s in range(0, n, ch):
                rows = slice(s, s + ch)
                z[l][rows] = relu_argmin(m[rows] - u[l][rows], a[l][rows] + v[l][rows], beta, gamma)
            # A-update: argmin P_{ℓ+1} + Q_ℓ (uses the old Z_{ℓ+1}, U_{ℓ+1})
            w_next, b_next = read_weights(lins[l + 1])
            a[l] = activation_solve(
                state.solver,
                w_next,
                b_next,
                lambda rows, l=l: z[l + 1][rows] + u[l + 1][rows],
                lambda rows, l=l: torch.relu(z[l][rows]) - v[l][rows],
                beta,
                gamma,
                n,
                ch,
            )
            if update_duals:  # U_ℓ, V_ℓ are not read again in this sweep
                r = z[l] - m
                s_act = a[l] - torch.relu(z[l])
                u[l] += r
                v[l] += s_act
                res.append(sq_norm(r))
                act.append(sq_norm(s_act))
            del m
        # Z_L-update: argmin J(Y, Z_L) + P_L
        w, b = read_weights(lins[-1])
        m = linear(inputs(L - 1), w, b)
        z[-1] = output_prox(batch.loss, batch.y, m - u[-1], beta, start=z[-1])
        if update_duals:
            r = z[-1] - m
            u[-1] += r
            res.append(sq_norm(r))
            state.scalars["residuals"] = [(q / n) ** 0.5 for q in res]
            state.scalars["act_residuals"] = [(q / n) ** 0.5 for q in act]

    @torch.no_grad()
    def dual_step(self, lins, state: LiftedState, x: torch.Tensor) -> None:
        """U_ℓ ← U_ℓ + Z_ℓ − A_{ℓ−1}W_ℓᵀ − b_ℓ;  V_ℓ ← V_ℓ + A_ℓ − relu(Z_ℓ)  (Alg. 3, end of sweep)."""
        z, a, u, v = (state.vars[k] for k in ("z", "a", "u", "v"))
        for l, lin in enumerate(lins):
            w, b = read_weights(lin)
            u[l] += z[l] - linear(x if l == 0 else a[l - 1], w, b)
            if l < len(lins) - 1:
                v[l] += a[l] - torch.relu(z[l])
        self.record_residuals(lins, state, x)

    @torch.no_grad()
    def lagrangian(self, lins, state: LiftedState, x: torch.Tensor, batch: TrainBatch) -> float:
        """The augmented Lagrangian L(W, Z, A, U, V) above, in float64."""
        z, a, u, v = (state.vars[k] for k in ("z", "a", "u", "v"))
        total = float(batch.loss(z[-1].double(), batch.y))
        for l, lin in enumerate(lins):
            w, b = read_weights(lin)
            total += self.weight_decay * sq_norm(w)
            m = linear((x if l == 0 else a[l - 1]).double(), w.double(), b.double())
            total += self.beta / 2 * (sq_norm(z[l].double() - m + u[l]) - sq_norm(u[l]))
            if l < len(lins) - 1:
                total += self.gamma / 2 * (sq_norm(a[l].double() - torch.relu(z[l].double()) + v[l]) - sq_norm(v[l]))
        return total

    def report_betas(self, state, L):
        return [self.beta] * L

    def extra_diagnostics(self, state):
        return {"gammas": [self.gamma] * (len(state.vars["z"]) - 1)}
