"""Online Stochastic Block-ADMM's settings (paper Alg. 2). The updates are
:mod:`admm_core.methods.online_admm`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import (
    MethodBase,
    lr_decay_setting,
    power_every_setting,
    power_steps_setting,
    setting,
    z_step_setting,
)


def _one(v) -> bool:
    return v == 1


@dataclass(frozen=True)
class OnlineADMMSettings(MethodBase):
    """Online Stochastic Block-ADMM (Alg. 2): Z per minibatch, O(d) duals.

    The defaults are the recipe measured across the zoo of others' networks and the presets
    (docs/deviations.md, "The methods' defaults"): Θ-steps at the forward start's inputs, the dual step read
    off the Θ-step's own forward pass, a fixed Z step ζ = 1 (with β = 1 and the additive dual, each block's Θ-gradient
    is then backprop's: on a network without stochastic layers the run follows Adam backprop's trajectory), L_t
    re-estimated every 10 minibatches where the step is scaled. Alg. 2 as printed:
    ``recipe='paper'``."""

    name = "online-admm"
    summary = "Online Stochastic Block-ADMM (paper Alg. 2): Z per minibatch, O(d) duals, O(batch) memory"
    implementation = "admm_core.methods.online_admm:OnlineADMM"
    supports_augment = True  # every training read of X goes through TrainBatch.inputs
    supports_lr_schedule = True
    live_metrics = ("residuals", "backprop_cosine", "dual_norms", "betas")

    # Alg. 2 as printed: z from a forward pass every minibatch, Adam on z (restarted each minibatch) and on Θ,
    # the scalar dual u_t ← u_t + ‖r_t‖ inside the square, β = 1. ζ for Adam on z is not given: 0.01.
    PAPER: ClassVar[dict] = {
        "dual": "literal",
        "z_optimizer": "adam",
        "z_lr": 0.01,
        "z_step": "fixed",
        "theta_optimizer": "adam",
        "beta": 1.0,
        "primal_steps": 1,
        "dual_theta": "new",
        "theta_input": "new",
        "z_norm": "off",
    }
    lr: float = setting(1e-3, "η: step size of the Θ-updates", label="η — Θ step size")
    lr_decay: float = lr_decay_setting()
    theta_optimizer: str = setting("adam", "optimizer of the Θ-updates", choices=("adam", "sgd"), label="Θ optimizer")
    z_lr: float = setting(
        1.0, "ζ: step size of the Z-updates (scaled: in units of 1/curvature, < 2)", label="ζ — Z-step size"
    )
    # fixed ζ = 1 with β = 1: from the forward start each block's Θ-gradient is backprop's (the scaled step's
    # factor 1/(β_t + β_{t+1}L²) moves with L_t and Adam does not absorb a changing scale); measured across the
    # zoo, docs/results/zoo.md "online-admm's Z step"
    z_step: str = z_step_setting("fixed")
    power_steps: int = power_steps_setting()
    power_every: int = power_every_setting(10)  # measured: docs/deviations.md, "The methods' defaults"
    z_optimizer: str = setting(
        "sgd", "Z-update rule (Adam restarts every minibatch: sign steps)", choices=("sgd", "adam"), label="Z optimizer"
    )
    beta: float = setting(
        1.0,
        "β: penalty weight of the coupling terms (one value, or one per block)",
        per_block=True,
        label="β — penalty weight",
    )
    recipe: str = setting(
        "measured",
        "measured: the settings as given, over the method's measured defaults (a preset gives its own measured "
        "values; docs/deviations.md); paper: Alg. 2 as printed (Adam on z with ζ = 0.01 and on Θ, the scalar dual inside the square, β = 1, one "
        "primal pass) in place of the given values of those settings",
        choices=("measured", "paper"),
        label="Recipe",
    )
    primal_steps: int = setting(1, "Z/Θ passes per minibatch before the dual step", label="Z/Θ passes per minibatch")
    dual: str = setting(
        "additive",
        "dual form: additive (= backprop direction), feature (per-feature u_t ∈ R^d), literal (Alg. 2 as printed), damped",
        choices=("additive", "feature", "literal", "damped"),
        label="Dual form",
    )
    dual_decay: float = setting(
        0.9,
        "δ of the damped dual u ← δu + ‖r‖",
        positive=False,
        max=0.999999,
        label="δ — dual damping",
        when={"dual": "damped"},
    )
    eps: float = setting(1e-8, "ε guarding ‖r‖ at r = 0", label="ε — guard at r = 0")
    fused: bool = setting(
        False,
        "fused Θ-optimizer kernel instead of foreach (same update; faster on GPU and CPU)",
        label="Fused kernel",
    )
    dual_theta: str = setting(
        "old",
        "the dual step's block_t(z_{t−1}): after the Θ-step (new, Alg. 2) or the Θ-step's own forward pass "
        "before it stepped (old: one forward pass fewer; with dual='additive' only the recorded u and "
        "residuals change, not the training)",
        choices=("new", "old"),
        label="Θ of the dual step",
    )
    theta_input: str = setting(
        "start",
        "block t's input in its Θ-step: z_{t−1} after the Z-update (new, Alg. 2) or the forward pass the "
        "Z-update started from (start: the Θ-step reuses that pass and runs no forward of its own; "
        "primal_steps = 1 only)",
        choices=("new", "start"),
        label="Input of the Θ-step",
        when={"primal_steps": _one},
    )
    z_norm: str = setting(
        "off",
        "each z_t-step rescaled to the size of the z_T-step of the same rows (top), or only where it is "
        "smaller (up), so a signal keeps its size block by block; signal: only the part from block t+1, raised "
        "to the size of ∇J(z_T) where it is smaller; off: as computed",
        choices=("off", "top", "up", "signal"),
        label="Z-step size per block",
    )
    bn_mode: str = setting(
        "train",
        "BatchNorm in the forward-pass start, the Z sweep and the dual step: the minibatch's statistics, "
        "as the Θ-step sees them (train), or running statistics (eval: the Θ-step then fits train-mode "
        "outputs to eval-mode targets; did not learn ResNet-18)",
        choices=("train", "eval"),
        label="BatchNorm in Z steps",
    )

    def __post_init__(self):
        super().__post_init__()
        if self.primal_steps != 1:  # later passes have no forward start to reuse: the Θ-step reads its inputs anew
            object.__setattr__(self, "theta_input", "new")

    def estimate_state_bytes(self, s) -> int:
        # one minibatch of Z (and its Adam moments); a scalar dual per block
        rows = min(s.batch_size, s.n)
        return rows * sum(s.block_out) * 4 * (3 if self.z_optimizer == "adam" else 1) + 8 * len(s.block_out)

    def theta_moments(self) -> int:
        return 2 if self.theta_optimizer == "adam" else 0
