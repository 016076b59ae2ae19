"""The engine's runs: a split network trained by a method, as a task of the one run loop.

:func:`build` loads the data and builds the network, the method and its state (a
:class:`Session`); :class:`NetworkTask` plugs it into :func:`admm_core.loop.run_loop` (an epoch,
the evaluation behind each metrics line, the divergence test, ``checkpoint.pt``); :func:`train`
is that run.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from . import data as data_mod
from . import distributed as dist_mod
from .blocks import BlockNet, build_blocknet
from .checkpoint import load_checkpoint, save_checkpoint
from .device import machine, resolve_device
from .errors import ConfigError, check
from .loop import Task, run_loop
from .losses import get_loss
from .methods import make_method
from .methods.base import TrainBatch
from .spec.archs import OWN, OWN_MESSAGE
from .spec.config import RunConfig
from .spec.datasets import OWN_DATA
from .spec.resources import augment_problem
from .status import RunStatus

TRAIN_EVAL_LIMIT = 10_000  # train loss/accuracy are measured on the first 10k training samples


def _all_finite(obj) -> bool:
    """True when every tensor / number in obj (nested lists, tuples, dicts) is finite."""
    if torch.is_tensor(obj):
        return not obj.is_floating_point() or bool(torch.isfinite(obj).all())
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, (list, tuple)):
        return all(_all_finite(v) for v in obj)
    if isinstance(obj, dict):
        return all(_all_finite(v) for v in obj.values())
    return True


def divergence(
    sess: "Session", m: dict, best_loss: float | None, first_loss: float | None, factor: float
) -> str | None:
    """Why the run diverged at this evaluation, or None.

    Non-finite training loss, residuals, Θ or any tensor of the method state (Z, U), or a
    training loss above ``factor`` × the best so far *and* above the loss at epoch 0 (so a
    loss that is merely noisy near zero does not count). ``factor`` 0 turns the loss test off.
    """
    if not math.isfinite(m["train_loss"]):
        return f"training loss is {m['train_loss']}"
    if not _all_finite(m.get("residuals", [])):
        return f"residuals are not finite ({m['residuals']})"
    if not all(bool(torch.isfinite(p).all()) for p in sess.net.parameters()):
        return "Θ (network parameters) is not finite"
    st = sess.state.__dict__ if hasattr(sess.state, "__dict__") else {}
    for name in ("z", "u"):
        if name in st and not _all_finite(st[name]):
            return f"{name.upper()} is not finite"
    loss = m["train_loss"]
    if factor and best_loss is not None and loss > factor * best_loss and (first_loss is None or loss > first_loss):
        return f"training loss {m['train_loss']:.4g} exceeds {factor:g} × its best {best_loss:.4g}"
    return None


@dataclass
class Session:
    """A built experiment: data on the device, network, method and its state."""

    cfg: RunConfig
    device: torch.device
    dataset: data_mod.Dataset
    net: torch.nn.Module
    method: object
    state: object
    batch: TrainBatch

    def evaluate(self) -> dict:
        loss = get_loss(self.cfg.train.loss)
        x_te, y_te = self.dataset.x_test.to(self.device), self.dataset.y_test.to(self.device)
        # reduced over ranks when the rows are sharded (admm_core.distributed)
        tr_loss, tr_acc, te_loss, te_acc = dist_mod.evaluate_split(
            self.net, self.batch, x_te, y_te, loss, TRAIN_EVAL_LIMIT
        )
        diag = self.method.diagnostics(self.net, self.state, self.batch)
        return {
            "train_loss": tr_loss,
            "train_accuracy": tr_acc,
            "test_loss": te_loss,
            "test_accuracy": te_acc,
            **diag,
            "state_bytes": self.method.state_bytes(self.state),  # this process's
            **dist_mod.extra_metrics(self.method, self.state),
        }


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks (up to 32 MiB each) instead of returning them to the
    system: a training step frees and re-allocates the same activations, and without this every
    allocation over the 128 KiB default is a fresh mmap, paid in page faults (ResNet-18 at width 8 on
    2 cores: 340,000 faults and ~half the CPU time in the kernel per 20 steps; after: ~3,000 and
    none). Linux/glibc only; elsewhere a no-op. Returns whether it took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


def build(cfg: RunConfig, net: BlockNet | None = None, dataset: data_mod.Dataset | None = None) -> Session:
    """Load data, build the split network and the method's initial state (seeded).

    ``net`` / ``dataset``: a network and data handed over instead of the ones ``cfg`` names (the
    Python API for a user's own model, :mod:`admm_core.own`; ``model.arch`` / ``data.name`` 'own').
    """
    if (cfg.model.arch == OWN and net is None) or (cfg.data.name == OWN_DATA and dataset is None):
        raise ConfigError(OWN_MESSAGE)
    device = dist_mod.local_device(resolve_device(cfg.train.device))
    keep_freed_memory()
    torch.manual_seed(cfg.train.seed)
    ds = dataset or data_mod.load(
        cfg.data.name, cfg.data.root, train_limit=cfg.data.train_limit, test_limit=cfg.data.test_limit
    )
    net = (net or build_blocknet(cfg.model, ds.input_shape, ds.n_classes, seed=cfg.train.seed)).to(device)
    method = make_method(cfg.method, cfg.method_settings)  # the run's one method object
    gen = torch.Generator().manual_seed(cfg.train.seed)
    x_train = ds.x_train.to(device)
    if cfg.train.channels_last:
        check(x_train.dim() == 4, "train.channels_last", True, "needs image inputs (N, C, H, W)")
        net = net.to(memory_format=torch.channels_last)
        x_train = x_train.contiguous(memory_format=torch.channels_last)
    augment = None
    if cfg.data.augment:
        if problem := augment_problem(cfg, tuple(x_train.shape[1:])):
            raise ConfigError(problem)
        augment = data_mod.CropFlip(
            x_train.shape[0], ds.pad_value, pad=cfg.data.augment_pad, flip=cfg.data.augment_flip, seed=cfg.train.seed
        )
    if cfg.train.lr_schedule != "constant":
        check(
            method.supports_lr_schedule,
            "train.lr_schedule",
            cfg.train.lr_schedule,
            f"method {cfg.method!r} has no Θ step size to schedule",
        )
    batch = TrainBatch(
        x_train,
        ds.y_train.to(device),
        get_loss(cfg.train.loss),
        cfg.train.batch_size,
        augment=augment,
        epochs=cfg.train.epochs,
        lr_schedule=cfg.train.lr_schedule,
    )
    method, batch = dist_mod.distribute(method, batch, net)  # under torchrun: this rank's rows or block
    state = method.init_state(net, batch, gen)
    return Session(cfg, device, ds, net, method, state, batch)


def autocast(cfg: RunConfig, device: torch.device):
    """bf16 autocast of the network's compute when ``train.precision = 'bf16'`` (else a no-op).

    No cast cache: autocast keeps the bf16 copy of each weight until its outermost context
    exits, and one context spans a whole epoch, so with the cache every forward of the epoch
    would run on the weights the epoch started with (the optimizer's updates unseen; sgd and
    block-admm diverged on the GPU before this).
    """
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.train.precision == "bf16", cache_enabled=False)


def summarize(cfg: RunConfig, metrics: list[dict], status: str) -> dict:
    last = metrics[-1] if metrics else {}
    best = max(metrics, key=lambda m: m["test_accuracy"]) if metrics else {}

    def time_to(acc):
        hit = next((m for m in metrics if m["test_accuracy"] >= acc), None)
        return None if hit is None else hit["wall_time_s"]

    epochs = last.get("epoch", 0)
    return {
        "method": cfg.method,
        "preset": cfg.preset,
        "data": cfg.data.name,
        "status": status,
        "epochs": epochs,
        "test_accuracy": last.get("test_accuracy"),
        "best_test_accuracy": best.get("test_accuracy"),
        "best_epoch": best.get("epoch"),
        "train_accuracy": last.get("train_accuracy"),
        "train_loss": last.get("train_loss"),
        "wall_time_s": last.get("wall_time_s", 0.0),
        "seconds_per_epoch": (last.get("wall_time_s", 0.0) / epochs) if epochs else None,
        "state_bytes": last.get("state_bytes"),
        "time_to_90_s": time_to(0.90),
        "time_to_95_s": time_to(0.95),
    }


class NetworkTask(Task):
    """A :class:`RunConfig` as a task of the run loop: epochs of the method over the training set,
    a metrics line every ``eval_every`` epochs, ``checkpoint.pt`` every ``checkpoint_every``.

    Under torchrun every rank runs it: only rank 0 writes the run's files, each rank its share
    of the checkpoint (:mod:`admm_core.distributed`), and a crash's traceback goes to
    ``error-rank<r>.txt`` on the other ranks.
    """

    kind = "network"

    def __init__(self, cfg: RunConfig, config_written: bool = False):
        self.cfg, self.config_written = cfg, config_written
        self.epochs = cfg.train.epochs
        self.eval_every = cfg.train.eval_every
        self.checkpoint_every = cfg.train.checkpoint_every
        self.tensorboard = cfg.train.tensorboard
        self.lead = dist_mod.is_lead()  # under torchrun only rank 0 writes status, metrics and summary
        self.error_file = "error.txt" if self.lead else f"error-rank{dist_mod.rank()}.txt"
        self.factor = cfg.train.diverge_factor
        self.best_loss = self.first_loss = None

    def resume_point(self, run_dir: Path):
        # no checkpoint yet (stopped before the first): the resume starts afresh
        return True if dist_mod.checkpoint_world(run_dir) is not None else None

    def config_text(self, resumed: bool) -> str | None:
        # a resume keeps the file (the CLI rewrites a new length); so does a run whose file holds cfg
        return None if resumed or self.config_written else self.cfg.to_json()

    def setup(self, run_dir: Path, status: RunStatus, resumed: bool) -> float:
        self.sess = build(self.cfg)
        status.update(force=True, machine=machine(self.sess.device))  # beside every timing: where it was measured
        return 0.0

    def load(self, run_dir: Path, point) -> tuple[int, float]:
        out = load_checkpoint(run_dir / "checkpoint.pt", self.sess)
        dist_mod.barrier()  # every rank has loaded its checkpoint before rank 0 rewrites the metrics
        return out

    def observe(self, lines: list[dict]) -> None:
        self.best_loss = min((x["train_loss"] for x in lines if math.isfinite(x["train_loss"])), default=None)
        self.first_loss = lines[0]["train_loss"] if lines else None

    def run_epoch(self, epoch: int, progress) -> None:
        sess = self.sess
        sess.batch.set_epoch(epoch)  # this epoch's augmentation view (no-op without augmentation)
        with autocast(self.cfg, sess.device):
            sess.method.run_epoch(sess.net, sess.state, sess.batch, progress)
        if sess.device.type == "cuda":
            torch.cuda.synchronize()

    def evaluate(self, epoch: int) -> dict:
        with autocast(self.cfg, self.sess.device):
            return self.sess.evaluate()

    def diverged(self, m: dict) -> str | None:
        # a loss that exploded past its best and its starting value ends the run
        why = divergence(self.sess, m, self.best_loss, self.first_loss, self.factor)
        if not why and math.isfinite(m["train_loss"]):
            self.best_loss = m["train_loss"] if self.best_loss is None else min(self.best_loss, m["train_loss"])
        return why

    def save(self, run_dir: Path, epoch: int, wall: float) -> None:
        save_checkpoint(run_dir / "checkpoint.pt", self.sess, epoch, wall)

    def finish(self, run_dir: Path, status: RunStatus, metrics: list[dict], wall: float) -> tuple[dict, dict]:
        return summarize(self.cfg, metrics, "finished"), {}

    def summary(self, metrics: list[dict], state: str) -> dict:
        return summarize(self.cfg, metrics, state)


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    on_progress: Callable[[float, dict | None], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    config_written: bool = False,
) -> dict:
    """Train ``cfg`` into ``run_dir`` (resuming from its checkpoint if asked); returns the summary.
    ``config_written``: ``run_dir``/config.json holds ``cfg`` already (the loop leaves it).

    ``on_progress(epochs_done_as_float, metrics_or_None)`` is called during epochs and after
    each evaluation. ``should_stop()`` is polled; when true the run ends at once as 'stopped'
    (the last checkpoint remains, so it can be resumed). The loop is :func:`admm_core.loop.run_loop`.
    """
    should_stop = dist_mod.agreed(should_stop)  # every rank stops at the same point
    return run_loop(
        NetworkTask(cfg, config_written), run_dir, resume=resume, should_stop=should_stop, on_progress=on_progress
    )
