"""One epoch of Block-ADMM's minibatch schedule (``z_schedule='minibatch'``, the default) against
its equations written by hand.

Per minibatch i, in the order ``minibatches`` draws them (k = 1 primal pass):

    Z⁰_{t,i}: a forward pass of the current Θ (z_start='forward') or the stored rows (previous)
    Z_T-step, reverse sweep t = T−1 … 1 from Z⁰ (plain gradient steps, fixed ζ_t)
    Θ_t ← Θ_t − η ∇_{Θ_t} P_t/|i|, block t's input Z⁰_{t−1} (theta_input='start') or the new Z_{t−1}
    U_{t,i} ← U_{t,i} + α (Z_{t,i} − block_t(input_{t−1})), block_t with Θ before its step
             (dual_theta='old', the Θ-step's own pass) or after it, on the new Z_{t−1} (new)

for a 3-block ReLU MLP with MSE loss and SGD on Θ, every gradient by hand (no autograd). Rows of
minibatch 2 see Θ after minibatch 1's step, so the per-row bookkeeping is exercised.
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import mlp_weights, tiny_mlp

from admm_core.losses import mse_sum
from admm_core.methods import make_method
from admm_core.methods.base import TrainBatch
from admm_core.methods.zsweep import minibatches

N, D, C, BS = 11, 7, 4, 4  # three minibatches (4, 4, 3)
BETAS, Z_LRS, LR = [0.7, 1.3, 0.9], [0.3, 0.2, 0.4], 0.05


def relu(a):
    return a.clamp_min(0)


def blocks_out(W, inputs):
    """block_t(inputs[t]) and its pre-activation, t = 1..3 (the last block is linear)."""
    outs, pres = [], []
    for t, ((Wt, bt), inp) in enumerate(zip(W, inputs)):
        pre = inp @ Wt.T + bt
        pres.append(pre)
        outs.append(relu(pre) if t < 2 else pre)
    return outs, pres


def reference_epoch(W, Z, U, x, y, batches, z_start, theta_input, dual_theta, alpha, uses_duals=True):
    """The schedule's epoch by hand; returns (W, Z, U) after it (inputs untouched)."""
    W = [(w.clone(), b.clone()) for w, b in W]
    Z, U = [z.clone() for z in Z], [u.clone() for u in U]
    Y = F.one_hot(y, C).double()
    B1, B2, B3 = BETAS
    q1, q2, q3 = Z_LRS
    (W1, _), (W2, _), (W3, _) = W
    for idx in batches:
        xi, Yi = x[idx], Y[idx]
        Ui = [u[idx] for u in U]
        if z_start == "forward":
            h1 = relu(xi @ W[0][0].T + W[0][1])
            h2 = relu(h1 @ W[1][0].T + W[1][1])
            h3 = h2 @ W[2][0].T + W[2][1]
            Z0 = [h1, h2, h3]
        else:
            Z0 = [z[idx] for z in Z]
        (W1, b1), (W2, b2), (W3, b3) = W
        # the block outputs the sweep reads, all at the start Z⁰
        pre1 = xi @ W1.T + b1
        pre2 = Z0[0] @ W2.T + b2
        F1, F2, F3 = relu(pre1), relu(pre2), Z0[1] @ W3.T + b3
        # Z_T-step: ∇ [½‖Z3 − Y‖² + β3/2 ‖Z3 − F3 + U3‖²]
        Z3 = Z0[2] - q3 * ((Z0[2] - Yi) + B3 * (Z0[2] - F3 + Ui[2]))
        # t = 2: own term + P_3 through block 3 (linear), at the new Z3
        Z2 = Z0[1] - q2 * (B2 * (Z0[1] - F2 + Ui[1]) - B3 * (Z3 - F3 + Ui[2]) @ W3)
        # t = 1: own term + P_2 through block 2 (ReLU mask), at the new Z2
        Z1 = Z0[0] - q1 * (B1 * (Z0[0] - F1 + Ui[0]) - (B2 * (Z2 - F2 + Ui[1]) * (pre2 > 0)) @ W2)
        Zn = [Z1, Z2, Z3]
        for t in range(3):
            Z[t][idx] = Zn[t]
        # Θ-step: SGD on Σ_t P_t / |i|
        inputs = [xi, Z0[0], Z0[1]] if theta_input == "start" else [xi, Z1, Z2]
        outs_old, pres = blocks_out(W, inputs)
        new_W = []
        for t in range(3):
            delta = -BETAS[t] * (Zn[t] - outs_old[t] + Ui[t]) / len(idx)
            if t < 2:
                delta = delta * (pres[t] > 0)
            Wt, bt = W[t]
            new_W.append((Wt - LR * delta.T @ inputs[t], bt - LR * delta.sum(0)))
        W = new_W
        # dual step of these rows
        if uses_duals:
            outs = outs_old if dual_theta == "old" else blocks_out(W, [xi, Z1, Z2])[0]
            for t in range(3):
                U[t][idx] = Ui[t] + alpha * (Zn[t] - outs[t])
    return W, Z, U


# (z_start, theta_input, dual_theta, α); theta_input='start' needs z_start='forward'
DEFAULT = ("forward", "start", "old", 0.01)
CASES = [
    (zs, ti, dt, a)
    for zs, ti in (("forward", "start"), ("forward", "new"), ("previous", "new"))
    for dt in ("old", "new")
    for a in (1.0, 0.01)
]


def run_case(method_name, z_start, theta_input, dual_theta, alpha, seed=0):
    net, x, y = tiny_mlp(N, D, (6, 5), C, seed)
    params = dict(lr=LR, theta_optimizer="sgd", z_lr=Z_LRS, beta=BETAS, chunk_size=5)
    if z_start is not None:
        params.update(z_start=z_start, theta_input=theta_input)
    if method_name == "block-admm":
        params.update(dual_theta=dual_theta, dual_lr=alpha, u_init="uniform", u_init_scale=0.5)
    method = make_method(method_name, params)
    s = method.settings
    batch = TrainBatch(x, y, mse_sum, batch_size=BS)
    state = method.init_state(net, batch, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)  # Z away from the forward pass, so 'previous' differs from 'forward'
    for z in state.z:
        z.add_(0.3 * torch.randn(z.shape, generator=g, dtype=z.dtype))
    gen = torch.Generator()
    gen.set_state(state.gen.get_state())
    order = minibatches(N, BS, gen)  # the epoch's minibatches, drawn as run_epoch will draw them
    W0, Z0, U0 = mlp_weights(net), [z.clone() for z in state.z], [u.clone() for u in state.u]

    method.run_epoch(net, state, batch)

    ref = reference_epoch(
        W0, Z0, U0, x, y, order, s.z_start, s.theta_input, s.dual_theta, s.dual_lr, uses_duals=s.uses_duals
    )
    return net, state, (W0, Z0, U0), ref, s


def check(net, state, start, ref):
    W0, Z0, U0 = start
    ref_W, ref_Z, ref_U = ref
    for (a, b), (ra, rb) in zip(mlp_weights(net), ref_W):
        torch.testing.assert_close(a, ra, atol=1e-10, rtol=0)
        torch.testing.assert_close(b, rb, atol=1e-10, rtol=0)
    for z, rz in zip(state.z, ref_Z):
        torch.testing.assert_close(z, rz, atol=1e-10, rtol=0)
    for u, ru in zip(state.u, ref_U):
        torch.testing.assert_close(u, ru, atol=1e-10, rtol=0)
    # the epoch really moved every row of Z and every block's Θ (the oracle is not comparing no-ops)
    assert all(((z - z0).abs().amax(1) > 1e-3).all() for z, z0 in zip(state.z, Z0))
    assert all((w[0] - w0[0]).abs().max() > 1e-4 for w, w0 in zip(mlp_weights(net), W0))


@pytest.mark.parametrize("z_start,theta_input,dual_theta,alpha", CASES)
def test_minibatch_epoch_matches_hand_written_equations(z_start, theta_input, dual_theta, alpha):
    net, state, start, ref, s = run_case("block-admm", z_start, theta_input, dual_theta, alpha)
    assert (s.z_start, s.theta_input, s.dual_theta, s.dual_lr) == (z_start, theta_input, dual_theta, alpha)
    check(net, state, start, ref)
    assert all(((u - u0).abs().amax(1) > 1e-5).all() for u, u0 in zip(state.u, start[2]))  # every row's dual step


def test_the_default_recipe_matches_hand_written_equations():
    """The settings a user gets: nothing of the schedule given."""
    net, state, start, ref, s = run_case("block-admm", None, None, "old", 0.01)
    assert (s.z_schedule, s.z_start, s.theta_input, s.dual_theta, s.dual_lr, s.primal_steps) == (
        "minibatch",
        *DEFAULT,
        1,
    )
    check(net, state, start, ref)


def test_gotmare_keeps_u_zero_and_matches_the_equations_with_u_zero():
    net, state, start, ref, s = run_case("gotmare", None, None, None, None)
    assert not s.uses_duals and s.z_schedule == "minibatch"
    assert all(bool((u == 0).all()) for u in state.u)
    check(net, state, start, ref)
