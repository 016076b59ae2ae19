"""Batch Stochastic Block-ADMM (paper Alg. 1), composed of named parts.

Augmented Lagrangian, with scaled duals U_t and the coupling term
P_t = β_t/2 ‖Z_t − block_t(Z_{t−1}) + U_t‖²  (Z_0 = X):

    L(Θ, Z, U) = J(Y, Z_T) + Σ_{t=1}^{T} P_t

Z_t and U_t hold one row per training sample and persist across iterations. Per iteration:

    repeat k = primal_steps times:
        Z_T ← Z_T − ζ_T ∇_{Z_T} (J + P_T)                       # Z_T-step
        for t = T−1 … 1:  Z_t ← Z_t − ζ_t ∇_{Z_t} (P_t + P_{t+1})  # reverse sweep
        for t = 1 … T:    Θ_t ← Θ_t − η_t ∇_{Θ_t} P_t on minibatches  # Θ-step
    for t = 1 … T:        U_t ← U_t + Z_t − block_t(Z_{t−1})      # dual step

The parts, each a module with its equations and its own oracle test
(tests/test_block_admm_parts.py); :class:`BlockADMM` (:mod:`.engine`) composes them in that order:

- :mod:`.zstep` — the Z-step rule (:class:`ZStepRule`): ζ fixed, curvature-scaled or Newton;
  a gradient or Adam step on Z; the per-block size ``z_norm``;
- :mod:`.sweep` — the schedule of Alg. 1 as printed (:class:`SweepSchedule`): every row swept
  between shares of the Θ-steps, Gauss–Seidel or Jacobi, the dual step folded into the next sweep;
- :mod:`.minibatch` — the minibatch schedule (:class:`MinibatchSchedule`): one minibatch's rows at a
  time; where Z starts, Θ's input and the dual's forward pass;
- :mod:`.dual` — the dual rule (:class:`DualRule`): α, start, reset, initialisation; off for
  gotmare (U ≡ 0);
- :mod:`.penalty` — the penalty rule (:class:`PenaltyRule`): β fixed, grown per epoch, or adaptive;
- :mod:`.state` — the state (:class:`BlockADMMState`), Z's forward-pass start, the memory check.

Each setting of the record (:class:`~admm_core.spec.methods.block_admm.BlockADMMSettings`) is read by
one part. Gotmare et al. 2018 is the same engine with the record's ``uses_duals = False``.

Implementation choices (measured, see README):
- The Z-step defaults to a plain gradient step: Adam on Z (the paper's choice, offered as
  ``z_optimizer='adam'``) normalises each coordinate's step to ≈ ζ, so Z jumps by ±ζ and
  the blocks cannot follow (:mod:`.zstep`).
- The Θ-step minimises P_t averaged over the minibatch (P_t/|i|), so η does not depend on
  the batch size.
- The adaptive penalty (paper eq. for ρ_k, ρ = 1/β) is off by default (:mod:`.penalty`). Prop. 1
  also needs the primal sub-problem solved ever more accurately: ``primal_growth`` adds a primal
  pass every that many dual steps (up to ``primal_steps_max``; :func:`.sweep.primal_passes`).
- With the Θ-steps at the forward start's inputs (``theta_input='start'``, the default) the Z sweep's
  vector-Jacobian products are also taken w.r.t. Θ and give the Θ-step's ∇_{Θ_t} P_t
  (:data:`admm_core.methods.zsweep.THETA_GRADS_FROM_SWEEP`): one backward pass per block and
  minibatch, as in backprop; the same update, in Alg. 1's order, up to float rounding.
- Blocks run in eval mode (BatchNorm uses running statistics) in Z sweeps and dual steps,
  so the Z objective really separates per sample; Θ-steps run in train mode.
- Sample sharding (``batch.shard``, :mod:`admm_core.distributed`): this process holds the
  rows [start, start + n) of Z and U. Minibatches are drawn over the *global* rows with
  the same generator on every rank, so the sequence does not depend on the world size;
  each rank backpropagates its rows of a minibatch and the gradients are summed by
  all-reduce (P_t/|i| with the global |i|), so every rank takes the same Θ-step. Residual
  and dual-norm sums are reduced across ranks; Z sweeps and dual steps need no messages.
"""

from __future__ import annotations

from .dual import DualRule
from .engine import BlockADMM
from .minibatch import MinibatchSchedule
from .penalty import PenaltyRule
from .state import BlockADMMState, calibrate_batchnorm, check_state_fits, coupling_terms, free_bytes
from .sweep import SweepSchedule, primal_passes
from .zstep import ZStepRule, gradient_step

__all__ = [
    "BlockADMM",
    "BlockADMMState",
    "DualRule",
    "MinibatchSchedule",
    "PenaltyRule",
    "SweepSchedule",
    "ZStepRule",
    "calibrate_batchnorm",
    "check_state_fits",
    "coupling_terms",
    "free_bytes",
    "gradient_step",
    "primal_passes",
]
