"""Curvature-scaled Z steps: Lipschitz constants of the blocks by warm-started power
iteration, and the step sizes ζ_t,eff they give (``z_step='scaled'``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


# Leaf modules whose Lipschitz constant is ≤ 1 (element-wise, in eval mode): a block made of
# these and Linear layers is bounded by the product of its weights' spectral norms.
def _one_lipschitz() -> tuple:
    return (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Flatten, nn.Identity, nn.Dropout)  # a call: torch imported on use


JACOBIAN_ROWS = 16  # rows of Z_{t−1} on which a general block's Jacobian is power-iterated


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm().clamp_min(1e-30)


@torch.no_grad()
def spectral_norm(w: torch.Tensor, v: torch.Tensor, steps: int) -> tuple[float, torch.Tensor]:
    """σ_max(W) by ``steps`` power-iteration steps on WᵀW from the (warm) unit vector v.

    Returns (‖W v‖, v): a lower bound on σ_max that converges to it; warm-started across
    calls, two steps a call track a W that moves by small Θ-steps.
    """
    w = w.reshape(w.shape[0], -1)
    for _ in range(steps):
        v = _unit(w.T @ (w @ v))
    return float((w @ v).norm()), v


def jacobian_norm(block: nn.Module, inp: torch.Tensor, v: torch.Tensor, steps: int) -> tuple[float, torch.Tensor]:
    """‖∂block/∂z‖₂ at rows ``inp`` by power iteration on JᵀJ (one Jv and one Jᵀw a step).

    The rows are independent (eval mode), so J is block-diagonal and the estimate is the
    largest per-row Jacobian norm among these rows: a local estimate, not a global bound.
    Jv is taken by reverse mode only, from the graph of Jᵀw (linear in w): Jv = ∂(Jᵀw)/∂w · v.
    Forward-mode AD (``torch.func.jvp``) would do it in one pass, but its first use makes torch
    compile its jvp decompositions with the deprecated ``torch.jit.script``, which prints a
    FutureWarning into the user's console.
    """
    inp = inp.detach()
    n = inp.shape[0]
    if v.shape[0] < n:  # the warm vector came from a smaller (last) minibatch: tile it back to n rows
        v = _unit(v.repeat(-(-n // v.shape[0]), *[1] * (v.dim() - 1))[:n])
    v = v[:n].to(inp)
    # second derivatives: the fused attention kernels (flash, memory-efficient) have no double
    # backward on the CPU; the math kernel computes the same function from differentiable ops
    with torch.enable_grad(), sdpa_kernel([SDPBackend.MATH]):
        inp = inp.requires_grad_()
        out = block(inp)
        w = torch.zeros_like(out, requires_grad=True)
        jt_w = torch.autograd.grad(out, inp, w, create_graph=True)[0]  # Jᵀw, with its graph in w

        def jv_of(v):
            return torch.autograd.grad(jt_w, w, v, retain_graph=True)[0]

        for _ in range(steps):
            v = _unit(torch.autograd.grad(out, inp, jv_of(v), retain_graph=True)[0])  # JᵀJv
        jv = jv_of(v)
    return float(jv.detach().norm()), v.detach()


def lipschitz_vectors(blocks: Sequence[nn.Module], shapes: Sequence[tuple], gen: torch.Generator) -> list[list]:
    """Initial warm-start vectors per block: one per Linear layer, or one Jacobian probe.

    ``shapes[t]`` is the per-sample shape of block t's input Z_{t−1}.
    """
    out = []
    for block, shape in zip(blocks, shapes):
        if _is_linear_chain(block):
            vs = [m.weight.shape[1] for m in block.modules() if isinstance(m, nn.Linear)]
            out.append([_unit(torch.randn(n, generator=gen, dtype=torch.float64)) for n in vs])
        else:
            out.append([_unit(torch.randn((JACOBIAN_ROWS, *shape), generator=gen))])
    return out


def _is_linear_chain(block: nn.Module) -> bool:
    leaves = [m for m in block.modules() if not list(m.children())]
    # a traced block (admm_core.cuts) may hold functions between its modules (a residual add, a
    # scaling): the product of the Linear norms bounds L only for modules alone
    traced = [m for m in block.modules() if isinstance(m, torch.fx.GraphModule)]
    if any(n.op in ("call_function", "call_method") for m in traced for n in m.graph.nodes):
        return False
    return all(isinstance(m, (nn.Linear, *_one_lipschitz())) for m in leaves)


def lipschitz_estimates(
    blocks: Sequence[nn.Module], inputs: Sequence[torch.Tensor | None], vecs: list[list], steps: int
) -> list[float]:
    """L_t per block (updates the warm vectors in ``vecs`` in place).

    - Linear layers with 1-Lipschitz activations: L_t = Π ‖W‖₂ (an upper bound up to the
      power iteration's convergence).
    - Any other block (conv, BatchNorm, ResNet stages): the Jacobian norm at the first
      ``JACOBIAN_ROWS`` rows of ``inputs[t]`` (a local estimate at the current Z).
    ``inputs[t]`` may be None for a block whose L is not needed (block 1); it gets 0.
    """
    out = []
    for t, block in enumerate(blocks):
        if inputs[t] is None:
            out.append(0.0)
        elif _is_linear_chain(block):
            L, lins = 1.0, [m for m in block.modules() if isinstance(m, nn.Linear)]
            for i, lin in enumerate(lins):
                s, vecs[t][i] = spectral_norm(lin.weight.detach().double(), vecs[t][i].to(lin.weight.device), steps)
                L *= s
            out.append(L)
        else:
            # in the parameters' precision, outside any autocast (torch.func's jvp meets bf16 weights
            # with float32 tangents there)
            dtype = next(block.parameters()).dtype
            with torch.autocast(inputs[t].device.type, enabled=False):
                L, vecs[t][0] = jacobian_norm(block, inputs[t][:JACOBIAN_ROWS].to(dtype), vecs[t][0], steps)
            out.append(L)
    return out


def z_step_sizes(
    z_lr: Sequence[float], beta: Sequence[float], lips: Sequence[float], loss_curvature: float, scaled: bool
) -> list[float]:
    """ζ_t,eff per block.

    fixed:  ζ_t.
    scaled: ζ_t / (β_t + β_{t+1} L²_{t+1}) for t < T and ζ_T / (β_T + c_J) for Z_T, where the
    denominators bound the curvature of Z_t's objective (P_t + P_{t+1}, resp. J + P_T; c_J is
    the largest eigenvalue of J's Hessian: 1 for MSE, ½ for cross-entropy). A gradient step
    is stable for ζ_t < 2, and ζ = 1 with MSE puts Z_T exactly on argmin J + P_T.
    """
    T = len(beta)
    if not scaled:
        return list(z_lr)
    out = [z_lr[t] / (beta[t] + beta[t + 1] * lips[t + 1] ** 2) for t in range(T - 1)]
    return out + [z_lr[T - 1] / (beta[T - 1] + loss_curvature)]


def loss_grad(loss, y: torch.Tensor):
    """``Z_T ↦ ∇J(y, Z_T)`` in closed form where the loss has one (losses.py), else None (autograd)."""
    grad = getattr(loss, "grad", None)
    return None if grad is None else (lambda z: grad(z, y))


def loss_curvature(loss) -> float:
    """c_J of an objective: its ``curvature`` attribute (losses.py sets it), else 1."""
    return float(getattr(loss, "curvature", 1.0))
