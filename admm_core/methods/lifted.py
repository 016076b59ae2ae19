"""Shared machinery of the full-batch *lifted* baselines (admm-closed, taylor, dladmm, bcd).

These methods do not use the block split: they lift every layer of a plain ReLU MLP,

    Z_ℓ = A_{ℓ−1} W_ℓᵀ + b_ℓ   (pre-activation, one row per sample; A_0 = X)
    A_ℓ = relu(Z_ℓ)             (activation, ℓ < L)

and update W_ℓ, b_ℓ, Z_ℓ, A_ℓ (and multipliers) over the *whole* training set in closed
form or by linearised steps. Rows are samples (the papers write columns; A W ᵀ here is
their W A). The bias is folded in as an extra input column of ones, so "W" in a solve is
the augmented [W b] of shape (d_out, d_in + 1) — the papers drop the intercept "for
simplicity"; this is their formulation with it put back.

What lives here:

- :func:`mlp_linears` finds the nn.Linear layers of the engine's MLP (and refuses anything
  else with a ConfigError);
- :class:`Solver` does the regularised SPD solves in float64 (Cholesky with growing jitter,
  then a least-squares fallback) and *counts* ill-conditioned ones instead of crashing;
- row-chunked Gram / cross products, so temporaries stay O(chunk × width) and 60,000 ×
  784 MNIST runs in float32 well inside 24 GB (the Gram sums accumulate in float64);
- the exact elementwise ReLU sub-problem :func:`relu_argmin`, the activation solve
  :func:`activation_solve` and the output proximal step :func:`output_prox`;
- :class:`LiftedState` (tensors + scalars, exact resume) and :class:`LiftedMethod`, the
  protocol glue (``run_epoch`` = ``iters_per_epoch`` outer iterations, diagnostics,
  state_bytes).

Weights live in the network's own nn.Linear modules (checkpointed by the engine), so the
engine's straight-through evaluation measures exactly what the method trained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import ConfigError
from ..losses import mse_sum
from ..spec.archs import linear_chains
from .base import Engine, TrainBatch, tensor_bytes

# --------------------------------------------------------------------------------------
# the network


def mlp_linears(net: nn.Module, method: str) -> list[nn.Linear]:
    """The Linear layers of a Linear(+ReLU) MLP, in order; anything else -> ConfigError."""
    mods = [
        m
        for m in net.modules()
        if not isinstance(m, (nn.Sequential, nn.ModuleList)) and m is not net and len(list(m.children())) == 0
    ]
    linears, pattern = [], []
    for m in mods:
        if isinstance(m, nn.Linear):
            linears.append(m)
            pattern.append("L")
        elif isinstance(m, nn.ReLU):
            pattern.append("R")
        elif isinstance(m, nn.Flatten):
            continue
        else:
            raise ConfigError(
                f"method = {method!r}: needs a plain MLP of Linear + ReLU layers (model.arch = {linear_chains()}); "
                f"this network has a {type(m).__name__} layer"
            )
    want = "LR" * (len(linears) - 1) + "L"
    if not linears or "".join(pattern) != want:
        raise ConfigError(
            f"method = {method!r}: needs Linear, ReLU, …, Linear layers (model.arch = {linear_chains()}); got {''.join(pattern) or 'no Linear layer'}"
        )
    return linears


def read_weights(lin: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
    """(W (d_out, d_in), b (d_out,)) as plain tensors (no autograd)."""
    b = (
        lin.bias.detach()
        if lin.bias is not None
        else torch.zeros(lin.out_features, device=lin.weight.device, dtype=lin.weight.dtype)
    )
    return lin.weight.detach(), b


@torch.no_grad()
def write_weights(lin: nn.Linear, w: torch.Tensor, b: torch.Tensor) -> None:
    lin.weight.copy_(w)
    if lin.bias is not None:
        lin.bias.copy_(b)


# --------------------------------------------------------------------------------------
# row-chunked products


def linear(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A Wᵀ + b, (N, d_out)."""
    return torch.addmm(b, a, w.t())


def gram(a: torch.Tensor, chunk: int) -> torch.Tensor:
    """Augmented Gram [A 1]ᵀ[A 1], (d+1, d+1), accumulated in float64 over row chunks."""
    d = a.shape[1]
    g = torch.zeros(d + 1, d + 1, dtype=torch.float64, device=a.device)
    for s in range(0, a.shape[0], chunk):
        ac = a[s : s + chunk]
        g[:d, :d] += (ac.t() @ ac).double()
        col = ac.sum(0, dtype=torch.float64)
        g[:d, d] += col
        g[d, :d] += col
        g[d, d] += ac.shape[0]
    return g


def cross(a: torch.Tensor, target: torch.Tensor, chunk: int) -> torch.Tensor:
    """Augmented cross product [A 1]ᵀ T, (d+1, m), float64. ``target`` may be a callable(rows)."""
    d = a.shape[1]
    out = None
    for s in range(0, a.shape[0], chunk):
        rows = slice(s, s + chunk)
        t = target(rows) if callable(target) else target[rows]
        if out is None:
            out = torch.zeros(d + 1, t.shape[1], dtype=torch.float64, device=a.device)
        out[:d] += (a[rows].t() @ t).double()
        out[d] += t.sum(0, dtype=torch.float64)
    return out


def sq_norm(x: torch.Tensor) -> float:
    return float(x.double().pow(2).sum())


# --------------------------------------------------------------------------------------
# regularised solves


class Solver:
    """SPD solves in float64 that never crash a run; ill-conditioned ones are counted.

    ``solve(M, R)`` returns M⁻¹R for symmetric positive semi-definite M (d, d). It adds a
    relative jitter ``eps · mean(diag M)`` (0 allowed), tries Cholesky, and if that fails
    (or the factor's diagonal spans more than 1e6, i.e. cond(M) > 1e12) counts the solve as
    ill-conditioned; failing factorisations retry with 100× more jitter, and as a last
    resort the minimum-norm least-squares solution is used.
    """

    def __init__(self, eps: float):
        self.eps = eps
        self.ill_conditioned = 0  # solves counted as ill-conditioned since the state was made
        self.solves = 0

    def solve(self, m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        self.solves += 1
        m = m.double()
        scale = float(m.diagonal().abs().mean()) or 1.0
        jitter = self.eps * scale
        eye = torch.eye(m.shape[0], dtype=m.dtype, device=m.device)
        bad = False
        for _ in range(6):
            fac, info = torch.linalg.cholesky_ex(m + jitter * eye)
            if int(info) == 0 and bool(torch.isfinite(fac).all()):
                dg = fac.diagonal()
                if float(dg.max()) > 1e6 * float(dg.min()):
                    bad = True
                if bad:
                    self.ill_conditioned += 1
                return torch.cholesky_solve(r.double(), fac)
            bad = True
            jitter = max(jitter * 100.0, 1e-10 * scale)
        self.ill_conditioned += 1
        return torch.linalg.lstsq(m.cpu(), r.double().cpu(), driver="gelsd").solution.to(m.device)


def solve_weights(
    solver: Solver,
    g: torch.Tensor,
    rhs: torch.Tensor,
    ridge: float,
    ridge_bias: float = 0.0,
    prior: torch.Tensor | None = None,
):
    """argmin_W̃ ½‖T − [A 1] W̃ᵀ‖² + ridge/2 ‖W‖² + ridge_bias/2 b² (+ prior pull), closed form.

    ``g`` = [A 1]ᵀ[A 1], ``rhs`` = [A 1]ᵀT (float64). With ``prior`` (d_out, d_in+1) the
    objective gains ridge/2 ‖W̃ − prior‖² (proximal form: rhs += ridge · priorᵀ), as in BCD.
    Returns (W (d_out, d_in), b (d_out,)) in float32.
    """
    d = g.shape[0] - 1
    reg = torch.full((d + 1,), float(ridge), dtype=torch.float64, device=g.device)
    reg[d] = ridge_bias
    m = g + torch.diag(reg)
    if prior is not None:
        rhs = rhs + reg[:, None] * prior.t().double()
    wt = solver.solve(m, rhs)  # (d+1, d_out)
    w = wt[:d].t().float().contiguous()
    b = wt[d].float().contiguous()
    return w, b


def activation_solve(
    solver: Solver, w_next, b_next, target_next, anchor, beta: float, gamma: float, n: int, chunk: int
) -> torch.Tensor:
    """argmin_A β/2 ‖T − A W_{ℓ+1}ᵀ − b_{ℓ+1}‖² + γ/2 ‖A − H‖²  (row by row, one shared factor).

    ``target_next`` T and ``anchor`` H are (N, ·) tensors or callables(rows -> tensor).
    A = (β (T − b) W + γ H)(β WᵀW + γ I)⁻¹, the (d, d) inverse formed once in float64.
    """
    d = w_next.shape[1]
    eye = torch.eye(d, dtype=torch.float64, device=w_next.device)
    m = beta * (w_next.t().double() @ w_next.double()) + gamma * eye
    inv = solver.solve(m, eye).float()  # (d, d)
    out = torch.empty(n, d, dtype=inv.dtype, device=w_next.device)
    for s in range(0, n, chunk):
        rows = slice(s, s + chunk)
        t = target_next(rows) if callable(target_next) else target_next[rows]
        h = anchor(rows) if callable(anchor) else anchor[rows]
        torch.mm(torch.addmm(h, t - b_next, w_next, beta=gamma, alpha=beta), inv, out=out[rows])
    return out


# --------------------------------------------------------------------------------------
# elementwise and row-wise sub-problems


def relu_argmin(p: torch.Tensor, q: torch.Tensor, wp: float, wq: float) -> torch.Tensor:
    """Exact elementwise argmin_z  wp/2 (z − p)² + wq/2 (q − relu(z))².

    Case split: on z ≥ 0 the minimiser is max(0, (wp p + wq q)/(wp + wq)); on z ≤ 0 it is
    min(0, p); keep whichever has the lower objective (ties -> the z ≥ 0 branch).
    """
    # The comparison in closed form (fewer passes over N × d tensors): for p ≥ 0 the z ≥ 0
    # branch always wins, giving max(0, s) with s = (wp p + wq q)/(wp + wq); for p < 0 it wins
    # only if s > 0 and its value wp·wq/(wp+wq)·(p − q)² ≤ wq q² (the value at z = p).
    s = (wp * p + wq * q) / (wp + wq)
    pos = (p >= 0) | ((s > 0) & (wp * (q - p).square() <= (wp + wq) * q.square()))
    return torch.where(pos, s.clamp_min_(0), p)


def output_prox(
    loss, y: torch.Tensor, center: torch.Tensor, weight: float, start: torch.Tensor | None = None, iters: int = 100
) -> torch.Tensor:
    """argmin_z J(y, z) + weight/2 ‖z − center‖² (J summed over rows, separable per row).

    Closed form for the MSE loss J = ½‖z − onehot(y)‖²: z = (onehot + weight·center)/(1 + weight).
    Any other J (cross-entropy) by accelerated gradient steps (FISTA, as dlADMM's code does)
    with step 1/(weight + 1/2) — the cross-entropy Hessian is bounded by ½ I.
    """
    if loss is mse_sum:
        onehot = torch.nn.functional.one_hot(y, center.shape[1]).to(center.dtype)
        return (onehot + weight * center) / (1.0 + weight)
    step = 1.0 / (weight + 0.5)
    z = (center if start is None else start).detach().clone()
    z_prev, t = z.clone(), 1.0
    for _ in range(iters):
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        look = z + ((t - 1) / t_next) * (z - z_prev)
        with torch.enable_grad():
            lk = look.detach().requires_grad_()
            g = torch.autograd.grad(loss(lk, y), lk)[0]
        z_prev, z, t = z, look - step * (g + weight * (look - center)), t_next
    return z.detach()


# --------------------------------------------------------------------------------------
# state and protocol glue


@dataclass
class LiftedState:
    """Everything a lifted method changes, except the weights (they live in the network).

    ``vars`` holds per-layer tensor lists (e.g. ``z``, ``a``, ``u``, ``v``); ``scalars``
    holds penalties, step-size parameters, counters and the last residuals. ``solver``
    carries the ill-conditioned-solve counter (saved in ``scalars`` on checkpoint).
    """

    vars: dict[str, list[torch.Tensor]]
    scalars: dict
    solver: Solver
    cache: dict = field(default_factory=dict)  # derived data (e.g. the constant Gram of X); not saved

    def state_dict(self) -> dict:
        return {
            "vars": self.vars,
            "scalars": {**self.scalars, "ill_conditioned": self.solver.ill_conditioned, "solves": self.solver.solves},
        }

    def load_state_dict(self, d: dict) -> None:
        self.vars = {k: list(v) for k, v in d["vars"].items()}
        self.scalars = dict(d["scalars"])
        self.solver.ill_conditioned = int(self.scalars.pop("ill_conditioned", 0))
        self.solver.solves = int(self.scalars.pop("solves", 0))
        self.cache.clear()


class LiftedMethod(Engine):
    """Protocol glue for full-batch lifted methods. Subclasses implement ``init_vars`` and ``sweep``.

    An *epoch* is ``iters_per_epoch`` outer iterations, each one sweep over every variable
    of every layer on the full training set (default 1: one epoch = one outer iteration).
    """

    # subclasses: init_vars(net, lins, x, batch, gen) -> (vars, scalars); sweep(net, lins, state, batch)

    def init_state(self, net, batch: TrainBatch, gen: torch.Generator) -> LiftedState:
        lins = mlp_linears(net, self.name)
        x = batch.x.reshape(batch.n, -1)
        if x.shape[1] != lins[0].in_features:
            raise ConfigError(
                f"method = {self.name!r}: input width {x.shape[1]} does not match the first Linear layer ({lins[0].in_features})"
            )
        with torch.no_grad():
            vars_, scalars = self.init_vars(net, lins, x, batch, gen)
        scalars.setdefault("iteration", 0)
        scalars.setdefault("residuals", [0.0] * len(lins))
        scalars.setdefault("act_residuals", [0.0] * (len(lins) - 1))
        state = LiftedState(vars=vars_, scalars=scalars, solver=Solver(self.solve_eps))
        self.record_residuals(lins, state, x)
        return state

    def run_epoch(self, net, state: LiftedState, batch: TrainBatch, progress=None) -> dict:
        lins = mlp_linears(net, self.name)
        x = batch.x.reshape(batch.n, -1)
        with torch.no_grad():
            for i in range(self.iters_per_epoch):
                self.sweep(lins, state, x, batch)
                state.scalars["iteration"] += 1
                if progress:
                    progress((i + 1) / self.iters_per_epoch)
        return {}

    # --- helpers subclasses share ---------------------------------------------------
    def x_gram(self, state: LiftedState, x: torch.Tensor) -> torch.Tensor:
        """[X 1]ᵀ[X 1]: A_0 = X never changes, so layer 1's Gram is computed once."""
        if "gram_x" not in state.cache:
            state.cache["gram_x"] = gram(x, self.chunk_size)
        return state.cache["gram_x"]

    def layer_gram(self, state: LiftedState, x: torch.Tensor, a_in: torch.Tensor, layer: int) -> torch.Tensor:
        return self.x_gram(state, x) if layer == 0 else gram(a_in, self.chunk_size)

    @torch.no_grad()
    def record_residuals(self, lins, state: LiftedState, x: torch.Tensor) -> None:
        """RMS per sample of Z_ℓ − (A_{ℓ−1}W_ℓᵀ + b_ℓ) and of A_ℓ − relu(Z_ℓ), from the current state."""
        z, a = state.vars["z"], state.vars["a"]
        n = x.shape[0]
        res, act = [], []
        for l, lin in enumerate(lins):
            w, b = read_weights(lin)
            a_in = x if l == 0 else a[l - 1]
            sq = 0.0
            for s in range(0, n, self.chunk_size):
                rows = slice(s, s + self.chunk_size)
                sq += sq_norm(z[l][rows] - linear(a_in[rows], w, b))
            res.append(math.sqrt(sq / n))
            if l < len(lins) - 1:
                act.append(math.sqrt(sq_norm(a[l] - torch.relu(z[l])) / n))
        state.scalars["residuals"] = res
        state.scalars["act_residuals"] = act

    # --- diagnostics ---------------------------------------------------------------
    def diagnostics(self, net, state: LiftedState, batch: TrainBatch) -> dict:
        n = batch.n
        L = len(state.vars["z"])
        if state.scalars.pop("residuals_stale", False):  # sweeps that leave the residuals to evaluation time
            self.record_residuals(mlp_linears(net, self.name), state, batch.x.reshape(n, -1))

        def norms(name, count):
            if name not in state.vars:
                return [0.0] * count
            return [math.sqrt(sq_norm(t) / n) for t in state.vars[name]]

        u_name = self.dual_vars[0] if self.dual_vars else None
        dual = [0.0] * L
        if u_name is not None:
            vals = norms(u_name, L)
            # a multiplier only on some layers (taylor, dladmm) is stored for those layers only
            dual = vals if len(vals) == L else [0.0] * (L - len(vals)) + vals
        out = {
            "residuals": list(state.scalars["residuals"]),
            "act_residuals": list(state.scalars["act_residuals"]),
            "dual_norms": dual,
            "betas": self.report_betas(state, L),
            "iteration": state.scalars["iteration"],
            "ill_conditioned": state.solver.ill_conditioned,
            "solves": state.solver.solves,
        }
        if len(self.dual_vars) > 1:
            out["act_dual_norms"] = norms(self.dual_vars[1], L - 1)
        out.update(self.extra_diagnostics(state))
        return out

    def report_betas(self, state: LiftedState, L: int) -> list[float]:
        return [float(self.beta)] * L

    def extra_diagnostics(self, state: LiftedState) -> dict:
        return {}

    def state_bytes(self, state: LiftedState) -> int:
        return tensor_bytes([t for ts in state.vars.values() for t in ts])


def uniform_init(lins, scale: float, gen: torch.Generator) -> None:
    """W, b ~ U(0, scale) (the seed paper's init for standard ADMM and Taylor et al.)."""
    for lin in lins:
        w = torch.rand(lin.weight.shape, generator=gen) * scale
        b = torch.rand(lin.out_features, generator=gen) * scale
        write_weights(lin, w.to(lin.weight.device), b.to(lin.weight.device))


def normal_init(lins, std: float, bias: float | None, gen: torch.Generator) -> None:
    """W ~ N(0, std²); b ~ N(0, std²) or the constant ``bias``."""
    for lin in lins:
        w = torch.randn(lin.weight.shape, generator=gen) * std
        b = (
            torch.full((lin.out_features,), bias)
            if bias is not None
            else torch.randn(lin.out_features, generator=gen) * std
        )
        write_weights(lin, w.to(lin.weight.device), b.to(lin.weight.device))


@torch.no_grad()
def forward_vars(lins, x: torch.Tensor, chunk: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(Z_1..Z_L, A_1..A_{L−1}) of a forward pass."""
    z, a = [], []
    inp = x
    for l, lin in enumerate(lins):
        w, b = read_weights(lin)
        zl = torch.cat([linear(inp[s : s + chunk], w, b) for s in range(0, inp.shape[0], chunk)])
        z.append(zl)
        if l < len(lins) - 1:
            inp = torch.relu(zl)
            a.append(inp)
    return z, a


class ClosedFormADMM(LiftedMethod):
    """The start shared by the closed-form ADMM baselines (admm-closed, taylor): W, b ~ U(0, init_scale)
    then one forward pass for Z, A (the seed paper's init for both)."""

    def start_vars(self, lins, x: torch.Tensor, gen: torch.Generator) -> tuple[list, list]:
        """(Z_1..Z_L, A_1..A_{L−1}) of the forward pass after the init."""
        if self.init == "uniform":
            uniform_init(lins, self.init_scale, gen)
        return forward_vars(lins, x, self.chunk_size)
