"""Online Block-ADMM (Alg. 2) against hand-written equations, curvature-scaled Z steps, the
backprop cosine, the adaptive penalty of Prop. 1, divergence detection, bench --markdown."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import mlp_weights, tiny_mlp

from admm_core import bench
from admm_core.blocks import BlockNet
from admm_core.losses import mse_sum
from admm_core.methods import make_method
from admm_core.methods.base import TrainBatch
from admm_core.methods.lipschitz import lipschitz_estimates, lipschitz_vectors, spectral_norm
from admm_core.models import mlp_layers
from admm_core.network import train
from admm_core.rundir import read_json, read_metrics
from admm_core.spec.presets import preset_config

N, D, H1, H2, C = 19, 7, 6, 5, 4
EPS = 1e-8


def tiny(seed=0):
    return tiny_mlp(N, D, (H1, H2), C, seed)


def ref_online(W, x, y, u, betas, z_lrs, lr, dual, decay):
    """One online minibatch iteration (Alg. 2, k = 1, SGD Θ-step), every gradient by hand.

    g(r, u) = ∂T/∂r of the coupling T(r) for each dual reading:
      additive β/2(‖r‖² + u)      -> β r
      literal, damped β/2(‖r‖_ε + u)² -> β (‖r‖_ε + u) r / ‖r‖_ε   (‖r‖ over the minibatch)
      feature β/2‖r + u‖² (u ∈ R^d) -> β (r + u)
    """
    (W1, b1), (W2, b2), (W3, b3) = W
    B = betas
    relu = lambda a: a.clamp_min(0)
    Y = F.one_hot(y, C).double()
    n = x.shape[0]

    def g(r, u, beta):
        if dual == "additive":
            return beta * r
        if dual == "feature":
            return beta * (r + u)
        nr = torch.sqrt((r * r).sum() + EPS**2)
        return beta * (nr + u) * r / nr

    # forward-pass initialisation: every constraint holds, r_t = 0
    pre1 = x @ W1.T + b1
    z1 = relu(pre1)
    pre2 = z1 @ W2.T + b2
    z2 = relu(pre2)
    z3 = z2 @ W3.T + b3
    F1, F2, F3 = z1, z2, z3
    # Z_T-step: ∇ [½‖z3 − Y‖² + T_3(z3 − F3)]
    z3n = z3 - z_lrs[2] * ((z3 - Y) + g(z3 - F3, u[2], B[2]))
    # t = 2: own T_2 + T_3 at the new z3 through block 3 (linear)
    z2n = z2 - z_lrs[1] * (g(z2 - F2, u[1], B[1]) - g(z3n - F3, u[2], B[2]) @ W3)
    # t = 1: own T_1 + T_2 at the new z2 through block 2 (ReLU mask)
    z1n = z1 - z_lrs[0] * (g(z1 - F1, u[0], B[0]) - (g(z2n - F2, u[1], B[1]) * (pre2 > 0)) @ W2)
    # Θ-step: SGD on T_t / n with the new z as inputs and targets
    new_W = []
    for inp, zt, (Wt, bt), act, ut, beta in (
        (x, z1n, W[0], True, u[0], B[0]),
        (z1n, z2n, W[1], True, u[1], B[1]),
        (z2n, z3n, W[2], False, u[2], B[2]),
    ):
        pre = inp @ Wt.T + bt
        out = relu(pre) if act else pre
        delta = -g(zt - out, ut, beta) / n
        if act:
            delta = delta * (pre > 0)
        new_W.append((Wt - lr * delta.T @ inp, bt - lr * delta.sum(0)))
    # dual step with the new Θ
    (V1, c1), (V2, c2), (V3, c3) = new_W
    rs = [z1n - relu(x @ V1.T + c1), z2n - relu(z1n @ V2.T + c2), z3n - (z2n @ V3.T + c3)]
    new_u = []
    for ut, r in zip(u, rs):
        if dual == "feature":
            new_u.append(ut + r.mean(0))
        elif dual == "damped":
            new_u.append(decay * ut + r.pow(2).sum().sqrt())
        else:
            new_u.append(ut + r.pow(2).sum().sqrt())
    return new_W, new_u


@pytest.mark.parametrize(
    "dual,z_step",
    [("additive", "fixed"), ("literal", "fixed"), ("damped", "fixed"), ("feature", "fixed"), ("feature", "scaled")],
)
def test_online_iteration_matches_hand_written_equations(dual, z_step):
    net, x, y = tiny()
    betas, z_lr, lr, decay = [0.7, 1.3, 0.9], 0.4, 0.05, 0.6
    method = make_method(
        "online-admm",
        dict(
            lr=lr,
            theta_optimizer="sgd",
            z_lr=z_lr,
            z_step=z_step,
            power_steps=500,
            beta=betas,
            dual=dual,
            dual_decay=decay,
            theta_input="new",  # Alg. 2's Θ-step and dual step, as the reference writes them
            dual_theta="new",
        ),
    )
    batch = TrainBatch(x, y, mse_sum, batch_size=N)  # one minibatch = the whole set
    state = method.init_state(net, batch, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    if dual == "feature":  # a non-zero dual so that it enters every gradient
        state.u = [0.2 * torch.randn(d, generator=g, dtype=torch.float64) for d in (H1, H2, C)]
    else:
        state.u = [0.3, 0.2, 0.5]
    u0 = [u.clone() if torch.is_tensor(u) else u for u in state.u]
    W0 = mlp_weights(net)
    if z_step == "scaled":
        s = [torch.linalg.matrix_norm(w, 2).item() for w, _ in W0]
        z_lrs = [
            z_lr / (betas[0] + betas[1] * s[1] ** 2),
            z_lr / (betas[1] + betas[2] * s[2] ** 2),
            z_lr / (betas[2] + 1),
        ]
    else:
        z_lrs = [z_lr] * 3

    method.run_epoch(net, state, batch)

    ref_W, ref_u = ref_online(W0, x, y, u0, betas, z_lrs, lr, dual, decay)
    for (a, b), (ra, rb) in zip(mlp_weights(net), ref_W):
        torch.testing.assert_close(a, ra, atol=1e-6, rtol=0)
        torch.testing.assert_close(b, rb, atol=1e-6, rtol=0)
    for u, ru in zip(state.u, ref_u):
        torch.testing.assert_close(torch.as_tensor(u, dtype=torch.float64), torch.as_tensor(ru), atol=1e-6, rtol=0)
    assert all((w[0] - w0[0]).abs().max() > 1e-5 for w, w0 in zip(mlp_weights(net), W0))  # not a no-op
    assert state.iteration == 1


def test_theta_step_size_decays_once_per_epoch_by_gamma():
    """η_e = η·γ^e: after two epochs, the third (e = 2) of a one-minibatch set is the oracle step with η·γ²."""
    net, x, y = tiny()
    lr, gamma, betas, z_lr = 0.05, 0.5, [0.7, 1.3, 0.9], 0.4
    method = make_method(
        "online-admm",
        dict(lr=lr, lr_decay=gamma, theta_optimizer="sgd", z_lr=z_lr, z_step="fixed", beta=betas, dual="additive")
        | {"theta_input": "new", "dual_theta": "new"},  # Alg. 2's, as the reference writes it
    )
    batch = TrainBatch(x, y, mse_sum, batch_size=N)
    state = method.init_state(net, batch, torch.Generator().manual_seed(1))
    for _ in range(2):
        method.run_epoch(net, state, batch)
    W0, u0 = mlp_weights(net), [float(u) for u in state.u]
    assert state.epoch == 2 and min(u0) > 0  # the duals moved: the oracle starts from them
    method.run_epoch(net, state, batch)
    assert state.epoch == 3
    ref_W, _ = ref_online(W0, x, y, u0, betas, [z_lr] * 3, lr * gamma**2, "additive", 0.0)
    for (a, b), (ra, rb) in zip(mlp_weights(net), ref_W):
        torch.testing.assert_close(a, ra, atol=1e-6, rtol=0)
        torch.testing.assert_close(b, rb, atol=1e-6, rtol=0)
    assert {g["lr"] for g in state.opt.param_groups} == {lr * gamma**2}  # every group (one for all blocks)


@pytest.mark.parametrize("method", ["sgd", "adam"])
def test_backprop_baselines_decay_their_step_size_the_same_way(method):
    """sgd/adam with lr_decay γ: epoch e steps with η·γ^e (SGD checked against its gradient)."""
    import copy

    net, x, y = tiny()
    lr, gamma = 0.05, 0.5
    m = make_method(method, dict(lr=lr, lr_decay=gamma))
    batch = TrainBatch(x, y, mse_sum, batch_size=N)
    state = m.init_state(net, batch, torch.Generator().manual_seed(1))
    for _ in range(2):
        m.run_epoch(net, state, batch)
    ref = copy.deepcopy(net)
    (mse_sum(ref(x), y) / N).backward()
    m.run_epoch(net, state, batch)
    assert [g["lr"] for g in state.opt.param_groups] == [lr * gamma**2]
    if method == "sgd":
        for p, q in zip(net.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q - lr * gamma**2 * q.grad, atol=1e-12, rtol=0)


def test_online_trains_on_the_epochs_augmented_view():
    """With augmentation the online method sees exactly the shifted images of the epoch: the
    same as a run on those images stored as the data set."""
    from admm_core.data import CropFlip

    torch.manual_seed(0)
    x = torch.rand(12, 1, 3, 3, dtype=torch.float64)
    y = torch.randint(0, C, (12,))
    aug = CropFlip(12, pad=1, flip=False, seed=5)
    aug.set_epoch(1)
    shifted = aug(x, slice(None))
    assert not torch.equal(shifted, x) and not aug.flip.any()
    params = dict(lr=0.05, theta_optimizer="sgd", z_lr=0.3, z_step="fixed", dual="additive")
    nets = []
    for xs, augment in ((x, aug), (shifted, None)):
        torch.manual_seed(1)
        net = BlockNet(mlp_layers(9, (H1, H2), C), ("fc1", "fc2")).double()
        method = make_method("online-admm", params)
        batch = TrainBatch(xs, y, mse_sum, batch_size=5, augment=augment)
        method.run_epoch(net, method.init_state(net, batch, torch.Generator().manual_seed(2)), batch)
        nets.append(net)
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_power_iteration_finds_the_spectral_norm_and_warm_starts():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(30, 20, generator=g, dtype=torch.float64)
    exact = torch.linalg.matrix_norm(w, 2).item()
    v = torch.randn(20, generator=g, dtype=torch.float64)
    v = v / v.norm()
    est = []
    for _ in range(15):  # two steps a call, warm-started from the last vector
        s, v = spectral_norm(w, v, 2)
        est.append(s)
    assert est[-1] <= exact + 1e-9 and abs(est[-1] - exact) < 1e-3 * exact
    assert est[0] < est[-1]  # the warm start kept improving it


def test_jacobian_estimate_for_a_non_linear_block_matches_its_linear_bound():
    """A block with BatchNorm (eval) takes the Jacobian route; for BN∘Linear the Jacobian is
    diag(γ/σ) W at every point, whose spectral norm the estimate must find."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 5).double()
    bn = torch.nn.BatchNorm1d(5).double().eval()
    bn.running_var.uniform_(0.5, 2.0)
    block = torch.nn.Sequential(lin, bn)
    vecs = lipschitz_vectors([block], [(6,)], torch.Generator().manual_seed(0))
    vecs[0][0] = vecs[0][0].double()
    z = torch.randn(16, 6, dtype=torch.float64)
    est = lipschitz_estimates([block], [z], vecs, 200)[0]
    jac = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach()[:, None] * lin.weight.detach()
    assert abs(est - torch.linalg.matrix_norm(jac, 2).item()) < 1e-6


def digits(method, epochs, **params):
    base = preset_config("digits-mlp", method)
    return base.replace(
        train__epochs=epochs,
        data__train_limit=400,
        data__test_limit=300,
        method_params={**base.method_params, **params},
    )


def test_additive_online_direction_is_backprop_and_feature_dual_is_not(tmp_path):
    """Logged every evaluation: one cosine per block; additive ≈ backprop (z restarts at the
    forward pass), the per-feature dual turns the Θ-direction away from it."""
    cos = {}
    for dual in ("additive", "feature"):
        train(digits("online-admm", 2, dual=dual, z_lr=0.1), tmp_path / dual)
        ms = read_metrics(tmp_path / dual)
        assert all(len(m["backprop_cosine"]) == 3 for m in ms)
        cos[dual] = ms[-1]["backprop_cosine"]
    assert min(cos["additive"]) > 0.95, cos
    assert min(cos["feature"]) < min(cos["additive"]) - 0.05, cos


def test_fixed_z_step_diverges_where_the_scaled_step_holds(tmp_path):
    """Batch Z persists across sweeps, so a fixed ζ above 2/(β_t + β_{t+1}‖W‖²) compounds: the
    run ends as 'diverged' with a message naming the epoch and the quantity. The scaled step
    (ζ = 1.5 < 2 in curvature units) learns."""
    # Alg. 1's sweep schedule, where Z persists (the minibatch recipe, digits-mlp's default, restarts it)
    sweep = {"z_schedule": "sweep", "z_start": "previous", "dual_theta": "new", "theta_input": "new"}
    fixed = train(digits("block-admm", 3, z_lr=10.0, z_step="fixed", **sweep), tmp_path / "fixed")
    st = read_json(tmp_path / "fixed" / "status.json")
    assert fixed["status"] == st["state"] == "diverged", st
    assert st["error"].startswith("epoch ") and ("loss" in st["error"] or "finite" in st["error"]), st
    scaled = train(digits("block-admm", 4, z_lr=1.5, z_step="scaled", **sweep), tmp_path / "scaled")
    assert scaled["status"] == "finished" and scaled["test_accuracy"] > 0.8, scaled


def test_a_loss_explosion_past_its_best_ends_the_run(tmp_path, monkeypatch):
    """Finite but exploding: training loss above diverge_factor × its best (and its start)."""
    from admm_core import network

    real = network.Session.evaluate
    calls = {"n": 0}

    def evaluate(self):
        m = real(self)
        calls["n"] += 1
        if calls["n"] == 3:  # the evaluation after epoch 2
            m["train_loss"] = 1e4
        return m

    monkeypatch.setattr(network.Session, "evaluate", evaluate)
    summary = train(digits("adam", 4).replace(train__diverge_factor=50.0), tmp_path)
    st = read_json(tmp_path / "status.json")
    assert summary["status"] == st["state"] == "diverged" and summary["epochs"] == 2
    assert st["error"].startswith("epoch 2: training loss 1e+04 exceeds 50 × its best"), st


def test_adaptive_penalty_is_capped_and_ends_near_the_fixed_run_with_lower_violation(tmp_path):
    """Prop. 1's schedule: β ≤ β_max, the Z step curvature-scaled (not shrunk), growing primal
    passes. The old schedule (no cap, ζ ← cζ) ran β to 2^29 and lost 3 points on digits."""
    ad = dict(
        adaptive_rho=True,
        rho_bound=0.3,
        rho_bound_decay=0.8,
        rho_c=0.5,
        z_step="scaled",
        z_lr=1.0,
        beta_max=10.0,
        primal_growth=3,
        primal_steps_max=6,
    )
    train(digits("block-admm", 12), tmp_path / "fixed")
    train(digits("block-admm", 12, **ad), tmp_path / "adaptive")
    f, a = read_metrics(tmp_path / "fixed")[-1], read_metrics(tmp_path / "adaptive")[-1]
    h = lambda m: math.sqrt(sum(r * r for r in m["residuals"]))
    assert max(a["betas"]) <= 10.0 and max(a["betas"]) > 1.0, a["betas"]  # it acted, and was capped
    assert a["test_accuracy"] >= f["test_accuracy"] - 0.01, (a["test_accuracy"], f["test_accuracy"])
    assert h(a) < h(f), (h(a), h(f))


def test_primal_passes_grow_by_the_schedule():
    m = make_method("block-admm", dict(primal_steps=2, primal_growth=3, primal_steps_max=4))
    assert [m.primal_passes(k) for k in range(10)] == [2, 2, 2, 3, 3, 3, 4, 4, 4, 4]
    assert make_method("block-admm", dict(primal_steps=3)).primal_passes(99) == 3


def test_bench_writes_its_table_into_a_markdown_section(tmp_path):
    doc = tmp_path / "online.md"
    doc.write_text("# Title\n\ntext above\n\n<!-- generated:duals -->\nold\n<!-- /generated:duals -->\n\ntext below\n")
    args = ["--preset", "digits-mlp", "--methods", "online-admm", "--epochs", "1", "--out", str(tmp_path / "b")]
    vary = ["--vary", "online-admm:dual=additive,feature", "--markdown", str(doc), "--section", "duals"]
    assert bench.main(args + vary) == 0
    text = doc.read_text()
    assert "old" not in text and "text above" in text and "text below" in text
    assert "| online-admm dual=additive | 1 |" in text and "| online-admm dual=feature | 1 |" in text
    # --collect re-tabulates what is there without training
    assert bench.main(args + vary + ["--collect"]) == 0
    assert (
        json.loads((tmp_path / "b" / "digits-mlp-online-admm-dual=feature" / "summary.json").read_text())["epochs"] == 1
    )


def test_at_its_defaults_online_admm_follows_adam_backprop_and_the_scaled_step_does_not(tmp_path):
    """From the forward start with ζβ = 1 (``z_step='fixed'``, ζ = 1, β = 1), the additive dual and Θ at
    the start's inputs, block t's Θ-gradient is backprop's (the Z sweep is backprop's adjoint recursion),
    so two epochs of online-admm at its defaults end at Adam backprop's weights (same η, same minibatches;
    float32 rounding apart). The curvature-scaled step multiplies each block's gradient by a factor that
    moves with L_t; Adam does not absorb it and the weights part from Adam's. Alg. 2 as printed parts far."""
    from torch import nn

    from admm_core import own

    torch.manual_seed(0)
    x, y = torch.randn(256, 8), torch.randint(0, 3, (256,))

    def net():
        torch.manual_seed(1)
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))

    def flat(m):
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    start, ends = flat(net()), {}
    for name, method, settings in (
        ("adam", "adam", {}),
        ("defaults", "online-admm", {}),
        ("scaled", "online-admm", {"z_step": "scaled"}),
        ("paper", "online-admm", {"recipe": "paper"}),
    ):
        m = net()
        run = own.train(
            m,
            ["1", "3"],
            (x, y),
            method,
            test_data=(x, y),
            settings=settings,
            epochs=2,
            batch_size=32,
            loss="ce",
            out=tmp_path / name,
        )
        assert run.summary["status"] == "finished"
        ends[name] = flat(m)
    moved = (ends["adam"] - start).norm()
    apart = {k: ((v - ends["adam"]).norm() / moved).item() for k, v in ends.items()}
    assert apart["defaults"] < 1e-5, apart
    assert apart["scaled"] > 1e-3 and apart["paper"] > 0.1, apart
