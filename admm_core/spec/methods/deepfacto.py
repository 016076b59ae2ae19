"""DeepFacto's record: the method of its own kind of run (:data:`admm_core.spec.kinds.KINDS` "deepfacto").

Its settings are the algorithm's (rank r, γ, β, ζ, the NMF and Θ steps, the embedding), declared once
here; a run's :class:`~admm_core.spec.deepfacto.DeepFactoConfig` derives from this record (the
algorithm's settings plus the run's own). It runs with its own task of
the run loop, :class:`admm_core.deepfacto.run.DeepFactoTask` (its state is
:class:`~admm_core.deepfacto.trainer.DeepFactoState`, its iterations
:class:`~admm_core.deepfacto.trainer.DeepFactoTrainer`'s), on the records of its kind: LFWA and the face
backbone ``face-resnet18s`` (:mod:`admm_core.spec.faces`). The network methods' loop never runs it: the
record declares no implementation of the network protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..faces import FACE_FEATURES
from ..kinds import DEEPFACTO
from .base import FLOAT_BYTES, MethodBase, StateSizes, setting

S_MODES = ("projection", "admm")
M_UPDATES = ("gradient", "exact")


@dataclass(frozen=True)
class DeepFacto(MethodBase):
    """Block-ADMM on backbone → NMF module → FC (T = 2 blocks, Z_1 ≈ M S with M, S ≥ 0):

    J(Y, Z_2) + β/2 ‖Z_1 − block_1(X) + U_1‖² + γ/2 ‖Z_1 − M S + V‖² + β/2 ‖Z_2 − block_2(S) + U_2‖²,

    J the batch-hard triplet loss on Z_2/‖Z_2‖ (margin ``margin``). Each iteration: a ζ-step on Z_2,
    ``m_steps`` projected M-steps (or the exact NNLS in M), S (the projection P_M(block_1(X)) or
    ``s_steps`` projected steps), the Z_1-step, Adam steps on Θ_1 (fine-tune only, η_1 =
    ``backbone_lr_ft``) and Θ_2 (η_2 = ``fc_lr``), then the dual steps (V by ``nmf_dual_step``).
    """

    name = "deepfacto"
    summary = "DeepFacto: face backbone → NMF module (rank r) → triplet FC, by Block-ADMM (LFWA only)"
    kind: ClassVar[str] = DEEPFACTO  # admm_core.spec.kinds: it runs with DeepFactoTask, not the network loop
    uses_blocks = True
    # what its metrics lines carry (admm_core.deepfacto.run), drawn per epoch by the dashboard
    live_unit: ClassVar[str] = "epoch"  # one outer iteration over all admm_images (DeepFactoConfig)
    live_accuracy: ClassVar[str] = "Face verification accuracy (%)"
    live_metrics: ClassVar[tuple[str, ...]] = ("residuals", "dual_norms", "nmf")
    live_charts: ClassVar[dict] = {
        "residuals": {
            "title": "Constraint residual (RMS per image)",
            "names": ("Z₁ − block₁(X)", "Z₁ − MS", "Z₂ − block₂(S)"),
        },
        "dual_norms": {"title": "Dual norms (RMS per image)", "names": ("U₁", "V", "U₂")},
        "nmf": {
            "title": "NMF module: relative residuals",
            "lines": (
                ("nmf_residual", "‖Z₁ − MS‖/‖Z₁‖"),
                ("nmf_residual_backbone", "‖block₁(X) − MS‖/‖block₁(X)‖"),
                ("reconstruction_error", "same, S from the test-time projection"),
                ("s_mismatch", "‖S_train − S_test‖/‖S_test‖"),
            ),
        },
    }

    # the algorithm's settings, declared once: a run's DeepFactoConfig derives from this record
    rank: int = setting(32, "r: rank of the NMF module (paper: 4, 32, 256)", label="NMF rank r")
    gamma: float = setting(1.0, "γ: weight of the NMF term γ/2‖Z_1 − MS + V‖²", label="γ — NMF weight")
    beta: float = setting(1.0, "β_1 = β_2: weight of the coupling terms", label="β — coupling weight")
    z_lr: float = setting(0.1, "ζ: step of the Z_2 update", label="ζ — Z₂ step size")
    s_mode: str = setting(
        "projection",
        "S in training: the test-time projection P_M(block_1(X)) (projection) or the paper's free variable (admm)",
        choices=S_MODES,
        label="S in training",
    )
    nmf_dual_step: float = setting(
        1.0,
        "V ← V + step·(Z_1 − MS): 1 = ADMM, 0 = penalty only",
        positive=False,
        max=1.0,
        label="V step (1 ADMM, 0 penalty)",
    )
    s_steps: int = setting(3, "projected S steps per iteration (s_mode admm)", label="S steps per iteration")
    m_steps: int = setting(
        5,
        "projected M steps per iteration (m_update gradient)",
        label="M steps per iteration",
    )
    m_update: str = setting(
        "gradient",
        "M-step: projected gradient steps, or the convex NNLS in M solved exactly",
        choices=M_UPDATES,
        label="M-step",
    )
    fc_lr: float = setting(1e-3, "η_2: Adam step of block 2 (the FC layer)", label="η₂ — FC step size")
    backbone_lr_ft: float = setting(
        1e-4, "η_1: Adam step of block 1 in the fine-tune phase", label="η₁ — backbone fine-tune step"
    )
    emb_dim: int = setting(128, "d: embedding size of the FC layer", label="d — embedding size")
    margin: float = setting(0.2, "triplet margin", label="Triplet margin")

    def estimate_state_bytes(self, s: StateSizes) -> int:
        """Bytes of :class:`DeepFactoState`: block_1(X), Z_1, U_1, V (N·C·n each), S (N·r·n), M (C·r),
        Z_2 and U_2 (N·d each); ``s.block_out[0]`` = C·n, the size of Z_1 per image."""
        cn = s.block_out[0]
        n_pos = cn // FACE_FEATURES
        return FLOAT_BYTES * (s.n * (4 * cn + self.rank * n_pos + 2 * self.emb_dim) + FACE_FEATURES * self.rank)

    def theta_moments(self) -> int:
        return 2  # Adam on Θ_1 and Θ_2
