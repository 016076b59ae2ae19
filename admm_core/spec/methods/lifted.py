"""The lifted baselines' settings: standard ADMM with closed-form updates, Taylor et al., dlADMM
and BCD, each on the per-layer lifted network of a plain MLP. The updates are
:mod:`admm_core.methods.lifted`'s and its subclasses'."""

from __future__ import annotations

from dataclasses import dataclass

from .base import MethodBase, setting


class LiftedSettings(MethodBase):
    """What the full-batch lifted methods share: constraints per layer whatever the split, and their
    state, the per-layer Z and A of every row."""

    uses_blocks = False  # the constraints are per layer whatever the split
    needs_linear_chain = True  # closed-form layer solves: Linear (+ ReLU) layers only
    dual_vars: tuple[str, ...] = ()  # names in state.vars that are multipliers (for diagnostics)
    live_metrics = ("residuals", "dual_norms", "betas")

    def estimate_state_bytes(self, s) -> int:
        """Z_l for every layer and A_l for every hidden layer (N rows each), plus :meth:`extra_floats`
        (closed-form Θ-updates: no optimizer moments)."""
        w = s.layer_out
        return s.n * (sum(w) + sum(w[:-1]) + self.extra_floats(w)) * 4

    def extra_floats(self, widths) -> int:
        """Per row: one output dual (Taylor, dlADMM) or output activation (BCD)."""
        return widths[-1]


@dataclass(frozen=True)
class ClosedFormADMMSettings(LiftedSettings):
    """The settings shared by the closed-form ADMM baselines (admm-closed, taylor): penalties β
    (linear constraints) and γ (activation constraints), and W, b ~ U(0, init_scale) then one
    forward pass for Z, A (the seed paper's init for both)."""

    beta: float = setting(
        10.0,
        "β: penalty of the linear constraints Z_ℓ = A_{ℓ−1}W_ℓᵀ + b_ℓ (paper: 10)",
        label="β — linear-constraint penalty",
    )
    gamma: float = setting(
        10.0, "γ: penalty of the activation constraints A_ℓ = relu(Z_ℓ) (paper: 10)", label="γ — activation penalty"
    )
    init: str = setting(
        "uniform",
        "initial W, b: U(0, init_scale) as in the paper, or the network's own init",
        choices=("uniform", "net"),
        label="Initial W, b",
    )
    init_scale: float = setting(
        1e-4, "upper end of the uniform init (paper: 1e-4)", label="Uniform init scale", when={"init": "uniform"}
    )
    iters_per_epoch: int = setting(1, "outer iterations (full sweeps) per epoch")
    solve_eps: float = setting(1e-7, "relative jitter added to every linear solve (× mean diagonal)", positive=False)
    chunk_size: int = setting(16384, "rows per chunk in products (memory bound only)")


@dataclass(frozen=True)
class ADMMClosedSettings(ClosedFormADMMSettings):
    """Standard ADMM with closed-form updates (supplement Alg. 3)."""

    name = "admm-closed"
    summary = "Standard ADMM (paper supp. Alg. 3): full-batch closed-form W, Z, A updates, multipliers U, V on every constraint"
    implementation = "admm_core.methods.admm_closed:ADMMClosed"
    dual_vars = ("u", "v")

    def extra_floats(self, widths) -> int:
        return sum(widths) + sum(widths[:-1])  # a dual U_l per layer, V_l per hidden layer

    weight_decay: float = setting(5e-5, "λ: weight decay λ‖W‖² (paper: 5e-5)", positive=False, label="λ — weight decay")


@dataclass(frozen=True)
class TaylorSettings(ClosedFormADMMSettings):
    """Taylor et al. 2016 (Alg. 1)."""

    name = "taylor"
    summary = "Taylor et al. 2016: closed-form ADMM, Bregman multiplier on the output layer only, warm start"
    implementation = "admm_core.methods.taylor:Taylor"
    dual_vars = ("u",)

    warm_start_iters: int = setting(
        10,
        "first outer iterations without the multiplier update (Taylor et al. §6 warm start)",
        min=0,
        label="Warm-start iterations",
    )


@dataclass(frozen=True)
class DLADMMSettings(LiftedSettings):
    """dlADMM (Wang et al. 2019)."""

    name = "dladmm"
    summary = "dlADMM (Wang et al. 2019): backward-then-forward sweeps, linearised W/A steps with backtracking, dual on the last layer"
    implementation = "admm_core.methods.dladmm:DLADMM"
    dual_vars = ("u",)
    solve_eps = 0.0  # dlADMM solves no linear systems (not a setting)

    rho: float = setting(1e-6, "ρ (= ν): initial penalty (their code: 1e-6)", label="ρ — first penalty")
    rho_max: float = setting(0.1, "upper bound of the ρ schedule (their code: 0.1)", label="ρ cap")
    rho_factor: float = setting(
        10.0, "ρ ← factor·ρ when the training loss rose three times in a row", label="ρ growth factor"
    )
    theta: float = setting(1.0, "θ: initial backtracking constant of the W steps", label="θ — W backtracking")
    tau: float = setting(1.0, "τ: initial backtracking constant of the A steps", label="τ — A backtracking")
    init_std: float = setting(0.1, "W, b ~ N(0, init_std²) (their code: 0.1)", label="Init std of W, b")
    iters_per_epoch: int = setting(1, "outer iterations (backward + forward sweep) per epoch")
    chunk_size: int = setting(16384, "rows per chunk in products (memory bound only)")


@dataclass(frozen=True)
class BCDSettings(LiftedSettings):
    """Block coordinate descent (Zeng et al. 2019, Alg. 1)."""

    name = "bcd"
    summary = "BCD (Zeng et al. 2019): proximal block coordinate descent on the lifted ReLU network, no multipliers"
    implementation = "admm_core.methods.bcd:BCD"

    gamma: float = setting(
        1.0, "γ: weight of A_ℓ = relu(Z_ℓ) (and A_L = Z_L) (their code: 1)", label="γ — activation weight"
    )
    rho: float = setting(1.0, "ρ: weight of Z_ℓ = A_{ℓ−1}W_ℓᵀ + b_ℓ (their code: 1)", label="ρ — linear weight")
    alpha: float = setting(
        5.0,
        "α: proximal weight keeping each block near its previous value (their code: 5)",
        label="α — proximal weight",
    )
    init_std: float = setting(0.01, "W ~ init_std·N(0, 1) (their code: 0.01)", label="Init std of W")
    init_bias: float = setting(0.1, "b = init_bias (their code: 0.1)", positive=False, label="Initial bias b")
    iters_per_epoch: int = setting(1, "outer iterations (backward sweeps) per epoch")
    solve_eps: float = setting(1e-7, "relative jitter of linear solves (× mean diagonal)", positive=False)
    chunk_size: int = setting(16384, "rows per chunk in products (memory bound only)")
