"""torchvision's architectures as records (``tv-*``), read without torch.

``tv-resnet18``, ``tv-resnet18-cifar``, ``tv-resnet34``, ``tv-resnet34-cifar``, ``tv-vgg11-bn`` and
``tv-mobilenet-v2``: ``torchvision.models``' networks (random init, ``weights=None``), cut into
their top-level children (:mod:`admm_core.tv` builds them and says how each is cut).

Their tables are not written out by arithmetic here: :mod:`admm_core.tv` computes them on torch's
meta device in a **child process** (``python -m admm_core.tv``; this process never imports
torch, so the dashboard's server stays without it), and they are cached, in memory and in a JSON
file under :func:`admm_core.spec.datasets.cache_dir` keyed by record, input shape, classes and the
torch and torchvision versions. The first look at a (record, shape, classes) costs that child
(about 2–4 s, torch's import); every later one reads the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from .. import child_env
from ..errors import ConfigError
from .archs import Arch, register_arch

if TYPE_CHECKING:
    from .config import ModelConfig

TABLE_VERSION = 1  # bump when admm_core.tv cuts a network differently: older cache files are not read
CHILD_TIMEOUT_S = 300


@dataclass(frozen=True)
class TVRecord:
    """One torchvision network: its ``torchvision.models`` function, stem, label and split points."""

    torchvision: str
    label: str
    splits: tuple[str, ...]
    default_split: tuple[str, ...]
    stem: str = "imagenet"  # "cifar": 3×3 stride-1 conv1, no max-pool (ResNets only)


_RESNET_SPLITS = ("layer1", "layer2", "layer3", "layer4")
_STAGES = tuple(f"stage{i}" for i in range(1, 8))
# T = 2 by default: after the second of four stages for the ResNets (where the resnet18 record's
# conv3_x split, the paper's CIFAR-10 split, falls), after the third for VGG and MobileNetV2.
# labels: short enough for one line of the Train form's network menu ("tv" = torchvision; "CIFAR": the CIFAR stem)
TV_RECORDS: dict[str, TVRecord] = {
    "tv-resnet18": TVRecord("resnet18", "ResNet-18 (tv)", _RESNET_SPLITS, ("layer2",)),
    "tv-resnet18-cifar": TVRecord("resnet18", "ResNet-18 (tv, CIFAR)", _RESNET_SPLITS, ("layer2",), stem="cifar"),
    "tv-resnet34": TVRecord("resnet34", "ResNet-34 (tv)", _RESNET_SPLITS, ("layer2",)),
    "tv-resnet34-cifar": TVRecord("resnet34", "ResNet-34 (tv, CIFAR)", _RESNET_SPLITS, ("layer2",), stem="cifar"),
    "tv-vgg11-bn": TVRecord("vgg11_bn", "VGG-11-BN (tv)", _STAGES[:5] + ("avgpool",), ("stage3",)),
    "tv-mobilenet-v2": TVRecord("mobilenet_v2", "MobileNetV2 (tv)", ("stem", *_STAGES, "head_conv"), ("stage3",)),
}


def versions() -> str:
    """torch and torchvision's installed versions (from their package metadata: no import)."""
    try:
        return f"torch-{metadata.version('torch')}_torchvision-{metadata.version('torchvision')}"
    except metadata.PackageNotFoundError as e:
        raise ConfigError(f"model.arch: the tv-* architectures need torch and torchvision installed ({e})") from None


def cache_file(record: str, in_shape: tuple[int, ...], n_out: int) -> Path:
    """The cached table of ``record`` for ``in_shape`` inputs and ``n_out`` classes."""
    from .datasets import cache_dir

    shape = "x".join(str(int(s)) for s in in_shape)
    return cache_dir() / "tv-tables" / f"v{TABLE_VERSION}_{versions()}" / f"{record}_{shape}_{int(n_out)}.json"


_MEMO: dict[tuple, list | str] = {}  # (record, shape, classes) -> table, or the error message


def _read(path: Path) -> list | None:
    try:
        rows = json.loads(path.read_text())
        return [(str(n), tuple(int(d) for d in s), int(p)) for n, s, p in rows]
    except (OSError, ValueError, TypeError):
        return None  # missing or damaged: computed again


def _child(requests: list[tuple[str, tuple[int, ...], int]]) -> list[list | str]:
    """The tables (or error messages) of ``requests``, from one ``python -m admm_core.tv``."""
    env = child_env(OMP_NUM_THREADS="1")
    arg = json.dumps([[r, list(s), n] for r, s, n in requests])
    what = ", ".join(sorted({r for r, _, _ in requests}))
    try:
        p = subprocess.run(
            [sys.executable, "-m", "admm_core.tv", arg],
            capture_output=True,
            text=True,
            env=env,
            timeout=CHILD_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"model.arch = {what}: the layer table could not be computed ({e})") from None
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit code {p.returncode}"]
        raise ConfigError(
            f"model.arch = {what}: the layer table could not be computed (python -m admm_core.tv: {tail[0]})"
        ) from None
    return [
        err if t is None else [(n, tuple(s), int(k)) for n, s, k in t] for t, err in zip(out["tables"], out["errors"])
    ]


def prefetch(requests) -> None:
    """Make sure the tables of ``requests`` ((record, input shape, classes), …) are known: the missing
    ones computed in one child process (one torch import for all; with every other record's for the
    same inputs and classes, a second or two more), then cached."""
    todo = []
    for record, shape, n_out in requests:
        key = (record, tuple(shape), int(n_out))
        if key in _MEMO:
            continue
        rows = _read(cache_file(*key))
        if rows is not None:
            _MEMO[key] = rows
        elif key not in todo:
            todo.append(key)
    if not todo:
        return
    # the other records for the same inputs in the same child: the form and the presets ask for them next
    for _, shape, n_out in list(todo):
        todo += [k for k in ((r, shape, n_out) for r in TV_RECORDS) if k not in todo and k not in _MEMO]
    for key, rows in zip(todo, _child(todo)):  # the child also writes each table's cache file
        _MEMO[key] = rows


def tv_table(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> list:
    """The ``tv-*`` records' ``table``: cached, else computed on the meta device in a child process."""
    if len(in_shape) != 3:
        raise ConfigError(f"model.arch = {cfg.arch!r}: needs image inputs (C, H, W), got shape {tuple(in_shape)}")
    key = (cfg.arch, tuple(in_shape), int(n_out))
    prefetch([key])
    rows = _MEMO[key]
    if isinstance(rows, str):
        raise ConfigError(rows)
    return list(rows)


for _name, _r in TV_RECORDS.items():
    register_arch(
        _name,
        Arch(
            build="admm_core.tv:build",
            table=tv_table,
            splits=_r.splits,
            default_split=lambda names, _d=_r.default_split: _d,
            label=_r.label,
            image_input=True,
            # CIFAR-10's shape, a grey 28×28 (MNIST: VGG's five max-pools need 32×32) and a larger one
            examples=((((3, 32, 32), {}), ((1, 28, 28), {}), ((3, 64, 48), {})))
            if not _r.torchvision.startswith("vgg")
            else (((3, 32, 32), {}), ((1, 32, 32), {}), ((3, 64, 48), {})),
        ),
    )
