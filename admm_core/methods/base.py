"""The method protocol and the pieces Block-ADMM variants share.

A method object holds only its settings (a frozen dataclass whose fields carry a one-line
``help`` in their metadata). Everything that changes during training lives in a state
object with ``state_dict()`` / ``load_state_dict()``, so a run resumes exactly; most states
are dataclasses deriving from :class:`MethodState`, whose fields *are* the checkpoint.

Protocol (:class:`Method`, :class:`State`)::

    state = method.init_state(net, batch, gen)       # Alg. initialisation
    stats = method.run_epoch(net, state, batch, progress)   # one pass over the data
    diag  = method.diagnostics(net, state, batch)    # residuals, dual norms, betas
    method.state_bytes(state)                        # bytes of Z, U and their moments
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import check
from ..lazy import nn, no_grad, torch
from ..profile import phase


def setting(default, help: str, **meta):
    """A settings field with a one-line help (shown by the CLI and the dashboard)."""
    return field(default=default, metadata={"help": help, **meta})


def z_step_setting(default: str):
    """``z_step``, shared by the batch and online methods (their defaults differ)."""
    return setting(
        default,
        "Z step: ζ/(β_t + β_{t+1}L²_{t+1}) (scaled, stable as ‖W‖ grows) or ζ as is (fixed)",
        choices=("scaled", "fixed"),
    )


def lr_decay_setting():
    """``lr_decay`` γ: the Θ step size of epoch e is η·γ^e (online-admm, sgd, adam)."""
    return setting(1.0, "γ: the Θ step size of epoch e is η·γ^e (1: constant)", max=1.0)


def set_epoch_lr(opt: torch.optim.Optimizer, lr: float, gamma: float, epoch: int, factor: float = 1.0) -> None:
    """Every parameter group's step size becomes η·γ^epoch·``factor`` (step decay, once per epoch;
    ``factor`` is the run's Θ schedule, :meth:`TrainBatch.lr_factor`)."""
    for group in opt.param_groups:
        group["lr"] = lr * gamma**epoch * factor


LR_SCHEDULES = ("constant", "cosine")


def schedule_factor(schedule: str, progress: float) -> float:
    """Multiplier of η at ``progress`` ∈ [0, 1] of the run: 1 (constant) or ½(1 + cos πp) (cosine)."""
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
    return 1.0


_MODULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


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


def power_steps_setting():
    """``power_steps``: iterations of the warm-started power method behind L_t (scaled Z step)."""
    return setting(2, "warm-started power-iteration steps per estimate of L_t (scaled Z step)")


def power_every_setting():
    """``power_every``: how often L_t is re-estimated (it moves slowly with Θ; the estimate is warm)."""
    return setting(1, "re-estimate L_t every this many Z-updates (scaled Z step; minibatch Z-updates count one each)")


@dataclass
class Shard:
    """This process's share of the training rows: global rows [start, start + n).

    With ``world`` = 1 (the default) every collective below is the identity, so a single
    process and rank r of a sample-sharded run (:mod:`admm_core.distributed`) run the same
    code; with ``world`` > 1 they act on torch.distributed's default process group.
    """

    rank: int = 0
    world: int = 1
    start: int = 0
    n_global: int | None = None  # None: this process holds every row

    def local(self, idx: torch.Tensor, n_local: int) -> torch.Tensor:
        """The global row indices ``idx`` this shard holds, as local indices (order kept)."""
        if self.world == 1:
            return idx
        keep = (idx >= self.start) & (idx < self.start + n_local)
        return idx[keep] - self.start

    def sum(self, values: Sequence[float], device=None) -> list[float]:
        """Σ over ranks of each value (float64)."""
        if self.world == 1:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(t)
        return t.tolist()

    def sum_grads(self, params: Sequence[torch.Tensor]) -> None:
        """All-reduce (Σ) the gradients in one flat buffer; a missing gradient counts as 0."""
        if self.world == 1:
            return
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        torch.distributed.all_reduce(flat)
        for p, g in zip(params, flat.split([p.numel() for p in params])):
            p.grad.copy_(g.view_as(p))

    def average_buffers(self, module: nn.Module) -> None:
        """Average floating buffers (BatchNorm running statistics) so every rank keeps one network."""
        if self.world == 1:
            return
        for b in module.buffers():
            if b.is_floating_point():
                torch.distributed.all_reduce(b)
                b.div_(self.world)


@dataclass
class TrainBatch:
    """The training set on the device (this process's rows of it) plus the objective."""

    x: torch.Tensor  # (N, ...) inputs, Z_0
    y: torch.Tensor  # (N,) labels
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # J, summed over samples
    batch_size: int  # minibatch size of Θ-steps
    shard: Shard = field(default_factory=Shard)
    augment: Callable | None = None  # e.g. data.CropFlip: (x[idx], idx) -> augmented rows, one view per epoch
    epochs: int = 1  # epochs of the whole run (the Θ schedule's length)
    lr_schedule: str = "constant"  # the Θ schedule of every method: see schedule_factor

    def lr_factor(self, epoch: int, frac: float = 0.0) -> float:
        """η's multiplier ``frac`` of the way through epoch ``epoch`` (0-based) of the run."""
        return schedule_factor(self.lr_schedule, (epoch + frac) / max(1, self.epochs))

    @property
    def n(self) -> int:
        """Rows held here."""
        return self.x.shape[0]

    @property
    def n_global(self) -> int:
        """Rows of the whole training set (= n in a single process)."""
        return self.n if self.shard.n_global is None else self.shard.n_global

    def inputs(self, idx) -> torch.Tensor:
        """Training inputs ``x[idx]`` as this epoch sees them (augmented when ``augment`` is set)."""
        x = self.x[idx]
        return x if self.augment is None else self.augment(x, idx)

    def set_epoch(self, epoch: int) -> None:
        """Draw epoch ``epoch``'s augmentation view (no-op without augmentation)."""
        if self.augment is not None:
            self.augment.set_epoch(epoch, self.x.device)


@runtime_checkable
class State(Protocol):
    """What a method changes while it trains; a checkpoint holds ``state_dict()``."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, d: dict) -> None: ...


@runtime_checkable
class Method(Protocol):
    """A training method: frozen settings plus the four calls the run loop makes."""

    name: ClassVar[str]
    summary: ClassVar[str]
    uses_blocks: ClassVar[bool]
    supports_augment: ClassVar[bool]

    def init_state(self, net: nn.Module, batch: TrainBatch, gen: torch.Generator) -> State: ...

    def run_epoch(self, net: nn.Module, state: State, batch: TrainBatch, progress=None) -> dict: ...

    def diagnostics(self, net: nn.Module, state: State, batch: TrainBatch) -> dict: ...

    def state_bytes(self, state: State) -> int: ...


@dataclass
class MethodState:
    """A state whose dataclass fields are its checkpoint.

    Optimizers and generators are saved through their own ``state_dict`` / ``get_state`` and
    restored in place (the objects are bound to the network's parameters); every other field
    (tensors, lists of tensors, numbers) is saved as it is. Fields named in ``NOT_SAVED``
    are derived data and are left out. A field with a default that a checkpoint lacks (one
    written before the field existed) keeps its default.
    """

    NOT_SAVED: ClassVar[tuple[str, ...]] = ()

    def state_dict(self) -> dict:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in self.NOT_SAVED:
                continue
            v = getattr(self, f.name)
            if isinstance(v, torch.optim.Optimizer):
                v = v.state_dict()
            elif isinstance(v, torch.Generator):
                v = v.get_state()
            out[f.name] = v
        return out

    def load_state_dict(self, d: dict) -> None:
        for f in dataclasses.fields(self):
            if f.name in self.NOT_SAVED:
                continue
            if f.name not in d and (f.default is not MISSING or f.default_factory is not MISSING):
                continue
            cur, v = getattr(self, f.name), d[f.name]
            if isinstance(cur, torch.optim.Optimizer):
                load_optimizer_state(cur, v)
            elif isinstance(cur, torch.Generator):
                cur.set_state(v.cpu())  # a CPU generator; the checkpoint may be mapped to cuda
            else:
                setattr(self, f.name, v)


class MethodBase:
    """Shared helpers; concrete methods are frozen dataclasses that inherit this."""

    name = "?"
    summary = ""
    uses_blocks = True  # False for end-to-end methods (the split is ignored)
    supports_augment = False  # True where every read of the inputs goes through TrainBatch.inputs
    supports_lr_schedule = False  # True where Θ's step size follows TrainBatch.lr_factor

    @classmethod
    def settings(cls) -> list[dict]:
        """[{name, default, help, type, choices}] for menus and ``--help``."""
        out = []
        for f in dataclasses.fields(cls):
            out.append(
                {
                    "name": f.name,
                    "default": f.default,
                    "help": f.metadata.get("help", ""),
                    "type": type(f.default).__name__,
                    "choices": f.metadata.get("choices"),
                }
            )
        return out

    def _validate(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            choices = f.metadata.get("choices")
            if f.metadata.get("per_block") and isinstance(v, (list, tuple)):
                for b in v:
                    check(
                        isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0,
                        f"{self.name}.{f.name}",
                        list(v),
                        "every value must be > 0",
                    )
                object.__setattr__(self, f.name, tuple(float(b) for b in v))
            elif choices is not None:
                check(v in choices, f"{self.name}.{f.name}", v, f"choose from {list(choices)}")
            elif isinstance(f.default, bool):
                check(isinstance(v, bool), f"{self.name}.{f.name}", v, "must be true or false")
            elif isinstance(f.default, int):
                check(isinstance(v, int) and not isinstance(v, bool), f"{self.name}.{f.name}", v, "must be an integer")
                lo = f.metadata.get("min", 1)
                check(v >= lo, f"{self.name}.{f.name}", v, f"must be ≥ {lo}")
            elif isinstance(f.default, float):
                check(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
                    f"{self.name}.{f.name}",
                    v,
                    "must be a number",
                )
                object.__setattr__(self, f.name, float(v))
                if f.metadata.get("positive", True):
                    check(v > 0, f"{self.name}.{f.name}", v, "must be > 0")
                else:
                    check(v >= 0, f"{self.name}.{f.name}", v, "must be ≥ 0")
                if "max" in f.metadata:
                    check(v <= f.metadata["max"], f"{self.name}.{f.name}", v, f"must be ≤ {f.metadata['max']}")

    def __post_init__(self):
        self._validate()


def per_block(value: float | Sequence[float], T: int, name: str) -> list[float]:
    """A scalar or one value per block -> list of T floats (validated)."""
    vals = [float(value)] * T if isinstance(value, (int, float)) else [float(v) for v in value]
    check(len(vals) == T, name, value, f"give one value or one per block (T = {T})")
    for v in vals:
        check(math.isfinite(v) and v > 0, name, value, "every value must be > 0")
    return vals


def make_theta_optimizer(net, kind: str, lr: float, fused: bool = False) -> torch.optim.Optimizer:
    """One optimizer over every block's Θ, in block order.

    Adam and SGD act element-wise, so one optimizer takes exactly the steps T per-block optimizers
    would; one parameter group (not one per block: the blocks share η) makes a step one foreach call
    per kind of tensor instead of T (~20% of a small MLP's Θ-step). Checkpoints written with a group
    per block load through :func:`load_optimizer_state`. ``fused`` picks the single-kernel
    implementation (same update, fewer launches; on a CPU about 3× faster than foreach for Adam).
    """
    opt = torch.optim.Adam if kind == "adam" else torch.optim.SGD
    impl = {"fused": True} if fused else {"foreach": True}
    return opt([p for b in net.blocks for p in b.parameters()], lr=lr, **impl)


def load_optimizer_state(opt: torch.optim.Optimizer, saved: dict) -> None:
    """``opt.load_state_dict(saved)``, merging a checkpoint's parameter groups into one where it was
    written by an optimizer with one group per block (same parameters in the same order, same
    hyperparameters: the per-parameter state, keyed by position, carries over unchanged)."""
    groups = saved.get("param_groups", [])
    if len(opt.param_groups) == 1 and len(groups) > 1:
        merged = {**groups[0], "params": [i for g in groups for i in g["params"]]}
        saved = {**saved, "param_groups": [merged]}
    opt.load_state_dict(saved)


def theta_step(
    net,
    opt: torch.optim.Optimizer,
    inputs: Sequence[torch.Tensor],
    coupling_losses: Callable[[int, torch.Tensor], torch.Tensor],
    reduce_grads: Callable[[list[torch.Tensor]], None] | None = None,
    given: dict | None = None,
) -> None:
    """Θ-update of every block on one minibatch: Θ_t ← Θ_t − η ∇_{Θ_t} P_t.

    ``inputs[t]`` is block t's (detached) input Z_{t−1}; ``coupling_losses(t, out)`` its P_t.
    P_t depends on Θ_t alone (Z and U are fixed here), so the gradient of Σ_t P_t w.r.t.
    Θ_t is ∇_{Θ_t} P_t: one backward call gives every block its own update and no
    gradient crosses a block boundary (the inputs carry no graph).

    ``reduce_grads(params)`` runs between backward and step (the data-parallel all-reduce);
    with it, empty ``inputs`` (this rank holds none of the minibatch's rows) skip the forward.
    ``given[t]``: block t's output on ``inputs[t]`` already computed with Θ_t's graph (it is used
    instead of a second forward pass; the caller vouches that Θ_t and the input are the same).
    """
    opt.zero_grad(set_to_none=True)
    if reduce_grads is None or inputs[0].shape[0] > 0:
        with phase("theta.forward_backward"):
            given = given or {}
            total = sum(
                coupling_losses(t, given[t] if t in given else block(inputs[t])) for t, block in enumerate(net.blocks)
            )
            total.backward()
    if reduce_grads is not None:
        with phase("theta.all_reduce"):
            reduce_grads([p for g in opt.param_groups for p in g["params"]])
    with phase("theta.optimizer"):
        opt.step()


def minibatches(n: int, batch_size: int, gen: torch.Generator) -> list[torch.Tensor]:
    """A fresh random permutation of range(n) cut into minibatches."""
    perm = torch.randperm(n, generator=gen)
    return list(perm.split(batch_size))


def tensor_bytes(tensors) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors if t is not None))


@dataclass
class ZRows:
    """Z_t of some rows, held as Z_t = base_t + δ_t, where base_t is the forward pass a Z-update
    started from (``base`` None: ``delta`` holds Z_t itself).

    Residuals are formed as (base_t − out) + δ_t: when out is that same forward pass, base_t − out
    is exactly 0 and the residual is δ_t, however small against the activations (see
    :func:`reverse_z_sweep`'s ``forwards``).
    """

    base: list | None
    delta: list
    given: dict | None = None  # {t: block_t's output with Θ_t's graph}, for the Θ-step to reuse

    def z(self, t: int) -> torch.Tensor:
        return self.delta[t] if self.base is None else self.base[t] + self.delta[t]

    def zs(self) -> list[torch.Tensor]:
        return [self.z(t) for t in range(len(self.delta))]

    def residual(self, t: int, out: torch.Tensor) -> torch.Tensor:
        """Z_t − out."""
        return self.delta[t] - out if self.base is None else (self.base[t] - out) + self.delta[t]


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
    """
    T = len(blocks)
    zs = list(zs)
    z_old = list(zs)
    if forwards is not None:
        deltas = [torch.zeros_like(out, dtype=zs[t].dtype) for t, (_, out) in enumerate(forwards)]
        old_deltas = list(deltas)

    def forward(t: int):
        """(input, output) of block t (0-based), input tracking grad unless it is Z_0."""
        if forwards is not None:
            inp, out = forwards[t]
        elif t == 0:
            with torch.no_grad():
                inp, out = z0, blocks[0](z0)
        else:
            inp = zs[t - 1].detach().requires_grad_()
            out = blocks[t](inp)
        if on_forward is not None:
            on_forward(t, out.detach())
        return inp, out

    def residual(t: int, out: torch.Tensor, new: bool = True) -> torch.Tensor:
        """Z_t − out (displacement form: δ_t, exact, as out is the forward pass Z_t started from)."""
        if forwards is not None:
            return (deltas if new else old_deltas)[t] + (forwards[t][1].detach() - out)
        return (zs if new else z_old)[t].detach() - out

    def own(t: int, out: torch.Tensor) -> torch.Tensor:
        r = residual(t, out.detach())
        if own_grad is not None:
            return own_grad(t, r)
        r = r.requires_grad_()
        return torch.autograd.grad(couplings[t](r), r)[0]

    def step(t: int, g: torch.Tensor) -> None:
        if forwards is not None:
            deltas[t] = z_step(t, deltas[t], g)
        else:
            zs[t] = z_step(t, zs[t], g)

    with torch.enable_grad():
        with phase(f"z_sweep.block{T}"):
            inp, out = forward(T - 1)
            # Z_T-step (Alg. 1, line 1): ∇ (J + P_T)
            if objective_grad is not None:
                g_obj = objective_grad(zs[T - 1].detach())
            else:
                zT = zs[T - 1].detach().requires_grad_()
                g_obj = torch.autograd.grad(objective(zT), zT)[0]
            step(T - 1, g_obj + own(T - 1, out))
        # Z-update, reverse sweep (Alg. 1, t = T−1 … 1)
        for t in range(T - 2, -1, -1):
            with phase(f"z_sweep.block{t + 1}"):
                # P_{t+1} at the new Z_{t+1}, differentiated through block_{t+1} only
                if own_grad is not None:  # a vjp with ∇_out P_{t+1} = −∇_r P_{t+1}
                    g_out = -own_grad(t + 1, residual(t + 1, out.detach(), new=not jacobi))
                    g_next = torch.autograd.grad(out, inp, g_out, retain_graph=keep_graphs)[0]
                else:
                    g_next = torch.autograd.grad(
                        couplings[t + 1](residual(t + 1, out, new=not jacobi)), inp, retain_graph=keep_graphs
                    )[0]
                inp, out = forward(t)
                step(t, own(t, out) + g_next)
    if forwards is None:
        return [z.detach() for z in zs]
    if offsets is not None:
        offsets[:] = [d.detach() for d in deltas]
    return [(out.detach() + d).detach() for (_, out), d in zip(forwards, deltas)]


def adam_z_step(z, g, m, v, step: int, lr: float, b1=0.9, b2=0.999, eps=1e-8):
    """Adam on Z rows (in place on m, v). Shown here to degenerate into ±lr sign steps early on."""
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    mhat = m / (1 - b1**step)
    vhat = v / (1 - b2**step)
    return z - lr * mhat / (vhat.sqrt() + eps)


@no_grad
def evaluate(net: nn.Module, x: torch.Tensor, y: torch.Tensor, loss, chunk: int = 8192) -> tuple[float, float]:
    """(mean loss per sample, accuracy) of the straight-through forward pass."""
    was = net.training
    net.eval()
    total, correct = 0.0, 0
    for s in range(0, x.shape[0], chunk):
        out = net(x[s : s + chunk])
        total += float(loss(out, y[s : s + chunk]))
        correct += int((out.argmax(1) == y[s : s + chunk]).sum())
    net.train(was)
    n = max(1, x.shape[0])
    return total / n, correct / n


# --- curvature-scaled Z steps ------------------------------------------------------------


# Leaf modules whose Lipschitz constant is ≤ 1 (element-wise, in eval mode): a block made of
# these and Linear layers is bounded by the product of its weights' spectral norms.
def _one_lipschitz() -> tuple:
    return (nn.ReLU, nn.LeakyReLU, nn.Tanh, nn.Flatten, nn.Identity, nn.Dropout)  # a call: torch imported on use


JACOBIAN_ROWS = 16  # rows of Z_{t−1} on which a general block's Jacobian is power-iterated


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm().clamp_min(1e-30)


@no_grad
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
    """‖∂block/∂z‖₂ at rows ``inp`` by power iteration on JᵀJ (one jvp and one vjp a step).

    The rows are independent (eval mode), so J is block-diagonal and the estimate is the
    largest per-row Jacobian norm among these rows: a local estimate, not a global bound.
    """
    inp = inp.detach()
    n = inp.shape[0]
    if v.shape[0] < n:  # the warm vector came from a smaller (last) minibatch: tile it back to n rows
        v = _unit(v.repeat(-(-n // v.shape[0]), *[1] * (v.dim() - 1))[:n])
    v = v[:n].to(inp)
    with torch.enable_grad():
        out, vjp_fn = torch.func.vjp(block, inp)
        for _ in range(steps):
            jv = torch.func.jvp(block, (inp,), (v,))[1]
            v = _unit(vjp_fn(jv)[0])
        jv = torch.func.jvp(block, (inp,), (v,))[1]
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


# --- how close to backprop ------------------------------------------------------------------


def block_update_grads(net, inputs: Sequence[torch.Tensor], coupling_losses) -> list[torch.Tensor]:
    """∇_{Θ_t} P_t per block, flattened (the direction a Θ-step descends), without stepping."""
    out = []
    with torch.enable_grad():
        for t, block in enumerate(net.blocks):
            params = [p for p in block.parameters() if p.requires_grad]
            g = torch.autograd.grad(coupling_losses(t, block(inputs[t].detach())), params, allow_unused=True)
            out.append(
                torch.cat([(gi if gi is not None else torch.zeros_like(p)).reshape(-1) for gi, p in zip(g, params)])
            )
    return out


def backprop_grads(net, x: torch.Tensor, y: torch.Tensor, loss) -> list[torch.Tensor]:
    """∇_{Θ_t} J(y, net(x)) per block, flattened: the end-to-end gradient."""
    params = [[p for p in b.parameters() if p.requires_grad] for b in net.blocks]
    with torch.enable_grad():
        g = torch.autograd.grad(loss(net(x), y), [p for ps in params for p in ps], allow_unused=True)
    out, i = [], 0
    for ps in params:
        out.append(
            torch.cat(
                [(g[i + j] if g[i + j] is not None else torch.zeros_like(p)).reshape(-1) for j, p in enumerate(ps)]
            )
        )
        i += len(ps)
    return out


def cosines(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> list[float]:
    """cos∠(a_t, b_t) per block (0 where either is zero).

    Each side is normalised first, in float64: a deep network's vanishing gradients (1e-20 and
    below in float32) would otherwise make ‖a‖‖b‖ a denormal and the quotient leave [−1, 1].
    """
    out = []
    for u, v in zip(a, b):
        u, v = u.double(), v.double()
        nu, nv = u.norm(), v.norm()
        out.append(float(((u / nu) @ (v / nv)).clamp(-1.0, 1.0)) if nu > 0 and nv > 0 else 0.0)
    return out


def probe_rows(n: int, size: int, seed: int) -> torch.Tensor:
    """The rows of the diagnostic minibatch: seeded, so probing never touches the training draws."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:size]
