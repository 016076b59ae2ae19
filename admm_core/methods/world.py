"""Which rows and which blocks this process updates, and how tensors travel between processes.

A method runs the same code in one process and in many; a :class:`World` (on
``TrainBatch.shard``) only says what part of the work is this process's and carries the
messages. Three cases, built by :mod:`admm_core.distributed` (the strategies):

- one process (the default): every row, every block; every collective is the identity;
- rows (``parallel='samples'``): rank r holds the global rows [start, start + n) of X, Z and U
  and updates every block on them; sums and Θ-gradients are all-reduced;
- blocks (``parallel='blocks'``): rank r updates the blocks t with ``owner[t] == r`` on every
  row; it holds their Z_t, U_t and the input Z_{t−1} of its first block. Neighbouring
  owners exchange ∇_{Z_{t−1}} P_t (backward, :meth:`World.pass_back`) and the new Z_t
  (forward, :meth:`World.pass_forward`); per-block values (residuals, L_t) are gathered by
  :meth:`World.gather_blocks`, and block t's parameters go from its owner to every rank at the
  end of an epoch (:meth:`World.sync_blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class World:
    """This process's share of the rows (global rows [start, start + n)) and of the blocks.

    With ``world`` = 1 (the default) every collective below is the identity, so a single
    process and rank r of a sharded run run the same code; with ``world`` > 1 they act on
    torch.distributed's default process group.
    """

    rank: int = 0
    world: int = 1
    start: int = 0
    n_global: int | None = None  # None: this process holds every row
    owner: tuple[int, ...] | None = None  # owner[t]: the rank that updates block t (None: every rank, every block)

    # --- which part is mine ---------------------------------------------------------------
    @property
    def shards_rows(self) -> bool:
        """True where the rows are split over processes (sample sharding)."""
        return self.world > 1 and self.owner is None

    @property
    def shards_blocks(self) -> bool:
        return self.world > 1 and self.owner is not None

    def owns(self, t: int) -> bool:
        """This process updates block t (its Θ_t, Z_t, U_t)."""
        return self.owner is None or self.owner[t] == self.rank

    def holds(self, t: int) -> bool:
        """This process keeps Z_t: it owns block t or block t+1 (Z_t is that block's input)."""
        return self.owns(t) or (self.owner is not None and t + 1 < len(self.owner) and self.owns(t + 1))

    def local(self, idx: torch.Tensor, n_local: int) -> torch.Tensor:
        """The global row indices ``idx`` this shard holds, as local indices (order kept)."""
        if not self.shards_rows:
            return idx
        keep = (idx >= self.start) & (idx < self.start + n_local)
        return idx[keep] - self.start

    # --- collectives ----------------------------------------------------------------------
    def sum(self, values: Sequence[float], device=None) -> list[float]:
        """Σ over ranks of each value (float64)."""
        if self.world == 1:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        return t.tolist()

    def gather_blocks(self, values: Sequence[float], device=None) -> list[float]:
        """Per-block values where each block's owner computed its own: every rank gets them all.

        Blocks not owned here must hold 0 (x + 0 is exact, so the owner's value arrives unchanged)."""
        if not self.shards_blocks:
            return [float(v) for v in values]
        return self.sum([float(v) if self.owns(t) else 0.0 for t, v in enumerate(values)], device)

    def sum_grads(self, params: Sequence[torch.Tensor]) -> None:
        """All-reduce (Σ) the gradients in one flat buffer; a missing gradient counts as 0."""
        if not self.shards_rows:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        torch.distributed.all_reduce(flat)
        for p, g in zip(params, flat.split([p.numel() for p in params])):
            p.grad.copy_(g.view_as(p))

    def average_buffers(self, module: nn.Module) -> None:
        """Average floating buffers (BatchNorm running statistics) so every rank keeps one network
        (rows split; with blocks split each block's buffers move only on its owner)."""
        if not self.shards_rows:
            return
        for b in module.buffers():
            if b.is_floating_point():
                torch.distributed.all_reduce(b)
                b.div_(self.world)

    def pass_back(self, back: dict, like: Sequence[torch.Tensor]) -> dict:
        """``back[t]`` (t ≥ 1, from block t's owner): ∇_{Z_{t−1}} P_t. Returns {t−1: that message}
        for every block t−1 owned here (received from block t's owner where it is another rank);
        ``like[t]`` gives the shape of a message to Z_t."""
        if self.owner is None:
            return {t - 1: g for t, g in back.items()}
        out, ops = {}, []
        for t in range(1, len(self.owner)):
            src, dst = self.owner[t], self.owner[t - 1]
            if src == dst == self.rank:
                out[t - 1] = back[t]
            elif src == self.rank:
                ops.append(torch.distributed.P2POp(torch.distributed.isend, back[t].contiguous(), dst))
            elif dst == self.rank:
                out[t - 1] = torch.empty_like(like[t - 1])
                ops.append(torch.distributed.P2POp(torch.distributed.irecv, out[t - 1], src))
        _run(ops)
        return out

    def pass_forward(self, zs: Sequence[torch.Tensor]) -> None:
        """The new Z_t from block t's owner into the same rows of block t+1's owner's copy (in place)."""
        if self.owner is None:
            return
        ops = []
        for t in range(len(self.owner) - 1):
            src, dst = self.owner[t], self.owner[t + 1]
            if src == dst:
                continue
            if src == self.rank:
                ops.append(torch.distributed.P2POp(torch.distributed.isend, zs[t], dst))
            elif dst == self.rank:
                ops.append(torch.distributed.P2POp(torch.distributed.irecv, zs[t], src))
        _run(ops)

    def sync_blocks(self, net: nn.Module) -> None:
        """Every rank gets every block's current parameters and buffers (block t from its owner)."""
        if not self.shards_blocks:
            return
        with torch.no_grad():
            for t, block in enumerate(net.blocks):
                for p in [*block.parameters(), *block.buffers()]:
                    torch.distributed.broadcast(p.data, src=self.owner[t])


def _run(ops: list) -> None:
    if ops:
        for req in torch.distributed.batch_isend_irecv(ops):
            req.wait()
