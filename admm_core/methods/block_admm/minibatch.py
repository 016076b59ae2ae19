"""The minibatch schedule (``z_schedule='minibatch'``): Alg. 1's three steps on the rows i of one
minibatch at a time.

    repeat k times:  Z_{T,i}-step; reverse sweep of Z_{t,i}, t = T−1 … 1   # Alg. 1, rows i only
                     Θ_t ← Θ_t − η ∇_{Θ_t} P_t(rows i)                       # Θ-step
    U_{t,i} ← U_{t,i} + α (Z_{t,i} − block_t(Z_{t−1,i}))                     # dual step, rows i

Deviation from Alg. 1, which sweeps every row between Θ-steps: a row's Z and U move once an
epoch, just before the Θ-step that reads them, so no Θ-step fits a Z that is a fraction of an
epoch old (on ResNet-18 the stale Z of the sweep schedule did not learn;
docs/results/deep-networks.md). Its own choices, each a setting:

- where Z starts (``z_start``): the rows' stored Z (Alg. 1) or a forward pass of the current Θ
  (U still persists per sample); ``z_sweeps`` sweeps per visit;
- Θ's input (``theta_input``): Z_{t−1} after the Z-update (Alg. 1) or the forward start's
  (the Θ-step then reuses that pass);
- the dual's forward pass (``dual_theta``): block_t(Z_{t−1}) with the new Θ (Alg. 1) or the
  Θ-step's own pass before it stepped (one pass fewer).
"""

from __future__ import annotations

import torch

from ...errors import ConfigError
from ...profile import phase
from .. import zsweep
from ..lipschitz import loss_grad
from ..masks import held_masks
from ..zsweep import ZRows, block_params, forward_start, minibatches, norm_mode, reverse_z_sweep, set_mode
from .state import coupling_grad, coupling_terms, squared_norm
from .sweep import primal_passes


class MinibatchSchedule:
    """Alg. 1 per minibatch; ``m`` is the :class:`BlockADMM` whose parts take the steps."""

    def __init__(self, settings):
        self.s = settings

    def run_epoch(self, m, net, state, batch, progress=None) -> None:
        T = net.T
        k = primal_passes(self.s, state.iteration)
        batches = minibatches(batch.n_global, batch.batch_size, state.gen)
        sq = [torch.zeros((), dtype=torch.float64, device=batch.x.device) for _ in range(T)]
        for b, idx in enumerate(batches):
            rows = batch.shard.local(idx, batch.n).to(batch.x.device)
            m.set_lr(state, batch, b / len(batches))
            outs = [None] * T if self.s.dual_theta == "old" else None
            zr = None
            with held_masks(net.blocks):  # one dropout mask per block for all of this minibatch's passes
                for p in range(k):
                    if len(rows):  # Alg. 1: Z_T-step, reverse Z sweep, rows i
                        zr = self.z_update_rows(m, net, state, batch, rows, step=state.z_steps + p + 1, first=p == 0)
                    # Alg. 1: Θ-step
                    m.theta_steps(net, state, batch, [idx], outputs=outs if p == k - 1 else None, zrows=zr)
                if len(rows):  # Alg. 1: dual step, rows i
                    self.dual_rows(m, net, state, batch, rows, sq, zr, outs)
            if progress and (b % 20 == 0 or b == len(batches) - 1):
                progress((b + 1) / len(batches))
        state.z_steps += k
        m.after_dual(state, [float(v) for v in sq], batch)

    def z_update_rows(self, m, net, state, batch, rows: torch.Tensor, step: int, first: bool = True) -> ZRows:
        """Z-update (Alg. 1: Z_T-step, reverse sweep) of the rows of one minibatch, in place
        (``first``: the first of the minibatch's k primal passes). Returns the rows' new Z."""
        with phase("z_sweep"):
            zr, moments = m.sweep_rows(net, state, batch, rows, step, first, for_theta=True)
        for t in range(net.T):
            z = zr.z(t)
            # the Z-step: the displacement from the forward start, or from the stored Z
            move = zr.delta[t] if zr.base is not None and first else z - state.z[t][rows]
            state.record_move(t, move, z)
            state.z[t][rows] = z.to(state.z[t].dtype)
            if moments is not None:
                state.z_m[t][rows] = moments[0][t]
                state.z_v[t][rows] = moments[1][t]
        return zr

    def start(self, net, state, x, rows, first: bool, for_theta: bool):
        """Where the rows' Z-update starts: (Z rows, the forward start's [(input, output)] or None,
        the passes handed to the Θ-step or None).

        ``for_theta`` (a forward start in train mode, a Θ-step to follow): block 1's pass is run with
        Θ_1's graph and BatchNorm's usual statistics update, and handed to that Θ-step
        (``ZRows.given``): it is the forward pass the Θ-step would compute — one block-1 forward
        pass fewer per minibatch, the same numbers. With ``theta_input='start'`` every block's pass
        is handed over: the Θ-step runs no forward pass at all.
        """
        s = self.s
        # the start's passes are the Θ-step's where BatchNorm (if any) runs as in a Θ-step
        same_mode = s.bn_mode == "train" or not any(
            isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) for mod in net.modules()
        )
        if s.theta_input == "start" and not same_mode:
            raise ConfigError(
                f"{s.name}.theta_input = 'start': with BatchNorm in the network it needs bn_mode='train' "
                f"(the Θ-step reuses the forward start, which runs in bn_mode = {s.bn_mode!r})"
            )
        if not (s.z_start == "forward" and first):
            return [z[rows] for z in state.z], None, None
        reuse = for_theta and same_mode
        given = None
        with phase("forward_start"):  # the Z sub-problem warm-started at the current forward pass
            if reuse and s.theta_input == "start":  # this pass is every block's Θ-step forward
                set_mode(net, True)
                zs, forwards = forward_start(net.blocks, x, net.blocks[0](x))
                return zs, forwards, {t: out for t, (_, out) in enumerate(forwards)}
            if reuse:  # block 1's pass is its Θ-step's forward (statistics updated once, as there)
                set_mode(net, True)
                with torch.enable_grad():
                    given = {0: net.blocks[0](x)}
            with norm_mode(net, s.bn_mode):
                zs, forwards = forward_start(net.blocks, x, given[0] if given else None)
        return zs, forwards, given

    def sweep_rows(self, m, net, state, batch, rows, step: int, first: bool = True, for_theta: bool = False):
        """Z_T-step and reverse sweep of the rows ``rows`` (an index tensor), in ``bn_mode``.

        Returns the new Z rows (:class:`ZRows`: from a forward start, that pass plus the exact
        displacements) and, with Adam on Z, the new moment rows; the state is not touched (the
        caller writes them back, or a diagnostic throws them away).
        """
        s, T = self.s, net.T
        x = batch.inputs(rows)
        zs, forwards, given = self.start(net, state, x, rows, first, for_theta)
        us = [u[rows] for u in state.u]
        moments = None
        if state.z_m is not None:
            moments = [[mm[rows] for mm in state.z_m], [v[rows] for v in state.z_v]]
        z_step, solve = m.z_rule.for_rows(state, batch, m.z_rule.sizes(net, state, batch, zs), moments, step, T)
        y = batch.y[rows]
        sweep = dict(
            jacobi=s.z_sweep == "jacobi",
            own_grad=coupling_grad(state.beta, us),  # ∇_Z P_t in closed form
            objective_grad=loss_grad(batch.loss, y),
            solve=solve,
            signal_norm=m.z_rule.signal_norm,
        )
        problem = (lambda z: batch.loss(z, y)), coupling_terms(state.beta, us)
        fused = self.theta_grads_from_sweep(given, batch.shard, T)
        new, offsets, theta_grads = self.sweeps(net, x, zs, problem, z_step, sweep, forwards, given, fused)
        if forwards is None:
            return ZRows(None, [z.to(state.z[t].dtype) for t, z in enumerate(new)]), moments
        # one sweep from the forward start: its Z_t is base_t + δ_t as ZRows forms it (the same sum)
        values = new if s.z_sweeps == 1 else None
        return ZRows([out.detach() for _, out in forwards], offsets, given, theta_grads, values), moments

    def theta_grads_from_sweep(self, given, shard, T: int) -> bool:
        """Whether the sweep's vector-Jacobian products also give every block's Θ-gradient.

        Every block's Θ-step reads the forward start (``theta_input='start'``, all T passes
        ``given``) right after one Gauss–Seidel pass with the same Z and U: the sweep's vjps
        through the blocks then give the Θ-step's ∇_{Θ_t} P_t as well, and the Θ-step runs no
        backward pass of its own. Not when the rows or blocks are shared over processes.
        """
        s = self.s
        return bool(
            zsweep.THETA_GRADS_FROM_SWEEP
            and given is not None
            and len(given) == T
            and s.z_sweeps == 1
            and s.z_sweep != "jacobi"
            and not (shard.shards_rows or shard.shards_blocks)
        )

    def sweeps(self, net, x, zs, problem, z_step, sweep: dict, forwards, given, fused: bool):
        """The visit's ``z_sweeps`` reverse sweeps, in ``bn_mode``: the first from ``zs`` (with the
        forward start's passes, and the Θ-gradients where ``fused``), each next from the last's Z.
        Returns (new Z rows, their displacements from the forward start or None, the Θ-gradients
        or None); ``problem`` is (J of Z_T, the coupling terms P_t)."""
        objective, couplings = problem
        offsets = [None] * net.T if forwards is not None else None
        theta_grads = {} if fused else None
        with norm_mode(net, self.s.bn_mode):
            new = reverse_z_sweep(
                net.blocks,
                x,
                zs,
                objective,
                couplings,
                z_step,
                forwards=forwards,
                offsets=offsets,
                keep_graphs=given is not None and len(given) > 1 and not fused,
                theta_params=[block_params(b) for b in net.blocks] if fused else None,
                theta_grads=theta_grads,
                **sweep,
            )
            for _ in range(self.s.z_sweeps - 1):  # more Z-steps on the same rows before the Θ-step
                new = reverse_z_sweep(net.blocks, x, new, objective, couplings, z_step, **sweep)
                if forwards is not None:  # still held as the forward start + its displacement
                    offsets = [z - out.detach() for z, (_, out) in zip(new, forwards)]
        return new, offsets, theta_grads

    @torch.no_grad()
    def dual_rows(self, m, net, state, batch, rows: torch.Tensor, sq: list, zr: ZRows, outs=None) -> None:
        """U_{t,i} ← U_{t,i} + α (Z_{t,i} − block_t(Z_{t−1,i})) on the rows of one minibatch, with the
        new Θ (Alg. 1), or with ``outs``, the outputs the Θ-step computed before it stepped
        (``dual_theta='old'``: no extra forward pass); adds each block's Σ r² to ``sq``."""
        with norm_mode(net, self.s.bn_mode), phase("dual"):
            inp = batch.inputs(rows) if outs is None else None
            for t, block in enumerate(net.blocks):
                z = zr.z(t)
                r = zr.residual(t, block(inp) if outs is None else outs[t])
                m.dual.add_rows(state.u[t], rows, r, state.epoch)
                sq[t] += squared_norm(r)
                inp = z
