"""Alg. 1's schedule (``z_schedule='sweep'``): every row's Z swept between shares of the Θ-steps.

    repeat k = primal_steps times:
        Z_T ← Z_T − ζ_T ∇_{Z_T} (J + P_T)                          # Z_T-step
        for t = T−1 … 1:  Z_t ← Z_t − ζ_t ∇_{Z_t} (P_t + P_{t+1})    # reverse sweep
        Θ_t ← Θ_t − η_t ∇_{Θ_t} P_t on a share of the minibatches    # Θ-step
    U_t ← U_t + α (Z_t − block_t(Z_{t−1})) for every row             # dual step

An epoch is one pass of Θ-steps over the data, spread over ``iters_per_epoch`` × k such passes.
Z's objective separates per sample, so a sweep covers all rows in chunks of ``chunk_size``.
The dual step of iteration k and the first sweep of iteration k+1 see the same Z and Θ, so
within an epoch the dual step rides along that sweep's forward pass (one pass fewer, the same
numbers); the last of an epoch runs on its own, so diagnostics and checkpoints see a finished
iteration. The sweep is Gauss–Seidel (Z_t sees the new Z_{t+1}) or Jacobi (``z_sweep``: every
Z_t from the previous iterate, block by block, the same code when the blocks are split over
processes, :mod:`admm_core.distributed`).
"""

from __future__ import annotations

import torch

from ...profile import phase
from ..lipschitz import loss_grad
from ..zsweep import minibatches, norm_mode, reverse_z_sweep
from .state import coupling_terms


def primal_passes(settings, iteration: int) -> int:
    """k for the dual step numbered ``iteration`` (0-based): primal_steps, growing by one every
    ``primal_growth`` dual steps up to ``primal_steps_max`` (Prop. 1: ε_k → 0)."""
    if not settings.primal_growth:
        return settings.primal_steps
    return min(
        max(settings.primal_steps, settings.primal_steps_max),
        settings.primal_steps + iteration // settings.primal_growth,
    )


class SweepSchedule:
    """Alg. 1 as printed; ``m`` is the :class:`BlockADMM` whose parts take the steps."""

    def __init__(self, settings):
        self.s = settings

    def run_epoch(self, m, net, state, batch, progress=None) -> None:
        s = self.s
        batches = minibatches(batch.n_global, batch.batch_size, state.gen)  # global rows, any world size
        ks = [primal_passes(s, state.iteration + it) for it in range(s.iters_per_epoch)]
        phases = sum(ks)
        per_phase = [
            batches[round(i * len(batches) / phases) : round((i + 1) * len(batches) / phases)] for i in range(phases)
        ]
        fuse = not s.adaptive_rho  # the penalty schedule must act between dual step and sweep
        done = 0
        for it in range(s.iters_per_epoch):
            for p in range(ks[it]):
                # Alg. 1: Z_T-step, reverse Z sweep (the previous iteration's dual step rides along)
                m.z_update(net, state, batch, with_dual=(fuse and it > 0 and p == 0))
                m.set_lr(state, batch, done / phases)
                m.theta_steps(net, state, batch, per_phase[done])  # Alg. 1: Θ-step
                done += 1
            if not fuse or it == s.iters_per_epoch - 1:
                m.dual_step(net, state, batch)  # Alg. 1: dual step (otherwise folded into the next sweep)
            if progress:
                progress((it + 1) / s.iters_per_epoch)

    def z_update(self, m, net, state, batch, with_dual: bool = False) -> None:
        """Z_T-step and reverse sweep over this process's rows, chunk by chunk (rows are independent).
        With ``with_dual`` the pending dual step is applied to each chunk first, from the same
        forward pass the sweep needs anyway."""
        with phase("z_sweep"):
            sweep = self._jacobi if self.s.z_sweep == "jacobi" else self._gauss_seidel
            sq = sweep(m, net, state, batch, with_dual)
        state.z_steps += 1
        if with_dual:
            m.after_dual(state, sq, batch)

    def _gauss_seidel(self, m, net, state, batch, with_dual: bool) -> list[float]:
        sq = [0.0] * net.T
        z_lrs = m.z_rule.sizes(net, state, batch, state.z)
        for s in range(0, batch.n, self.s.chunk_size):
            rows = slice(s, s + self.s.chunk_size)
            y = batch.y[rows]
            zs = [z[rows] for z in state.z]
            us = [u[rows] for u in state.u]  # views: in-place updates reach the state

            def dual(t, out, zs=zs, us=us):
                r = zs[t] - out
                m.dual.add_(us[t], r, state.epoch)  # Alg. 1: dual step, before Z_t moves
                sq[t] += float(r.pow(2).sum())

            with norm_mode(net, self.s.bn_mode):
                new = reverse_z_sweep(
                    net.blocks,
                    batch.inputs(rows),  # Z_0: this epoch's view of the inputs
                    zs,
                    lambda z: batch.loss(z, y),
                    coupling_terms(state.beta, us),
                    m.z_rule.for_stored(state, z_lrs, rows),
                    on_forward=dual if with_dual else None,
                    own_grad=lambda t, r, us=us: state.beta[t] * (r + us[t]),  # ∇_Z P_t, closed form
                    objective_grad=loss_grad(batch.loss, y),
                )
            for t in range(net.T):
                state.record_move(t, new[t] - state.z[t][rows], new[t])
                state.z[t][rows] = new[t]
        return sq

    def _jacobi(self, m, net, state, batch, with_dual: bool) -> list[float]:
        """``z_sweep='jacobi'``: every Z_t moves from the previous iterate, block by block:

            Z_T ← Z_T − ζ_T [∇J(Z_T) + ∇_{Z_T} P_T]
            Z_t ← Z_t − ζ_t [∇_{Z_t} P_t + ∇_{Z_t} P_{t+1}],   t = T−1 … 1, all Z at their old values

        Block t computes, from its own Z_{t−1}, Z_t, U_t and Θ_t only, ∇_{Z_t} P_t = β_t (r_t + U_t)
        and ∇_{Z_{t−1}} P_t (a vjp through block_t); the second is block t−1's share
        (``World.pass_back``), and the new Z_t is block t+1's input (``World.pass_forward``). One
        process does every block and the messages stay in memory; with the blocks split over
        processes each does its own and the messages travel: the same code, the same numbers.
        """
        w = batch.shard
        own = [t for t in range(net.T) if w.owns(t)]
        sq = [0.0] * net.T
        z_lrs = m.z_rule.sizes(net, state, batch, state.z)
        with norm_mode(net, self.s.bn_mode), torch.enable_grad():
            for s in range(0, batch.n, self.s.chunk_size):
                rows = slice(s, s + self.s.chunk_size)
                grads, back = {}, {}
                for t in own:
                    grads[t], back[t] = self._block_grads(m, net, state, batch, rows, t, sq if with_dual else None)
                msgs = w.pass_back({t: b for t, b in back.items() if b is not None}, [z[rows] for z in state.z])
                step = m.z_rule.for_stored(state, z_lrs, rows)
                for t in own:
                    g = grads[t] if t == net.T - 1 else grads[t] + msgs[t]
                    state.z[t][rows] = step(t, state.z[t][rows], g).detach()
                w.pass_forward([z[rows] for z in state.z])
        return sq

    def _block_grads(self, m, net, state, batch, rows, t: int, sq: list | None):
        """Block t's part of a Jacobi sweep on ``rows``: (∇_{Z_t} of its terms, ∇_{Z_{t−1}} P_t or None).
        With ``sq`` the pending dual step is applied to U_t's rows first (and Σ r² added there)."""
        z, u = state.z[t][rows], state.u[t][rows]  # views: the dual step reaches the state
        if t == 0:
            with torch.no_grad():
                inp, out = None, net.blocks[0](batch.inputs(rows))
        else:
            inp = state.z[t - 1][rows].detach().requires_grad_()
            out = net.blocks[t](inp)
        r = z - out.detach()
        if sq is not None:
            m.dual.add_(u, r, state.epoch)  # Alg. 1: dual step, before Z_t moves
            sq[t] += float(r.pow(2).sum())
        g = state.beta[t] * (r + u)  # ∇_{Z_t} P_t, closed form
        back = None
        if inp is not None:  # ∇_{Z_{t−1}} P_t = vjp of block_t with ∇_out P_t = −∇_r P_t
            back = torch.autograd.grad(out, inp, -g)[0]
        if t == net.T - 1:  # Z_T-step: ∇ (J + P_T)
            jg = loss_grad(batch.loss, batch.y[rows])
            if jg is None:
                zt = z.detach().requires_grad_()
                g = torch.autograd.grad(batch.loss(zt, batch.y[rows]), zt)[0] + g
            else:
                g = jg(z.detach()) + g
        return g, back

    @torch.no_grad()
    def dual_step(self, m, net, state, batch) -> None:
        """U_t ← U_t + α (Z_t − block_t(Z_{t−1})) for every row; records the residuals."""
        sq = [0.0] * net.T
        with norm_mode(net, self.s.bn_mode), phase("dual"):
            for s in range(0, batch.n, self.s.chunk_size):
                rows = slice(s, s + self.s.chunk_size)
                for t, block in enumerate(net.blocks):
                    if not batch.shard.owns(t):  # another process's block
                        continue
                    r = state.z[t][rows] - block(batch.inputs(rows) if t == 0 else state.z[t - 1][rows])
                    m.dual.add_rows(state.u[t], rows, r, state.epoch)
                    sq[t] += float(r.pow(2).sum())
        m.after_dual(state, sq, batch)
