"""Training objectives J(Y, Z_T), summed over samples (so J separates per sample).

- ``mse``: J = Σ_i ½ ‖z_i − onehot(y_i)‖².  With β_T = 1 the Z_T-step with ζ = 0.5
  lands exactly on the minimiser of J + P_T.
- ``ce``:  J = Σ_i −log softmax(z_i)[y_i].
"""

from __future__ import annotations

from .lazy import F, torch


def mse_sum(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * (z - F.one_hot(y, z.shape[1]).to(z.dtype)).pow(2).sum()


def ce_sum(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(z, y, reduction="sum")


# c_J: largest eigenvalue of J's Hessian per sample (bounds the Z_T-step's curvature)
mse_sum.curvature = 1.0
ce_sum.curvature = 0.5  # softmax Hessian diag(p) − ppᵀ has eigenvalues ≤ ½

LOSSES = {"mse": mse_sum, "ce": ce_sum}


def get_loss(name: str):
    return LOSSES[name]
