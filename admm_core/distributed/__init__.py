"""Block-ADMM on torch.distributed: Z and U sharded over processes (and machines).

Launch with ``torchrun --nproc-per-node N -m admm_core train …`` (gloo on CPU, NCCL on
GPUs); ``init_from_env`` joins the process group torchrun describes (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK). Without torchrun nothing here communicates and a
run is world size 1. Two ways to split the work (the method setting ``parallel``):

- ``samples`` (block-admm, gotmare): rank r holds the training rows [r·N/W, (r+1)·N/W) of
  X, Z_t and U_t (:class:`~admm_core.methods.world.World`). Z sweeps and dual steps are
  local; Θ-steps are synchronous data-parallel steps on the *global* minibatches (drawn by
  the same seeded generator on every rank, so the sequence does not depend on W): each
  rank backpropagates its rows of the minibatch, the gradients are summed by all-reduce and
  every rank takes the same optimizer step (identical optimizer state everywhere).
- ``blocks`` (block-admm, gotmare with ``z_sweep='jacobi'``): each rank owns a contiguous
  run of blocks (one each when W = T): their Θ_t, Z_t, U_t for every sample and a copy of the
  input Z_{t−1} of its first block. All blocks take their Θ-steps at once and Z moves by
  BlockADMM's own Jacobi sweep; neighbouring owners exchange Z_t (forward) and
  ∇_{Z_t} P_{t+1} (backward) by point-to-point sends.

Both are strategies, not algorithms: :func:`distribute` hands the method an
:class:`~admm_core.methods.world.World` on ``TrainBatch.shard`` saying which rows and blocks are
this process's and how tensors travel, and BlockADMM's code does every update. So every setting
(per-block ζ and β, ``z_step='scaled'``, the adaptive penalty and its ``beta_max`` cap) means the
same in one process and in many (tests/test_distributed.py runs the same settings both ways).

Checkpoints of a run with W > 1 are one file per rank plus a manifest written by rank 0
after every rank's file is complete; resuming needs the same W.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from ..errors import ConfigError
from ..methods.base import TrainBatch, evaluate
from ..methods.block_admm import BlockADMM
from ..methods.world import World
from ..rundir import MANIFEST, checkpoint_world, read_checkpoint_manifest, write_text_atomic
from ..spec.resources import multi_process_problem


# --- the process group ---------------------------------------------------------------
def active() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_lead() -> bool:
    """Rank 0 writes metrics, status and summary."""
    return rank() == 0


def init_from_env(device: str = "auto") -> bool:
    """Join the process group torchrun describes; False (and nothing done) without torchrun.

    Backend: NCCL when the run trains on CUDA, gloo otherwise.
    """
    if active() or "WORLD_SIZE" not in os.environ:
        return False
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    return True


def shutdown() -> None:
    if active():
        dist.destroy_process_group()


def local_device(device: torch.device) -> torch.device:
    """cuda → this process's GPU (LOCAL_RANK) under torchrun."""
    if device.type == "cuda" and active():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def broadcast(obj):
    """Rank 0's value of a picklable object, on every rank."""
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def agreed(should_stop: Callable[[], bool] | None) -> Callable[[], bool] | None:
    """A stop poll all ranks agree on (any rank asked → all stop at the same point).

    Every rank must poll it equally often; the train loop does (the same epochs and progress
    calls everywhere).
    """
    if world_size() == 1:
        return should_stop

    def poll() -> bool:
        flag = torch.tensor([1.0 if should_stop and should_stop() else 0.0], dtype=torch.float64, device=_comm_device())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    return poll


def _comm_device() -> torch.device:
    if active() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def shard_range(n: int, r: int, w: int) -> tuple[int, int]:
    """Rows [start, stop) of rank r: contiguous, sizes differ by at most one."""
    return r * n // w, (r + 1) * n // w


# --- building a session ---------------------------------------------------------------
def distribute(method, batch: TrainBatch, net) -> tuple[object, TrainBatch]:
    """The method and this process's batch for the current world size (unchanged when W = 1)."""
    w = world_size()
    if w == 1:
        return method, batch
    if problem := multi_process_problem(method.name):  # the preflight's refusal, for a launch that skipped it
        raise ConfigError(f"world size = {w}: {problem}")
    if method.parallel == "blocks":
        return method, dataclasses.replace(batch, shard=block_world(method, rank(), w, net.T))
    r = rank()
    start, stop = shard_range(batch.n, r, w)
    if stop <= start:
        raise ConfigError(f"world size = {w}: more processes than training samples ({batch.n})")
    shard = World(rank=r, world=w, start=start, n_global=batch.n)
    # clone: the shard must not keep the whole training set alive through a view
    local = dataclasses.replace(batch, x=batch.x[start:stop].clone(), y=batch.y[start:stop].clone(), shard=shard)
    if batch.augment is not None:  # sample i keeps the view it has in one process: look it up by global row
        local.augment = _GlobalRows(batch.augment, start)
    return method, local


def block_world(method: BlockADMM, r: int, w: int, T: int) -> World:
    """Rank ``r``'s share of ``parallel='blocks'``: the contiguous blocks shard_range(T, r, w)."""
    method.check_blocks(w, T)  # the settings' own check: its size, the sweep it needs
    owner = tuple(i for i in range(w) for _ in range(*shard_range(T, i, w)))
    return World(rank=r, world=w, owner=owner)


class _GlobalRows:
    """An augmentation indexed by global rows, called with this shard's local row indices."""

    def __init__(self, augment, start: int):
        self.augment, self.start = augment, start

    def set_epoch(self, epoch: int, device) -> None:
        self.augment.set_epoch(epoch, device)

    def __call__(self, x: torch.Tensor, idx) -> torch.Tensor:
        if isinstance(idx, slice):  # a contiguous block of local rows, x = x_local[idx]
            first = idx.start or 0
            idx = torch.arange(first, first + x.shape[0], device=x.device)
        return self.augment(x, idx + self.start)


def evaluate_split(net, batch: TrainBatch, x_te, y_te, loss, train_limit: int) -> tuple[float, float, float, float]:
    """(train loss, train accuracy, test loss, test accuracy), reduced over ranks.

    Train figures cover the first ``train_limit`` *global* training rows (each rank its part
    of them), test figures the whole test set (each rank a contiguous slice).
    """
    sh = batch.shard
    if sh.world == 1:
        return (*evaluate(net, batch.x[:train_limit], batch.y[:train_limit], loss), *evaluate(net, x_te, y_te, loss))
    if sh.shards_rows:  # this rank's rows of the first train_limit
        lo, hi = 0, max(0, min(batch.n, train_limit - sh.start))
    else:  # every rank holds every row (and, after the epoch, the whole network): split them
        lo, hi = shard_range(min(batch.n, train_limit), sh.rank, sh.world)
    a, b = shard_range(x_te.shape[0], sh.rank, sh.world)
    sums = []
    for x, y in ((batch.x[lo:hi], batch.y[lo:hi]), (x_te[a:b], y_te[a:b])):
        lo, acc = evaluate(net, x, y, loss) if x.shape[0] else (0.0, 0.0)
        sums += [lo * x.shape[0], acc * x.shape[0], x.shape[0]]
    s = sh.sum(sums, batch.x.device)
    return s[0] / max(s[2], 1), s[1] / max(s[2], 1), s[3] / max(s[5], 1), s[4] / max(s[5], 1)


def extra_metrics(method, state) -> dict:
    """Per-run figures only a multi-process run has: world size and the Z/U bytes of all ranks."""
    w = world_size()
    if w == 1:
        return {}
    b = [0.0] * w
    b[rank()] = float(method.state_bytes(state))
    b = World(world=w).sum(b, _comm_device())
    return {"world_size": w, "state_bytes_per_rank": [int(v) for v in b], "state_bytes_total": int(sum(b))}


# --- checkpoints ------------------------------------------------------------------------
def _rank_file(run_dir: Path, r: int, epoch: int) -> Path:
    return Path(run_dir) / f"checkpoint-rank{r}-epoch{epoch}.pt"


def check_world(run_dir: Path) -> None:
    """ConfigError when the checkpoint was written by another number of processes."""
    saved, now = checkpoint_world(run_dir), world_size()
    if saved is not None and saved != now:
        raise ConfigError(
            f"resume: the checkpoint in {run_dir} was written by {saved} process(es) but this run has {now}; "
            f"resume with the same world size (torchrun --nproc-per-node {saved})"
        )


def save(run_dir: Path, payload: dict, epoch: int, write: Callable[[dict, Path], None]) -> None:
    """One file per rank, then rank 0's manifest naming them; older files go after that.

    A kill at any point leaves a manifest that names a complete set of files.
    """
    r, w = rank(), world_size()
    write({**payload, "rank": r, "world_size": w}, _rank_file(run_dir, r, epoch))
    dist.barrier()
    if r == 0:
        files = [_rank_file(run_dir, i, epoch).name for i in range(w)]
        manifest = {"world_size": w, "epoch": epoch, "files": files}
        write_text_atomic(Path(run_dir) / MANIFEST, json.dumps(manifest, indent=2))
    dist.barrier()
    for old in Path(run_dir).glob(f"checkpoint-rank{r}-epoch*.pt"):
        if old.name != _rank_file(run_dir, r, epoch).name:
            old.unlink(missing_ok=True)


def load(run_dir: Path, device, read: Callable[[Path], dict] | None = None) -> dict:
    """This rank's checkpoint payload (after :func:`check_world`).

    ``read`` loads one file (the run loop passes its verifying, tensors-only loader); the
    default is ``torch.load(..., weights_only=True)``: a checkpoint never runs code.
    """
    check_world(run_dir)
    m = read_checkpoint_manifest(run_dir)
    path = Path(run_dir) / m["files"][rank()]
    ck = read(path) if read else torch.load(path, map_location=device, weights_only=True)
    if ck.get("epoch") != m["epoch"]:
        raise ConfigError(f"resume: {m['files'][rank()]} holds epoch {ck.get('epoch')}, the manifest {m['epoch']}")
    return ck


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()
