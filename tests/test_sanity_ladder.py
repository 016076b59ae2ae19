"""The sanity ladder on ResNet-18: Block-ADMM's Θ-update, as the methods actually take it,
against backprop's gradient in the same BatchNorm modes.

Rung (a): online-admm with a small ζ and one sweep starts z at the forward pass, so each block's
coupling gradient is backprop's times a per-block scalar: cosine ≥ 0.99 per block, BatchNorm
included ("small": ζ = 0.1; at ζ = 1 block 2's input has moved enough to give 0.97, and below
ζ ≈ 1e-3 the targets' shift falls under float32 rounding of the activations: 0.37), on the
gradient the optimizer is handed (captured at ``opt.step``), not on a re-computation.
The same check fails with BatchNorm's running statistics in the forward start (the bug that kept
online-admm at chance), and the dashboard's diagnostic reads the same number.
"""

from __future__ import annotations

import copy

import pytest
import torch

from admm_core.blocks import build_blocknet
from admm_core.losses import get_loss
from admm_core.methods import make_method
from admm_core.methods.base import TrainBatch
from admm_core.methods.probes import backprop_grads, cosines
from admm_core.spec.config import ModelConfig

N = 24


def resnet_and_batch(seed: int = 0):
    """ResNet-18 (width 4, BatchNorm everywhere) split after conv3_x, with calibrated running
    statistics far from this minibatch's (as mid-training), and one minibatch = the whole set."""
    net = build_blocknet(ModelConfig("resnet18", split=("conv3_x",), width=4), (3, 32, 32), 10, seed=seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, 3, 32, 32, generator=g) * 1.5 + 0.3
    y = torch.randint(0, 10, (N,), generator=g)
    net.train()
    with torch.no_grad():  # running statistics from other data: eval mode ≠ train mode here
        for _ in range(20):
            net(torch.randn(N, 3, 32, 32, generator=g))
    return net, TrainBatch(x, y, get_loss("ce"), batch_size=N)


def captured_theta_grads(method, net, batch) -> list[torch.Tensor]:
    """Run one epoch (= one minibatch) and return, per block, the flattened gradient the Θ
    optimizer was handed at its first step."""
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    seen = []
    step = state.opt.step

    def spy(*a, **k):
        if not seen:
            for block in net.blocks:  # the optimizer holds every block's Θ in one group
                seen.append(torch.cat([p.grad.reshape(-1).clone() for p in block.parameters()]))
        return step(*a, **k)

    state.opt.step = spy
    method.run_epoch(net, state, batch)
    return seen


def backprop_reference(net, batch) -> list[torch.Tensor]:
    """∇_Θ J per block in train mode on the whole set (BatchNorm on its statistics), on a copy."""
    ref = copy.deepcopy(net).train()
    return backprop_grads(ref, batch.x, batch.y, batch.loss)


@pytest.mark.parametrize("z_step,z_lr", [("scaled", 0.1), ("fixed", 0.1)])
def test_online_admm_small_zeta_takes_backprops_direction_on_resnet18(z_step, z_lr):
    net, batch = resnet_and_batch()
    ref = backprop_reference(net, batch)
    method = make_method("online-admm", {"z_lr": z_lr, "z_step": z_step, "primal_steps": 1, "theta_optimizer": "sgd"})
    cos = cosines(captured_theta_grads(method, net, batch), ref)
    assert min(cos) >= 0.99, cos


def test_the_same_check_fails_with_running_statistics_in_the_forward_start():
    net, batch = resnet_and_batch()
    ref = backprop_reference(net, batch)
    method = make_method("online-admm", {"z_lr": 0.1, "primal_steps": 1, "theta_optimizer": "sgd", "bn_mode": "eval"})
    cos = cosines(captured_theta_grads(method, net, batch), ref)
    assert min(cos) < 0.9, cos  # eval-mode targets, train-mode fit: not backprop's direction


@pytest.mark.parametrize("bn_mode,close", [("train", True), ("eval", False)])
def test_the_diagnostic_reads_the_update_that_is_taken(bn_mode, close):
    net, batch = resnet_and_batch()
    # fixed ζ: the scaled step's L_t is estimated on the first rows, which the probe draws in another order
    settings = {"z_lr": 0.1, "z_step": "fixed", "bn_mode": bn_mode}
    method = make_method("online-admm", {**settings, "primal_steps": 1, "theta_optimizer": "sgd"})
    ref = backprop_reference(net, batch)
    taken = cosines(captured_theta_grads(method, copy.deepcopy(net), batch), ref)
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    diag = method.backprop_cosine(net, state, batch)
    # the probe moves nothing: weights and running statistics as they were
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert diag == pytest.approx(taken, abs=1e-3)
    assert (min(diag) >= 0.99) == close, diag


def test_block_admm_from_a_forward_start_with_small_zeta_takes_backprops_direction():
    """Batch Block-ADMM, minibatch schedule, Z started at the forward pass, U = 0 at the first step:
    the same rung for the batch method (its first Θ-step)."""
    net, batch = resnet_and_batch()
    ref = backprop_reference(net, batch)
    settings = {"z_lr": 0.1, "z_schedule": "minibatch", "z_start": "forward", "bn_mode": "train"}
    method = make_method("block-admm", {**settings, "primal_steps": 1, "theta_optimizer": "sgd"})
    cos = cosines(captured_theta_grads(method, net, batch), ref)
    assert min(cos) >= 0.99, cos


# --- small steps deep in a network survive float32 -----------------------------------------------


def deep_sweep(net, x, y, z_lr: float, displacement: bool, dtype=torch.float32) -> list[torch.Tensor]:
    """δ_t = Z_t − block_t(Z_{t−1}) after one reverse sweep from the forward pass (fixed ζ, U = 0),
    computed in the displacement form or as the plain difference of two activations."""
    from admm_core.methods.zsweep import forward_start, reverse_z_sweep

    net = copy.deepcopy(net).to(dtype)
    x = x.to(dtype)
    T = net.T
    zs, forwards = forward_start(net.blocks, x)
    couplings = [lambda r: 0.5 * r.pow(2).sum()] * T
    offsets = [None] * T
    new = reverse_z_sweep(
        net.blocks,
        x,
        zs,
        lambda z: 0.5 * (z - torch.nn.functional.one_hot(y, 10).to(dtype)).pow(2).sum(),
        couplings,
        lambda t, z, g: z - z_lr * g,
        forwards=forwards if displacement else None,
        offsets=offsets if displacement else None,
    )
    if displacement:
        return offsets
    with torch.no_grad():  # the plain form: δ_t = Z_t − block_t(Z_{t−1}) as two activations subtracted
        return [new[t] - forwards[t][1].detach() for t in range(T)]


def test_the_displacement_form_keeps_a_deep_networks_small_steps_in_float32():
    """20 one-layer blocks (the paper's deep MLP): δ_1 is ~ζ^19 of the top step, 1e-18 here.
    Subtracting two activations loses it (even in float64); stepping the displacement keeps it."""
    from admm_core.blocks import build_blocknet as build

    net = build(ModelConfig("mlp", (32,) * 19), (64,), 10, seed=0)
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
    ref = deep_sweep(net, x, y, 0.3, displacement=True, dtype=torch.float64)
    plain64 = deep_sweep(net, x, y, 0.3, displacement=False, dtype=torch.float64)
    exact = deep_sweep(net, x, y, 0.3, displacement=True)
    plain = deep_sweep(net, x, y, 0.3, displacement=False)

    def rel(a, b):
        return float((a.double() - b).norm() / b.norm())

    assert float(ref[0].abs().max()) < 1e-15  # far below the resolution of an activation, even in float64
    # the same update: where the plain float64 difference still resolves it, the two forms agree
    assert all(rel(plain64[t], ref[t]) < 1e-6 for t in range(12, 20))
    assert all(rel(exact[t], ref[t]) < 1e-5 for t in range(20))  # float32 displacements: every block
    assert rel(plain[0], ref[0]) > 0.5 and rel(plain[8], ref[8]) > 0.5  # float32 differences: lost


def test_with_zeta_beta_one_and_the_forward_starts_inputs_the_first_theta_step_is_backprops_gradient():
    """From a forward start with U = 0, a fixed ζ = 1/β makes δ_T = −∇J/β and δ_t = J_{t+1}ᵀ δ_{t+1}:
    the reverse sweep is backprop's adjoint recursion. With each Θ_t stepped at the forward pass's
    input (theta_input='start'), β·δ_t pulls Θ_t exactly along backprop's gradient, not just parallel."""
    net, batch = resnet_and_batch()
    ref = backprop_reference(net, batch)
    settings = {"z_schedule": "minibatch", "z_start": "forward", "bn_mode": "train", "theta_input": "start"}
    method = make_method(
        "block-admm", {**settings, "z_lr": 1.0, "beta": 1.0, "primal_steps": 1, "theta_optimizer": "sgd"}
    )
    got = captured_theta_grads(method, net, batch)
    for g, r in zip(got, ref):
        assert float((g * N - r).norm() / r.norm()) < 1e-4  # the same vector (P_t/|i| against J summed)
    # with the moved inputs of Alg. 1 the second block's gradient is no longer backprop's
    alg1 = make_method("block-admm", {**settings, "theta_input": "new", "z_lr": 1.0, "theta_optimizer": "sgd"})
    assert cosines(captured_theta_grads(alg1, copy.deepcopy(resnet_and_batch()[0]), batch), ref)[1] < 0.999


@pytest.mark.parametrize("scale", [1.0, 1e-22, 1e-30])
def test_cosines_of_vanishing_gradients_stay_exact(scale):
    """The 20-layer MLP's bottom blocks get float32 gradients of 1e-20 and less; their cosine must be
    the cosine of the same directions at unit scale (an unnormalised ‖a‖‖b‖ there is a denormal)."""
    g = torch.Generator().manual_seed(0)
    a = [torch.randn(50, generator=g) for _ in range(3)]
    b = [u + 0.5 * torch.randn(50, generator=g) for u in a]
    want = [float(torch.nn.functional.cosine_similarity(u.double(), v.double(), dim=0)) for u, v in zip(a, b)]
    got = cosines([u * scale for u in a], [v * scale for v in b])
    assert got == pytest.approx(want, abs=1e-6)
    assert cosines([torch.zeros(3)], [torch.ones(3)]) == [0.0]


@pytest.mark.parametrize("theta_input,exact", [("start", True), ("new", False)])
def test_the_block_admm_diagnostic_reads_the_theta_inputs_the_step_uses(theta_input, exact):
    """ζβ = 1 from a forward start: U_t cancels out of every residual r_t = δ_t + U_t, so with the Θ-steps
    at the start's inputs the direction is backprop's for any U, and the diagnostic must say so
    (it once read the moved inputs whatever ``theta_input`` said, and reported 0.1–0.9 on a learning run)."""
    net, batch = resnet_and_batch()
    settings = {"z_schedule": "minibatch", "z_start": "forward", "bn_mode": "train", "theta_input": theta_input}
    method = make_method("block-admm", {**settings, "z_lr": 1.0, "beta": 1.0, "primal_steps": 1})
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(2)
    state.u = [torch.randn(u.shape, generator=g) * 0.1 for u in state.u]  # duals far from zero
    cos = method.backprop_cosine(net, state, batch)
    assert (min(cos) > 0.9999) == exact, cos
