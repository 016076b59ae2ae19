"""Speed-ups that must not change the numbers: each is compared with the plain computation."""

from __future__ import annotations

import copy

import pytest
import torch

from admm_core import profile
from admm_core.blocks import build_blocknet
from admm_core.losses import get_loss
from admm_core.methods import make_method
from admm_core.methods.base import TrainBatch
from admm_core.spec.config import ModelConfig

RECIPE = {
    "z_schedule": "minibatch",
    "bn_mode": "train",
    "z_start": "forward",
    "z_step": "scaled",
    "z_lr": 0.1,
    "dual_theta": "old",
    "theta_input": "new",  # the ResNet presets' (block 1's forward start alone serves its Θ-step)
    "primal_steps": 1,
}


def small_resnet(seed=0):
    net = build_blocknet(ModelConfig("resnet18", split=("conv3_x",), width=4), (3, 16, 16), 10, seed=seed)
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(48, 3, 16, 16, generator=g), torch.randint(0, 10, (48,), generator=g)
    return net, TrainBatch(x, y, get_loss("ce"), batch_size=16)


def one_epoch(method, net, batch):
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    method.run_epoch(net, state, batch)
    return net.state_dict(), state


@pytest.mark.parametrize("dual_lr", [1.0, 0.1])
def test_reusing_block_1s_forward_start_in_its_theta_step_changes_nothing(monkeypatch, dual_lr):
    """The forward start's block-1 pass (train mode, Θ_1's graph) serves the Θ-step: weights, running
    statistics, Z and U equal those of a run that computes the Θ-step's forward pass again."""
    from admm_core.methods import block_admm

    method = make_method("block-admm", {**RECIPE, "dual_lr": dual_lr})
    net, batch = small_resnet()
    fast, fast_state = one_epoch(method, copy.deepcopy(net), batch)
    plain_sweep = block_admm.BlockADMM.sweep_rows

    def no_reuse(self, *a, for_theta=False, **k):
        return plain_sweep(self, *a, for_theta=False, **k)

    monkeypatch.setattr(block_admm.BlockADMM, "sweep_rows", no_reuse)
    calls = {"n": 0}
    block1 = net.blocks[0]
    block1.register_forward_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    slow, slow_state = one_epoch(method, net, batch)
    assert calls["n"] > 0
    for k in fast:
        assert torch.allclose(fast[k].float(), slow[k].float(), atol=1e-6, rtol=1e-5), k
    for a, b in zip(fast_state.u + fast_state.z, slow_state.u + slow_state.z):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def test_the_reuse_saves_one_block_1_forward_pass_per_minibatch():
    method = make_method("block-admm", RECIPE)
    net, batch = small_resnet()
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    calls = {"n": 0}
    net.blocks[0].register_forward_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    method.run_epoch(net, state, batch)
    assert calls["n"] == 3  # one block-1 pass per minibatch (48 / 16): forward start = Θ-step's forward


def test_profile_phases_add_up_and_nest():
    """Exclusive seconds: a nested phase is subtracted from its parent, and they sum to the parent's
    inclusive time."""
    import time

    with profile.profiling(sync_cuda=False) as times:
        with profile.phase("outer"):
            time.sleep(0.02)
            with profile.phase("inner"):
                time.sleep(0.03)
    assert times.inclusive["outer"] == pytest.approx(times.exclusive["outer"] + times.exclusive["inner"])
    assert times.exclusive["inner"] >= 0.03 and times.exclusive["outer"] >= 0.02  # the inner time is not in "outer"
    assert times.exclusive["outer"] < times.inclusive["outer"] - 0.029
    assert times.calls == {"outer": 1, "inner": 1}
    assert not profile.active()  # off again outside the block
    # by outermost phase: an inner phase entered under another top-level phase is charged there
    with profile.profiling(sync_cuda=False) as times:
        for top in ("epoch", "eval"):
            with profile.phase(top), profile.phase("inner"):
                time.sleep(0.01)
    assert set(times.within) == {"epoch", "eval"} and times.calls["inner"] == 2
    assert times.within["epoch"]["inner"] + times.within["eval"]["inner"] == pytest.approx(times.exclusive["inner"])
    assert 0.01 <= times.within["epoch"]["inner"] < times.exclusive["inner"] - 0.009


def test_profile_command_charges_an_epoch_to_its_phases(tmp_path):
    """`admm profile` on the offline digits: the block-admm column has the Z sweep per block, the Θ-step
    and dual step, and the per-phase seconds add up to the epoch's."""
    from admm_core.speed import PER_CALL, main

    md = tmp_path / "speed.md"
    assert main(["--preset", "digits-mlp", "--methods", "block-admm,adam", "--epochs", "1", "--markdown", str(md)]) == 0
    text = md.read_text()
    for name in ("z_sweep.block1", "z_sweep.block3", "theta.forward_backward", "theta.optimizer", "dual", "eval"):
        assert f"| {name} |" in text
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines() if line.count("|") > 4}
    inside = [
        float(v)
        for k, v in rows.items()
        if k not in ("phase", "---") and v != "—" and not k.startswith("**") and k not in PER_CALL
    ]
    total = float(rows["**epoch, all phases**"].strip("*"))
    # every cell is rounded to 1 ms: the sum may differ from the total by half a ms per cell
    assert sum(inside) == pytest.approx(total, abs=5e-4 * (len(inside) + 1) + 1e-9)


# --- online-admm (Alg. 2) ------------------------------------------------------------------------


def small_mlp(seed=0):
    net = build_blocknet(ModelConfig("mlp", (32, 16)), (1, 8, 8), 10, seed=seed)
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(48, 64, generator=g), torch.randint(0, 10, (48,), generator=g)
    return net, TrainBatch(x, y, get_loss("mse"), batch_size=16)


def online_epochs(method, net, batch, epochs=2):
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    for _ in range(epochs):
        method.run_epoch(net, state, batch)
    return net.state_dict(), state


def forward_counts(net):
    counts = [0] * net.T
    for t, block in enumerate(net.blocks):
        block.register_forward_hook(lambda *a, t=t: counts.__setitem__(t, counts[t] + 1))
    return counts


def assert_same_training(fast, slow):
    for k in fast:
        assert torch.allclose(fast[k].float(), slow[k].float(), atol=1e-6, rtol=1e-5), k


@pytest.mark.parametrize(
    "make, params",
    [
        (small_resnet, {"z_lr": 0.1, "theta_input": "new"}),  # BatchNorm in train mode in every pass (the preset's)
        (small_mlp, {"z_lr": 0.1, "primal_steps": 2, "dual": "feature"}),
        (small_mlp, {"z_lr": 0.1, "theta_input": "start", "dual": "literal"}),
    ],
)
def test_online_forward_start_serving_the_theta_step_changes_nothing(monkeypatch, make, params):
    """The forward start's passes serve the Θ-step (block 1's; every block's with theta_input='start'):
    weights, running statistics and duals equal those of a run whose Θ-step computes its own forward."""
    from admm_core.methods import online_admm

    method = make_method("online-admm", params)
    net, batch = make()
    fast, fast_state = online_epochs(method, copy.deepcopy(net), batch)
    monkeypatch.setattr(online_admm.OnlineADMM, "reuses_forward", lambda self, net: False)
    counts = forward_counts(net)
    slow, slow_state = online_epochs(method, net, batch)
    assert counts[0] > 0
    assert_same_training(fast, slow)
    for a, b in zip(fast_state.u, slow_state.u):
        assert torch.allclose(torch.as_tensor(a), torch.as_tensor(b), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "params, per_minibatch",
    [
        ({"dual_theta": "new", "theta_input": "new"}, [2, 3, 3]),  # forward start (block 1's = the Θ-step's), Θ, dual
        ({"dual_theta": "old", "theta_input": "new"}, [1, 2, 2]),  # the dual step reads the Θ-step's outputs
        ({"dual_theta": "old", "theta_input": "start"}, [1, 1, 1]),  # one forward pass of each block
    ],
)
def test_online_forward_passes_per_minibatch(params, per_minibatch):
    method = make_method("online-admm", {"z_lr": 0.1, "power_every": 1000, **params})
    net, batch = small_mlp()
    state = method.init_state(net, batch, torch.Generator().manual_seed(0))
    counts = forward_counts(net)
    method.run_epoch(net, state, batch)
    assert counts == [3 * n for n in per_minibatch]  # 48 rows / 16 = 3 minibatches


def test_online_dual_from_the_theta_steps_outputs_trains_the_same_with_the_additive_dual():
    """dual='additive': u sits outside the square, so reading the dual residual before the Θ-step moved
    (dual_theta='old') leaves the training unchanged; u then sums ‖z_t − block_t(z_{t−1})‖ with the old Θ."""
    net, batch = small_mlp()
    alg2 = {"z_lr": 0.1, "theta_input": "new"}
    new, new_state = online_epochs(make_method("online-admm", {**alg2, "dual_theta": "new"}), copy.deepcopy(net), batch)
    old, old_state = online_epochs(make_method("online-admm", {**alg2, "dual_theta": "old"}), net, batch)
    assert_same_training(new, old)
    assert all(a != b for a, b in zip(new_state.u, old_state.u))  # the record differs: Θ before the step
    assert all(u > 0 for u in old_state.u)


def test_online_theta_input_start_reads_new_inputs_after_more_than_one_primal_step():
    """Passes after the first have no forward start to reuse: the Θ-step reads its inputs anew."""
    assert make_method("online-admm", {}).theta_input == "start"
    assert make_method("online-admm", {"theta_input": "start", "primal_steps": 2}).theta_input == "new"


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_one_theta_optimizer_group_steps_as_per_block_groups_and_loads_their_checkpoints(kind):
    """The Θ-optimizer's single group takes the steps of one group per block (the layout of older
    checkpoints), and a checkpoint in that layout resumes into it with the same next steps."""
    from admm_core.methods.base import load_optimizer_state, make_theta_optimizer

    net, batch = small_mlp()
    old_net, new_net = copy.deepcopy(net), copy.deepcopy(net)
    cls = torch.optim.Adam if kind == "adam" else torch.optim.SGD
    old = cls([{"params": list(b.parameters())} for b in old_net.blocks], lr=1e-2, foreach=True)
    new = make_theta_optimizer(new_net, kind, 1e-2)
    assert len(new.param_groups) == 1

    def step(n, o):
        o.zero_grad()
        batch.loss(n(batch.x), batch.y).backward()
        o.step()

    for _ in range(3):
        step(old_net, old)
        step(new_net, new)
    assert_same_training(old_net.state_dict(), new_net.state_dict())
    resumed_net = copy.deepcopy(old_net)
    resumed = make_theta_optimizer(resumed_net, kind, 1e-2)
    load_optimizer_state(resumed, copy.deepcopy(old.state_dict()))
    for _ in range(2):
        step(old_net, old)
        step(resumed_net, resumed)
    assert_same_training(old_net.state_dict(), resumed_net.state_dict())


@pytest.mark.parametrize("loss", ["mse", "ce"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_closed_form_loss_gradients_equal_autograds(loss, dtype):
    j = get_loss(loss)
    g = torch.Generator().manual_seed(1)
    z, y = (3 * torch.randn(32, 10, generator=g)).to(dtype).requires_grad_(), torch.randint(0, 10, (32,), generator=g)
    (auto,) = torch.autograd.grad(j(z, y), z)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    assert torch.allclose(j.grad(z.detach(), y), auto, atol=tol, rtol=tol)


@pytest.mark.parametrize("make", [small_mlp, small_resnet])
def test_sweep_with_closed_form_gradients_equals_the_autograd_sweep(make):
    """One reverse Z sweep from a forward start: ∇J in closed form and each coupling's gradient through
    block_{t+1} as a vjp with −∇_r P give the Z of the sweep that asks autograd for both."""
    from admm_core.methods.lipschitz import loss_grad
    from admm_core.methods.zsweep import reverse_z_sweep

    net, batch = make()
    net = net.double().train()
    x, y = batch.x[:16].double(), batch.y[:16]
    g = torch.Generator().manual_seed(2)
    beta = [0.7, 1.3, 0.9][: net.T]
    with torch.no_grad():
        zs = [z + 0.1 * torch.randn(z.shape, generator=g, dtype=z.dtype) for z in net.forward_all(x)]
    us = [0.05 * torch.randn(z.shape, generator=g, dtype=z.dtype) for z in zs]
    couplings = [lambda r, t=t: 0.5 * beta[t] * (r + us[t]).pow(2).sum() for t in range(net.T)]

    def sweep(closed):
        return reverse_z_sweep(
            net.blocks,
            x,
            zs,
            lambda z: batch.loss(z, y),
            couplings,
            lambda t, z, grad: z - 0.05 * grad,
            own_grad=(lambda t, r: beta[t] * (r + us[t])) if closed else None,
            objective_grad=loss_grad(batch.loss, y) if closed else None,
        )

    for a, b in zip(sweep(True), sweep(False)):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10)


# --- the Θ-step's gradients from the Z sweep's vector-Jacobian products --------------------------


def backward_passes(net) -> list[int]:
    """How many backward passes run through each block's output (a pre-hook on its grad_fn), per block."""
    counts = [0] * net.T

    def hook(module, inputs, out, t):
        if out.grad_fn is not None:
            out.grad_fn.register_prehook(lambda g: counts.__setitem__(t, counts[t] + 1))

    for t, block in enumerate(net.blocks):
        block.register_forward_hook(lambda m, i, o, t=t: hook(m, i, o, t))
    return counts


def float64_run(make, batch_size=20):
    """``make``'s network and data in float64, minibatches of 20, 20 and 8 rows (1/|i| is then not
    always a power of two, so the two computations differ by float rounding, not by nothing)."""
    net, batch = make()
    batch.x, batch.batch_size = batch.x.double(), batch_size
    return net.double(), batch


@pytest.mark.parametrize("name", ["block-admm", "online-admm"])
@pytest.mark.parametrize("make", [small_mlp, small_resnet])
def test_theta_gradients_from_the_sweep_train_as_the_theta_steps_own_backward(monkeypatch, name, make):
    """The defaults (theta_input='start'): the sweep's vjp through block t, taken at the final Z_t of its
    Gauss–Seidel pass, also gives ∇_{Θ_t} P_t, and the Θ-step runs no backward of its own. Two epochs of
    it (β per block ≠ 1, minibatches of unequal size) end where the plain Θ-step's own backward ends:
    weights, BatchNorm statistics, Z, U and the recorded residuals, to float64 rounding."""
    from admm_core.methods import zsweep

    beta = [0.7, 1.3, 0.9] if make is small_mlp else [0.7, 1.3]
    method = make_method(name, {"beta": beta, "z_lr": 0.3})
    net, batch = float64_run(make)
    runs = {}
    for fused in (True, False):
        monkeypatch.setattr(zsweep, "THETA_GRADS_FROM_SWEEP", fused)
        runs[fused] = online_epochs(method, copy.deepcopy(net), batch)
    (fast, fast_state), (slow, slow_state) = runs[True], runs[False]
    assert any(not torch.equal(fast[k], net.state_dict()[k]) for k in fast)  # it trained
    for k in fast:
        assert torch.allclose(fast[k].double(), slow[k].double(), atol=1e-10, rtol=1e-9), k
    tensors = (lambda s: [*s.z, *s.u]) if name == "block-admm" else (lambda s: [torch.as_tensor(u) for u in s.u])
    for a, b in zip(tensors(fast_state), tensors(slow_state)):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-9)
    assert fast_state.residuals == pytest.approx(slow_state.residuals, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", ["block-admm", "online-admm"])
def test_one_backward_pass_through_each_block_per_minibatch(monkeypatch, name):
    """With the Θ-gradients from the sweep, each block is backpropagated once per minibatch (its vjp);
    the plain Θ-step backpropagates blocks 2 … T a second time."""
    from admm_core.methods import zsweep

    method = make_method(name, {"power_every": 1000} if name == "online-admm" else {})
    for fused, per_minibatch in ((True, [1, 1, 1]), (False, [1, 2, 2])):
        monkeypatch.setattr(zsweep, "THETA_GRADS_FROM_SWEEP", fused)
        net, batch = small_mlp()
        state = method.init_state(net, batch, torch.Generator().manual_seed(0))
        counts = backward_passes(net)
        method.run_epoch(net, state, batch)
        assert counts == [3 * n for n in per_minibatch]  # 48 rows / 16 = 3 minibatches
