"""Batch Stochastic Block-ADMM (paper Alg. 1).

Augmented Lagrangian, with scaled duals U_t and the coupling term
P_t = β_t/2 ‖Z_t − block_t(Z_{t−1}) + U_t‖²  (Z_0 = X):

    L(Θ, Z, U) = J(Y, Z_T) + Σ_{t=1}^{T} P_t

Z_t and U_t hold one row per training sample and persist across iterations. Per iteration:

    repeat k = primal_steps times:
        Z_T ← Z_T − ζ_T ∇_{Z_T} (J + P_T)                       # Z_T-step
        for t = T−1 … 1:  Z_t ← Z_t − ζ_t ∇_{Z_t} (P_t + P_{t+1})  # reverse sweep
        for t = 1 … T:    Θ_t ← Θ_t − η_t ∇_{Θ_t} P_t on minibatches  # Θ-step
    for t = 1 … T:        U_t ← U_t + Z_t − block_t(Z_{t−1})      # dual step

Implementation choices (measured, see README):
- Z's objective separates per sample, so each sweep covers *all* rows, in chunks of
  ``chunk_size`` rows; Θ takes minibatch steps. An epoch is one pass of Θ-steps over the
  data, spread over ``iters_per_epoch × primal_steps`` sweeps.
- The Z-step defaults to a plain gradient step: Adam on Z (the paper's choice, offered as
  ``z_optimizer='adam'``) normalises each coordinate's step to ≈ ζ, so Z jumps by ±ζ and
  the blocks cannot follow. A gradient step on Z_t is stable for
  ζ_t < 2/(β_t + β_{t+1} L²_{t+1}) (L_{t+1}: Lipschitz constant of block_{t+1}).
  ``z_step='scaled'`` takes ζ_t,eff = ζ/(β_t + β_{t+1} L²_{t+1}) and ζ_T,eff = ζ/(β_T + c_J),
  with L by warm-started power iteration (``lipschitz.lipschitz_estimates``), so ζ is in units of
  the inverse curvature (ζ = 1 with MSE puts Z_T on argmin J + P_T). ``fixed`` takes ζ as is
  (for MSE and β_T = 1, ζ = 0.5 puts Z_T on argmin J + P_T).
- The Θ-step minimises P_t averaged over the minibatch (P_t/|i|), so η does not depend on
  the batch size.
- The adaptive penalty (paper eq. for ρ_k, ρ = 1/β) is off by default. When it fires,
  β ← min(β/c, β_max) and U ← (β_old/β_new) U, so the unscaled multiplier λ = βU is unchanged.
  The Z step stays stable without shrinking ζ: scaled, ζ_eff follows β; fixed, ζ ← ζ β_old/β_new
  (ζβ constant; the cap bounds how small it gets). Prop. 1 also needs the primal sub-problem
  solved ever more accurately: ``primal_growth`` adds a primal pass every that many dual steps
  (up to ``primal_steps_max``).
- The dual step of iteration k and the first Z sweep of iteration k+1 see the same Z and
  Θ, so within an epoch the dual step is folded into that sweep (one forward pass fewer,
  same numbers); the last dual step of an epoch runs on its own so diagnostics and
  checkpoints see a finished iteration.
- Blocks run in eval mode (BatchNorm uses running statistics) in Z sweeps and dual steps,
  so the Z objective really separates per sample; Θ-steps run in train mode.
- ``z_sweep='jacobi'`` replaces the reverse Gauss–Seidel sweep (Z_t sees the new Z_{t+1})
  by a Jacobi sweep (every Z_t from the previous iterate), computed block by block
  (``_jacobi_z_update``): the same code whether one process does every block or the blocks
  are split over processes (``parallel='blocks'``, :mod:`admm_core.distributed`); the
  ``World`` on ``batch.shard`` only says which blocks are this process's and carries the
  messages, so every setting (per-block ζ, β, scaled steps, the β cap) means the same.
- Sample sharding (``batch.shard``, :mod:`admm_core.distributed`): this process holds the
  rows [start, start + n) of Z and U. Minibatches are drawn over the *global* rows with
  the same generator on every rank, so the sequence does not depend on the world size;
  each rank backpropagates its rows of a minibatch and the gradients are summed by
  all-reduce (P_t/|i| with the global |i|), so every rank takes the same Θ-step. Residual
  and dual-norm sums are reduced across ranks; Z sweeps and dual steps need no messages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..errors import ConfigError
from ..profile import phase
from ..spec.methods.base import per_block
from ..spec.methods.block_admm import BlockADMMSettings
from .base import (
    MethodState,
    TrainBatch,
    make_theta_optimizer,
    set_epoch_lr,
    tensor_bytes,
)
from .lipschitz import lipschitz_estimates, lipschitz_vectors, loss_curvature, loss_grad, z_step_sizes
from .masks import held_masks
from .probes import backprop_grads, block_update_grads, cosines, probe_rows
from .zsweep import (
    ZRows,
    adam_z_step,
    forward_start,
    minibatches,
    newton_direction,
    norm_mode,
    normalised_steps,
    reverse_z_sweep,
    theta_step,
)


def free_bytes(device: torch.device) -> int:
    """Memory free for new tensors on ``device``: CUDA's free memory, else MemAvailable."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: do not block


@torch.no_grad()
def calibrate_batchnorm(net: torch.nn.Module, x: torch.Tensor, chunk: int) -> int:
    """Running mean/variance of every BatchNorm layer := their average over train-mode passes of
    ``x`` in chunks (weights untouched; each layer's momentum restored). Returns how many layers."""
    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not bns:
        return 0
    saved = [m.momentum for m in bns]
    was_training = net.training
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the chunks
    net.train()
    for s in range(0, len(x), chunk):
        net.forward_all(x[s : s + chunk])
    for m, momentum in zip(bns, saved):
        m.momentum = momentum
    net.train(was_training)
    return len(bns)


def check_state_fits(name: str, net, batch: TrainBatch, copies: int = 2, headroom: float = 0.9) -> int:
    """Bytes of the per-sample state (Z_t and U_t, float32, ``copies`` tensors per block);
    raises ConfigError at once when they exceed ``headroom`` × the device's free memory.

    A small local check before the allocation (the generic estimate of a whole run is
    ``admm_core.spec.resources``). Shapes come from a forward pass of one sample: at the paper's
    CIFAR-10 split, Z_1 is (128, 16, 16) per sample, so Z and U of 50,000 samples take
    50,000 · (32,768 + 10) · 4 B · 2 ≈ 13.1 GB.
    """
    per_sample = sum(int(z[0].numel()) for z in net.forward_all(batch.x[:1]))
    need = batch.n * per_sample * 4 * copies
    free = free_bytes(batch.x.device)
    if need > headroom * free:
        raise ConfigError(
            f"{name}: Z and U need {need / 1e9:.1f} GB ({batch.n:,} samples × {per_sample:,} values × 4 B × {copies}) "
            f"but {batch.x.device} has {free / 1e9:.1f} GB free; use fewer samples (data.train_limit), a narrower "
            "network (model.width) or a device with more memory"
        )
    return need


def coupling_terms(beta, us) -> list:
    """P_t as a function of its residual r = Z_t − block_t(Z_{t−1}): β_t/2 ‖r + U_t‖² per block."""
    return [(lambda r, u=u, b=b: 0.5 * b * (r + u).pow(2).sum()) for b, u in zip(beta, us)]


def _none_like(t: torch.Tensor) -> torch.Tensor:
    """A placeholder with no rows for a block another process owns (0 bytes; any use fails loudly)."""
    return t.new_empty((0, *t.shape[1:]))


def _rows(t: torch.Tensor, idx, held: bool):
    return t[idx] if held else None


@dataclass
class BlockADMMState(MethodState):
    """Everything Block-ADMM changes while it trains."""

    z: list[torch.Tensor]  # Z_t, t = 1..T, each (N, *d_t)
    u: list[torch.Tensor]  # U_t, same shapes as Z_t
    beta: list[float]  # β_t (changes only with the adaptive penalty)
    z_lr: list[float]  # ζ_t
    opt: torch.optim.Optimizer  # Θ optimizer, one parameter group per block
    gen: torch.Generator  # minibatch draws
    z_m: list[torch.Tensor] | None = None  # Adam moments of Z (z_optimizer='adam')
    z_v: list[torch.Tensor] | None = None
    z_steps: int = 0  # Z sweeps so far (minibatch schedule: Z-updates of each row so far)
    iteration: int = 0  # dual steps so far (minibatch schedule: epochs, each a dual step of every row)
    epoch: int = 0  # epochs done (the Θ schedule's clock)
    rho_bound: float = 1.0  # η_k, the bound on ‖h‖ of the adaptive penalty
    residuals: list[float] = field(default_factory=list)  # RMS ‖Z_t − block_t(Z_{t−1})‖ at the last dual step
    lip_vecs: list = field(default_factory=list)  # warm-start vectors of the power iterations
    lips: list[float] = field(default_factory=list)  # L_t at the last Z sweep
    lip_calls: int = 0  # Z-updates that asked for ζ_t,eff (power_every counts them)
    z_moves: list = field(default_factory=list)  # this epoch's [Σ‖Z_t-step‖², Σ‖Z_t‖², rows] per block
    theta_moves: list[float] = field(default_factory=list)  # ‖ΔΘ_t‖/‖Θ_t‖ over the last epoch


class BlockADMM(BlockADMMSettings):
    """Batch Stochastic Block-ADMM (Alg. 1). See the module docstring for the math; the settings
    and their checks are the record's (:class:`~admm_core.spec.methods.block_admm.BlockADMMSettings`)."""

    # --- initialisation --------------------------------------------------------------
    @torch.no_grad()
    def init_state(self, net, batch: TrainBatch, gen: torch.Generator) -> BlockADMMState:
        T = net.T
        self.check_world(batch.shard, T)
        if self.bn_calibrate:
            # Deviation: Alg. 1 starts Z at a forward pass; Z sweeps and dual steps run BatchNorm
            # in eval mode, whose statistics are still (0, 1) at this point, so that pass gives
            # activations nothing like those the Θ-steps will fit (ResNet-18: eval loss 5.6
            # against 2.5 once calibrated; docs/results/deep-networks.md). No-op without BatchNorm.
            calibrate_batchnorm(net, batch.x, self.chunk_size)
            batch.shard.average_buffers(net)
        net.eval()
        check_state_fits(self.name, net, batch, copies=4 if self.z_optimizer == "adam" else 2)
        # Z initialised in a forward pass (Alg. 1), chunked; kept in the parameters' dtype
        # (float32 under bf16 autocast; float64 when the network is, as in the oracle tests)
        dtype = next(net.parameters()).dtype
        parts = [[] for _ in range(T)]
        for s in range(0, batch.n, self.chunk_size):
            for t, z in enumerate(net.forward_all(batch.x[s : s + self.chunk_size])):
                parts[t].append(z.to(dtype))
        z = [torch.cat(p) for p in parts]
        if self.u_init == "uniform":
            u = [self._uniform_rows(zt, batch, gen) for zt in z]
        else:
            u = [torch.zeros_like(zt) for zt in z]
        state = BlockADMMState(
            z=z,
            u=u,
            beta=per_block(self.beta, T, f"{self.name}.beta"),
            z_lr=per_block(self.z_lr, T, f"{self.name}.z_lr"),
            opt=make_theta_optimizer(net, self.theta_optimizer, self.lr, self.fused, self.eps),
            gen=gen,
            rho_bound=self.rho_bound,
            residuals=[0.0] * T,
            lip_vecs=lipschitz_vectors(
                net.blocks,
                [tuple(batch.x.shape[1:])] + [tuple(zt.shape[1:]) for zt in z[:-1]],
                torch.Generator().manual_seed(0),
            ),
            lips=[0.0] * T,
        )
        if self.z_optimizer == "adam":
            state.z_m = [torch.zeros_like(zt) for zt in z]
            state.z_v = [torch.zeros_like(zt) for zt in z]
        w = batch.shard
        if w.shards_blocks:  # every block's Z and U were made (the generator advanced as in one process): keep ours
            state.z = [zt if w.holds(t) else _none_like(zt) for t, zt in enumerate(state.z)]
            for key in ("u", "z_m", "z_v"):
                if getattr(state, key) is not None:
                    setattr(state, key, [v if w.owns(t) else _none_like(v) for t, v in enumerate(getattr(state, key))])
        return state

    def check_world(self, world, T: int) -> None:
        """ConfigError unless this method's settings can run with ``world``'s split of the blocks."""
        if world.shards_blocks:
            self.check_blocks(world.world, T)

    def _uniform_rows(self, zt: torch.Tensor, batch: TrainBatch, gen: torch.Generator) -> torch.Tensor:
        """U(0, scale) draws for this shard's rows, drawn over the global rows in fixed chunks
        so every rank consumes the generator alike and the values do not depend on the world size."""
        lo, hi, step = batch.shard.start, batch.shard.start + batch.n, 8192
        parts = []
        for s in range(0, batch.n_global, step):
            r = torch.rand((min(step, batch.n_global - s), *zt.shape[1:]), generator=gen, dtype=zt.dtype)
            if s < hi and s + r.shape[0] > lo:
                parts.append(r[max(lo - s, 0) : hi - s])
        return (torch.cat(parts) * self.u_init_scale).to(zt.device)

    # --- one epoch -------------------------------------------------------------------
    def primal_passes(self, iteration: int) -> int:
        """k for the dual step numbered ``iteration`` (0-based): primal_steps, growing by one every
        ``primal_growth`` dual steps up to ``primal_steps_max`` (Prop. 1: ε_k → 0)."""
        if not self.primal_growth:
            return self.primal_steps
        return min(max(self.primal_steps, self.primal_steps_max), self.primal_steps + iteration // self.primal_growth)

    def duals_on(self, state: BlockADMMState) -> bool:
        """Whether this epoch's dual steps move U (gotmare: never; ``dual_start``: not yet)."""
        return self.uses_duals and state.epoch >= self.dual_start

    def run_epoch(self, net, state: BlockADMMState, batch: TrainBatch, progress=None) -> dict:
        if self.dual_reset and state.epoch > 0 and state.epoch % self.dual_reset == 0:
            for u in state.u:
                u.zero_()  # the per-sample memory of old epochs' signals is dropped
        before = [torch.cat([p.detach().flatten() for p in b.parameters()]) for b in net.blocks]
        state.z_moves = [[0.0, 0.0, 0] for _ in range(net.T)]
        if self.z_schedule == "minibatch":
            self._epoch_by_minibatch(net, state, batch, progress)
        else:
            self._epoch_by_sweeps(net, state, batch, progress)
        batch.shard.sync_blocks(net)  # blocks split over processes: every rank gets the whole network
        state.theta_moves = [
            float((torch.cat([p.detach().flatten() for p in b.parameters()]) - v).norm() / v.norm().clamp_min(1e-30))
            for b, v in zip(net.blocks, before)
        ]
        state.epoch += 1
        if self.beta_growth != 1.0:
            self.grow_penalty(state, self.beta_growth)
        return {}

    def grow_penalty(self, state: BlockADMMState, g: float) -> None:
        """β_t ← gβ_t with λ_t = β_t U_t unchanged (U_t ← U_t/g) and, for a fixed Z step, ζ_tβ_t unchanged."""
        for t, b in enumerate(state.beta):
            state.u[t].mul_(1.0 / g)
            if self.z_step == "fixed":
                state.z_lr[t] /= g
            state.beta[t] = b * g

    def _record_moves(self, state: BlockADMMState, t: int, step: torch.Tensor, z: torch.Tensor) -> None:
        acc = state.z_moves[t] if t < len(state.z_moves) else None
        if acc is not None:  # tensors on the data's device: no sync per minibatch
            acc[0] = acc[0] + step.detach().double().pow(2).sum()
            acc[1] = acc[1] + z.detach().double().pow(2).sum()
            acc[2] += int(z.shape[0])

    def _epoch_by_sweeps(self, net, state: BlockADMMState, batch: TrainBatch, progress=None) -> None:
        """Alg. 1 as printed: each iteration sweeps Z over every row, then a share of the epoch's
        minibatch Θ-steps; k such passes, then the dual step of every row."""
        batches = minibatches(batch.n_global, batch.batch_size, state.gen)  # global rows, any world size
        ks = [self.primal_passes(state.iteration + it) for it in range(self.iters_per_epoch)]
        phases = sum(ks)
        per_phase = [
            batches[round(i * len(batches) / phases) : round((i + 1) * len(batches) / phases)] for i in range(phases)
        ]
        fuse = not self.adaptive_rho  # the penalty schedule must act between dual step and sweep
        phase = 0
        for it in range(self.iters_per_epoch):
            for p in range(ks[it]):
                # Z-update (Z_T-step, reverse sweep); the previous iteration's dual step rides along
                self.z_update(net, state, batch, with_dual=(fuse and it > 0 and p == 0))
                self.set_lr(state, batch, phase / phases)
                self.theta_steps(net, state, batch, per_phase[phase])  # Θ-update
                phase += 1
            if not fuse or it == self.iters_per_epoch - 1:
                self.dual_step(net, state, batch)  # U-update (otherwise folded into the next sweep)
            if progress:
                progress((it + 1) / self.iters_per_epoch)

    def _epoch_by_minibatch(self, net, state: BlockADMMState, batch: TrainBatch, progress=None) -> None:
        """``z_schedule='minibatch'``: Alg. 1's three steps on the rows i of one minibatch at a time.

            repeat k times:  Z_{T,i}-step; reverse sweep of Z_{t,i}, t = T−1 … 1   # Alg. 1, rows i only
                             Θ_t ← Θ_t − η ∇_{Θ_t} P_t(rows i)                       # Θ-step
            U_{t,i} ← U_{t,i} + Z_{t,i} − block_t(Z_{t−1,i})                          # dual step, rows i

        Deviation from Alg. 1, which sweeps every row between Θ-steps: here a row's Z and U move
        once an epoch, just before the Θ-step that reads them, so no Θ-step fits a Z that is a
        fraction of an epoch old (on ResNet-18 the stale Z of the sweep schedule did not learn;
        docs/results/deep-networks.md). Z, U still persist per sample; an epoch costs one Z-update
        of each row instead of iters_per_epoch × k. With ``bn_mode='train'`` BatchNorm sees the
        same minibatch statistics in the sweep, the Θ-step and the dual step.
        """
        T = net.T
        k = self.primal_passes(state.iteration)
        batches = minibatches(batch.n_global, batch.batch_size, state.gen)
        sq = [torch.zeros((), dtype=torch.float64, device=batch.x.device) for _ in range(T)]
        for b, idx in enumerate(batches):
            rows = batch.shard.local(idx, batch.n).to(batch.x.device)
            self.set_lr(state, batch, b / len(batches))
            outs = [None] * T if self.dual_theta == "old" else None
            zr = None
            with held_masks(net.blocks):  # one dropout mask per block for all of this minibatch's passes
                for p in range(k):
                    if len(rows):  # Z-update (Alg. 1: Z_T-step, reverse sweep), rows i
                        zr = self.z_update_rows(net, state, batch, rows, step=state.z_steps + p + 1, first=p == 0)
                    # Θ-update (Alg. 1)
                    self.theta_steps(net, state, batch, [idx], outputs=outs if p == k - 1 else None, zrows=zr)
                if len(rows):  # U-update (Alg. 1: dual step), rows i
                    self.dual_rows(net, state, batch, rows, sq, zr, outs)
            if progress and (b % 20 == 0 or b == len(batches) - 1):
                progress((b + 1) / len(batches))
        state.z_steps += k
        self._after_dual(state, [float(v) for v in sq], batch)

    def set_lr(self, state: BlockADMMState, batch: TrainBatch, frac: float) -> None:
        """η of every block at ``frac`` of this epoch: the run's Θ schedule."""
        set_epoch_lr(state.opt, self.lr, 1.0, 0, batch.lr_factor(state.epoch, frac))

    def z_update(self, net, state: BlockADMMState, batch: TrainBatch, with_dual: bool = False) -> None:
        with phase("z_sweep"):
            self._z_update(net, state, batch, with_dual)

    def _z_update(self, net, state: BlockADMMState, batch: TrainBatch, with_dual: bool = False) -> None:
        """Z_T-step and reverse sweep over this process's rows, chunk by chunk (rows are independent).

        With ``with_dual`` the pending dual step U_t ← U_t + Z_t − block_t(Z_{t−1}) is applied
        to each chunk first, from the same forward pass the sweep needs anyway.
        """
        if self.z_sweep == "jacobi":
            return self._jacobi_z_update(net, state, batch, with_dual)
        T = net.T
        sq = [0.0] * T
        z_lrs = self._z_lrs(net, state, batch, state.z)
        for s in range(0, batch.n, self.chunk_size):
            rows = slice(s, s + self.chunk_size)
            y = batch.y[rows]
            zs = [z[rows] for z in state.z]
            us = [u[rows] for u in state.u]  # views: in-place updates reach the state
            couplings = coupling_terms(state.beta, us)

            def dual(t, out, zs=zs, us=us):
                r = zs[t] - out
                if self.duals_on(state):
                    us[t].add_(r, alpha=self.dual_lr)  # U-update (Alg. 1), before Z_t moves
                sq[t] += float(r.pow(2).sum())

            def z_step(t, z, g, rows=rows):
                if state.z_m is None:
                    return z - z_lrs[t] * g
                return adam_z_step(z, g, state.z_m[t][rows], state.z_v[t][rows], state.z_steps + 1, z_lrs[t])

            with norm_mode(net, self.bn_mode):
                new = reverse_z_sweep(
                    net.blocks,
                    batch.inputs(rows),  # Z_0: this epoch's view of the inputs
                    zs,
                    lambda z: batch.loss(z, y),
                    couplings,
                    z_step,
                    on_forward=dual if with_dual else None,
                    own_grad=lambda t, r, us=us: state.beta[t] * (r + us[t]),  # ∇_Z P_t, closed form
                    objective_grad=loss_grad(batch.loss, y),
                )
            for t in range(T):
                self._record_moves(state, t, new[t] - state.z[t][rows], new[t])
                state.z[t][rows] = new[t]
        state.z_steps += 1
        if with_dual:
            self._after_dual(state, sq, batch)

    def _jacobi_z_update(self, net, state: BlockADMMState, batch: TrainBatch, with_dual: bool = False) -> None:
        """``z_sweep='jacobi'``: every Z_t moves from the previous iterate, block by block:

            Z_T ← Z_T − ζ_T [∇J(Z_T) + ∇_{Z_T} P_T]
            Z_t ← Z_t − ζ_t [∇_{Z_t} P_t + ∇_{Z_t} P_{t+1}],   t = T−1 … 1, all Z at their old values

        Block t computes, from its own Z_{t−1}, Z_t, U_t and Θ_t only, ∇_{Z_t} P_t = β_t (r_t + U_t)
        and ∇_{Z_{t−1}} P_t (a vjp through block_t); the second is block t−1's share
        (``World.pass_back``), and the new Z_t is block t+1's input (``World.pass_forward``). One
        process does every block and the messages stay in memory; with the blocks split over
        processes (:mod:`admm_core.distributed`) each does its own and the messages travel: the
        same code, the same numbers. The pending dual step (``with_dual``) is applied to each
        block's rows from this forward pass first, as in the Gauss–Seidel sweep.
        """
        T, w = net.T, batch.shard
        own = [t for t in range(T) if w.owns(t)]
        sq = [0.0] * T
        z_lrs = self._z_lrs(net, state, batch, state.z)
        with norm_mode(net, self.bn_mode), torch.enable_grad():
            for s in range(0, batch.n, self.chunk_size):
                rows = slice(s, s + self.chunk_size)
                grads, back = {}, {}
                for t in own:
                    z, u = state.z[t][rows], state.u[t][rows]  # views: the dual step reaches the state
                    if t == 0:
                        with torch.no_grad():
                            inp, out = None, net.blocks[0](batch.inputs(rows))
                    else:
                        inp = state.z[t - 1][rows].detach().requires_grad_()
                        out = net.blocks[t](inp)
                    r = z - out.detach()
                    if with_dual:
                        if self.duals_on(state):
                            u.add_(r, alpha=self.dual_lr)  # U-update (Alg. 1), before Z_t moves
                        sq[t] += float(r.pow(2).sum())
                    g = state.beta[t] * (r + u)  # ∇_{Z_t} P_t, closed form
                    if inp is not None:  # ∇_{Z_{t−1}} P_t = vjp of block_t with ∇_out P_t = −∇_r P_t
                        back[t] = torch.autograd.grad(out, inp, -g)[0]
                    if t == T - 1:  # Z_T-step: ∇ (J + P_T)
                        jg = loss_grad(batch.loss, batch.y[rows])
                        if jg is None:
                            zt = z.detach().requires_grad_()
                            g = torch.autograd.grad(batch.loss(zt, batch.y[rows]), zt)[0] + g
                        else:
                            g = jg(z.detach()) + g
                    grads[t] = g
                msgs = w.pass_back(back, [z[rows] for z in state.z])
                for t in own:
                    g = grads[t] if t == T - 1 else grads[t] + msgs[t]
                    z = state.z[t][rows]
                    if state.z_m is None:
                        new = z - z_lrs[t] * g
                    else:
                        m, v = state.z_m[t][rows], state.z_v[t][rows]
                        new = adam_z_step(z, g, m, v, state.z_steps + 1, z_lrs[t])
                    state.z[t][rows] = new.detach()
                w.pass_forward([z[rows] for z in state.z])
        state.z_steps += 1
        if with_dual:
            self._after_dual(state, sq, batch)

    def _z_lrs(self, net, state: BlockADMMState, batch: TrainBatch, zs) -> list[float]:
        """ζ_t,eff of this Z-update (the scaled step re-estimates L_t at ``zs``, in eval mode:
        torch.func cannot differentiate BatchNorm's running-statistics update). L_t is estimated by
        block t's owner, at its input Z_{t−1}, and gathered."""
        if self.z_step == "scaled" and (state.lip_calls % self.power_every == 0 or not any(state.lips)):
            w = batch.shard
            inputs = [zs[t - 1] if t > 0 and w.owns(t) else None for t in range(len(zs))]
            with norm_mode(net, "eval"), phase("lipschitz"):
                lips = lipschitz_estimates(net.blocks, inputs, state.lip_vecs, self.power_steps)
            state.lips = w.gather_blocks(lips, batch.x.device)
        state.lip_calls += 1
        return z_step_sizes(state.z_lr, state.beta, state.lips, loss_curvature(batch.loss), self.z_step == "scaled")

    def sweep_rows(
        self,
        net,
        state: BlockADMMState,
        batch: TrainBatch,
        rows: torch.Tensor,
        step: int,
        first: bool = True,
        for_theta: bool = False,
    ) -> tuple[ZRows, list | None]:
        """Z_T-step and reverse sweep of the rows ``rows`` (an index tensor), in ``bn_mode``.

        Returns the new Z rows (:class:`ZRows`: from a forward start, that pass plus the exact
        displacements) and, with Adam on Z, the new moment rows; the state is not touched (the
        caller writes them back, or a diagnostic throws them away).

        ``for_theta`` (a forward start in train mode, a Θ-step to follow): block 1's pass is run with
        Θ_1's graph and BatchNorm's usual statistics update, and handed to that Θ-step
        (``ZRows.given``): Θ_1 and the input are the same there, so it is the forward pass the
        Θ-step would compute — one block-1 forward pass fewer per minibatch, the same numbers.
        With ``theta_input='start'`` every block's pass is handed over (the Θ-steps then read the
        forward start's inputs): the Θ-step runs no forward pass at all.
        """
        T = net.T
        x = batch.inputs(rows)
        forwards = None
        given = None
        # the start's passes are the Θ-step's where BatchNorm (if any) runs as in a Θ-step
        same_mode = self.bn_mode == "train" or not any(
            isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules()
        )
        reuse = for_theta and same_mode and self.z_start == "forward" and first
        if self.theta_input == "start" and not same_mode:
            raise ConfigError(
                f"{self.name}.theta_input = 'start': with BatchNorm in the network it needs bn_mode='train' "
                f"(the Θ-step reuses the forward start, which runs in bn_mode = {self.bn_mode!r})"
            )
        if self.z_start == "forward" and first:  # the Z sub-problem warm-started at the current forward pass
            with phase("forward_start"):
                if reuse and self.theta_input == "start":  # this pass is every block's Θ-step forward
                    net.train()
                    zs, forwards = forward_start(net.blocks, x, net.blocks[0](x))
                    given = {t: out for t, (_, out) in enumerate(forwards)}
                else:
                    if reuse:  # block 1's pass is its Θ-step's forward (statistics updated once, as there)
                        net.train()
                        with torch.enable_grad():
                            given = {0: net.blocks[0](x)}
                    with norm_mode(net, self.bn_mode):
                        zs, forwards = forward_start(net.blocks, x, given[0] if given else None)
        else:
            zs = [z[rows] for z in state.z]
        us = [u[rows] for u in state.u]
        z_lrs = self._z_lrs(net, state, batch, zs)
        couplings = coupling_terms(state.beta, us)
        moments = None
        if state.z_m is not None:
            moments = [[m[rows] for m in state.z_m], [v[rows] for v in state.z_v]]

        z_step, solve = self._z_steps(state, batch, z_lrs, moments, step, T)
        y = batch.y[rows]
        offsets = [None] * T
        graphs = given is not None and len(given) > 1
        with norm_mode(net, self.bn_mode):
            new = reverse_z_sweep(
                net.blocks,
                x,
                zs,
                lambda z: batch.loss(z, y),
                couplings,
                z_step,
                jacobi=self.z_sweep == "jacobi",
                forwards=forwards,
                own_grad=lambda t, r: state.beta[t] * (r + us[t]),  # ∇_Z P_t in closed form
                offsets=offsets if forwards is not None else None,
                keep_graphs=graphs,
                objective_grad=loss_grad(batch.loss, y),
                solve=solve,
                signal_norm=self.z_norm == "signal",
            )
            for _ in range(self.z_sweeps - 1):  # more Z-steps on the same rows before the Θ-step
                new = reverse_z_sweep(
                    net.blocks,
                    x,
                    new,
                    lambda z: batch.loss(z, y),
                    couplings,
                    z_step,
                    jacobi=self.z_sweep == "jacobi",
                    own_grad=lambda t, r: state.beta[t] * (r + us[t]),
                    objective_grad=loss_grad(batch.loss, y),
                    solve=solve,
                    signal_norm=self.z_norm == "signal",
                )
                if forwards is not None:  # still held as the forward start + its displacement
                    offsets = [z - out.detach() for z, (_, out) in zip(new, forwards)]
        if forwards is None:
            return ZRows(None, [z.to(state.z[t].dtype) for t, z in enumerate(new)]), moments
        return ZRows([out.detach() for _, out in forwards], offsets, given), moments

    def _z_steps(self, state: BlockADMMState, batch: TrainBatch, z_lrs, moments, step: int, T: int):
        """(z_step, solve) of :func:`reverse_z_sweep` for these settings: a gradient or Adam step of ζ_t,
        rescaled per ``z_norm``, and the Newton direction of ``z_step='newton'`` (else None)."""

        def plain_step(t, z, g):
            if moments is None:
                return z - z_lrs[t] * g
            return adam_z_step(z, g, moments[0][t], moments[1][t], step, z_lrs[t])

        # Deviation (z_norm, not in the paper): each Z_t-step given the Z_T-step's size (issue 51)
        z_step = normalised_steps(plain_step, "off" if self.z_norm == "signal" else self.z_norm, T)
        if self.z_step != "newton":
            return z_step, None
        c = loss_curvature(batch.loss)

        def solve(t, g, inp, out):
            if inp is None:  # Z_T: J + P_T has curvature c_J + β_T along every direction
                return g / (c + state.beta[T - 1])
            return newton_direction(g, inp, out, state.beta[t], state.beta[t + 1], self.newton_steps)

        return z_step, solve

    def z_update_rows(
        self, net, state: BlockADMMState, batch: TrainBatch, rows: torch.Tensor, step: int, first: bool = True
    ) -> ZRows:
        """Z-update (Alg. 1: Z_T-step, reverse sweep) of the rows of one minibatch, in place
        (``first``: the first of the minibatch's k primal passes). Returns the rows' new Z."""
        with phase("z_sweep"):
            zr, moments = self.sweep_rows(net, state, batch, rows, step, first, for_theta=True)
        for t in range(net.T):
            z = zr.z(t)
            # the Z-step: the displacement from the forward start, or from the stored Z
            move = zr.delta[t] if zr.base is not None and first else z - state.z[t][rows]
            self._record_moves(state, t, move, z)
            state.z[t][rows] = z.to(state.z[t].dtype)
            if moments is not None:
                state.z_m[t][rows] = moments[0][t]
                state.z_v[t][rows] = moments[1][t]
        return zr

    def theta_inputs(self, x: torch.Tensor, zr: ZRows) -> list[torch.Tensor]:
        """Block t's input in its Θ-step, Z_{t−1} rows (B, *d_{t−1}): after the Z-update (Alg. 1), or
        the forward pass the Z-update started from (``theta_input='start'``, where there was one).
        One rule for the Θ-step and the diagnostic, so the probe measures the step taken."""
        start = self.theta_input == "start" and zr.base is not None
        return [x, *(zr.base[:-1] if start else zr.zs()[:-1])]

    @torch.no_grad()
    def dual_rows(
        self, net, state: BlockADMMState, batch: TrainBatch, rows: torch.Tensor, sq: list, zr: ZRows, outs=None
    ) -> None:
        """U_{t,i} ← U_{t,i} + α (Z_{t,i} − block_t(Z_{t−1,i})) on the rows of one minibatch, with the
        new Θ (Alg. 1), or with ``outs``, the outputs the Θ-step computed before it stepped
        (``dual_theta='old'``: no extra forward pass); adds each block's Σ r² to ``sq``."""
        with norm_mode(net, self.bn_mode), phase("dual"):
            inp = batch.inputs(rows) if outs is None else None
            for t, block in enumerate(net.blocks):
                z = zr.z(t)
                r = zr.residual(t, block(inp) if outs is None else outs[t])
                if self.duals_on(state):
                    state.u[t][rows] += self.dual_lr * r.to(state.u[t].dtype)
                sq[t] += r.double().pow(2).sum()
                inp = z

    def theta_steps(self, net, state: BlockADMMState, batch: TrainBatch, idx_list, outputs=None, zrows=None) -> None:
        """Θ_t ← Θ_t − η ∇_{Θ_t} P_t/|i| on each minibatch i, all blocks at once (they are independent).

        ``outputs`` (a list of T Nones) receives block_t(Z_{t−1}) of the last minibatch, as the step
        computed it (Θ before the step): the folded dual step reads its residual from there.
        ``zrows``: the minibatch's Z as its Z-update left them (one minibatch only), so residuals
        from a forward start are formed exactly (:class:`ZRows`)."""
        if not idx_list:
            return
        with phase("theta"):
            self._theta_steps(net, state, batch, idx_list, outputs, zrows)

    def _theta_steps(self, net, state: BlockADMMState, batch: TrainBatch, idx_list, outputs=None, zrows=None) -> None:
        net.train()
        shard = batch.shard
        reduce = shard.sum_grads if shard.shards_rows else None
        own = None if not shard.shards_blocks else [t for t in range(net.T) if shard.owns(t)]
        for idx in idx_list:
            size = len(idx)  # the global minibatch: P_t/|i| whatever share of it is held here
            idx = shard.local(idx, batch.n).to(batch.x.device)
            zr = (
                zrows
                if zrows is not None
                else ZRows(None, [_rows(z, idx, shard.holds(t)) for t, z in enumerate(state.z)])
            )
            inputs = self.theta_inputs(batch.inputs(idx), zr)
            terms = coupling_terms(state.beta, [_rows(u, idx, shard.owns(t)) for t, u in enumerate(state.u)])

            def coupling(t, out, zr=zr, terms=terms):
                if outputs is not None:
                    outputs[t] = out.detach()
                return terms[t](zr.residual(t, out)) / size  # P_t / |i|

            theta_step(net, state.opt, inputs, coupling, reduce_grads=reduce, given=zr.given, blocks=own)
        shard.average_buffers(net)

    @torch.no_grad()
    def dual_step(self, net, state: BlockADMMState, batch: TrainBatch) -> None:
        """U_t ← U_t + Z_t − block_t(Z_{t−1}) for every sample; records the residuals."""
        sq = [0.0] * net.T
        with norm_mode(net, self.bn_mode), phase("dual"):
            for s in range(0, batch.n, self.chunk_size):
                rows = slice(s, s + self.chunk_size)
                for t, block in enumerate(net.blocks):
                    if not batch.shard.owns(t):  # another process's block
                        continue
                    r = state.z[t][rows] - block(batch.inputs(rows) if t == 0 else state.z[t - 1][rows])
                    if self.duals_on(state):
                        state.u[t][rows] += self.dual_lr * r
                    sq[t] += float(r.pow(2).sum())
        self._after_dual(state, sq, batch)

    def _after_dual(self, state: BlockADMMState, sq: list[float], batch: TrainBatch) -> None:
        sq = batch.shard.sum(sq, batch.x.device)  # Σ over ranks: residuals of the whole training set
        state.residuals = [math.sqrt(v / batch.n_global) for v in sq]
        state.iteration += 1
        if self.adaptive_rho:
            self.adapt_penalty(state)

    def adapt_penalty(self, state: BlockADMMState) -> None:
        """ρ_{k+1} = ρ_k if ‖h‖ ≤ η_k else cρ_k  (ρ = 1/β, capped at β_max); η_{k+1} = decay · η_k."""
        h = math.sqrt(sum(r * r for r in state.residuals))
        if h > state.rho_bound:
            for t, b in enumerate(state.beta):
                new = min(b / self.rho_c, self.beta_max)
                if new <= b:
                    continue
                state.u[t].mul_(b / new)  # keep λ = βU unchanged
                if self.z_step == "fixed":
                    state.z_lr[t] *= b / new  # keep ζβ (scaled: ζ_eff already divides by β)
                state.beta[t] = new
        state.rho_bound *= self.rho_bound_decay

    # --- diagnostics -----------------------------------------------------------------
    def diagnostics(self, net, state: BlockADMMState, batch: TrainBatch) -> dict:
        sq = batch.shard.sum([float(u.pow(2).sum()) for u in state.u], batch.x.device)
        return {
            "residuals": list(state.residuals),
            "dual_norms": [math.sqrt(v / batch.n_global) for v in sq],
            "betas": list(state.beta),
            "lipschitz": list(state.lips),
            "z_lr_eff": z_step_sizes(
                state.z_lr, state.beta, state.lips, loss_curvature(batch.loss), self.z_step == "scaled"
            ),
            "backprop_cosine": self.backprop_cosine(net, state, batch),
            "iteration": state.iteration,
            # the last epoch's Z-steps (RMS per row) and their size against Z's, and ‖ΔΘ_t‖/‖Θ_t‖
            "z_step_rms": [math.sqrt(float(a) / max(1, n)) for a, _, n in state.z_moves],
            "z_step_rel": [math.sqrt(float(a) / float(b)) if float(b) > 0 else 0.0 for a, b, _ in state.z_moves],
            "theta_step_rel": list(state.theta_moves),
        }

    def backprop_cosine(self, net, state: BlockADMMState, batch: TrainBatch) -> list[float]:
        """cos∠(∇_{Θ_t} P_t, ∇_{Θ_t} J(y, net(x))) per block on one seeded minibatch: the Θ-direction
        the method takes there, in the modes it takes it (BatchNorm on the minibatch's statistics,
        as in a Θ-step; running statistics untouched), against backprop's in the same modes.

        Sweep schedule: the Θ-step reads the stored Z, U. Minibatch schedule: it reads the rows
        after their Z-update, so the probe runs that update on copies (nothing in the state moves).
        """
        with held_masks(net.blocks):  # the masks training would hold; backprop's pass sees them too
            return self._backprop_cosine(net, state, batch)

    def _backprop_cosine(self, net, state: BlockADMMState, batch: TrainBatch) -> list[float]:
        w = batch.shard
        idx = probe_rows(batch.n, batch.batch_size, state.iteration).to(batch.x.device)
        x = batch.inputs(idx)
        if self.z_schedule == "minibatch":
            lips, vecs = list(state.lips), [[v.clone() for v in vs] for vs in state.lip_vecs]
            zr = self.sweep_rows(net, state, batch, idx, step=state.z_steps + 1)[0]
            state.lips, state.lip_vecs = lips, vecs  # the probe leaves the power iteration where it was
        else:
            zr = ZRows(None, [_rows(z, idx, w.holds(t)) for t, z in enumerate(state.z)])
        terms = coupling_terms(state.beta, [_rows(u, idx, w.owns(t)) for t, u in enumerate(state.u)])
        own = [t for t in range(net.T) if w.owns(t)]
        with norm_mode(net, "train"):
            mine = block_update_grads(
                net,
                self.theta_inputs(x, zr),  # the inputs the Θ-step reads
                lambda t, out: terms[t](zr.residual(t, out)) / len(idx),
                blocks=own,
            )
            ref = backprop_grads(net, x, batch.y[idx], batch.loss)
        cos = [cosines([a], [b])[0] if a is not None else 0.0 for a, b in zip(mine, ref)]
        return w.gather_blocks(cos, batch.x.device)  # each block's from the process that owns it

    def state_bytes(self, state: BlockADMMState) -> int:
        return tensor_bytes([*state.z, *state.u, *(state.z_m or []), *(state.z_v or [])])
