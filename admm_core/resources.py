"""Sanity before a run starts: is the configuration runnable here, and does it fit in memory?

Everything is arithmetic on the :class:`RunConfig`: no network is built and no data set is
loaded, so a configuration with widths ``100000,100000`` is refused in microseconds instead
of allocating 40 GB first. The estimate counts what a run keeps for its whole life (float32):

- ``param_bytes``     Θ, the network's parameters
- ``optimizer_bytes`` the Θ-optimizer's moments (Adam: 2|Θ|; SGD with momentum: |Θ|)
- ``state_bytes``     the method's auxiliary variables: Z_t and U_t (t = 1..T) of every
  training sample for Block-ADMM (plus Adam moments of Z), one minibatch of Z for online
  ADMM, the per-layer Z, A, U, V of the lifted baselines, nothing for backprop
- ``data_bytes``      the training and test sets on the device

Activations of one minibatch are not counted (they are small next to Z/U for the MLPs; for
ResNet-18 they are a few hundred MB per 64 images), so ``check_fits`` is a lower bound on need.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from .config import ModelConfig, RunConfig
from .errors import ConfigError, check
from .methods import METHODS
from .models import ARCHS

FLOAT = 4  # float32 bytes

# name -> (input shape, classes, training samples, test samples) of the real loaders in admm_core.data
DATA_SHAPES: dict[str, tuple[tuple[int, ...], int, int, int]] = {
    "digits": ((64,), 10, 1347, 450),  # 1,797 images, stratified 75/25
    "mnist-5k": ((784,), 10, 4000, 1000),  # 5,000 images, stratified 80/20
    "mnist": ((1, 28, 28), 10, 60000, 10000),
    "fashion-mnist": ((1, 28, 28), 10, 60000, 10000),
    "cifar10": ((3, 32, 32), 10, 50000, 10000),
}

LIFTED = {"admm-closed": 4, "taylor": 2, "dladmm": 2, "bcd": 2}  # see _lifted_bytes


def _numel(shape) -> int:
    return int(math.prod(shape))


def layers_of(cfg: RunConfig) -> list[tuple[str, tuple[int, ...], int]]:
    """[(layer name, output shape, parameter count)] of the network ``cfg`` describes."""
    shape, n_out, _, _ = DATA_SHAPES[cfg.data.name]
    if cfg.model.arch != "mlp":
        check(
            len(shape) == 3,
            "model.arch",
            cfg.model.arch,
            f"needs image inputs (C, H, W); {cfg.data.name} gives {shape}",
        )
    return ARCHS[cfg.model.arch].table(shape, cfg.model, n_out)


def layer_table(arch: str, hidden: tuple[int, ...], shape: tuple[int, ...], n_out: int, width: int = 64) -> list:
    """[(layer name, output shape, parameter count)] of :func:`admm_core.models.build_layers`'s network,
    by arithmetic (the architecture's ``table``; checked against the built network in tests/test_archs.py)."""
    return ARCHS[arch].table(tuple(shape), ModelConfig(arch, tuple(hidden), width=width), n_out)


def split_of(cfg: RunConfig) -> tuple[str, ...]:
    """The split points in effect (the architecture's default when ``model.split`` is None)."""
    if cfg.model.split is not None:
        return tuple(cfg.model.split)
    names = [n for n, _, _ in layers_of(cfg)]
    return ARCHS[cfg.model.arch].default_split(names)


def _samples(cfg: RunConfig) -> tuple[int, int]:
    _, _, n_train, n_test = DATA_SHAPES[cfg.data.name]
    lim_tr, lim_te = cfg.data.train_limit, cfg.data.test_limit
    return (min(n_train, lim_tr) if lim_tr else n_train), (min(n_test, lim_te) if lim_te else n_test)


def estimate_memory(cfg: RunConfig) -> dict:
    """Bytes a run of ``cfg`` keeps resident: {param_bytes, optimizer_bytes, state_bytes, data_bytes, total_bytes}."""
    check(cfg.data.name in DATA_SHAPES, "data.name", cfg.data.name, "no size known for this data set")
    layers = layers_of(cfg)
    shapes = {name: s for name, s, _ in layers}
    n_params = sum(p for _, _, p in layers)
    n, n_test = _samples(cfg)
    method = cfg.build_method()
    settings = dataclass_values(method)
    # Z_t is the output of block t: of the layer before each split point, and of the last layer
    block_out = [_numel(shapes[s]) for s in split_of(cfg) if s in shapes] + [_numel(layers[-1][1])]
    if cfg.method in ("block-admm", "gotmare"):
        # Z and U (Gotmare keeps U allocated at zero), plus Adam moments of Z
        per_row = 2 * sum(block_out) + (2 * sum(block_out) if settings.get("z_optimizer") == "adam" else 0)
        state = n * per_row * FLOAT
    elif cfg.method == "online-admm":
        # one minibatch of Z (and its Adam moments); a scalar dual per block
        rows = min(cfg.train.batch_size, n)
        state = rows * sum(block_out) * FLOAT * (3 if settings.get("z_optimizer") == "adam" else 1) + 8 * len(block_out)
    elif cfg.method in LIFTED:
        state = _lifted_bytes(cfg.method, [_numel(s) for _, s, _ in layers], n)
    elif not METHODS[cfg.method].uses_blocks:
        state = 0  # backprop: no auxiliary variables
    else:
        state = 2 * n * sum(block_out) * FLOAT  # an unknown block method: assume Z and U
    opt = settings.get("theta_optimizer", "adam" if cfg.method == "adam" else "sgd")
    moments = 2 if opt == "adam" else (1 if settings.get("momentum", 0.0) > 0 else 0)
    if cfg.method in LIFTED:
        moments = 0  # closed-form Θ-updates
    shape, _, _, _ = DATA_SHAPES[cfg.data.name]
    data = (n + n_test) * (_numel(shape) * FLOAT + 8)  # float32 inputs + int64 labels
    out = {
        "param_bytes": n_params * FLOAT,
        "optimizer_bytes": moments * n_params * FLOAT,
        "state_bytes": int(state),
        "data_bytes": data,
    }
    out["total_bytes"] = sum(out.values())
    return out


def dataclass_values(method) -> dict:
    return {s["name"]: getattr(method, s["name"]) for s in type(method).settings()}


def _lifted_bytes(method: str, widths: list[int], n: int) -> int:
    """Per-layer variables of the lifted baselines (N rows each): Z_l for every layer, A_l for
    every hidden layer; ADMM (closed form) adds a dual U_l per layer and V_l per hidden layer,
    Taylor / dlADMM one output dual, BCD one output activation."""
    z, a = sum(widths), sum(widths[:-1])
    extra = (sum(widths) + sum(widths[:-1])) if method == "admm-closed" else widths[-1]
    return n * (z + a + extra) * FLOAT


# --- what is available ---------------------------------------------------------------------


def _cgroup_free() -> int | None:
    """memory.max − memory.current of this process's cgroup (v2), when it is limited."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None


def available_memory(device: str = "cpu") -> tuple[int, str]:
    """(free bytes, what was measured) on ``device`` ('cpu' or 'cuda')."""
    if str(device).startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info()
        return int(free), "free GPU memory"
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if free is None:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    cg = _cgroup_free()
    if cg is not None and cg < free:
        return cg, "free memory of this cgroup"
    return free, "available CPU RAM"


def human(n: float | None) -> str:
    """A byte count in binary units (KiB = 1024 B), '—' for none: the one formatter of sizes."""
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def physical_memory() -> int:
    """This machine's RAM in bytes (16 GiB where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def check_fits(cfg: RunConfig, available: tuple[int, str] | None = None) -> dict:
    """Raise ConfigError (estimate and what is available) unless ``cfg`` fits; returns the estimate."""
    from .runs import device_name

    device = device_name(cfg.train.device).split(":")[0]
    est = estimate_memory(cfg)
    free, what = available if available is not None else available_memory(device)
    if est["total_bytes"] > free:
        size = (
            f"model.hidden = {list(cfg.model.hidden)}"
            if cfg.model.arch == "mlp"
            else f"model.arch = {cfg.model.arch!r}"
        )
        n, _ = _samples(cfg)
        raise ConfigError(
            f"{size} on {cfg.data.name} ({n} training samples) with {cfg.method}: needs about "
            f"{human(est['total_bytes'])} (parameters {human(est['param_bytes'])}, optimizer "
            f"{human(est['optimizer_bytes'])}, Z/U {human(est['state_bytes'])}, data {human(est['data_bytes'])}) "
            f"but {what} is {human(free)} on {device}"
        )
    return est


def preflight(cfg: RunConfig, available: tuple[int, str] | None = None, processes: int = 1) -> dict:
    """The CLI's and the worker's form of :func:`admm_core.config.preflight`: raises the first
    problem (ConfigError / DeviceError / DataError naming the field); returns the estimate."""
    from .config import preflight_errors

    problems = preflight_errors(cfg, processes, free=available)
    if problems:
        raise next(iter(problems.values()))
    return estimate_memory(cfg)


__all__ = [
    "DATA_SHAPES",
    "estimate_memory",
    "check_fits",
    "available_memory",
    "preflight",
    "layers_of",
    "layer_table",
    "split_of",
    "human",
    "physical_memory",
]
