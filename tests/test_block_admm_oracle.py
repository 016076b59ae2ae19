"""One Block-ADMM iteration against a hand-written implementation of the paper's equations.

The reference below writes out Alg. 1 for a 3-block ReLU MLP with MSE loss, one β per block,
plain gradient Z-steps (fixed ζ, or curvature-scaled ζ/(β_t + β_{t+1}‖W_{t+1}‖²) with the exact
spectral norm) and SGD Θ-steps, with every gradient derived by hand (ReLU masks and transposed
weights, no autograd). The engine must agree to 1e-6 (float64).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import mlp_weights, tiny_mlp

from admm_core.losses import mse_sum
from admm_core.methods import make_method
from admm_core.methods.base import TrainBatch
from admm_core.methods.zsweep import minibatches

N, D, H1, H2, C = 23, 7, 6, 5, 4


def tiny_problem(seed=0):
    return tiny_mlp(N, D, (H1, H2), C, seed)


def scaled_steps(W, betas, z_lr):
    """ζ_t / (β_t + β_{t+1}‖W_{t+1}‖₂²) for t < T, ζ / (β_T + 1) for Z_T (MSE's Hessian is I)."""
    s = [torch.linalg.matrix_norm(w, 2).item() for w, _ in W]
    B1, B2, B3 = betas
    return [z_lr / (B1 + B2 * s[1] ** 2), z_lr / (B2 + B3 * s[2] ** 2), z_lr / (B3 + 1.0)]


def reference_iteration(W, Z, U, x, y, betas, z_lrs, lr):
    """Alg. 1, one iteration (k = 1 primal step, full-batch Θ-step), by hand; β_t, ζ_t per block."""
    (W1, b1), (W2, b2), (W3, b3) = W
    B1, B2, B3 = betas
    q1, q2, q3 = z_lrs
    Z1, Z2, Z3 = Z
    U1, U2, U3 = U
    Y = F.one_hot(y, C).double()
    n = x.shape[0]
    relu = lambda a: a.clamp_min(0)

    # Z_T-step: ∇_{Z3} [½‖Z3 − Y‖² + β3/2 ‖Z3 − F3 + U3‖²]
    F3 = Z2 @ W3.T + b3
    Z3n = Z3 - q3 * ((Z3 - Y) + B3 * (Z3 - F3 + U3))
    # reverse sweep, t = 2: own term + P_3 through block 3 (linear)
    pre2 = Z1 @ W2.T + b2
    F2 = relu(pre2)
    g2 = B2 * (Z2 - F2 + U2) - B3 * (Z3n - F3 + U3) @ W3
    Z2n = Z2 - q2 * g2
    # t = 1: own term + P_2 through block 2 (ReLU mask)
    pre1 = x @ W1.T + b1
    F1 = relu(pre1)
    g1 = B1 * (Z1 - F1 + U1) - (B2 * (Z2n - F2 + U2) * (pre2 > 0)) @ W2
    Z1n = Z1 - q1 * g1

    # Θ-step: SGD on P_t / n, inputs are the new Z
    def grads(inp, Zt, Ut, Wt, bt, act, beta):
        pre = inp @ Wt.T + bt
        out = relu(pre) if act else pre
        delta = -beta * (Zt - out + Ut) / n
        if act:
            delta = delta * (pre > 0)
        return delta.T @ inp, delta.sum(0)

    new_W = []
    for inp, Zt, Ut, (Wt, bt), act, beta in (
        (x, Z1n, U1, W[0], True, B1),
        (Z1n, Z2n, U2, W[1], True, B2),
        (Z2n, Z3n, U3, W[2], False, B3),
    ):
        gW, gb = grads(inp, Zt, Ut, Wt, bt, act, beta)
        new_W.append((Wt - lr * gW, bt - lr * gb))

    # dual step with the new weights and Z
    (V1, c1), (V2, c2), (V3, c3) = new_W
    U1n = U1 + Z1n - relu(x @ V1.T + c1)
    U2n = U2 + Z2n - relu(Z1n @ V2.T + c2)
    U3n = U3 + Z3n - (Z2n @ V3.T + c3)
    return new_W, [Z1n, Z2n, Z3n], [U1n, U2n, U3n]


@pytest.mark.parametrize("z_step", ["fixed", "scaled"])
def test_one_iteration_matches_hand_written_equations(z_step):
    net, x, y = tiny_problem()
    betas, z_lr, lr = [0.7, 1.3, 0.9], 0.3, 0.05
    method = make_method(
        "block-admm",
        dict(
            lr=lr,
            theta_optimizer="sgd",
            z_lr=z_lr,
            z_step=z_step,
            power_steps=500,  # converged: the reference uses the exact spectral norm
            beta=betas,
            primal_steps=1,
            iters_per_epoch=1,
            z_schedule="sweep",  # Alg. 1's schedule and full dual step, as the reference writes them
            dual_lr=1.0,
            u_init="uniform",
            u_init_scale=0.5,
            chunk_size=10,
        ),
    )
    batch = TrainBatch(x, y, mse_sum, batch_size=N)  # one minibatch = the whole set
    state = method.init_state(net, batch, torch.Generator().manual_seed(1))
    # move away from the forward-pass init so every term is non-trivial
    g = torch.Generator().manual_seed(2)
    for z in state.z:
        z.add_(0.3 * torch.randn(z.shape, generator=g, dtype=z.dtype))
    W0 = mlp_weights(net)
    Z0 = [z.clone() for z in state.z]
    U0 = [u.clone() for u in state.u]
    assert all(u.abs().sum() > 0 for u in U0)

    method.run_epoch(net, state, batch)

    z_lrs = scaled_steps(W0, betas, z_lr) if z_step == "scaled" else [z_lr] * 3
    ref_W, ref_Z, ref_U = reference_iteration(W0, Z0, U0, x, y, betas, z_lrs, lr)
    for (a, b), (ra, rb) in zip(mlp_weights(net), ref_W):
        torch.testing.assert_close(a, ra, atol=1e-6, rtol=0)
        torch.testing.assert_close(b, rb, atol=1e-6, rtol=0)
    for z, rz in zip(state.z, ref_Z):
        torch.testing.assert_close(z, rz, atol=1e-6, rtol=0)
    for u, ru in zip(state.u, ref_U):
        torch.testing.assert_close(u, ru, atol=1e-6, rtol=0)
    # the update really moved everything (the oracle is not comparing no-ops)
    assert all((z - z0).abs().max() > 1e-3 for z, z0 in zip(state.z, Z0))
    assert all((w[0] - w0[0]).abs().max() > 1e-4 for w, w0 in zip(mlp_weights(net), W0))


def test_folded_dual_step_equals_separate_dual_steps():
    """run_epoch folds the dual step into the next sweep; the numbers must not change."""
    net, x, y = tiny_problem(3)
    params = dict(lr=1e-2, z_lr=0.4, primal_steps=2, iters_per_epoch=3, chunk_size=8, z_schedule="sweep")
    method = make_method("block-admm", params)
    batch = TrainBatch(x, y, mse_sum, batch_size=4)
    net_b = copy.deepcopy(net)
    state_a = method.init_state(net, batch, torch.Generator().manual_seed(5))
    state_b = method.init_state(net_b, batch, torch.Generator().manual_seed(5))

    method.run_epoch(net, state_a, batch)

    # explicit Alg. 1 order: (sweep, Θ) × k, then dual, per iteration
    batches = minibatches(batch.n, batch.batch_size, state_b.gen)
    phases = params["iters_per_epoch"] * params["primal_steps"]
    per_phase = [
        batches[round(i * len(batches) / phases) : round((i + 1) * len(batches) / phases)] for i in range(phases)
    ]
    for it in range(params["iters_per_epoch"]):
        for p in range(params["primal_steps"]):
            method.z_update(net_b, state_b, batch)
            method.theta_steps(net_b, state_b, batch, per_phase[it * params["primal_steps"] + p])
        method.dual_step(net_b, state_b, batch)

    for a, b in zip(state_a.z + state_a.u, state_b.z + state_b.u):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    for pa, pb in zip(net.parameters(), net_b.parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-10, rtol=0)
    assert state_a.iteration == state_b.iteration == params["iters_per_epoch"]


def test_z_sweep_does_not_depend_on_chunk_size():
    net, x, y = tiny_problem(4)
    batch = TrainBatch(x, y, mse_sum, batch_size=N)
    out = []
    for chunk in (3, 50):
        m = make_method("block-admm", dict(chunk_size=chunk))
        st = m.init_state(net, batch, torch.Generator().manual_seed(0))
        for z in st.z:
            z.add_(0.1)
        m.z_update(net, st, batch)
        out.append(st.z)
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_block_gradient_stops_at_z():
    """The Θ-step of block t uses only P_t: changing U of another block leaves Θ_t's step unchanged."""
    net, x, y = tiny_problem(6)
    batch = TrainBatch(x, y, mse_sum, batch_size=N)
    m = make_method("block-admm", dict(theta_optimizer="sgd", lr=0.1))
    res = []
    for bump in (0.0, 5.0):
        n2 = copy.deepcopy(net)
        st = m.init_state(n2, batch, torch.Generator().manual_seed(0))
        for z in st.z:
            z.add_(0.2)
        st.u[2].add_(bump)  # only block 3's dual differs
        m.theta_steps(n2, st, batch, [torch.arange(N)])
        res.append([p.detach().clone() for p in n2.blocks[0].parameters()])
    for a, b in zip(*res):
        torch.testing.assert_close(a, b)
