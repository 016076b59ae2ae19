"""The dual rule of Block-ADMM: how the scaled duals U_t start, move and restart.

    U_t ← U_t + α (Z_t − block_t(Z_{t−1}))          (Alg. 1: α = 1; ``dual_lr``)

row by row, at the dual step of the schedule. Variants, each a setting of the record:

- initialisation (``u_init``): U = 0, or U ~ Uniform[0, ``u_init_scale``) per entry (the paper's);
- start (``dual_start``): U held at 0 for the first epochs, the dual steps only measure residuals;
- reset (``dual_reset``): U ← 0 at the start of every that-many-th epoch;
- none (the record's ``uses_duals = False``, gotmare): U ≡ 0, never moved and not counted as
  state — the quadratic-penalty method of Gotmare et al. 2018 is Block-ADMM with this rule.
"""

from __future__ import annotations

import torch

from ..base import TrainBatch


class DualRule:
    """U's initialisation, step, start and reset, read off a Block-ADMM record."""

    def __init__(self, settings):
        self.used = bool(settings.uses_duals)  # False: U ≡ 0 (gotmare)
        self.alpha = settings.dual_lr  # α
        self.start = settings.dual_start  # first epoch whose dual steps move U
        self.reset_every = settings.dual_reset  # U ← 0 every this many epochs (0: never)
        self.init = settings.u_init
        self.init_scale = settings.u_init_scale

    def initial(self, z: list[torch.Tensor], batch: TrainBatch, gen: torch.Generator) -> list[torch.Tensor]:
        """U_t at the start: zeros, or U(0, scale) draws (consuming ``gen`` as every rank does)."""
        if self.init == "uniform":
            return [self._uniform_rows(zt, batch, gen) for zt in z]
        return [torch.zeros_like(zt) for zt in z]

    def _uniform_rows(self, zt: torch.Tensor, batch: TrainBatch, gen: torch.Generator) -> torch.Tensor:
        """U(0, scale) draws for this shard's rows, drawn over the global rows in fixed chunks
        so every rank consumes the generator alike and the values do not depend on the world size."""
        lo, hi, step = batch.shard.start, batch.shard.start + batch.n, 8192
        parts = []
        for s in range(0, batch.n_global, step):
            r = torch.rand((min(step, batch.n_global - s), *zt.shape[1:]), generator=gen, dtype=zt.dtype)
            if s < hi and s + r.shape[0] > lo:
                parts.append(r[max(lo - s, 0) : hi - s])
        return (torch.cat(parts) * self.init_scale).to(zt.device)

    def on(self, epoch: int) -> bool:
        """Whether the dual steps of epoch ``epoch`` (0-based) move U."""
        return self.used and epoch >= self.start

    def begin_epoch(self, state) -> None:
        """U ← 0 at the start of every ``dual_reset``-th epoch: the per-sample memory of old signals is dropped."""
        if self.reset_every and state.epoch > 0 and state.epoch % self.reset_every == 0:
            for u in state.u:
                u.zero_()

    def add_(self, u: torch.Tensor, r: torch.Tensor, epoch: int) -> None:
        """U ← U + α r on ``u``, a view of some rows of U_t (in place)."""
        if self.on(epoch):
            u.add_(r, alpha=self.alpha)

    def add_rows(self, u: torch.Tensor, rows, r: torch.Tensor, epoch: int) -> None:
        """U[rows] ← U[rows] + α r (an index tensor of distinct rows, or a slice of rows)."""
        if self.on(epoch):
            step = self.alpha * r.to(u.dtype)
            if torch.is_tensor(rows):  # in place, no gathered copy: the same sums as u[rows] += step
                u.index_add_(0, rows, step)
            else:
                u[rows] += step

    def state_tensors(self, state) -> list[torch.Tensor]:
        """The duals a run keeps as its state (none when U ≡ 0: the zeros are not a variable)."""
        return list(state.u) if self.used else []
