"""Block-ADMM's state and what its initialisation needs: Z by a forward pass (Alg. 1), the memory
check before Z and U are allocated, BatchNorm's calibration, the coupling terms P_t."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...errors import ConfigError
from ..base import MethodState, TrainBatch
from ..masks import rng_kept


@dataclass
class BlockADMMState(MethodState):
    """Everything Block-ADMM changes while it trains."""

    z: list[torch.Tensor]  # Z_t, t = 1..T, each (N, *d_t)
    u: list[torch.Tensor]  # U_t, same shapes as Z_t
    beta: list[float]  # β_t (changes only with the adaptive penalty or its growth)
    z_lr: list[float]  # ζ_t
    opt: torch.optim.Optimizer  # Θ optimizer, one parameter group per block
    gen: torch.Generator  # minibatch draws
    z_m: list[torch.Tensor] | None = None  # Adam moments of Z (z_optimizer='adam')
    z_v: list[torch.Tensor] | None = None
    z_steps: int = 0  # Z sweeps so far (minibatch schedule: Z-updates of each row so far)
    iteration: int = 0  # dual steps so far (minibatch schedule: epochs, each a dual step of every row)
    epoch: int = 0  # epochs done (the Θ schedule's clock)
    rho_bound: float = 1.0  # η_k, the bound on ‖h‖ of the adaptive penalty
    residuals: list[float] = field(default_factory=list)  # RMS ‖Z_t − block_t(Z_{t−1})‖ at the last dual step
    lip_vecs: list = field(default_factory=list)  # warm-start vectors of the power iterations
    lips: list[float] = field(default_factory=list)  # L_t at the last Z sweep
    lip_calls: int = 0  # Z-updates that asked for ζ_t,eff (power_every counts them)
    z_moves: list = field(default_factory=list)  # this epoch's [Σ‖Z_t-step‖², Σ‖Z_t‖², rows] per block
    theta_moves: list[float] = field(default_factory=list)  # ‖ΔΘ_t‖/‖Θ_t‖ over the last epoch

    def record_move(self, t: int, step: torch.Tensor, z: torch.Tensor) -> None:
        """Add a Z_t-step of some rows (and those rows' new Z_t) to this epoch's sums."""
        acc = self.z_moves[t] if t < len(self.z_moves) else None
        if acc is not None:  # tensors on the data's device: no sync per minibatch
            acc[0] = acc[0] + squared_norm(step)
            acc[1] = acc[1] + squared_norm(z)
            acc[2] += int(z.shape[0])


def squared_norm(x: torch.Tensor) -> torch.Tensor:
    """Σ x² as a float64 0-d tensor, for the epoch's sums of residuals and Z-steps: ‖x‖ reduced in
    ``x``'s own dtype (float32: relative error ~1e-7, torch's reduction is blockwise), then squared
    in float64 so the sums over minibatches lose nothing. A float64 reduction cost 10× as much
    (5.8 against 0.57 ms for a minibatch of mnist-net's Z_1, 64×64×24×24, one CPU thread): three of
    them per block per minibatch were about a tenth of block-admm's epoch."""
    return torch.linalg.vector_norm(x.detach()).to(torch.float64).square()


def coupling_grad(beta, us):
    """∇_r P_t = β_t (r + U_t) as a function of (t, r) (β_t = 1: r + U_t, the same numbers without
    the product); ``beta`` is read at each call."""

    def grad(t: int, r: torch.Tensor) -> torch.Tensor:
        w = r + us[t]
        return w if beta[t] == 1 else beta[t] * w

    return grad


def coupling_terms(beta, us) -> list:
    """P_t as a function of its residual r = Z_t − block_t(Z_{t−1}): β_t/2 ‖r + U_t‖² per block."""
    return [(lambda r, u=u, b=b: 0.5 * b * (r + u).pow(2).sum()) for b, u in zip(beta, us)]


def none_like(t: torch.Tensor) -> torch.Tensor:
    """A placeholder with no rows for a block another process owns (0 bytes; any use fails loudly)."""
    return t.new_empty((0, *t.shape[1:]))


def rows_of(t: torch.Tensor, idx, held: bool):
    """``t[idx]``, or None for a block this process does not hold."""
    return t[idx] if held else None


@torch.no_grad()
def forward_z(net, batch: TrainBatch, chunk: int) -> list[torch.Tensor]:
    """Z_t := block_t(Z_{t−1}) for every row, Z_0 = X (Alg. 1's initialisation), in chunks of rows;
    kept in the parameters' dtype (float32 under bf16 autocast; float64 when the network is)."""
    dtype = next(net.parameters()).dtype
    parts = [[] for _ in range(net.T)]
    for s in range(0, batch.n, chunk):
        for t, z in enumerate(net.forward_all(batch.x[s : s + chunk])):
            parts[t].append(z.to(dtype))
    return [torch.cat(p) for p in parts]


def free_bytes(device: torch.device) -> int:
    """Memory free for new tensors on ``device``: CUDA's free memory, else MemAvailable."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: do not block


@torch.no_grad()
def calibrate_batchnorm(net: torch.nn.Module, x: torch.Tensor, chunk: int) -> int:
    """Running mean/variance of every BatchNorm layer := their average over train-mode passes of
    ``x`` in chunks (weights untouched; each layer's momentum restored). Returns how many layers."""
    bns = [m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not bns:
        return 0
    saved = [m.momentum for m in bns]
    was_training = net.training
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the chunks
    net.train()
    with rng_kept(x.device):  # dropout's masks here leave the stream training draws from untouched
        for s in range(0, len(x), chunk):
            net.forward_all(x[s : s + chunk])
    for m, momentum in zip(bns, saved):
        m.momentum = momentum
    net.train(was_training)
    return len(bns)


def check_state_fits(name: str, net, batch: TrainBatch, copies: int = 2, headroom: float = 0.9) -> int:
    """Bytes of the per-sample state (Z_t and U_t, float32, ``copies`` tensors per block);
    raises ConfigError at once when they exceed ``headroom`` × the device's free memory.

    A small local check before the allocation (the generic estimate of a whole run is
    ``admm_core.spec.resources``). Shapes come from a forward pass of one sample: at the paper's
    CIFAR-10 split, Z_1 is (128, 16, 16) per sample, so Z and U of 50,000 samples take
    50,000 · (32,768 + 10) · 4 B · 2 ≈ 13.1 GB.
    """
    per_sample = sum(int(z[0].numel()) for z in net.forward_all(batch.x[:1]))
    need = batch.n * per_sample * 4 * copies
    free = free_bytes(batch.x.device)
    if need > headroom * free:
        raise ConfigError(
            f"{name}: Z and U need {need / 1e9:.1f} GB ({batch.n:,} samples × {per_sample:,} values × 4 B × {copies}) "
            f"but {batch.x.device} has {free / 1e9:.1f} GB free; use fewer samples (data.train_limit), a narrower "
            "network (model.width) or a device with more memory"
        )
    return need
