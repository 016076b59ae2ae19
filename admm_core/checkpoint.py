"""Checkpoint files: written atomically and read back before they replace the last good one,
loaded safely (plain tensors only), and a network run's checkpoint (network + method state +
epoch, one file per rank under torchrun)."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from . import distributed as dist_mod
from .errors import CheckpointError
from .rundir import write_atomic
from .status import pid_alive

if TYPE_CHECKING:
    from .network import Session


class _KeepWriteError:
    """A file wrapper that remembers the OSError of a failed write (full disk, file-size limit)."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, b):
        try:
            return self.f.write(b)
        except OSError as e:
            self.error = e
            raise

    def flush(self):
        return self.f.flush()


def atomic_torch_save(obj, path: Path) -> None:
    """torch.save through :func:`admm_core.rundir.write_atomic`: a temporary, synced and read back
    before it replaces ``path``. A kill, a full disk or a failed read-back mid-write leaves the
    previous file intact (and no temporary file behind): a damaged checkpoint never replaces the
    last good one."""
    path = Path(path)

    def save(raw) -> None:
        f = _KeepWriteError(raw)
        try:
            torch.save(obj, f)
        except RuntimeError:
            if f.error is not None:  # torch reports a failed write as a bare RuntimeError: say what failed
                raise f.error from None
            raise

    # the read-back parses the whole archive (mmap: the tensors are not read)
    write_atomic(path, save, check=lambda tmp: safe_load(tmp, mmap=True))
    for stale in path.parent.glob(f"{path.name}.*.tmp"):  # left by a writer killed mid-write
        pid = stale.name[len(path.name) + 1 : -len(".tmp")].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            stale.unlink(missing_ok=True)


def safe_load(path: Path, map_location="cpu", mmap: bool = False):
    """torch.load restricted to tensors and plain containers (``weights_only=True``).

    A pickle that would run code, a truncated or garbage file all raise CheckpointError naming
    the file and why; nothing in the file is executed.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror})") from None
    if not head:
        raise CheckpointError(f"{path}: damaged: the file is empty")
    if head != b"PK\x03\x04":  # torch.save's zip format; anything else is garbage or a legacy pickle
        raise CheckpointError(f"{path}: damaged or not a PyTorch checkpoint (not a torch.save zip archive)")
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        what = f"it references {found.group(1)}" if found else "it holds objects other than tensors"
        raise CheckpointError(
            f"{path}: refused: not a plain-tensor checkpoint, loading it could run code ({what[:120]})"
        ) from None
    except Exception as e:  # noqa: BLE001 - a damaged file can fail in many ways inside torch/zipfile
        first = re.split(r"(?<=\.)\s", (str(e).strip().splitlines() or [""])[0])[0][:160]
        raise CheckpointError(f"{path}: damaged or not a PyTorch checkpoint ({type(e).__name__}: {first})") from None


CHECKPOINT_KEYS = ("epoch", "wall_time_s", "net", "method_state")


def verify_checkpoint(path: Path, map_location="cpu", mmap: bool = True) -> dict:
    """Load ``path`` safely and check it is a run checkpoint; raises CheckpointError naming what is wrong."""
    ck = safe_load(path, map_location=map_location, mmap=mmap)
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(ck, dict) or k not in ck]
    if missing:
        raise CheckpointError(f"{path}: not a run checkpoint (missing {', '.join(missing)})")
    return ck


def save_checkpoint(path: Path, sess: "Session", epoch: int, wall: float) -> None:
    payload = {
        "epoch": epoch,
        "wall_time_s": wall,
        "net": sess.net.state_dict(),
        "method_state": sess.state.state_dict(),
    }
    if dist_mod.world_size() > 1:  # one file per rank + manifest
        return dist_mod.save(path.parent, payload, epoch, atomic_torch_save)
    atomic_torch_save(payload, path)


def load_checkpoint(path: Path, sess: "Session") -> tuple[int, float]:
    dist_mod.check_world(path.parent)  # another world size: a ConfigError naming both
    if dist_mod.world_size() > 1:  # this rank's file, checked against the manifest
        ck = dist_mod.load(path.parent, sess.device, read=lambda p: verify_checkpoint(p, sess.device, mmap=False))
    else:
        ck = verify_checkpoint(path, map_location=sess.device, mmap=False)
    try:
        sess.net.load_state_dict(ck["net"])
        sess.state.load_state_dict(ck["method_state"])
        if "epoch" not in ck["method_state"] and hasattr(sess.state, "epoch"):
            sess.state.epoch = int(ck["epoch"])  # a checkpoint from before states counted epochs: η·γ^epoch goes on
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise CheckpointError(
            f"{path}: does not fit this run's network or method ({type(e).__name__}: {first})"
        ) from None
    return ck["epoch"], ck["wall_time_s"]
