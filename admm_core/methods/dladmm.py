"""dlADMM — Wang, Yu, Chen & Zhao 2019, "ADMM for efficient deep learning with global
convergence" (KDD), Algorithm 1 and its public code (github.com/xianggebenben/dlADMM).

Problem (their eq. 2 relaxed as in §3), rows = samples, A_0 = X, ν tied to ρ as in the code:

    min  J(Y, Z_L) + ν/2 Σ_{ℓ<L} (‖Z_ℓ − A_{ℓ−1}W_ℓᵀ − b_ℓ‖² + ‖A_ℓ − relu(Z_ℓ)‖²)
    s.t. Z_L = A_{L−1}W_Lᵀ + b_L               (the only constraint with a multiplier u)

    L_ρ = J + ν/2 Σ(…) + ⟨u, Z_L − A_{L−1}W_Lᵀ − b_L⟩ + ρ/2 ‖Z_L − A_{L−1}W_Lᵀ − b_L‖²

One iteration (= one epoch here) is a backward then a forward sweep, then the dual step:

    backward ℓ = L..1:  Z_ℓ, b_ℓ, W_ℓ, then A_{ℓ−1} (ℓ > 1)
    forward  ℓ = 1..L:  W_ℓ, b_ℓ, Z_ℓ, then A_ℓ (ℓ < L)
    u ← u + ρ (Z_L − A_{L−1}W_Lᵀ − b_L)

- W_ℓ: linearised step W ← W − ∇_W φ / θ with backtracking θ ← 2θ until
  φ(W') ≤ φ(W) + ⟨∇φ, W' − W⟩ + θ/2 ‖W' − W‖² (their P-check). φ is quadratic in W, so
  the check is exactly ρ ‖(W' − W)Ãᵀ‖² ≤ θ ‖W' − W‖², evaluated from the Gram AᵀA instead
  of a forward pass per trial — the same θ the code's loop finds, far cheaper.
- A_ℓ: the same linearised step with backtracking τ (their Q-check), exactly as above.
- b_ℓ: closed form (mean residual); Z_ℓ (ℓ < L): exact ReLU case split;
  Z_L: prox of J (closed form for MSE; FISTA, as their code, otherwise).
- ρ schedule (their code): ρ starts at 1e-6; when the training loss rose three iterations
  in a row, ρ ← min(10ρ, ρ_max) and the backtracking starts θ, τ grow ×10.

Deviations, stated: ν is tied to ρ (as in the public code, not a separate constant as in
the paper); W, b start N(0, 0.1²) as in the code but drawn independently per layer (the
code reuses one seed for all); Z_L starts from the forward pass rather than ±1 labels;
the ×10 on θ, τ is applied at any width (the code does it only for width ≥ 100);
the training loss for the schedule is J of the straight-through forward pass (mean).
"""

from __future__ import annotations

import math

import torch

from .base import TrainBatch
from .lifted import (
    LiftedMethod,
    LiftedState,
    forward_vars,
    gram,
    linear,
    normal_init,
    output_prox,
    read_weights,
    relu_argmin,
    sq_norm,
    write_weights,
)


def _backtrack(start: float, needed: float) -> float:
    """The first start·2^k ≥ needed (k ≥ 0): the value the code's doubling loop stops at."""
    t = start
    while t < needed and math.isfinite(needed):
        t *= 2.0
    return t


class DLADMM(LiftedMethod):
    """dlADMM (Wang et al. 2019). See the module docstring."""

    def init_vars(self, net, lins, x, batch: TrainBatch, gen):
        normal_init(lins, self.init_std, None, gen)
        z, a = forward_vars(lins, x, self.chunk_size)
        scalars = {
            "rho": self.rho,
            "theta": self.theta,
            "tau": self.tau,
            "loss_history": [],
            "theta_used": [0.0] * len(lins),
            "tau_used": [0.0] * (len(lins) - 1),
        }
        return {"z": z, "a": a, "u": [torch.zeros_like(z[-1])]}, scalars

    # --- the sub-problems ---------------------------------------------------------------
    def _target(self, state, l: int, L: int) -> torch.Tensor:
        """Z_ℓ (+ u/ρ on the last layer): what A_{ℓ−1}W_ℓᵀ + b_ℓ should match."""
        z = state.vars["z"][l]
        return z + state.vars["u"][0] / state.scalars["rho"] if l == L - 1 else z

    def _gram(self, state, x, l: int) -> torch.Tensor:
        """[A_{ℓ−1} 1]ᵀ[A_{ℓ−1} 1] (float64): gives AᵀA and the column sums of A."""
        return self.x_gram(state, x) if l == 0 else gram(state.vars["a"][l - 1], self.chunk_size)

    def update_w(self, lins, state, x, l: int, L: int) -> None:
        """W ← W − ∇_W φ / θ,  ∇_W φ = ρ (W AᵀA + b 1ᵀA − TᵀA), θ by backtracking."""
        rho, a_in = state.scalars["rho"], (x if l == 0 else state.vars["a"][l - 1])
        w, b = read_weights(lins[l])
        t = self._target(state, l, L)
        g = self._gram(state, x, l)
        gram_a, col = g[:-1, :-1], g[:-1, -1]  # AᵀA, 1ᵀA
        t_a = torch.zeros(w.shape, dtype=torch.float64, device=w.device)
        for s in range(0, x.shape[0], self.chunk_size):
            rows = slice(s, s + self.chunk_size)
            t_a += (t[rows].t() @ a_in[rows]).double()
        grad = rho * (w.double() @ gram_a + b.double()[:, None] * col[None, :] - t_a)
        gg = float((grad * grad).sum())
        curv = float(((grad @ gram_a) * grad).sum()) if gg > 0 else 0.0
        # backtracking (their P-check) in closed form: φ(W − ∇/θ) ≤ P  ⟺  θ ≥ ρ tr(∇ AᵀA ∇ᵀ)/‖∇‖²
        theta = _backtrack(state.scalars["theta"], rho * curv / gg if gg > 0 else 0.0)
        state.scalars["theta_used"][l] = theta
        write_weights(lins[l], (w.double() - grad / theta).float(), b)

    def update_b(self, lins, state, x, l: int, L: int) -> None:
        """b ← mean over rows of (T − A Wᵀ) = mean(T) − W mean(A): the exact minimiser."""
        w, b = read_weights(lins[l])
        t = self._target(state, l, L)
        mean_a = (
            self.x_gram(state, x)[:-1, -1] / x.shape[0]
            if l == 0
            else state.vars["a"][l - 1].mean(0, dtype=torch.float64)
        )
        write_weights(lins[l], w, (t.mean(0, dtype=torch.float64) - w.double() @ mean_a).float())

    def update_z(self, lins, state, x, batch, l: int, L: int) -> None:
        rho, z, a = state.scalars["rho"], state.vars["z"], state.vars["a"]
        w, b = read_weights(lins[l])
        a_in = x if l == 0 else a[l - 1]
        m = torch.cat([linear(a_in[s : s + self.chunk_size], w, b) for s in range(0, x.shape[0], self.chunk_size)])
        if l == L - 1:  # argmin J(Y, Z_L) + ⟨u, Z_L − m⟩ + ρ/2‖Z_L − m‖²
            z[l] = output_prox(batch.loss, batch.y, m - state.vars["u"][0] / rho, rho, start=z[l])
        else:  # argmin ν/2 ‖Z − m‖² + ν/2 ‖A_ℓ − relu(Z)‖²
            z[l] = relu_argmin(m, a[l], rho, rho)

    def update_a(self, lins, state, x, l: int, L: int) -> None:
        """A_ℓ ← A_ℓ − ∇/τ, ∇ = ρ (A W_{ℓ+1}ᵀ + b_{ℓ+1} − T_{ℓ+1}) W_{ℓ+1} + ν (A_ℓ − relu(Z_ℓ))."""
        rho, z, a = state.scalars["rho"], state.vars["z"], state.vars["a"]
        w, b = read_weights(lins[l + 1])
        t = self._target(state, l + 1, L)
        grad = rho * ((linear(a[l], w, b) - t) @ w + (a[l] - torch.relu(z[l])))
        gg = sq_norm(grad)
        curv = sq_norm(grad @ w.t()) + gg  # ‖∇ Wᵀ‖² + ‖∇‖²: φ's exact curvature along ∇
        tau = _backtrack(state.scalars["tau"], rho * curv / gg if gg > 0 else 0.0)
        state.scalars["tau_used"][l] = tau
        a[l] = a[l] - grad / tau

    # --- one iteration --------------------------------------------------------------------
    def sweep(self, lins, state: LiftedState, x: torch.Tensor, batch: TrainBatch) -> None:
        L = len(lins)
        # backward sweep ℓ = L..1: Z, b, W, then A_{ℓ−1}
        for l in range(L - 1, -1, -1):
            self.update_z(lins, state, x, batch, l, L)
            self.update_b(lins, state, x, l, L)
            self.update_w(lins, state, x, l, L)
            if l > 0:
                self.update_a(lins, state, x, l - 1, L)
        # forward sweep ℓ = 1..L: W, b, Z, then A_ℓ
        for l in range(L):
            self.update_w(lins, state, x, l, L)
            self.update_b(lins, state, x, l, L)
            self.update_z(lins, state, x, batch, l, L)
            if l < L - 1:
                self.update_a(lins, state, x, l, L)
        # dual step on the last layer: u ← u + ρ (Z_L − A_{L−1}W_Lᵀ − b_L)
        w, b = read_weights(lins[-1])
        rho = state.scalars["rho"]
        state.vars["u"][0] += rho * (state.vars["z"][-1] - linear(state.vars["a"][-1], w, b))
        state.scalars["residuals_stale"] = True  # a forward pass per layer: computed when diagnostics ask (untimed)
        # ρ schedule on the training loss of the straight-through network
        hist = state.scalars["loss_history"]
        hist.append(self.train_loss(lins, x, batch))
        del hist[:-4]
        if len(hist) == 4 and hist[3] > hist[2] > hist[1] > hist[0]:
            state.scalars["rho"] = min(self.rho_factor * rho, self.rho_max)
            state.scalars["theta"] *= 10.0
            state.scalars["tau"] *= 10.0

    def train_loss(self, lins, x, batch) -> float:
        total = 0.0
        for s in range(0, x.shape[0], self.chunk_size):
            h = x[s : s + self.chunk_size]
            for l, lin in enumerate(lins):
                w, b = read_weights(lin)
                h = linear(h, w, b)
                if l < len(lins) - 1:
                    h = torch.relu(h)
            total += float(batch.loss(h, batch.y[s : s + self.chunk_size]))
        return total / x.shape[0]

    def report_betas(self, state, L):
        return [state.scalars["rho"]] * L

    def extra_diagnostics(self, state):
        s = state.scalars
        return {"rho": s["rho"], "theta": list(s["theta_used"]), "tau": list(s["tau_used"])}
