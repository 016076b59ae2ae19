"""What every method record declares: its settings, and what other parts read without running it.

A method's record is a frozen dataclass of settings deriving from :class:`MethodBase` (each field a
:func:`~admm_core.spec.settings.setting`), with class attributes for what the CLI, the dashboard,
the memory estimate and the preflight read: its name and summary, the kind of run it makes, its
live charts, whether it works on blocks, augments, follows the Θ schedule, runs on several
processes, needs a chain of Linear layers, and the size of its state (:meth:`estimate_state_bytes`,
:meth:`theta_moments`). Its updates are the engine's: ``implementation`` names the engine class (in
:mod:`admm_core.methods`) that holds the record and adds the protocol calls; a record that defines
them itself (a plugin's one module) is its own implementation. A method that is another's record
with some declarations changed is a :func:`variant` of that record, not a subclass (gotmare:
Block-ADMM's record with the dual part off).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ...errors import ConfigError, check
from ..settings import applies, check_fields, described, setting

FLOAT_BYTES = 4  # float32
LR_SCHEDULES = ("constant", "cosine")


def schedule_factor(schedule: str, progress: float) -> float:
    """Multiplier of η at ``progress`` ∈ [0, 1] of the run: 1 (constant) or ½(1 + cos πp) (cosine)."""
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
    return 1.0


def z_step_setting(default: str):
    """``z_step``, shared by the batch and online methods (their defaults differ)."""
    return setting(
        default,
        "Z step: ζ/(β_t + β_{t+1}L²_{t+1}) (scaled, stable as ‖W‖ grows) or ζ as is (fixed)",
        choices=("scaled", "fixed"),
        label="Z-step rule",
    )


def lr_decay_setting():
    """``lr_decay`` γ: the Θ step size of epoch e is η·γ^e (online-admm, sgd, adam)."""
    return setting(1.0, "γ: the Θ step size of epoch e is η·γ^e (1: constant)", max=1.0, label="γ — η decay per epoch")


def power_steps_setting():
    """``power_steps``: iterations of the warm-started power method behind L_t (scaled Z step)."""
    return setting(
        2,
        "warm-started power-iteration steps per estimate of L_t (scaled Z step)",
        label="Power steps per Lₜ estimate",
        when={"z_step": "scaled"},
    )


def power_every_setting(default: int = 1):
    """``power_every``: how often L_t is re-estimated (it moves slowly with Θ; the estimate is warm)."""
    return setting(
        default,
        "re-estimate L_t every this many Z-updates (scaled Z step; minibatch Z-updates count one each)",
        label="Re-estimate Lₜ every",
        when={"z_step": "scaled"},
    )


@dataclass(frozen=True)
class StateSizes:
    """What the memory estimate knows of a run without building it (:func:`admm_core.spec.resources.estimate_memory`)."""

    n: int  # training rows
    batch_size: int  # minibatch size of Θ-steps
    block_out: tuple[int, ...]  # floats per sample of Z_t, the output of block t (t = 1..T)
    layer_out: tuple[int, ...]  # floats per sample of each layer's output


class MethodBase:
    """The base of every method record (module docstring); the records are frozen dataclasses."""

    name = "?"
    summary = ""
    # the engine class that runs it, "module:Class" (None: this class defines the protocol calls itself)
    implementation: ClassVar[str | None] = None
    uses_blocks = True  # False for end-to-end methods (the split is ignored)
    supports_augment = False  # True where every read of the inputs goes through TrainBatch.inputs
    supports_lr_schedule = False  # True where Θ's step size follows TrainBatch.lr_factor
    multi_process: ClassVar[bool] = False  # True where it runs on several processes under torchrun
    needs_linear_chain: ClassVar[bool] = False  # True where its updates solve Linear layers in closed form
    # the kind of run it makes (admm_core.spec.kinds.KINDS): "network" methods run with NetworkTask
    kind: ClassVar[str] = "network"
    # per-block lists its diagnostics log that the dashboard charts live (app/dashboard/charts.py),
    # the x axis of those charts, the accuracy chart's title, and per metric what is not the
    # default chart: {"title", "names" (one per block)} or {"title", "lines": ((key, name), …)}
    live_metrics: ClassVar[tuple[str, ...]] = ("residuals", "dual_norms", "betas")
    live_unit: ClassVar[str] = "epoch"
    live_accuracy: ClassVar[str] = "Accuracy (%)"
    live_charts: ClassVar[dict] = {}
    # settings of the record that mean nothing in this method (gotmare: the duals' own): not shown
    not_applicable: ClassVar[tuple[str, ...]] = ()

    def estimate_state_bytes(self, s: StateSizes) -> int:
        """Bytes of what the method keeps for the whole run besides Θ (float32), by arithmetic.
        Default: Z_t and U_t of every training row for a block method, nothing end to end."""
        return 2 * s.n * sum(s.block_out) * FLOAT_BYTES if self.uses_blocks else 0

    def theta_moments(self) -> int:
        """Θ-optimizer moments per parameter (Adam 2, SGD with momentum 1, closed-form updates 0)."""
        return 0

    def check_processes(self, n: int, T: int) -> None:
        """ConfigError unless these settings can run on ``n`` processes with ``T`` blocks (only
        asked of a ``multi_process`` method, for n > 1)."""

    @classmethod
    def settings(cls) -> list[dict]:
        """[{name, label, default, help, type, choices, when}] for menus and ``--help``."""
        return described(cls)

    @classmethod
    def shown_settings(cls, values: dict | None = None) -> list[dict]:
        """The settings that apply to this method while its settings hold ``values`` (the rest at
        their defaults): not :attr:`not_applicable`, and each one's ``when`` holds."""
        all_ = cls.settings()
        now = {s["name"]: s["default"] for s in all_} | dict(values or {})
        return [s for s in all_ if s["name"] not in cls.not_applicable and applies(s["when"], now)]

    # The settings of the paper's algorithm as printed: with ``recipe = 'paper'`` (a setting of the methods
    # that have one) they replace the given values, so Alg. 1 / Alg. 2 is one setting away from any preset.
    PAPER: ClassVar[dict] = {}

    def __post_init__(self):
        if getattr(self, "recipe", None) == "paper":
            for k, v in self.PAPER.items():
                object.__setattr__(self, k, v)
        check_fields(self, self.name)


def variant(record: type, qualname: str, doc: str, **declared) -> type:
    """The record of a method that is ``record`` with some of its declarations in place of their own
    (gotmare: Block-ADMM's record with the dual part off, ``uses_duals=False``, and its own name,
    summary, live charts, hidden settings and ``PAPER``).

    The variant has ``record``'s settings (each field's default, help and rule, in the same order) and
    its checks and methods (the same functions), with ``declared`` over its class attributes. It is a
    record of its own, deriving from ``record``'s bases, not a subclass of ``record``: a method holds
    its settings, it does not inherit another method's. Only attributes ``record`` has may be declared,
    and its methods must not call ``super()`` (whose class would be ``record``, not the variant).
    """
    unknown = sorted(k for k in declared if not hasattr(record, k))
    if unknown:
        raise TypeError(f"variant of {record.__name__}: no attribute {', '.join(unknown)} to declare")
    fields = dataclasses.fields(record)
    names = {f.name for f in fields}
    own = {k: v for k, v in vars(record).items() if k not in names and (k == "__post_init__" or k[:2] != "__")}
    for k, fn in own.items():
        if "__class__" in getattr(getattr(fn, "__code__", None), "co_freevars", ()):
            raise TypeError(f"variant of {record.__name__}: {k} calls super(); name the base's method instead")
    copies = [
        (f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata))
        for f in fields
    ]
    namespace = {**own, **declared, "__module__": record.__module__, "__doc__": doc}
    return dataclasses.make_dataclass(qualname, copies, bases=record.__bases__, namespace=namespace, frozen=True)


def per_block(value: float | Sequence[float], T: int, name: str) -> list[float]:
    """A scalar or one value per block -> list of T floats (validated)."""
    vals = [float(value)] * T if isinstance(value, (int, float)) else [float(v) for v in value]
    check(len(vals) == T, name, value, f"give one value or one per block (T = {T})")
    for v in vals:
        check(math.isfinite(v) and v > 0, name, value, "every value must be > 0")
    return vals


__all__ = [
    "ConfigError",
    "FLOAT_BYTES",
    "LR_SCHEDULES",
    "MethodBase",
    "StateSizes",
    "lr_decay_setting",
    "per_block",
    "power_every_setting",
    "power_steps_setting",
    "schedule_factor",
    "setting",
    "variant",
    "z_step_setting",
]
