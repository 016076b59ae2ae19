"""Gotmare, Thomas, Brea & Jaggi 2018, "Decoupling backpropagation using constrained
optimization methods" (ICML workshop on credit assignment) — the network is cut into blocks
glued by a quadratic penalty on auxiliary variables, with *no* dual variables:

    min_{Θ, Z}  J(Y, Z_T) + Σ_t β_t/2 ‖Z_t − block_t(Z_{t−1})‖²

solved by alternating stochastic steps on the per-sample Z_t (kept for every training
sample) and on each block's Θ_t. This is exactly batch Stochastic Block-ADMM (paper
Alg. 1, :mod:`.block_admm`) with the scaled duals frozen at U ≡ 0 — the seed paper's own
description of this baseline — so the class reuses BlockADMM and drops its dual step:

- U is created as zeros and never changes (``u_init`` must stay 'zero');
- the dual step U_t ← U_t + Z_t − block_t(Z_{t−1}) is replaced by a pass that only
  measures the residuals (same place in the schedule, same diagnostics);
- everything else — Z_T-step, reverse Z sweep, Θ-steps, chunking, the adaptive-penalty
  option (β grows while the violation stays above a shrinking bound; Gotmare et al. also
  raise the penalty over training) — is BlockADMM's code.

Deviations, stated: Gotmare et al. tune their own penalty schedule and optimisers per
experiment; here the schedule is BlockADMM's adaptive ρ rule (off by default) so the two
methods differ only in the multiplier. The seed paper trains this baseline with minibatch 64.
"""

from __future__ import annotations

from ..spec.methods.block_admm import GotmareSettings
from .block_admm import BlockADMM, BlockADMMState


class Gotmare(GotmareSettings, BlockADMM):
    """Block-ADMM with the duals frozen at zero (quadratic-penalty gluing, Gotmare et al. 2018): the
    record's ``uses_duals = False`` turns Block-ADMM's dual step into a measurement."""

    def state_bytes(self, state: BlockADMMState) -> int:
        # U is identically zero and not a variable of this method: count Z (and its moments)
        return super().state_bytes(state) - sum(u.numel() * u.element_size() for u in state.u)
