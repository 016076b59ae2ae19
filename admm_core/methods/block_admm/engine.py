"""Block-ADMM's engine: the parts composed into Alg. 1 (the package docstring lists them)."""

from __future__ import annotations

import math

import torch

from ...profile import phase
from ...spec.methods.base import per_block
from ..base import Engine, TrainBatch, make_theta_optimizer, set_epoch_lr, tensor_bytes
from ..lipschitz import lipschitz_vectors
from ..masks import held_masks, rng_kept
from ..probes import backprop_grads, block_update_grads, cosines, probe_rows
from ..zsweep import ZRows, norm_mode, set_mode, theta_step
from .dual import DualRule
from .minibatch import MinibatchSchedule
from .penalty import PenaltyRule
from .state import BlockADMMState, calibrate_batchnorm, check_state_fits, coupling_terms, forward_z, none_like, rows_of
from .sweep import SweepSchedule, primal_passes
from .zstep import ZStepRule


class BlockADMM(Engine):
    """Batch Stochastic Block-ADMM (Alg. 1) and, with the record's dual rule off, Gotmare et al.'s
    quadratic-penalty method: the record's settings (:class:`~admm_core.spec.methods.block_admm.BlockADMMSettings`)
    pick the parts, this class runs them in Alg. 1's order."""

    def __init__(self, settings):
        super().__init__(settings)
        self.z_rule = ZStepRule(settings)  # ζ_t,eff and the step of Z_t
        self.dual = DualRule(settings)  # U: start, step, reset (none for gotmare)
        self.penalty = PenaltyRule(settings)  # β: fixed, growth, adaptive
        self.sweep = SweepSchedule(settings)  # Alg. 1 as printed
        self.minibatch = MinibatchSchedule(settings)  # Alg. 1 on one minibatch's rows at a time
        self.schedule = self.minibatch if settings.z_schedule == "minibatch" else self.sweep

    # --- initialisation --------------------------------------------------------------
    @torch.no_grad()
    def init_state(self, net, batch: TrainBatch, gen: torch.Generator) -> BlockADMMState:
        s, T = self.settings, net.T
        self.check_world(batch.shard, T)
        if s.bn_calibrate:
            # Deviation: Alg. 1 starts Z at a forward pass; Z sweeps and dual steps run BatchNorm
            # in eval mode, whose statistics are still (0, 1) at this point, so that pass gives
            # activations nothing like those the Θ-steps will fit (ResNet-18: eval loss 5.6
            # against 2.5 once calibrated; docs/results/deep-networks.md). No-op without BatchNorm.
            calibrate_batchnorm(net, batch.x, s.chunk_size)
            batch.shard.average_buffers(net)
        net.eval()
        check_state_fits(s.name, net, batch, copies=4 if s.z_optimizer == "adam" else 2)
        z = forward_z(net, batch, s.chunk_size)  # Alg. 1: Z initialised by a forward pass
        state = BlockADMMState(
            z=z,
            u=self.dual.initial(z, batch, gen),
            beta=per_block(s.beta, T, f"{s.name}.beta"),
            z_lr=per_block(s.z_lr, T, f"{s.name}.z_lr"),
            opt=make_theta_optimizer(net, s.theta_optimizer, s.lr, s.fused, s.eps),
            gen=gen,
            rho_bound=s.rho_bound,
            residuals=[0.0] * T,
            lip_vecs=lipschitz_vectors(
                net.blocks,
                [tuple(batch.x.shape[1:])] + [tuple(zt.shape[1:]) for zt in z[:-1]],
                torch.Generator().manual_seed(0),
            ),
            lips=[0.0] * T,
        )
        if s.z_optimizer == "adam":
            state.z_m = [torch.zeros_like(zt) for zt in z]
            state.z_v = [torch.zeros_like(zt) for zt in z]
        w = batch.shard
        if w.shards_blocks:  # every block's Z and U were made (the generator advanced as in one process): keep ours
            state.z = [zt if w.holds(t) else none_like(zt) for t, zt in enumerate(state.z)]
            for key in ("u", "z_m", "z_v"):
                if getattr(state, key) is not None:
                    setattr(state, key, [v if w.owns(t) else none_like(v) for t, v in enumerate(getattr(state, key))])
        return state

    def check_world(self, world, T: int) -> None:
        """ConfigError unless this method's settings can run with ``world``'s split of the blocks."""
        if world.shards_blocks:
            self.settings.check_blocks(world.world, T)

    # --- one epoch (Alg. 1) -------------------------------------------------------------
    def run_epoch(self, net, state: BlockADMMState, batch: TrainBatch, progress=None) -> dict:
        self.dual.begin_epoch(state)  # dual_reset: U ← 0 every that-many epochs
        before = [torch.cat([p.detach().flatten() for p in b.parameters()]) for b in net.blocks]
        state.z_moves = [[0.0, 0.0, 0] for _ in range(net.T)]
        self.schedule.run_epoch(self, net, state, batch, progress)  # Z-updates, Θ-steps, dual steps
        batch.shard.sync_blocks(net)  # blocks split over processes: every rank gets the whole network
        state.theta_moves = [
            float((torch.cat([p.detach().flatten() for p in b.parameters()]) - v).norm() / v.norm().clamp_min(1e-30))
            for b, v in zip(net.blocks, before)
        ]
        state.epoch += 1
        self.penalty.after_epoch(state)  # beta_growth
        return {}

    def primal_passes(self, iteration: int) -> int:
        """k for the dual step numbered ``iteration`` (:func:`.sweep.primal_passes`)."""
        return primal_passes(self.settings, iteration)

    def set_lr(self, state: BlockADMMState, batch: TrainBatch, frac: float) -> None:
        """η of every block at ``frac`` of this epoch: the run's Θ schedule."""
        set_epoch_lr(state.opt, self.settings.lr, 1.0, 0, batch.lr_factor(state.epoch, frac))

    def after_dual(self, state: BlockADMMState, sq: list[float], batch: TrainBatch) -> None:
        """After a dual step of every row: the residuals (RMS over the whole training set), the count, the penalty rule."""
        sq = batch.shard.sum(sq, batch.x.device)  # Σ over ranks: residuals of the whole training set
        state.residuals = [math.sqrt(v / batch.n_global) for v in sq]
        state.iteration += 1
        self.penalty.after_dual(state)  # adaptive_rho

    # the schedules' steps by name (the oracle tests drive them one by one)
    def z_update(self, net, state, batch, with_dual: bool = False) -> None:
        """Alg. 1's Z_T-step and reverse sweep over every row (:meth:`.SweepSchedule.z_update`)."""
        self.sweep.z_update(self, net, state, batch, with_dual)

    def dual_step(self, net, state, batch) -> None:
        """Alg. 1's dual step of every row (:meth:`.SweepSchedule.dual_step`)."""
        self.sweep.dual_step(self, net, state, batch)

    def sweep_rows(self, net, state, batch, rows, step: int, first: bool = True, for_theta: bool = False):
        """Z-update of one minibatch's rows, the state untouched (:meth:`.MinibatchSchedule.sweep_rows`)."""
        return self.minibatch.sweep_rows(self, net, state, batch, rows, step, first, for_theta)

    # --- Θ-steps ------------------------------------------------------------------------
    def theta_inputs(self, x: torch.Tensor, zr: ZRows) -> list[torch.Tensor]:
        """Block t's input in its Θ-step, Z_{t−1} rows (B, *d_{t−1}): after the Z-update (Alg. 1), or
        the forward pass the Z-update started from (``theta_input='start'``, where there was one).
        One rule for the Θ-step and the diagnostic, so the probe measures the step taken."""
        start = self.settings.theta_input == "start" and zr.base is not None
        return [x, *(zr.base[:-1] if start else zr.zs()[:-1])]

    def theta_steps(self, net, state: BlockADMMState, batch: TrainBatch, idx_list, outputs=None, zrows=None) -> None:
        """Θ_t ← Θ_t − η ∇_{Θ_t} P_t/|i| on each minibatch i, all blocks at once (they are independent).

        ``outputs`` (a list of T Nones) receives block_t(Z_{t−1}) of the last minibatch, as the step
        computed it (Θ before the step): the folded dual step reads its residual from there.
        ``zrows``: the minibatch's Z as its Z-update left them (one minibatch only), so residuals
        from a forward start are formed exactly (:class:`ZRows`)."""
        if not idx_list:
            return
        with phase("theta"):
            set_mode(net, True)
            shard = batch.shard
            reduce = shard.sum_grads if shard.shards_rows else None
            own = None if not shard.shards_blocks else [t for t in range(net.T) if shard.owns(t)]
            for idx in idx_list:
                size = len(idx)  # the global minibatch: P_t/|i| whatever share of it is held here
                idx = shard.local(idx, batch.n).to(batch.x.device)
                zr = (
                    zrows
                    if zrows is not None
                    else ZRows(None, [rows_of(z, idx, shard.holds(t)) for t, z in enumerate(state.z)])
                )
                done = zr.theta_grads or {}  # blocks whose ∇_{Θ_t} P_t the Z sweep took: no U rows needed here
                # every block's gradient taken by the sweep: no block runs a forward pass here, so no x rows
                inputs = [] if len(done) == net.T and reduce is None else self.theta_inputs(batch.inputs(idx), zr)
                us = [rows_of(u, idx, shard.owns(t)) if t not in done else None for t, u in enumerate(state.u)]
                terms = coupling_terms(state.beta, us)

                def coupling(t, out, zr=zr, terms=terms):
                    if outputs is not None:
                        outputs[t] = out.detach()
                    return terms[t](zr.residual(t, out)) / size  # P_t / |i|

                # ∇_{Θ_t} P_t the Z sweep took with its vjp through block t: divided by |i| here, and
                # the output that step computed handed on to the dual step as above
                grads = None
                if done:
                    # in place: the sweep's gradients are this step's own (the same numbers, no copies)
                    grads = {t: [None if g is None else g.div_(size) for g in gs] for t, gs in done.items()}
                    if outputs is not None:  # the forward start's outputs (zr.base: its residual is δ_t)
                        for t in grads:
                            outputs[t] = zr.base[t]
                theta_step(
                    net, state.opt, inputs, coupling, reduce_grads=reduce, given=zr.given, blocks=own, grads=grads
                )
            shard.average_buffers(net)

    # --- diagnostics --------------------------------------------------------------------
    def diagnostics(self, net, state: BlockADMMState, batch: TrainBatch) -> dict:
        sq = batch.shard.sum([float(u.pow(2).sum()) for u in state.u], batch.x.device)
        return {
            "residuals": list(state.residuals),
            "dual_norms": [math.sqrt(v / batch.n_global) for v in sq],
            "betas": list(state.beta),
            "lipschitz": list(state.lips),
            "z_lr_eff": self.z_rule.effective(state, batch),
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
        # the masks training would hold (backprop's pass sees them too), drawn off training's stream
        with rng_kept(batch.x.device), held_masks(net.blocks):
            w = batch.shard
            idx = probe_rows(batch.n, batch.batch_size, state.iteration).to(batch.x.device)
            x = batch.inputs(idx)
            if self.schedule is self.minibatch:
                lips, vecs = list(state.lips), [[v.clone() for v in vs] for vs in state.lip_vecs]
                zr = self.sweep_rows(net, state, batch, idx, step=state.z_steps + 1)[0]
                state.lips, state.lip_vecs = lips, vecs  # the probe leaves the power iteration where it was
            else:
                zr = ZRows(None, [rows_of(z, idx, w.holds(t)) for t, z in enumerate(state.z)])
            terms = coupling_terms(state.beta, [rows_of(u, idx, w.owns(t)) for t, u in enumerate(state.u)])
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
        """Bytes of Z, the duals the run keeps (none for gotmare: U ≡ 0 is no variable) and Z's moments."""
        return tensor_bytes([*state.z, *self.dual.state_tensors(state), *(state.z_m or []), *(state.z_v or [])])
