"""Block-ADMM in the paper's vanishing-gradient regime: the knobs that give a deep block a
training signal of its own, checked against independent computations, and the sanity test — on a
network whose bottom-layer backprop gradient is below float32 resolution, block-admm's bottom block
still gets a signal of ordinary relative size, pointing along backprop's (float64) direction."""

from __future__ import annotations

import copy

import pytest
import torch

from admm_core.blocks import build_blocknet
from admm_core.losses import get_loss
from admm_core.methods import make_method
from admm_core.methods.base import TrainBatch
from admm_core.methods.probes import backprop_grads, cosines
from admm_core.methods.zsweep import newton_direction
from admm_core.spec.config import ModelConfig

# --- the sanity test ---------------------------------------------------------------------------

DEPTH, WIDTH, SIGMA, N = 14, 32, 0.02, 64
# from a forward start with ζβ = 1 and U = 0, Θ stepped at the start's inputs, one minibatch = the set
FORWARD = {"z_schedule": "minibatch", "z_start": "forward", "theta_input": "start", "primal_steps": 1}
FORWARD = {**FORWARD, "z_lr": 1.0, "beta": 1.0, "theta_optimizer": "sgd", "dual_theta": "old"}
VARIANTS = {
    "backprop": None,
    "gradient-scaled Z step (ζβ = 1: Adam backprop block by block)": {**FORWARD},
    "z_norm=top": {**FORWARD, "z_norm": "top"},
    "z_norm=signal": {**FORWARD, "z_norm": "signal"},
}
HAS_SIGNAL = {"z_norm=top", "z_norm=signal"}


def vanishing_mlp(dtype=torch.float32):
    """784-free stand-in of the deep MLPs at the paper's normal init: 64 → 13 × 32 → 10, N(0, σ²) weights,
    zero biases (each layer scales a signal by about σ√(n/2) = 0.08), and N random samples."""
    cfg = ModelConfig("mlp", (WIDTH,) * (DEPTH - 1), init="normal", init_std=SIGMA)
    net = build_blocknet(cfg, (64,), 10, seed=0).to(dtype)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 64, generator=g).to(dtype)  # the same samples in either precision
    y = torch.randint(0, 10, (N,), generator=g)
    return net, TrainBatch(x, y, get_loss("mse"), batch_size=N)


def bottom_signal(variant, name="block-admm") -> torch.Tensor:
    """The gradient block 1's Θ is handed at its first step (float32): backprop's ∇_{Θ_1} J, or
    the method's ∇_{Θ_1} P_1 (captured at the optimizer's step)."""
    net, batch = vanishing_mlp()
    if variant is None:
        return backprop_grads(net, batch.x, batch.y, batch.loss)[0]
    method = make_method(name, variant)
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    seen = []
    step = state.opt.step

    def spy(*a, **k):
        if not seen:
            seen.append(torch.cat([p.grad.reshape(-1).clone() for p in net.blocks[0].parameters()]))
        return step(*a, **k)

    state.opt.step = spy
    method.run_epoch(net, state, batch)
    return seen[0]


def has_ordinary_bottom_signal(grad: torch.Tensor, reference: torch.Tensor, theta: torch.Tensor) -> bool:
    """The property: block 1's signal is ≥ 1e-3 of its Θ in size (float32 resolves ~6e-8) and points
    where float64 backprop's does (cosine ≥ 0.99)."""
    rel = float(grad.double().norm() / theta.double().norm())
    return rel >= 1e-3 and cosines([grad], [reference])[0] >= 0.99


@pytest.fixture(scope="module")
def regime():
    net, batch = vanishing_mlp()
    theta = torch.cat([p.detach().reshape(-1) for p in net.blocks[0].parameters()])
    net64, batch64 = vanishing_mlp(torch.float64)
    ref = backprop_grads(net64, batch64.x, batch64.y, batch64.loss)[0]
    return theta, ref


def test_the_network_is_one_where_backprops_bottom_gradient_is_below_float32_resolution(regime):
    theta, ref = regime
    g = bottom_signal(None)
    w1 = theta[: WIDTH * 64]
    assert torch.equal(w1 - g[: WIDTH * 64], w1)  # an SGD step of η = 1 leaves W_1 as it is, bit for bit
    assert float(ref.norm() / theta.double().norm()) < 2.0**-24  # in exact arithmetic too: not a float32 artefact
    assert float(ref.norm()) > 0  # but it is a direction, which float64 resolves


@pytest.mark.parametrize("name", list(VARIANTS))
def test_block_admms_bottom_block_gets_a_signal_of_ordinary_size_where_backprop_gets_none(name, regime):
    theta, ref = regime
    got = has_ordinary_bottom_signal(bottom_signal(VARIANTS[name]), ref, theta)
    # the property holds for the variants that normalise the Z-step per block, and fails (so the check
    # can fail) for backprop and for the gradient-scaled step whose signal is backprop's, block by block
    assert got == (name in HAS_SIGNAL), name


@pytest.mark.parametrize("z_norm,has", [("top", True), ("off", False)])
def test_online_admm_gets_the_same_bottom_signal_with_z_norm(z_norm, has, regime):
    theta, ref = regime
    online = {"z_lr": 1.0, "z_step": "fixed", "theta_input": "start", "theta_optimizer": "sgd", "z_norm": z_norm}
    assert has_ordinary_bottom_signal(bottom_signal(online, "online-admm"), ref, theta) == has


# --- the knobs, against independent computations ---------------------------------------------------


def test_newton_direction_solves_the_linearised_sub_problem_exactly():
    """CG on (β_t I + β_{t+1} JᵀJ) d = g with J from the block's graph equals a dense solve (float64),
    for a linear next block and for Linear + ReLU (J = diag(mask) W)."""
    g = torch.Generator().manual_seed(1)
    W = torch.randn(5, 7, generator=g, dtype=torch.float64) * 0.3
    b = torch.randn(5, generator=g, dtype=torch.float64)
    z = torch.randn(4, 7, generator=g, dtype=torch.float64).requires_grad_()
    rhs = torch.randn(4, 7, generator=g, dtype=torch.float64)
    for relu in (False, True):
        pre = z @ W.T + b
        out = pre.clamp_min(0) if relu else pre
        d = newton_direction(rhs, z, out, 0.5, 40.0, iters=7)  # 7 = the unknowns per row: CG is exact
        for i in range(4):
            J = W * (pre[i] > 0).double()[:, None] if relu else W
            want = torch.linalg.solve(0.5 * torch.eye(7, dtype=torch.float64) + 40.0 * J.T @ J, rhs[i])
            assert torch.allclose(d[i], want, rtol=1e-8, atol=1e-10)


def tiny_net_and_batch(seed=0, n=48):
    net = build_blocknet(ModelConfig("mlp", (12, 9)), (6,), 4, seed=seed).double()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 4, (n,), generator=g)
    return net, TrainBatch(x, y, get_loss("mse"), batch_size=16)


def _epochs(settings, epochs, between=None, seed=0):
    net, batch = tiny_net_and_batch(seed)
    method = make_method("block-admm", settings)
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    for e in range(epochs):
        if between is not None and e > 0:
            between(state, e)
        method.run_epoch(net, state, batch)
    return net, method, state, batch


MB = {"z_schedule": "minibatch", "z_start": "previous", "primal_steps": 1, "z_lr": 0.3}


def test_a_dual_reset_is_zeroing_u_by_hand_between_epochs():
    _, _, a, _ = _epochs({**MB, "dual_reset": 2}, 3)
    _, _, b, _ = _epochs(MB, 3, between=lambda s, e: [u.zero_() for u in s.u] if e == 2 else None)
    _, _, c, _ = _epochs(MB, 3)
    assert all(torch.equal(x, y) for x, y in zip(a.u, b.u))
    assert not all(torch.equal(x, y) for x, y in zip(a.u, c.u))


def test_duals_stay_zero_until_dual_start_then_move():
    _, _, s1, _ = _epochs({**MB, "dual_start": 2}, 2)
    assert all(float(u.abs().max()) == 0 for u in s1.u)
    _, _, s2, _ = _epochs({**MB, "dual_start": 2}, 3)
    assert all(float(u.abs().max()) > 0 for u in s2.u)


def test_beta_growth_keeps_the_multiplier_and_zeta_beta():
    settings = {**MB, "beta_growth": 3.0, "beta": [1.0, 2.0, 0.5]}
    _, method, s, batch = _epochs(settings, 1)
    assert s.beta == pytest.approx([3.0, 6.0, 1.5])
    assert [z * b for z, b in zip(s.z_lr, s.beta)] == pytest.approx([0.3, 0.6, 0.15])
    # λ = βU after the growth equals λ of the same epoch without it
    _, _, ref, _ = _epochs({**MB, "beta": [1.0, 2.0, 0.5]}, 1)
    for b, u, b0, u0 in zip(s.beta, s.u, ref.beta, ref.u):
        assert torch.allclose(b * u, b0 * u0, rtol=1e-12)


def z_objective(net, batch, state, rows, zs):
    """J + Σ P_t of rows at Z = zs (U from the state)."""
    x, out = batch.x[rows], 0.0
    inp = x
    with torch.no_grad():
        for t, block in enumerate(net.blocks):
            out += 0.5 * state.beta[t] * float((zs[t] - block(inp) + state.u[t][rows]).pow(2).sum())
            inp = zs[t]
        return out + float(batch.loss(zs[-1], batch.y[rows]))


@pytest.mark.parametrize("z_step", ["fixed", "newton"])
def test_more_z_sweeps_per_visit_lower_the_z_sub_problem(z_step):
    values = []
    for sweeps in (1, 2, 6):
        net, batch = tiny_net_and_batch()
        method = make_method("block-admm", {**MB, "z_sweeps": sweeps, "z_step": z_step, "z_lr": 0.3})
        state = method.init_state(net, batch, torch.Generator().manual_seed(0))
        g = torch.Generator().manual_seed(3)
        state.u = [torch.randn(u.shape, generator=g, dtype=u.dtype) * 0.2 for u in state.u]
        rows = torch.arange(16)
        zr, _ = method.sweep_rows(net, state, batch, rows, step=1)
        values.append(z_objective(net, batch, state, rows, zr.zs()))
    assert values[0] > values[1] > values[2], values


def test_the_newton_z_step_from_a_forward_start_is_the_sub_problems_minimiser_for_a_linear_top():
    """T = 2 with a linear top block: one Newton sweep (ζ = 1) puts Z_2 on argmin J + P_2 and Z_1 on
    argmin P_1 + P_2 given the new Z_2 — a dense solve of (β_1 I + β_2 W₂ᵀW₂) Z_1 = … (float64)."""
    net = build_blocknet(ModelConfig("mlp", (5,), split=("fc1",)), (3,), 4, seed=2).double()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randint(0, 4, (8,), generator=g)
    batch = TrainBatch(x, y, get_loss("mse"), batch_size=8)
    b1, b2 = 0.5, 4.0
    method = make_method("block-admm", {**FORWARD, "z_step": "newton", "beta": [b1, b2], "newton_steps": 5})
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    zr, _ = method.sweep_rows(net, state, batch, torch.arange(8), step=1)
    with torch.no_grad():
        a1 = net.blocks[0](x)
        a2 = net.blocks[1](a1)
        Y = torch.nn.functional.one_hot(y, 4).double()
        z2 = (Y + b2 * a2) / (1 + b2)  # argmin ½‖Z − Y‖² + β₂/2‖Z − a₂‖²
        W, c = net.blocks[1][0][0].weight, net.blocks[1][0][0].bias
        A = b1 * torch.eye(5, dtype=torch.float64) + b2 * W.T @ W
        z1 = torch.linalg.solve(A, (b1 * a1 + b2 * (z2 - c) @ W).T).T
    assert torch.allclose(zr.z(1), z2, atol=1e-12)
    assert torch.allclose(zr.z(0), z1, atol=1e-9)


def test_the_step_diagnostics_measure_the_steps_taken():
    net, batch = tiny_net_and_batch()
    start = [torch.cat([p.detach().flatten() for p in b.parameters()]).clone() for b in net.blocks]
    method = make_method("block-admm", {**MB, "z_start": "forward", "z_lr": 1.0})
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    method.run_epoch(net, state, batch)
    d = method.diagnostics(net, state, batch)
    for t, b in enumerate(net.blocks):
        now = torch.cat([p.detach().flatten() for p in b.parameters()])
        assert d["theta_step_rel"][t] == pytest.approx(float((now - start[t]).norm() / start[t].norm()), rel=1e-9)
    # forward start: each row's Z-step is its displacement from the forward pass, once an epoch
    assert len(d["z_step_rms"]) == 3 and all(v > 0 for v in d["z_step_rms"])
    last = state.z[-1]
    with torch.no_grad():
        # Z_T's displacement is −ζ ∇(J + P_T) = −(Z_T − Y) at the start (U = 0, ζ = 1, β = 1): a state-free check
        assert d["z_step_rms"][-1] > 0.1 and d["z_step_rel"][-1] == pytest.approx(
            d["z_step_rms"][-1] / float(last.pow(2).sum(1).mean().sqrt()), rel=0.5
        )


def test_settings_that_need_the_minibatch_schedule_say_so():
    from admm_core.errors import ConfigError

    for bad in ({"z_sweeps": 2}, {"z_step": "newton"}, {"z_norm": "top"}):
        with pytest.raises(ConfigError, match="needs z_schedule='minibatch'"):
            make_method("block-admm", {"z_schedule": "sweep", **bad})
        make_method("block-admm", bad)  # the default schedule is the minibatch one
    # what only a minibatch's own Z-update reads means nothing under the sweep: it reads as the sweep has it
    m = make_method("block-admm", {"z_schedule": "sweep", "z_start": "forward", "theta_input": "start"})
    assert (m.z_start, m.theta_input, m.dual_theta) == ("previous", "new", "new")
    m = make_method("block-admm", {"z_start": "previous", "theta_input": "start"})  # no forward start to reuse
    assert (m.z_schedule, m.theta_input) == ("minibatch", "new")
    with pytest.raises(ConfigError, match="block-admm.z_norm"):
        make_method("block-admm", {**MB, "z_norm": "all"})


def test_copying_a_method_keeps_its_new_settings():
    m = make_method("block-admm", {**MB, "z_norm": "top", "z_sweeps": 3, "beta_growth": 1.5, "dual_reset": 2})
    assert copy.deepcopy(m) == m


def _displacements(settings, sigma):
    cfg = ModelConfig("mlp", (16,) * 5, init="normal", init_std=sigma)
    net = build_blocknet(cfg, (8,), 4, seed=1).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=g, dtype=torch.float64), torch.randint(0, 4, (32,), generator=g)
    batch = TrainBatch(x, y, get_loss("mse"), batch_size=32)
    method = make_method("block-admm", {**FORWARD, **settings})
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    zr, _ = method.sweep_rows(net, state, batch, torch.arange(32), step=1)
    return [float(d.pow(2).sum().div(32).sqrt()) for d in zr.delta]


def test_z_norm_top_gives_every_block_the_top_steps_size_and_up_only_raises_small_ones():
    off, top, up = (_displacements({"z_norm": v}, 0.05) for v in ("off", "top", "up"))  # shrinking signals
    assert top[-1] == off[-1] == up[-1]  # Z_T's own step is never rescaled
    assert max(off[:-1]) < 0.2 * off[-1]
    assert top[:-1] == pytest.approx([top[-1]] * 5, rel=1e-9) and up[:-1] == pytest.approx(top[:-1], rel=1e-9)
    off, top, up = (_displacements({"z_norm": v}, 1.0) for v in ("off", "top", "up"))  # growing signals
    assert off[-2] > 1.5 * off[-1]
    assert up[-2] == pytest.approx(off[-2], rel=1e-12)  # a step above the top's size is left as computed
    assert top[-2] == pytest.approx(off[-1], rel=1e-9)  # … and brought down to it by 'top'


def test_the_adam_eps_settings_reach_the_optimizers():
    net, batch = tiny_net_and_batch()
    state = make_method("block-admm", {"eps": 1e-30}).init_state(net, batch, torch.Generator().manual_seed(0))
    assert state.opt.param_groups[0]["eps"] == 1e-30
    bp = make_method("adam", {"eps": 1e-20}).init_state(net, batch, torch.Generator().manual_seed(0))
    assert bp.opt.param_groups[0]["eps"] == 1e-20


def test_with_z_norm_signal_the_duals_still_cancel_out_of_the_targets():
    """ζβ = 1 from a forward start: δ_t = −U_t − (signal), so r_t = δ_t + U_t does not depend on U when only
    the signal is rescaled (z_norm = signal); rescaling the whole step (up) lets U leak into the targets."""
    net, batch = vanishing_mlp(torch.float64)

    def residuals(mode, scale):
        m = make_method("block-admm", {**FORWARD, "z_norm": mode})
        state = m.init_state(copy.deepcopy(net), batch, torch.Generator().manual_seed(0))
        g = torch.Generator().manual_seed(4)
        state.u = [torch.randn(u.shape, generator=g, dtype=u.dtype) * scale for u in state.u]
        zr, _ = m.sweep_rows(net, state, batch, torch.arange(N), step=1)
        return [zr.delta[t] + state.u[t] for t in range(DEPTH)]

    a, b = residuals("signal", 0.0), residuals("signal", 0.3)
    assert all(torch.allclose(x, y, rtol=1e-9, atol=1e-12) for x, y in zip(a, b))
    a, b = residuals("up", 0.0), residuals("up", 0.3)
    assert not all(torch.allclose(x, y, rtol=1e-3) for x, y in zip(a, b))
