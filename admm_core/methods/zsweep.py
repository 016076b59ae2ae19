"""The Z-sweep machinery of the Block-ADMM family: one Z-update pass (Alg. 1's Z_T-step and
reverse sweep), Z held as forward pass plus displacement, the Θ-step of every block, minibatch
draws and the BatchNorm modes the sweeps run in."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from ..profile import phase

_MODULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# Where a Θ-step follows a Z sweep at the forward start's inputs (theta_input='start'), the sweep's
# vector-Jacobian products also give the Θ-step's gradients (:func:`reverse_z_sweep`'s
# ``theta_params``): one backward pass per block instead of two. False: the Θ-step runs its own
# backward, the plain computation (the tests compare the two). Speed only: the same numbers up to
# float rounding.
THETA_GRADS_FROM_SWEEP = True


def _modules_of(net: nn.Module) -> tuple[list, list]:
    """(every module, the BatchNorm modules) of ``net``, listed once per network: the walk costs
    more than a small block's forward pass, and the sweeps switch modes several times per minibatch."""
    found = _MODULES.get(net)
    if found is None:
        mods = list(net.modules())
        found = _MODULES[net] = (mods, [m for m in mods if isinstance(m, nn.modules.batchnorm._BatchNorm)])
    return found


def set_mode(net: nn.Module, training: bool) -> None:
    """``net.train(training)``, skipped when every module is already in that mode (same effect;
    ``Module.train`` walks and re-sets every submodule, ~0.1 ms a call on a 3-block MLP)."""
    mods, _ = _modules_of(net)
    if any(m.training != training for m in mods):
        net.train(training)


@contextmanager
def norm_mode(net: nn.Module, mode: str):
    """Run ``net`` with BatchNorm in ``mode`` for passes that are not Θ-steps (Z sweeps, dual steps).

    ``eval``: running statistics, so each sample's Z objective is its own. ``train``: the
    minibatch's statistics, as the Θ-step that follows sees them, with the running statistics
    left untouched (momentum 0), so only Θ-steps move them, once per step as in backprop.
    The previous mode and momenta are restored on exit.
    """
    was = net.training
    if mode == "eval":
        set_mode(net, False)
        try:
            yield
        finally:
            set_mode(net, was)
        return
    _, bns = _modules_of(net)
    saved = [(m.momentum, None if m.num_batches_tracked is None else m.num_batches_tracked.clone()) for m in bns]
    for m in bns:
        m.momentum = 0.0
    set_mode(net, True)
    try:
        yield
    finally:
        for m, (mom, count) in zip(bns, saved):
            m.momentum = mom
            if count is not None:
                m.num_batches_tracked.copy_(count)
        set_mode(net, was)


def block_params(block: nn.Module) -> list[torch.Tensor]:
    """Θ_t: the parameters of ``block`` that train, in one fixed order (the Θ-step's and the sweep's)."""
    return [p for p in block.parameters() if p.requires_grad]


def theta_step(
    net,
    opt: torch.optim.Optimizer,
    inputs: Sequence[torch.Tensor],
    coupling_losses: Callable[[int, torch.Tensor], torch.Tensor],
    reduce_grads: Callable[[list[torch.Tensor]], None] | None = None,
    given: dict | None = None,
    blocks: Sequence[int] | None = None,
    grads: dict | None = None,
) -> None:
    """Θ-update of every block (or of ``blocks``, the ones this process owns) on one minibatch: Θ_t ← Θ_t − η ∇_{Θ_t} P_t.

    ``inputs[t]`` is block t's (detached) input Z_{t−1}; ``coupling_losses(t, out)`` its P_t.
    P_t depends on Θ_t alone (Z and U are fixed here), so the gradient of Σ_t P_t w.r.t.
    Θ_t is ∇_{Θ_t} P_t: one backward call gives every block its own update and no
    gradient crosses a block boundary (the inputs carry no graph). The backward is asked for Θ
    alone: inputs that are leaves of a forward start's graph get no gradient they would not use.

    ``reduce_grads(params)`` runs between backward and step (the data-parallel all-reduce);
    with it, empty ``inputs`` (this rank holds none of the minibatch's rows) skip the forward.
    ``given[t]``: block t's output on ``inputs[t]`` already computed with Θ_t's graph (it is used
    instead of a second forward pass; the caller vouches that Θ_t and the input are the same).
    ``grads[t]``: ∇_{Θ_t} P_t already computed (one tensor or None per :func:`block_params` of block t),
    e.g. by the Z sweep's vector-Jacobian product through block t (:func:`reverse_z_sweep`'s
    ``theta_grads``); block t then has neither forward nor backward here.
    """
    opt.zero_grad(set_to_none=True)
    if reduce_grads is None or inputs[0].shape[0] > 0:
        with phase("theta.forward_backward"):
            given, grads = given or {}, grads or {}
            todo = [t for t in range(len(net.blocks)) if blocks is None or t in blocks]
            for t in todo:
                for p, g in zip(block_params(net.blocks[t]), grads.get(t, ())):
                    if g is not None:
                        p.grad = g if p.grad is None else p.grad + g  # a parameter shared by two blocks adds up
            rest = [t for t in todo if t not in grads]
            params = [p for t in rest for p in block_params(net.blocks[t])]
            if params:
                total = sum(coupling_losses(t, given[t] if t in given else net.blocks[t](inputs[t])) for t in rest)
                torch.autograd.backward(total, inputs=params)
    if reduce_grads is not None:
        with phase("theta.all_reduce"):
            reduce_grads([p for g in opt.param_groups for p in g["params"]])
    with phase("theta.optimizer"):
        opt.step()


def minibatches(n: int, batch_size: int, gen: torch.Generator) -> list[torch.Tensor]:
    """A fresh random permutation of range(n) cut into minibatches."""
    perm = torch.randperm(n, generator=gen)
    return list(perm.split(batch_size))


@dataclass
class ZRows:
    """Z_t of some rows, held as Z_t = base_t + δ_t, where base_t is the forward pass a Z-update
    started from (``base`` None: ``delta`` holds Z_t itself).

    Residuals are formed as (base_t − out) + δ_t: when out is that same forward pass, base_t − out
    is exactly 0 and the residual is δ_t, however small against the activations (see
    :func:`reverse_z_sweep`'s ``forwards``). Passed ``base[t]`` itself (no graph), the residual is
    δ_t with no arithmetic: (base_t − base_t) + δ_t = δ_t wherever the activations are finite.
    """

    base: list | None
    delta: list
    given: dict | None = None  # {t: block_t's output with Θ_t's graph}, for the Θ-step to reuse
    theta_grads: dict | None = None  # {t: ∇_{Θ_t} P_t}, taken by the sweep's vjp (``reverse_z_sweep``)
    values: list | None = None  # Z_t = base_t + δ_t where already formed (the sweep's return), else formed once

    def z(self, t: int) -> torch.Tensor:
        if self.base is None:
            return self.delta[t]
        if self.values is None:
            self.values = [None] * len(self.delta)
        if self.values[t] is None:
            self.values[t] = self.base[t] + self.delta[t]
        return self.values[t]

    def zs(self) -> list[torch.Tensor]:
        return [self.z(t) for t in range(len(self.delta))]

    def residual(self, t: int, out: torch.Tensor) -> torch.Tensor:
        """Z_t − out."""
        if self.base is None:
            return self.delta[t] - out
        if out is self.base[t]:
            return self.delta[t]
        return (self.base[t] - out) + self.delta[t]


def forward_start(
    blocks: Sequence[nn.Module], z0: torch.Tensor, first_out: torch.Tensor | None = None
) -> tuple[list[torch.Tensor], list[tuple]]:
    """Z_t from a forward pass (Z_0 = x), keeping each block's graph from its input: returns the Z
    start and, per block, (input, output) for :func:`reverse_z_sweep`'s ``forwards``.

    Block t's input is Z_{t−1} detached (a leaf that requires grad, except Z_0), so the sweep's
    vjp through block_{t+1} stops at Z_t and no gradient crosses a block boundary.
    ``first_out``: block_1(Z_0), computed by the caller (e.g. with Θ_1's graph, for its Θ-step).
    """
    pairs, inp = [], z0
    with torch.enable_grad():
        for t, block in enumerate(blocks):
            if t > 0:
                inp = inp.detach().requires_grad_()
            elif inp.requires_grad:
                inp = inp.detach()
            if t == 0 and first_out is not None:
                out = first_out
            elif t == 0:
                with torch.no_grad():
                    out = block(inp)
            else:
                out = block(inp)
            pairs.append((inp, out))
            inp = out
    return [out.detach() for _, out in pairs], pairs


def reverse_z_sweep(
    blocks: Sequence[nn.Module],
    z0: torch.Tensor,
    zs: list[torch.Tensor],
    objective: Callable[[torch.Tensor], torch.Tensor],
    couplings: Sequence[Callable[[torch.Tensor], torch.Tensor]],
    z_step: Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor],
    on_forward: Callable[[int, torch.Tensor], None] | None = None,
    jacobi: bool = False,
    forwards: Sequence[tuple] | None = None,
    own_grad: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
    offsets: list | None = None,
    keep_graphs: bool = False,
    objective_grad: Callable[[torch.Tensor], torch.Tensor] | None = None,
    solve: Callable | None = None,
    signal_norm: bool = False,
    theta_params: Sequence[Sequence[torch.Tensor]] | None = None,
    theta_grads: dict | None = None,
) -> list[torch.Tensor]:
    """One Z-update pass of Alg. 1/2 on some rows: Z_T first, then t = T−1 … 1.

    ``couplings[t](r)`` is block t+1's coupling term (0-based) as a function of its residual
    r = Z − block(Z_prev), e.g. β/2‖r + u‖². The gradient for Z_t is

        ∇_{Z_t} [ P_t(Z_t − block_t(Z_{t−1})) + P_{t+1}(Z_{t+1}^{new} − block_{t+1}(Z_t)) ]

    where the second term reaches Z_t only through block_{t+1} — backprop stops at Z_t.
    Each block runs forward exactly once, on the Z values the sweep started from;
    ``on_forward(t, out)`` sees each output block_t(Z_{t−1}) before Z_t is stepped (the batch
    method folds its pending dual step in there). ``z_step(t, z, grad)`` returns the new Z_t.
    ``own_grad(t, r)``: ∇_r of ``couplings[t]`` in closed form (β(r + u) for the quadratic),
    instead of asking autograd; the gradient through block_{t+1} is then one vector-Jacobian
    product of block_{t+1}'s output with −``own_grad(t+1, r)`` (∇_out P = −∇_r P). ``objective_grad(Z_T)``:
    ∇J in closed form (the loss's ``grad``), likewise.

    ``jacobi``: P_{t+1} is taken at the Z_{t+1} the sweep started from instead of the new one,
    so every Z_t moves from the previous iterate of its neighbours (a Jacobi sweep; the
    blocks' Z-steps are then independent and can run on different processes).

    ``forwards``: the (input, output) pairs of :func:`forward_start` when ``zs`` is that forward
    pass. The sweep then reuses them (one forward pass fewer) and steps the displacements
    δ_t = Z_t − block_t(Z_{t−1}) from 0 instead of Z_t itself: the same numbers in exact
    arithmetic, but a residual is never the difference of two nearly equal activations, so a
    small step deep in a network is not lost to float32 rounding (ζ^{T−t} shrinks it per block).
    ``offsets`` (a list of T Nones) then receives the final δ_t; the return is still Z_t = out + δ_t.
    ``keep_graphs``: keep the blocks' graphs after the vjps (a Θ-step will backpropagate through them).
    ``solve(t, g, inp, out)``: the direction handed to ``z_step`` instead of the gradient g, given
    block_{t+1}'s (input, output) pair with its graph (None for Z_T): e.g. the Newton direction of
    the linearised sub-problem (:func:`newton_direction`).
    ``signal_norm``: the signal from block_{t+1} (the vjp above) is raised to the size of ∇J(Z_T)
    where it is smaller (``z_norm='signal'``); Z_t's own term β_t(r_t + U_t) keeps its size, so
    with ζβ = 1 from a forward start U_t still cancels out of the residual.
    ``theta_params[t]``: Θ_t (:func:`block_params`), to get the Θ-step's gradients out of the sweep's
    backward passes: the vjp through block_{t+1} is also taken w.r.t. Θ_{t+1}, giving ∇_{Θ_{t+1}} P_{t+1}
    at the final Z_{t+1} of this Gauss–Seidel pass, and after Z_1's step one more vjp gives ∇_{Θ_1} P_1;
    each is written into ``theta_grads[t]`` (a dict). When the Θ-step follows at the forward start's
    inputs and outputs (``theta_input='start'``) with Z and U as this pass leaves them, these are its
    gradients of P_t (up to its factor 1/|i|), so one backward pass through each block serves both
    the Z-update and the Θ-step. Needs ``forwards`` (the blocks' graphs from Θ) and a Gauss–Seidel pass;
    that the Θ-step follows with the same Z and U is the caller's to vouch.
    """
    if theta_params is not None and (forwards is None or jacobi):
        raise ValueError("theta_params: needs a Gauss–Seidel pass from a forward start (forwards)")
    sweep = _Sweep(blocks, z0, zs, couplings, z_step, on_forward, forwards, own_grad)
    T = len(blocks)
    with torch.enable_grad():
        with phase(f"z_sweep.block{T}"):
            inp, out = sweep.forward(T - 1)
            # Z_T-step (Alg. 1, line 1): ∇ (J + P_T)
            if objective_grad is not None:
                g_obj = objective_grad(sweep.zs[T - 1].detach())
            else:
                zT = sweep.zs[T - 1].detach().requires_grad_()
                g_obj = torch.autograd.grad(objective(zT), zT)[0]
            g = g_obj + sweep.own(T - 1, out)
            top = _size(g_obj) if signal_norm else None  # the objective's pull, the signal that travels down
            sweep.step(T - 1, g if solve is None else solve(T - 1, g, None, None))
        keep = keep_graphs or solve is not None  # solve differentiates block_{t+1} again
        # Z-update, reverse sweep (Alg. 1, t = T−1 … 1)
        for t in range(T - 2, -1, -1):
            with phase(f"z_sweep.block{t + 1}"):
                # P_{t+1} at the new Z_{t+1} (Jacobi: the old one), differentiated through block_{t+1} only
                wrt = [inp] if theta_params is None else [inp, *theta_params[t + 1]]  # Θ_{t+1} too: its Θ-step's
                vjp = sweep.vjp(t + 1, out, wrt, keep, new=not jacobi, unused=len(wrt) > 1)
                g_next = vjp[0]
                if theta_params is not None:
                    theta_grads[t + 1] = list(vjp[1:])
                if signal_norm:  # z_norm='signal' (not in the paper): the signal keeps ∇J's size
                    size = _size(g_next)
                    if 0 < size < top:
                        g_next = g_next * (top / size).to(g_next.dtype)
                nxt = (inp, out)
                inp, out = sweep.forward(t)
                g = sweep.own(t, out) + g_next
                sweep.step(t, g if solve is None else solve(t, g, *nxt))
                del nxt
        if theta_params is not None:  # block 1's Θ-gradient at its final Z_1 (no Z-step reads it)
            with phase("z_sweep.block1"):
                theta_grads[0] = list(sweep.vjp(0, out, list(theta_params[0]), keep, unused=True))
    return sweep.result(offsets)


class _Sweep:
    """The rows' Z_t during one :func:`reverse_z_sweep`: Z_t itself, or its displacement δ_t from the
    forward pass the sweep started at (``forwards``), and the values the sweep started from."""

    def __init__(self, blocks, z0, zs, couplings, z_step, on_forward, forwards, own_grad):
        self.blocks, self.z0, self.couplings, self.z_step = blocks, z0, couplings, z_step
        self.on_forward, self.forwards, self.own_grad = on_forward, forwards, own_grad
        self.zs, self.z_old = list(zs), list(zs)
        if forwards is not None:
            self.deltas = [torch.zeros_like(out, dtype=zs[t].dtype) for t, (_, out) in enumerate(forwards)]
            self.old_deltas = list(self.deltas)

    def forward(self, t: int):
        """(input, output) of block t (0-based), input tracking grad unless it is Z_0."""
        if self.forwards is not None:
            inp, out = self.forwards[t]
        elif t == 0:
            with torch.no_grad():
                inp, out = self.z0, self.blocks[0](self.z0)
        else:
            inp = self.zs[t - 1].detach().requires_grad_()
            out = self.blocks[t](inp)
        if self.on_forward is not None:
            self.on_forward(t, out.detach())
        return inp, out

    def residual(self, t: int, out: torch.Tensor, new: bool = True) -> torch.Tensor:
        """Z_t − out (displacement form: δ_t, exact, as out is the forward pass Z_t started from)."""
        if self.forwards is not None:
            return (self.deltas if new else self.old_deltas)[t] + (self.forwards[t][1].detach() - out)
        return (self.zs if new else self.z_old)[t].detach() - out

    def vjp(self, t: int, out: torch.Tensor, wrt: list, keep: bool, new: bool = True, unused: bool = False) -> tuple:
        """∇ of P_t (at the new Z_t, or the old with ``new=False``) w.r.t. ``wrt`` through block t's
        output ``out`` only: with ``own_grad`` a vector-Jacobian product with ∇_out P_t = −∇_r P_t,
        else autograd through the coupling. With ``unused``, what P_t does not reach gets None."""
        if self.own_grad is not None:
            r = self.closed_residual(t, out, new=new)
            return torch.autograd.grad(out, wrt, -self.own_grad(t, r), retain_graph=keep, allow_unused=unused)
        r = self.residual(t, out, new=new)
        return torch.autograd.grad(self.couplings[t](r), wrt, retain_graph=keep, allow_unused=unused)

    def closed_residual(self, t: int, out: torch.Tensor, new: bool = True) -> torch.Tensor:
        """:meth:`residual` without a graph, for ``own_grad``: from a forward start, where ``out`` is
        that forward pass (every caller's), (out − out) + δ_t is δ_t itself (no arithmetic; the same
        numbers wherever the activations are finite)."""
        if self.forwards is not None:
            return (self.deltas if new else self.old_deltas)[t]
        return self.residual(t, out.detach(), new)

    def own(self, t: int, out: torch.Tensor) -> torch.Tensor:
        """∇ of block t's own coupling term P_t in Z_t (closed form when given, else autograd)."""
        if self.own_grad is not None:
            return self.own_grad(t, self.closed_residual(t, out))
        r = self.residual(t, out.detach())
        r = r.requires_grad_()
        return torch.autograd.grad(self.couplings[t](r), r)[0]

    def step(self, t: int, g: torch.Tensor) -> None:
        if self.forwards is not None:
            self.deltas[t] = self.z_step(t, self.deltas[t], g)
        else:
            self.zs[t] = self.z_step(t, self.zs[t], g)

    def result(self, offsets: list | None) -> list[torch.Tensor]:
        """The new Z_t (and, into ``offsets``, the final δ_t of a forward start)."""
        if self.forwards is None:
            return [z.detach() for z in self.zs]
        if offsets is not None:
            offsets[:] = [d.detach() for d in self.deltas]
        return [(out.detach() + d).detach() for (_, out), d in zip(self.forwards, self.deltas)]


def _size(d: torch.Tensor) -> torch.Tensor:
    """RMS over rows of a row's norm (float64)."""
    return d.detach().double().pow(2).sum().div(max(1, d.shape[0])).sqrt()


def normalised_steps(z_step: Callable, mode: str, T: int) -> Callable:
    """``z_step`` with each Z_t-step (t < T) rescaled to the size of the Z_T-step of the same rows
    (``mode='top'``), or only where it is smaller (``'up'``); ``'off'``: ``z_step`` itself.

    Size: the RMS over rows of a row's norm. From a forward start with ζβ = 1 the reverse sweep is
    backprop's adjoint recursion, so each block's step shrinks by about ‖J_{t+1}‖ per block; the rescale
    keeps its direction and gives it the top step's size, as choosing β_{t+1}/β_t per block so that the
    coupling passes the signal on undiminished would. The sweep visits Z_T first, so its size is known.
    """
    if mode == "off":
        return z_step
    top = [None]

    def step(t, z, g):
        new = z_step(t, z, g)
        d = new - z
        size = _size(d)
        if t == T - 1:
            top[0] = size
            return new
        if size == 0 or (mode == "up" and size >= top[0]):
            return new
        return z + d * (top[0] / size).to(d.dtype)

    return step


def _rowdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Σ over every dimension but the first: one inner product per row, shaped to broadcast."""
    return (a * b).flatten(1).sum(1).view(-1, *[1] * (a.dim() - 1))


def newton_direction(
    g: torch.Tensor, inp: torch.Tensor, out: torch.Tensor, beta_t: float, beta_next: float, iters: int
) -> torch.Tensor:
    """A⁻¹g for A = β_t I + β_{t+1} JᵀJ, J = ∂block_{t+1}/∂Z_t at ``inp`` (its graph to ``out``), by
    ``iters`` conjugate-gradient steps per row (the rows' systems are independent).

    A is the Hessian of P_t + P_{t+1} in Z_t with block_{t+1} linearised (Gauss–Newton), so
    Z_t − A⁻¹g is that sub-problem's minimiser: for a linear next block W it is
    (β_t I + β_{t+1}WᵀW)⁻¹(β_t block_t(Z_{t−1}) − β_t U_t + β_{t+1}Wᵀ(Z_{t+1} + U_{t+1} − b)). Along a
    singular direction s of J a gradient step moves Z_t by β_{t+1}s × the next residual, which
    shrinks block by block when s < 1; the Newton step moves it by β_{t+1}s/(β_t + β_{t+1}s²), which
    tends to 1/s (the least-squares inverse, a target-propagation target) as β_{t+1}/β_t grows.
    Jv comes from the vjp's own graph (∂(Jᵀw)/∂w · v), so any differentiable block serves.
    """
    with torch.enable_grad():
        w = torch.zeros_like(out, requires_grad=True)
        jt_w = torch.autograd.grad(out, inp, w, create_graph=True, retain_graph=True)[0]

        def a_op(v: torch.Tensor) -> torch.Tensor:
            jv = torch.autograd.grad(jt_w, w, v, retain_graph=True)[0]
            return beta_t * v + beta_next * torch.autograd.grad(out, inp, jv, retain_graph=True)[0]

        g = g.detach()
        x = torch.zeros_like(g)
        r, p = g.clone(), g.clone()
        rs = _rowdot(r, r)
        for _ in range(iters):
            ap = a_op(p).detach()
            den = _rowdot(p, ap)
            alpha = torch.where(den > 0, rs / den.clamp_min(1e-300 if g.dtype == torch.float64 else 1e-38), 0.0)
            x = x + alpha * p
            r = r - alpha * ap
            rs_new = _rowdot(r, r)
            p = r + torch.where(rs > 0, rs_new / rs.clamp_min(1e-38), 0.0) * p
            rs = rs_new
    return x


def adam_z_step(z, g, m, v, step: int, lr: float, b1=0.9, b2=0.999, eps=1e-8):
    """Adam on Z rows (in place on m, v). Shown here to degenerate into ±lr sign steps early on."""
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    mhat = m / (1 - b1**step)
    vhat = v / (1 - b2**step)
    return z - lr * mhat / (vhat.sqrt() + eps)
