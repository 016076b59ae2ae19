"""Online Stochastic Block-ADMM (paper Alg. 2): Z per minibatch, O(d) duals per block.

For each minibatch (x_i, y_i), with r_t = z_t − block_t(z_{t−1}) (z_0 = x_i) and ‖·‖ the
Frobenius norm over the minibatch:

    z_t ← forward pass                                   # re-initialised every minibatch
    z_T ← z_T − ζ_T ∇ (J(y_i, z_T) + T_T);  z_t ← z_t − ζ_t ∇ (T_t + T_{t+1}),  t = T−1 … 1
    Θ_t ← Θ_t − η ∇_{Θ_t} T_t / |i|
    u_t ← dual update

Z step (``z_step=``): ``scaled`` uses ζ_t,eff = ζ / (β_t + β_{t+1} L²_{t+1}) and
ζ_T,eff = ζ / (β_T + c_J), L_{t+1} the Lipschitz constant of block_{t+1} (spectral norms by
warm-started power iteration; see ``lipschitz.lipschitz_estimates``), c_J the curvature of the
loss (1 for MSE). The denominators bound the curvature of each z's objective, so ζ < 2 is
stable whatever ‖W‖ grows to. ``fixed`` (default) uses ζ as is. With Θ-steps at the updated inputs
(``theta_input='new'``) ζ·β·‖W‖² grows with the weights and the sweep eventually overshoots (on MNIST,
ζ = 0.05, the run collapsed to 10% at epoch 21). From the forward start with Θ at the start's inputs
and ζβ = 1 (the defaults) the sweep is backprop's adjoint recursion, z_T − ζ∇J then z_t ← z_t −
J_{t+1}ᵀ(block_{t+1}(z_t) − z_{t+1}), so block t's Θ-gradient β(block_t(z_{t−1}) − z_t)·∂block_t/∂Θ_t
is backprop's; the scaled step multiplies it by a factor that moves with L_t, which Adam does not
absorb (docs/results/zoo.md, "online-admm's Z step").

Four readings of the dual (``dual=``), measured on MNIST (docs/results/online.md):

- ``literal``  — Alg. 2 as printed: T_t = β/2 (‖r_t‖ + u_t)², u_t ← u_t + ‖r_t‖.
  u only grows (it sums norms), so the effective penalty β(1 + u/‖r‖) grows without bound.
- ``additive`` — the paper's online objective with u outside the square:
  T_t = β/2 (‖r_t‖² + u_t), u_t ← u_t + ‖r_t‖. u shifts the objective but not its
  gradients: a pure quadratic-penalty method; u is a running record of the violation.
  Because z restarts at the forward pass, one sweep's Θ-gradient is then backprop's gradient
  times a per-block scalar (cosine 1 to backprop, see ``diagnostics``).
- ``damped``   — the literal square with a leaky dual, u_t ← δ u_t + ‖r_t‖ (0 ≤ δ < 1),
  which bounds u by max‖r‖/(1 − δ).
- ``feature``  — a per-feature dual u_t ∈ R^{d_t} broadcast over the minibatch:
  T_t = β/2 ‖z_t − block_t(z_{t−1}) + u_t‖², u_t ← u_t + mean_i r_{t,i}. The dual of the
  constraint's minibatch mean, in O(d_t) memory: it changes the Z and Θ gradients.

‖r‖ is guarded as sqrt(‖r‖² + ε²): right after the forward pass r = 0 and ‖r‖ has no gradient.
Memory for z and u is O(batch + d): only the current minibatch's z exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..profile import phase
from ..spec.methods.base import per_block
from . import zsweep
from .base import (
    Engine,
    MethodState,
    TrainBatch,
    make_theta_optimizer,
    set_epoch_lr,
    tensor_bytes,
)
from .block_admm.zstep import gradient_step
from .lipschitz import (
    lipschitz_estimates,
    lipschitz_vectors,
    loss_curvature,
    loss_grad,
    z_step_sizes,
)
from .masks import held_masks, rng_kept
from .probes import (
    backprop_grads,
    block_update_grads,
    cosines,
    probe_rows,
)
from .zsweep import (
    ZRows,
    _modules_of,
    block_params,
    forward_start,
    minibatches,
    norm_mode,
    normalised_steps,
    reverse_z_sweep,
    set_mode,
    theta_step,
)


@dataclass
class OnlineADMMState(MethodState):
    u: list  # dual per block: a float (scalar readings) or a (d_t,) tensor (feature)
    beta: list[float]
    opt: torch.optim.Optimizer  # one parameter group per block
    gen: torch.Generator
    lip_vecs: list = field(default_factory=list)  # warm-start vectors of the power iterations
    lips: list[float] = field(default_factory=list)  # L_t at the last minibatch
    iteration: int = 0  # minibatches so far
    epoch: int = 0  # epochs done: this epoch's Θ step size is η·γ^epoch
    residuals: list[float] = field(default_factory=list)  # RMS per sample, mean over the last epoch
    batch_bytes: int = 0  # bytes of the largest minibatch's z (and Adam moments)


class OnlineADMM(Engine):
    """Online Stochastic Block-ADMM (Alg. 2). See the module docstring for the math; the settings and
    their checks are the record's (:class:`~admm_core.spec.methods.online_admm.OnlineADMMSettings`)."""

    def init_state(self, net, batch: TrainBatch, gen: torch.Generator) -> OnlineADMMState:
        T = net.T
        net.eval()
        with torch.no_grad():
            zs = net.forward_all(batch.x[:1])  # shapes of z_t
        shapes = [tuple(batch.x.shape[1:])] + [tuple(z.shape[1:]) for z in zs[:-1]]
        if self.dual == "feature":
            u = [torch.zeros(z.shape[1:], dtype=z.dtype, device=z.device) for z in zs]
        else:
            u = [0.0] * T
        return OnlineADMMState(
            u=u,
            beta=per_block(self.beta, T, f"{self.name}.beta"),
            opt=make_theta_optimizer(net, self.theta_optimizer, self.lr, self.fused),
            gen=gen,
            lip_vecs=lipschitz_vectors(net.blocks, shapes, torch.Generator().manual_seed(0)),
            lips=[0.0] * T,
            residuals=[0.0] * T,
        )

    def _norm(self, r: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(r.pow(2).sum() + self.eps**2)

    def coupling(self, beta: float, u, r: torch.Tensor) -> torch.Tensor:
        """T_t for the chosen dual form, as a function of the residual r = z_t − block_t(z_{t−1})."""
        if self.dual == "feature":
            return 0.5 * beta * (r + u).pow(2).sum()  # u broadcast over the minibatch
        if self.dual == "additive":
            return 0.5 * beta * (r.pow(2).sum() + u)
        return 0.5 * beta * (self._norm(r) + u) ** 2

    def own_grad(self, state: OnlineADMMState):
        """∇_r T_t in closed form where the coupling is a plain square (additive: βr; feature:
        β(r + u)); None (autograd) for the readings with ‖r‖ inside."""
        if self.dual == "additive":  # β_t = 1: r itself (the same numbers without the product)
            return lambda t, r: r if state.beta[t] == 1 else state.beta[t] * r
        if self.dual == "feature":
            return lambda t, r: state.beta[t] * (r + state.u[t])
        return None

    def _sweep_setup(self, net, state: OnlineADMMState, batch: TrainBatch, z, vecs):
        """ζ_t,eff and the coupling closures for one minibatch (z from the forward pass)."""
        T = net.T
        if self.z_step == "scaled" and state.iteration % self.power_every != 0 and any(state.lips):
            lips = list(state.lips)  # L_t moves slowly: re-estimated every power_every minibatches
        elif self.z_step == "scaled":
            with norm_mode(net, "eval"), phase("lipschitz"):  # torch.func cannot differentiate BN's statistics update
                lips = lipschitz_estimates(net.blocks, [None, *z[:-1]], vecs, self.power_steps)
        else:
            lips = [0.0] * T
        z_lrs = z_step_sizes([self.z_lr] * T, state.beta, lips, loss_curvature(batch.loss), self.z_step == "scaled")
        couplings = [(lambda r, t=t: self.coupling(state.beta[t], state.u[t], r)) for t in range(T)]
        return lips, z_lrs, couplings

    def run_epoch(self, net, state: OnlineADMMState, batch: TrainBatch, progress=None) -> dict:
        T = net.T
        batches = minibatches(batch.n, batch.batch_size, state.gen)
        sq = [0.0] * T
        for b, idx in enumerate(batches):
            set_epoch_lr(state.opt, self.lr, self.lr_decay, state.epoch, batch.lr_factor(state.epoch, b / len(batches)))
            idx = idx.to(batch.x.device)
            x, y = batch.inputs(idx), batch.y[idx]  # this epoch's view of the inputs
            outs = [None] * T if self.dual_theta == "old" else None
            with held_masks(net.blocks):  # one dropout mask per block for all of this minibatch's passes
                z, couplings = self.primal_steps_on(net, state, batch, x, y, step_theta=True, outputs=outs)
                # Alg. 2: dual update, with the new Θ (dual_theta='old': the Θ-step's outputs before it stepped)
                with torch.no_grad(), norm_mode(net, self.bn_mode), phase("dual"):
                    inp = x
                    for t, block in enumerate(net.blocks):
                        r = z.residual(t, block(inp) if outs is None else outs[t])
                        rn = float(r.pow(2).sum().sqrt())
                        sq[t] += rn * rn
                        if self.dual == "feature":
                            state.u[t] = state.u[t] + r.mean(0)  # u_t ← u_t + mean_i r_{t,i}
                        elif self.dual == "damped":
                            state.u[t] = self.dual_decay * state.u[t] + rn
                        else:
                            state.u[t] = state.u[t] + rn
                        inp = z.z(t)
            state.iteration += 1
            if progress and (b % 20 == 0 or b == len(batches) - 1):
                progress((b + 1) / len(batches))
        state.residuals = [math.sqrt(v / batch.n) for v in sq]
        state.epoch += 1
        return {}

    def reuses_forward(self, net) -> bool:
        """Whether the forward start's passes can serve the Θ-step (BatchNorm, if any, in train mode
        in both). The same numbers either way; only a forward pass is saved."""
        return self.bn_mode == "train" or not _modules_of(net)[1]

    def theta_inputs(self, x: torch.Tensor, zr: ZRows) -> list[torch.Tensor]:
        """Block t's input in its Θ-step: z_{t−1} after the Z-update (Alg. 2), or the forward start's
        (``theta_input='start'``, where the sweep started from one). One rule for the step and the probe."""
        start = self.theta_input == "start" and zr.base is not None
        return [x, *(zr.base[:-1] if start else zr.zs()[:-1])]

    def primal_steps_on(
        self, net, state: OnlineADMMState, batch: TrainBatch, x, y, step_theta: bool, vecs=None, outputs=None
    ):
        """z from a forward pass, then ``primal_steps`` × (z_T-step, reverse sweep, Θ-step) on one
        minibatch; returns the last z (:class:`ZRows`) and couplings. Without ``step_theta`` it stops after the
        first sweep (the diagnostic: the Θ-direction is read off the couplings, nothing moves).
        ``outputs`` (a list of T Nones) receives block_t(z_{t−1}) of the last Θ-step, before it stepped.

        BatchNorm follows ``bn_mode`` in the forward start and the sweeps; Θ-steps run in train
        mode (and alone move the running statistics).

        With a Θ-step to follow and BatchNorm (if any) in train mode, the forward start's block-1
        pass is run with Θ_1's graph and handed to the first Θ-step (its input x and Θ_1 are the
        same there): one block-1 forward pass fewer per minibatch, the same numbers. With
        ``theta_input='start'`` every block's pass is handed over and the Θ-step runs no forward.
        """
        reuse = step_theta and self.reuses_forward(net)
        start = self.theta_input == "start"
        given = None
        with phase("forward_start"):
            if reuse and start:  # every block's Θ-step forward: statistics updated once, as there
                set_mode(net, True)
                with torch.enable_grad():
                    z, forwards = forward_start(net.blocks, x, net.blocks[0](x))
                given = {t: out for t, (_, out) in enumerate(forwards)}
            else:
                if reuse:  # the Θ-step's own block-1 pass
                    set_mode(net, True)
                    with torch.enable_grad():
                        given = {0: net.blocks[0](x)}
                with norm_mode(net, self.bn_mode):  # z re-initialised in a forward pass (Alg. 2)
                    z, forwards = forward_start(net.blocks, x, given[0] if given else None)
        zr = ZRows(None, z)
        moments = [[torch.zeros_like(zt), torch.zeros_like(zt)] for zt in z] if self.z_optimizer == "adam" else None
        if step_theta:
            state.batch_bytes = max(state.batch_bytes, tensor_bytes(z) * (3 if moments else 1))
        lips, z_lrs, couplings = self._sweep_setup(net, state, batch, z, state.lip_vecs if vecs is None else vecs)
        if vecs is None:
            state.lips = lips
        for p in range(self.primal_steps if step_theta else 1):
            # Z-update (Alg. 2): z_T-step, then reverse sweep; the step is Block-ADMM's Z-step rule
            plain_step = gradient_step(z_lrs, (lambda t: moments[t]) if moments else None, p + 1)
            z_step = normalised_steps(
                plain_step, "off" if self.z_norm == "signal" else self.z_norm, net.T
            )  # z_norm: not in the paper

            first = p == 0  # the first sweep reuses the forward start and steps displacements from it
            offsets = [None] * net.T
            # Every block's Θ-step reads this forward start right after this one Gauss–Seidel pass, with
            # the same z and u: the sweep's vjps through the blocks give ∇_{Θ_t} T_t as well, and the
            # Θ-step runs no backward pass of its own (:func:`reverse_z_sweep`'s theta_params)
            fused = zsweep.THETA_GRADS_FROM_SWEEP and step_theta and first and given is not None and len(given) == net.T
            theta_grads = {} if fused else None
            with norm_mode(net, self.bn_mode), phase("z_sweep"):
                z = reverse_z_sweep(
                    net.blocks,
                    x,
                    zr.zs(),
                    lambda zT: batch.loss(zT, y),
                    couplings,
                    z_step,
                    forwards=forwards if first else None,
                    own_grad=self.own_grad(state),
                    offsets=offsets if first else None,
                    keep_graphs=given is not None and len(given) > 1 and not fused,
                    objective_grad=loss_grad(batch.loss, y),
                    signal_norm=self.z_norm == "signal",
                    theta_params=[block_params(b) for b in net.blocks] if fused else None,
                    theta_grads=theta_grads,
                )
            zr = ZRows([out.detach() for _, out in forwards], offsets, values=z) if first else ZRows(None, z)
            if step_theta:  # Θ-update (Alg. 2)
                set_mode(net, True)
                with phase("theta"):
                    inputs = self.theta_inputs(x, zr)

                    def coupling(t, out, zr=zr):
                        if outputs is not None:
                            outputs[t] = out.detach()
                        return couplings[t](zr.residual(t, out)) / len(x)

                    grads = None
                    if fused:  # the sweep's ∇_{Θ_t} T_t divided by |i|; its outputs on to the dual step
                        grads = {t: [None if g is None else g / len(x) for g in gs] for t, gs in theta_grads.items()}
                        if outputs is not None:  # the forward start's outputs (zr.base: its residual is δ_t)
                            for t in grads:
                                outputs[t] = zr.base[t]
                    theta_step(net, state.opt, inputs, coupling, given=given if first else None, grads=grads)
        return zr, couplings

    def backprop_cosine(self, net, state: OnlineADMMState, batch: TrainBatch) -> list[float]:
        """cos∠(∇_{Θ_t} T_t, ∇_{Θ_t} J(y, net(x))) per block on one seeded minibatch.

        The Θ-direction of the first primal step, computed as training computes it (forward start
        and sweep in ``bn_mode``, the Θ-gradient in train mode), against backprop's in train mode;
        running statistics are left untouched and the power iteration runs on copies of the warm
        vectors, so nothing in the state changes.
        """
        idx = probe_rows(batch.n, batch.batch_size, state.iteration).to(batch.x.device)
        x, y = batch.inputs(idx), batch.y[idx]
        was = net.training
        vecs = [[v.clone() for v in vs] for vs in state.lip_vecs]
        # the masks training would hold (backprop's pass sees them too), drawn off training's stream
        with rng_kept(batch.x.device), held_masks(net.blocks):
            z, couplings = self.primal_steps_on(net, state, batch, x, y, step_theta=False, vecs=vecs)
            with norm_mode(net, "train"):
                inputs = self.theta_inputs(x, z)
                mine = block_update_grads(net, inputs, lambda t, out: couplings[t](z.residual(t, out)) / len(idx))
                cos = cosines(mine, backprop_grads(net, x, y, batch.loss))
        net.train(was)
        return cos

    def diagnostics(self, net, state: OnlineADMMState, batch: TrainBatch) -> dict:
        T = net.T
        lips = state.lips or [0.0] * T
        return {
            "residuals": list(state.residuals),
            "dual_norms": [float(u.norm()) if torch.is_tensor(u) else abs(u) for u in state.u],
            "betas": list(state.beta),
            "lipschitz": list(lips),
            "z_lr_eff": z_step_sizes(
                [self.z_lr] * T, state.beta, lips, loss_curvature(batch.loss), self.z_step == "scaled"
            ),
            "backprop_cosine": self.backprop_cosine(net, state, batch),
            "iteration": state.iteration,
        }

    def state_bytes(self, state: OnlineADMMState) -> int:
        return state.batch_bytes + sum(tensor_bytes([u]) if torch.is_tensor(u) else 8 for u in state.u)
