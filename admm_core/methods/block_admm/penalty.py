"""The penalty rule of Block-ADMM: how β_t moves (fixed by default).

- fixed: β_t as given (one value, or one per block);
- growth (``beta_growth`` g ≠ 1), after every epoch:
      β_t ← g β_t,   U_t ← U_t / g   (λ_t = β_t U_t unchanged),   a fixed ζ_t ← ζ_t / g   (ζ_t β_t unchanged);
- adaptive (``adaptive_rho``; the paper's rule for ρ = 1/β), after every dual step, with
  h = (‖Z_t − block_t(Z_{t−1})‖)_t the constraint violation (RMS per sample):
      ρ_{k+1} = ρ_k if ‖h‖ ≤ η_k else c ρ_k   (β ← min(β/c, β_max), U ← (β_old/β_new) U, a fixed ζ ← ζ β_old/β_new),
      η_{k+1} = decay · η_k.
  The Z step stays stable without shrinking ζ by hand: scaled, ζ_eff already divides by β; fixed,
  ζβ is kept.
"""

from __future__ import annotations

import math


class PenaltyRule:
    """β's growth per epoch and its adaptive rule, read off a Block-ADMM record."""

    def __init__(self, settings):
        self.growth = settings.beta_growth  # g
        self.adaptive = bool(settings.adaptive_rho)
        self.c = settings.rho_c
        self.beta_max = settings.beta_max
        self.bound_decay = settings.rho_bound_decay
        self.keep_zeta_beta = settings.z_step == "fixed"  # a fixed ζ moves with β; a scaled one follows it

    def after_epoch(self, state) -> None:
        """β_t ← gβ_t with λ_t = β_t U_t unchanged (U_t ← U_t/g) and, for a fixed Z step, ζ_tβ_t unchanged."""
        if self.growth == 1.0:
            return
        g = self.growth
        for t, b in enumerate(state.beta):
            state.u[t].mul_(1.0 / g)
            if self.keep_zeta_beta:
                state.z_lr[t] /= g
            state.beta[t] = b * g

    def after_dual(self, state) -> None:
        """ρ_{k+1} = ρ_k if ‖h‖ ≤ η_k else cρ_k  (ρ = 1/β, capped at β_max); η_{k+1} = decay · η_k."""
        if not self.adaptive:
            return
        h = math.sqrt(sum(r * r for r in state.residuals))
        if h > state.rho_bound:
            for t, b in enumerate(state.beta):
                new = min(b / self.c, self.beta_max)
                if new <= b:
                    continue
                state.u[t].mul_(b / new)  # keep λ = βU unchanged
                if self.keep_zeta_beta:
                    state.z_lr[t] *= b / new  # keep ζβ (scaled: ζ_eff already divides by β)
                state.beta[t] = new
        state.rho_bound *= self.bound_decay
