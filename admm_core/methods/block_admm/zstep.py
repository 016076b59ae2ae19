"""The Z-step rule of Block-ADMM: the step each Z_t takes in a sweep, given its gradient.

With g_T = ∇_{Z_T}(J + P_T) and g_t = ∇_{Z_t}(P_t + P_{t+1}) (t < T):

- step size ζ_t,eff (``z_step``):
      fixed:   ζ_t as given;
      scaled:  ζ_t / (β_t + β_{t+1} L²_{t+1}),  ζ_T / (β_T + c_J)   (L_{t+1}: block t+1's Lipschitz
               constant by warm-started power iteration every ``power_every`` Z-updates; c_J: J's
               curvature), so ζ is in units of the inverse curvature: a gradient step on Z_t is
               stable for ζ_t < 2/(β_t + β_{t+1} L²_{t+1});
      newton:  ζ_t × the Newton direction of P_t + P_{t+1} with block t+1 linearised (``newton_steps``
               conjugate-gradient steps per row), ζ = 1 its minimiser; Z_T: g_T / (c_J + β_T);
- the update (``z_optimizer``): Z_t ← Z_t − ζ_t,eff g_t (sgd), or Adam's step on Z (the paper's;
  it normalises each coordinate's step to ≈ ζ);
- per-block size (``z_norm``, not in the paper): each Z_t-step rescaled to the size of the
  Z_T-step of the same rows (top), only where smaller (up), or only block t+1's part raised to
  ∇J(Z_T)'s size (signal); off: as computed.

Online Block-ADMM (Alg. 2) takes its Z-steps with the same :func:`gradient_step`.
"""

from __future__ import annotations

from collections.abc import Callable

from ...profile import phase
from ..lipschitz import lipschitz_estimates, loss_curvature, z_step_sizes
from ..zsweep import adam_z_step, newton_direction, norm_mode, normalised_steps


def gradient_step(z_lrs, moments: Callable | None, step: int) -> Callable:
    """(t, Z_t, g) ↦ Z_t − ζ_t g, or Adam's step of size ζ_t with ``moments(t)`` = (m_t, v_t) (updated
    in place; ``moments`` None: the plain step) at Adam step number ``step``."""

    def z_step(t, z, g):
        if moments is None:
            return z - z_lrs[t] * g
        m, v = moments(t)
        return adam_z_step(z, g, m, v, step, z_lrs[t])

    return z_step


class ZStepRule:
    """ζ_t,eff and the step of each Z_t, read off a Block-ADMM record."""

    def __init__(self, settings):
        self.kind = settings.z_step  # fixed | scaled | newton
        self.adam = settings.z_optimizer == "adam"
        self.norm = settings.z_norm  # off | top | up | signal
        self.power_steps = settings.power_steps
        self.power_every = settings.power_every
        self.newton_steps = settings.newton_steps

    @property
    def signal_norm(self) -> bool:
        """``z_norm='signal'``: the sweep itself splits Z_t's gradient (:func:`reverse_z_sweep`)."""
        return self.norm == "signal"

    def sizes(self, net, state, batch, zs) -> list[float]:
        """ζ_t,eff of this Z-update (the scaled step re-estimates L_t at ``zs``, in eval mode:
        torch.func cannot differentiate BatchNorm's running-statistics update). L_t is estimated by
        block t's owner, at its input Z_{t−1}, and gathered."""
        if self.kind == "scaled" and (state.lip_calls % self.power_every == 0 or not any(state.lips)):
            w = batch.shard
            inputs = [zs[t - 1] if t > 0 and w.owns(t) else None for t in range(len(zs))]
            with norm_mode(net, "eval"), phase("lipschitz"):
                lips = lipschitz_estimates(net.blocks, inputs, state.lip_vecs, self.power_steps)
            state.lips = w.gather_blocks(lips, batch.x.device)
        state.lip_calls += 1
        return self.effective(state, batch)

    def effective(self, state, batch) -> list[float]:
        """ζ_t,eff at the last L_t (the diagnostics' ``z_lr_eff``)."""
        return z_step_sizes(state.z_lr, state.beta, state.lips, loss_curvature(batch.loss), self.kind == "scaled")

    def for_rows(self, state, batch, z_lrs, moments, step: int, T: int):
        """(z_step, solve) of :func:`reverse_z_sweep` on some rows: the gradient or Adam step of ζ_t
        (``moments``: [m rows, v rows]), rescaled per ``z_norm``, and the Newton direction of
        ``z_step='newton'`` (else None)."""
        plain = gradient_step(z_lrs, (lambda t: (moments[0][t], moments[1][t])) if moments else None, step)
        # Deviation (z_norm, not in the paper): each Z_t-step given the Z_T-step's size
        z_step = normalised_steps(plain, "off" if self.signal_norm else self.norm, T)
        if self.kind != "newton":
            return z_step, None
        c = loss_curvature(batch.loss)

        def solve(t, g, inp, out):
            if inp is None:  # Z_T: J + P_T has curvature c_J + β_T along every direction
                return g / (c + state.beta[T - 1])
            return newton_direction(g, inp, out, state.beta[t], state.beta[t + 1], self.newton_steps)

        return z_step, solve

    def for_stored(self, state, z_lrs, rows) -> Callable:
        """The step of the stored rows ``rows`` (a slice) of Z: Adam's moments are the state's, updated in place."""
        moments = None if state.z_m is None else (lambda t: (state.z_m[t][rows], state.z_v[t][rows]))
        return gradient_step(z_lrs, moments, state.z_steps + 1)
