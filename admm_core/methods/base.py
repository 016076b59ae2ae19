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

A method's record (its settings, checks and declarations: ``MethodBase``, ``setting``,
``StateSizes``) is the spec layer's (:mod:`admm_core.spec.methods.base`); the engine's class of a
method (an :class:`Engine`) holds its record and adds the protocol calls. The machinery around the protocol lives
by job: :mod:`.zsweep` (the Z sweep, Θ-steps, BatchNorm
modes), :mod:`.lipschitz` (curvature-scaled Z steps), :mod:`.probes` (cosines with backprop),
:mod:`.world` (which rows and blocks this process updates, and the collectives).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import nn

from ..spec.methods.base import schedule_factor
from .world import World


def set_epoch_lr(opt: torch.optim.Optimizer, lr: float, gamma: float, epoch: int, factor: float = 1.0) -> None:
    """Every parameter group's step size becomes η·γ^epoch·``factor`` (step decay, once per epoch;
    ``factor`` is the run's Θ schedule, :meth:`TrainBatch.lr_factor`)."""
    for group in opt.param_groups:
        group["lr"] = lr * gamma**epoch * factor


@dataclass
class TrainBatch:
    """The training set on the device (this process's rows of it) plus the objective."""

    x: torch.Tensor  # (N, ...) inputs, Z_0
    y: torch.Tensor  # (N,) labels
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # J, summed over samples
    batch_size: int  # minibatch size of Θ-steps
    shard: World = field(default_factory=World)  # this process's rows and blocks (one process: all)
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


class Engine:
    """The engine of a method: it holds the method's settings record (``self.settings``, the frozen,
    torch-free dataclass the spec layer checks and the dashboard reads) and adds the protocol
    calls. The record's fields and declarations read through the engine as well
    (``engine.lr`` is ``engine.settings.lr``), so a method's code and its callers name a setting once."""

    def __init__(self, settings):
        self.settings = settings

    def __getattr__(self, name: str):
        if name == "settings":  # not set yet (copy, unpickling): no record to read from
            raise AttributeError(name)
        return getattr(self.settings, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r})"

    # an engine is its record put to work: two are equal when their classes and records are (the parts
    # it builds are functions of the record), as when the method was the record itself
    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other.settings == self.settings

    def __hash__(self) -> int:
        return hash((type(self), self.settings))


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


def make_theta_optimizer(net, kind: str, lr: float, fused: bool = False, eps: float = 1e-8) -> torch.optim.Optimizer:
    """One optimizer over every block's Θ, in block order.

    Adam and SGD act element-wise, so one optimizer takes exactly the steps T per-block optimizers
    would; one parameter group (not one per block: the blocks share η) makes a step one foreach call
    per kind of tensor instead of T (~20% of a small MLP's Θ-step). Checkpoints written with a group
    per block load through :func:`load_optimizer_state`. ``fused`` picks the single-kernel
    implementation (same update, fewer launches; on a CPU about 3× faster than foreach for Adam).
    """
    impl = {"fused": True} if fused else {"foreach": True}
    params = [p for b in net.blocks for p in b.parameters()]
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, eps=eps, **impl)
    return torch.optim.SGD(params, lr=lr, **impl)


def load_optimizer_state(opt: torch.optim.Optimizer, saved: dict) -> None:
    """``opt.load_state_dict(saved)``, merging a checkpoint's parameter groups into one where it was
    written by an optimizer with one group per block (same parameters in the same order, same
    hyperparameters: the per-parameter state, keyed by position, carries over unchanged)."""
    groups = saved.get("param_groups", [])
    if len(opt.param_groups) == 1 and len(groups) > 1:
        merged = {**groups[0], "params": [i for g in groups for i in g["params"]]}
        saved = {**saved, "param_groups": [merged]}
    opt.load_state_dict(saved)


def tensor_bytes(tensors) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors if t is not None))


@torch.no_grad()
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


__all__ = [
    "Engine",
    "TrainBatch",
    "State",
    "Method",
    "MethodState",
    "set_epoch_lr",
    "make_theta_optimizer",
    "load_optimizer_state",
    "tensor_bytes",
    "evaluate",
]
