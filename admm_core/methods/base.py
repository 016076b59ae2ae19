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

The machinery around the protocol lives by job: :mod:`.zsweep` (the Z sweep, Θ-steps, BatchNorm
modes), :mod:`.lipschitz` (curvature-scaled Z steps), :mod:`.probes` (cosines with backprop),
:mod:`.world` (which rows and blocks this process updates, and the collectives).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import check
from ..lazy import nn, no_grad, torch
from .world import Shard, World


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


def power_steps_setting():
    """``power_steps``: iterations of the warm-started power method behind L_t (scaled Z step)."""
    return setting(2, "warm-started power-iteration steps per estimate of L_t (scaled Z step)")


def power_every_setting():
    """``power_every``: how often L_t is re-estimated (it moves slowly with Θ; the estimate is warm)."""
    return setting(1, "re-estimate L_t every this many Z-updates (scaled Z step; minibatch Z-updates count one each)")


LR_SCHEDULES = ("constant", "cosine")


def schedule_factor(schedule: str, progress: float) -> float:
    """Multiplier of η at ``progress`` ∈ [0, 1] of the run: 1 (constant) or ½(1 + cos πp) (cosine)."""
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
    return 1.0


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


FLOAT_BYTES = 4  # float32


@dataclass(frozen=True)
class StateSizes:
    """What the memory estimate knows of a run without building it (:func:`admm_core.resources.estimate_memory`)."""

    n: int  # training rows
    batch_size: int  # minibatch size of Θ-steps
    block_out: tuple[int, ...]  # floats per sample of Z_t, the output of block t (t = 1..T)
    layer_out: tuple[int, ...]  # floats per sample of each layer's output


class MethodBase:
    """Shared helpers; concrete methods are frozen dataclasses that inherit this.

    Besides the protocol a method declares what other parts read without running it: its live
    charts (``live_metrics``) and the size of its state (:meth:`estimate_state_bytes`,
    :meth:`theta_moments`), so a new method is its module plus one registry line.
    """

    name = "?"
    summary = ""
    uses_blocks = True  # False for end-to-end methods (the split is ignored)
    supports_augment = False  # True where every read of the inputs goes through TrainBatch.inputs
    supports_lr_schedule = False  # True where Θ's step size follows TrainBatch.lr_factor
    # the kind of run it makes (admm_core.kinds.KINDS): "network" methods run with NetworkTask
    kind: ClassVar[str] = "network"
    # per-block lists its diagnostics log that the dashboard charts live (app/dashboard/charts.py),
    # the x axis of those charts, the accuracy chart's title, and per metric what is not the
    # default chart: {"title", "names" (one per block)} or {"title", "lines": ((key, name), …)}
    live_metrics: ClassVar[tuple[str, ...]] = ("residuals", "dual_norms", "betas")
    live_unit: ClassVar[str] = "epoch"
    live_accuracy: ClassVar[str] = "Accuracy (%)"
    live_charts: ClassVar[dict] = {}

    def estimate_state_bytes(self, s: StateSizes) -> int:
        """Bytes of what the method keeps for the whole run besides Θ (float32), by arithmetic.
        Default: Z_t and U_t of every training row for a block method, nothing end to end."""
        return 2 * s.n * sum(s.block_out) * FLOAT_BYTES if self.uses_blocks else 0

    def theta_moments(self) -> int:
        """Θ-optimizer moments per parameter (Adam 2, SGD with momentum 1, closed-form updates 0)."""
        return 0

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

    # The settings of the paper's algorithm as printed: with ``recipe = 'paper'`` (a setting of the methods
    # that have one) they replace the given values, so Alg. 1 / Alg. 2 is one setting away from any preset.
    PAPER: ClassVar[dict] = {}

    def __post_init__(self):
        if getattr(self, "recipe", None) == "paper":
            for k, v in self.PAPER.items():
                object.__setattr__(self, k, v)
        self._validate()


def per_block(value: float | Sequence[float], T: int, name: str) -> list[float]:
    """A scalar or one value per block -> list of T floats (validated)."""
    vals = [float(value)] * T if isinstance(value, (int, float)) else [float(v) for v in value]
    check(len(vals) == T, name, value, f"give one value or one per block (T = {T})")
    for v in vals:
        check(math.isfinite(v) and v > 0, name, value, "every value must be > 0")
    return vals


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


__all__ = [
    "setting",
    "z_step_setting",
    "lr_decay_setting",
    "set_epoch_lr",
    "LR_SCHEDULES",
    "schedule_factor",
    "Shard",
    "World",
    "StateSizes",
    "FLOAT_BYTES",
    "TrainBatch",
    "State",
    "Method",
    "MethodState",
    "MethodBase",
    "per_block",
    "make_theta_optimizer",
    "load_optimizer_state",
    "tensor_bytes",
    "evaluate",
    "power_every_setting",
    "power_steps_setting",
]
