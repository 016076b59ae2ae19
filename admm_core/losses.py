"""Training objectives J(Y, Z_T), summed over samples (so J separates per sample).

- ``mse``: J = Σ_i ½ ‖z_i − onehot(y_i)‖².  With β_T = 1 the Z_T-step with ζ = 0.5
  lands exactly on the minimiser of J + P_T.
- ``ce``:  J = Σ_i −log softmax(z_i)[y_i].

Each has ``grad(z, y)``, ∇_z J in closed form (z − onehot(y), softmax(z) − onehot(y)), and
``curvature``, c_J.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def mse_sum(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 0.5 * (z - F.one_hot(y, z.shape[1]).to(z.dtype)).pow(2).sum()


def ce_sum(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(z, y, reduction="sum")


def _mse_grad(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return z - F.one_hot(y, z.shape[1]).to(z.dtype)


def _ce_grad(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # at least float32 (cross_entropy's precision under autocast), returned in z's dtype as autograd's
    w = torch.promote_types(z.dtype, torch.float32)
    return (torch.softmax(z.to(w), 1) - F.one_hot(y, z.shape[1]).to(w)).to(z.dtype)


# ∇_z J in closed form (the Z_T-step's gradient without an autograd call)
mse_sum.grad = _mse_grad
ce_sum.grad = _ce_grad

# c_J: largest eigenvalue of J's Hessian per sample (bounds the Z_T-step's curvature)
mse_sum.curvature = 1.0
ce_sum.curvature = 0.5  # softmax Hessian diag(p) − ppᵀ has eigenvalues ≤ ½

LOSSES = {"mse": mse_sum, "ce": ce_sum}


def get_loss(name: str):
    return LOSSES[name]
