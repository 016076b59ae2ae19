"""The paper's baselines (admm-closed, taylor, dladmm, bcd, gotmare): oracles for their
update equations, their monotonicity properties, and that each one trains through the engine."""

import copy
import json

import pytest
import torch
from helpers import cli_call, digits_cfg

from admm_core.blocks import build_blocknet
from admm_core.losses import mse_sum
from admm_core.methods import make_method
from admm_core.methods.base import TrainBatch
from admm_core.methods.dladmm import _backtrack
from admm_core.methods.lifted import Solver, cross, gram, linear, mlp_linears, read_weights, relu_argmin, solve_weights
from admm_core.methods.zsweep import minibatches
from admm_core.network import build, train
from admm_core.rundir import read_metrics
from admm_core.spec.config import ConfigError, ModelConfig
from admm_core.spec.methods import METHODS

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
BASELINES = ["admm-closed", "taylor", "dladmm", "bcd", "gotmare"]
LIFTED = ["admm-closed", "taylor", "dladmm", "bcd"]


def test_registry_holds_every_baseline():
    assert set(BASELINES) <= set(METHODS)
    for name in BASELINES:
        assert make_method(name).name == name


# --- closed-form oracles -------------------------------------------------------------------


@pytest.mark.parametrize("ridge", [0.0, 0.3])
def test_w_update_equals_lstsq_and_normal_equations(ridge):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(300, 7, generator=g)
    t = torch.randn(300, 4, generator=g)
    w, b = solve_weights(Solver(0.0), gram(a, chunk=64), cross(a, t, chunk=64), ridge=ridge)
    a1 = torch.cat([a, torch.ones(300, 1)], 1).double()
    if ridge == 0:
        ref = torch.linalg.lstsq(a1, t.double()).solution  # (8, 4)
    else:  # normal equations with the ridge on W only (the bias is not decayed)
        reg = torch.diag(torch.tensor([ridge] * 7 + [0.0], dtype=torch.float64))
        ref = torch.linalg.solve(a1.t() @ a1 + reg, a1.t() @ t.double())
    torch.testing.assert_close(w.double(), ref[:7].t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.double(), ref[7], rtol=1e-5, atol=1e-5)


def test_admm_closed_w_update_is_the_ridge_least_squares_of_alg3():
    """Inside a real sweep, W_L = argmin β/2‖Z_L + U_L − A_{L−1}W̃ᵀ‖² + λ‖W‖² on the pre-sweep A, Z, U."""
    sess = build(digits_cfg("admm-closed", n=400, hidden=(16, 16), init="net", weight_decay=1e-2, solve_eps=0.0))
    m, st = sess.method, sess.state
    lins = mlp_linears(sess.net, m.name)
    x = sess.batch.x.reshape(sess.batch.n, -1)
    m.sweep(lins, st, x, sess.batch)  # give U a non-zero value first
    a_prev, target = (
        st.vars["a"][-1].cpu(),
        (st.vars["z"][-1] + st.vars["u"][-1]).cpu(),
    )  # the reference runs on the CPU
    m.sweep(lins, st, x, sess.batch)
    a1 = torch.cat([a_prev, torch.ones(len(a_prev), 1)], 1).double()
    reg = torch.diag(torch.tensor([2 * m.weight_decay / m.beta] * 16 + [0.0], dtype=torch.float64))
    ref = torch.linalg.solve(a1.t() @ a1 + reg, a1.t() @ target.double())
    w, b = (v.cpu() for v in read_weights(lins[-1]))
    tol = 1e-3 * float(ref.abs().max())  # float32 Gram products, float64 solve
    torch.testing.assert_close(w.double(), ref[:16].t(), rtol=0, atol=tol)
    torch.testing.assert_close(b.double(), ref[16], rtol=0, atol=tol)
    # and it is as good a minimiser as the float64 reference
    f = lambda wt: float(((target.double() - a1 @ wt) ** 2).sum() + 2 * m.weight_decay / m.beta * (wt[:16] ** 2).sum())
    assert f(torch.cat([w.t(), b[None]]).double()) <= f(ref) * (1 + 1e-6)


@pytest.mark.parametrize("wp, wq", [(10.0, 10.0), (1.0, 5.0), (6.0, 1.0)])
def test_relu_z_update_equals_brute_force_grid(wp, wq):
    g = torch.Generator().manual_seed(2)
    p = torch.randn(200, generator=g, dtype=torch.float64) * 2
    q = torch.randn(200, generator=g, dtype=torch.float64) * 2
    z = relu_argmin(p, q, wp, wq)
    grid = torch.linspace(-8, 8, 32_001, dtype=torch.float64)  # step 5e-4 (|p|, |q| < 8 here)
    f = lambda zz, pp, qq: wp / 2 * (zz - pp) ** 2 + wq / 2 * (qq - torch.relu(zz)) ** 2
    fg = f(grid[None, :], p[:, None], q[:, None])  # (200, grid)
    best = fg.min(1)
    assert (f(z, p, q) <= best.values + 1e-7).all()
    # where the minimiser is unique the arguments agree to the grid step
    second = torch.where((grid[None, :] - grid[best.indices][:, None]).abs() > 0.05, fg, torch.inf).min(1).values
    unique = second > best.values + 1e-3
    assert unique.sum() > 150
    assert (z[unique] - grid[best.indices][unique]).abs().max() <= 5e-4


def test_dladmm_backtracking_equals_the_papers_doubling_loop():
    """θ from the closed-form curvature == the public code's loop that evaluates φ on every trial."""
    g = torch.Generator().manual_seed(3)
    a = torch.rand(500, 12, generator=g, dtype=torch.float64)
    w = torch.randn(5, 12, generator=g, dtype=torch.float64)
    b = torch.randn(5, generator=g, dtype=torch.float64)
    t = torch.randn(500, 5, generator=g, dtype=torch.float64)
    for rho in (1e-6, 1e-2, 1.0):
        phi = lambda ww: rho / 2 * ((t - a @ ww.t() - b) ** 2).sum()
        grad = rho * (a @ w.t() + b - t).t() @ a
        theta = 1.0
        while phi(w - grad / theta) > phi(w) + (grad * (-grad / theta)).sum() + theta / 2 * ((grad / theta) ** 2).sum():
            theta *= 2
        curv = float(((grad @ (a.t() @ a)) * grad).sum())
        assert _backtrack(1.0, rho * curv / float((grad**2).sum())) == theta


# --- monotonicity ---------------------------------------------------------------------------


def test_admm_closed_lagrangian_never_rises_in_the_primal_updates():
    """Each primal update of Alg. 3 is an exact block minimiser of the augmented Lagrangian, so
    L does not increase over the primal part of a sweep; the dual step then raises it by
    exactly Σβ‖r‖² + Σγ‖s‖². (L over a whole iteration may rise — that is ADMM, not a bug.)"""
    sess = build(digits_cfg("admm-closed", n=300, hidden=(12, 12), init="net", weight_decay=1e-3, solve_eps=0.0))
    m, st = sess.method, sess.state
    lins = mlp_linears(sess.net, m.name)
    x = sess.batch.x.reshape(sess.batch.n, -1)
    for _ in range(6):
        before = m.lagrangian(lins, st, x, sess.batch)
        m.sweep(lins, st, x, sess.batch, update_duals=False)
        after = m.lagrangian(lins, st, x, sess.batch)
        assert after <= before + 1e-4 * abs(before), (before, after)
        # the dual step raises L by Σ β‖r‖² + γ‖s‖²
        r2 = s2 = 0.0
        for l, lin in enumerate(lins):
            w, b = read_weights(lin)
            a_in = x if l == 0 else st.vars["a"][l - 1]
            r2 += float((st.vars["z"][l] - linear(a_in, w, b)).double().pow(2).sum())
            if l < len(lins) - 1:
                s2 += float((st.vars["a"][l] - torch.relu(st.vars["z"][l])).double().pow(2).sum())
        m.dual_step(lins, st, x)
        raised = m.lagrangian(lins, st, x, sess.batch)
        assert raised - after == pytest.approx(m.beta * r2 + m.gamma * s2, rel=1e-3, abs=1e-4)


def test_admm_closed_folded_dual_step_equals_alg3_order():
    """The per-layer dual updates inside the sweep give the same numbers as Alg. 3's end-of-sweep step."""
    sess = build(digits_cfg("admm-closed", n=300, hidden=(12, 12), init="net"))
    m, st = sess.method, sess.state
    lins = mlp_linears(sess.net, m.name)
    x = sess.batch.x.reshape(sess.batch.n, -1)
    m.sweep(lins, st, x, sess.batch)
    net2, st2 = copy.deepcopy(sess.net), copy.deepcopy(st)
    lins2 = mlp_linears(net2, m.name)
    m.sweep(lins, st, x, sess.batch)
    m.sweep(lins2, st2, x, sess.batch, update_duals=False)
    m.dual_step(lins2, st2, x)
    for k in ("z", "a", "u", "v"):
        for t1, t2 in zip(st.vars[k], st2.vars[k]):
            torch.testing.assert_close(t1, t2, rtol=1e-5, atol=1e-6)
    assert st.scalars["residuals"] == pytest.approx(st2.scalars["residuals"], rel=1e-4, abs=1e-7)


def test_bcd_objective_never_rises():
    """Zeng et al.'s BCD is a descent method: every block update is an exact (proximal) minimiser,
    so the penalised objective is non-increasing over iterations."""
    sess = build(digits_cfg("bcd", n=300, hidden=(12, 12), solve_eps=0.0))
    m, st = sess.method, sess.state
    lins = mlp_linears(sess.net, m.name)
    x = sess.batch.x.reshape(sess.batch.n, -1)

    def objective():
        z, a, (out,) = st.vars["z"], st.vars["a"], st.vars["a_out"]
        f = float(mse_sum(out.double(), sess.batch.y)) + m.gamma / 2 * float((out - z[-1]).double().pow(2).sum())
        for l, lin in enumerate(lins):
            w, b = read_weights(lin)
            f += m.rho / 2 * float((z[l] - linear(x if l == 0 else a[l - 1], w, b)).double().pow(2).sum())
            if l < len(lins) - 1:
                f += m.gamma / 2 * float((a[l] - torch.relu(z[l])).double().pow(2).sum())
        return f

    values = [objective()]
    for _ in range(6):
        m.sweep(lins, st, x, sess.batch)
        values.append(objective())
    assert all(b <= a + 1e-4 * abs(a) for a, b in zip(values, values[1:])), values
    assert values[-1] < values[0]


# --- gotmare == block-admm with U ≡ 0 -------------------------------------------------------


def test_gotmare_equals_block_admm_with_duals_frozen_at_zero():
    # Alg. 1's sweep schedule, written out below (digits-mlp's own default is the minibatch recipe)
    sweep = {"z_schedule": "sweep", "z_start": "previous", "dual_theta": "new", "theta_input": "new"}
    cfg = digits_cfg("gotmare", n=400, **sweep)
    got = build(cfg)
    ref = build(cfg.replace(method="block-admm"))  # same seed -> same net, Z, generator
    bm = ref.method
    for _ in range(2):
        got.method.run_epoch(got.net, got.state, got.batch)
        # BlockADMM's own primal steps on the same schedule, the dual step left out
        batches = minibatches(ref.batch.n, ref.batch.batch_size, ref.state.gen)
        phases = bm.iters_per_epoch * bm.primal_steps
        for i in range(phases):
            bm.z_update(ref.net, ref.state, ref.batch, with_dual=False)
            bm.theta_steps(
                ref.net,
                ref.state,
                ref.batch,
                batches[round(i * len(batches) / phases) : round((i + 1) * len(batches) / phases)],
            )
    assert all(float(u.abs().max()) == 0.0 for u in got.state.u)
    for z1, z2 in zip(got.state.z, ref.state.z):
        assert torch.equal(z1, z2)
    for p1, p2 in zip(got.net.parameters(), ref.net.parameters()):
        assert torch.equal(p1, p2)
    d = got.method.diagnostics(got.net, got.state, got.batch)
    assert d["dual_norms"] == [0.0] * 3 and all(r > 0 for r in d["residuals"])
    assert got.method.state_bytes(got.state) == sum(z.numel() * 4 for z in got.state.z)


# --- engine integration ---------------------------------------------------------------------


@pytest.mark.parametrize("method", BASELINES)
def test_baseline_learns_on_digits_through_the_engine(method, tmp_path):
    summary = train(digits_cfg(method, epochs=3), tmp_path)
    ms = read_metrics(tmp_path)
    assert [m["epoch"] for m in ms] == [0, 1, 2, 3]
    assert ms[-1]["train_loss"] < 0.8 * ms[0]["train_loss"], [m["train_loss"] for m in ms]
    assert summary["test_accuracy"] > 0.7, summary
    last = ms[-1]
    assert len(last["residuals"]) == 3 and len(last["dual_norms"]) == 3 and len(last["betas"]) == 3
    assert last["state_bytes"] > 0
    if method in LIFTED:
        assert len(last["act_residuals"]) == 2 and last["ill_conditioned"] >= 0


@pytest.mark.parametrize("method", ["admm-closed", "dladmm"])
def test_lifted_resume_is_exact(method, tmp_path):
    cfg = digits_cfg(method, epochs=4, n=500)
    full = train(cfg, tmp_path / "full")
    train(cfg.replace(train__epochs=2), tmp_path / "part")
    resumed = train(cfg, tmp_path / "part", resume=True)
    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [(m["train_loss"], m["residuals"], m["dual_norms"]) for m in a] == [
        (m["train_loss"], m["residuals"], m["dual_norms"]) for m in b
    ]
    assert resumed["test_accuracy"] == full["test_accuracy"]


def test_lifted_methods_refuse_non_mlp_networks():
    net = build_blocknet(ModelConfig("resnet18"), (3, 32, 32), 10)
    batch = TrainBatch(torch.randn(4, 3, 32, 32), torch.zeros(4, dtype=torch.long), mse_sum, 2)
    for name in LIFTED:
        with pytest.raises(ConfigError, match="mlp"):
            make_method(name).init_state(net, batch, torch.Generator().manual_seed(0))


def test_singular_solves_are_regularised_and_counted():
    s = Solver(0.0)
    m = torch.ones(4, 4, dtype=torch.float64)  # rank 1
    r = torch.randn(4, 2, dtype=torch.float64)
    x = s.solve(m, r)
    assert torch.isfinite(x).all() and s.ill_conditioned == 1
    s.solve(torch.eye(4, dtype=torch.float64), r)
    assert s.ill_conditioned == 1 and s.solves == 2
    # a duplicated input column makes every layer-1 Gram singular: the run goes on and says so
    sess = build(digits_cfg("taylor", n=200, solve_eps=0.0))
    x = sess.batch.x.clone()  # the session's inputs are the process-wide cached data set's rows (data.load)
    x[:, 1] = x[:, 0]
    sess.batch.x = x
    sess.method.run_epoch(sess.net, sess.state, sess.batch)
    diag = sess.method.diagnostics(sess.net, sess.state, sess.batch)
    assert diag["ill_conditioned"] > 0
    assert all(torch.isfinite(p).all() for p in sess.net.parameters())


def test_cli_trains_a_baseline(tmp_path):
    out = tmp_path / "run"
    rc, stdout, err = cli_call(
        ["train", "--preset", "digits-mlp", "--method", "bcd", "--epochs", "2", "--out", str(out), "--quiet"]
    )
    assert rc == 0, err
    assert json.loads(stdout)["method"] == "bcd"
    assert len(read_metrics(out)) == 3
