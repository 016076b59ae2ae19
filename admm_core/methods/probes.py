"""How close a block update is to backprop: ∇_{Θ_t} P_t against ∇_{Θ_t} J, as cosines per block."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def block_update_grads(net, inputs: Sequence[torch.Tensor], coupling_losses, blocks=None) -> list:
    """∇_{Θ_t} P_t per block, flattened (the direction a Θ-step descends), without stepping
    (None for a block not in ``blocks``, where given: another process owns it)."""
    out = []
    with torch.enable_grad():
        for t, block in enumerate(net.blocks):
            if blocks is not None and t not in blocks:
                out.append(None)
                continue
            params = [p for p in block.parameters() if p.requires_grad]
            g = torch.autograd.grad(coupling_losses(t, block(inputs[t].detach())), params, allow_unused=True)
            out.append(
                torch.cat([(gi if gi is not None else torch.zeros_like(p)).reshape(-1) for gi, p in zip(g, params)])
            )
    return out


def backprop_grads(net, x: torch.Tensor, y: torch.Tensor, loss) -> list[torch.Tensor]:
    """∇_{Θ_t} J(y, net(x)) per block, flattened: the end-to-end gradient."""
    params = [[p for p in b.parameters() if p.requires_grad] for b in net.blocks]
    with torch.enable_grad():
        g = torch.autograd.grad(loss(net(x), y), [p for ps in params for p in ps], allow_unused=True)
    out, i = [], 0
    for ps in params:
        out.append(
            torch.cat(
                [(g[i + j] if g[i + j] is not None else torch.zeros_like(p)).reshape(-1) for j, p in enumerate(ps)]
            )
        )
        i += len(ps)
    return out


def cosines(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> list[float]:
    """cos∠(a_t, b_t) per block (0 where either is zero).

    Each side is normalised first, in float64: a deep network's vanishing gradients (1e-20 and
    below in float32) would otherwise make ‖a‖‖b‖ a denormal and the quotient leave [−1, 1].
    """
    out = []
    for u, v in zip(a, b):
        u, v = u.double(), v.double()
        nu, nv = u.norm(), v.norm()
        out.append(float(((u / nu) @ (v / nv)).clamp(-1.0, 1.0)) if nu > 0 and nv > 0 else 0.0)
    return out


def probe_rows(n: int, size: int, seed: int) -> torch.Tensor:
    """The rows of the diagnostic minibatch: seeded, so probing never touches the training draws."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:size]
