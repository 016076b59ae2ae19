"""Sanity before a run starts: is the configuration runnable here, and does it fit in memory?

Everything is arithmetic on the :class:`RunConfig`: no network is built and no data set is
loaded, so a configuration with widths ``100000,100000`` is refused in microseconds instead
of allocating 40 GB first. The estimate counts what a run keeps for its whole life (float32):

- ``param_bytes``     Θ, the network's parameters
- ``optimizer_bytes`` the Θ-optimizer's moments (Adam: 2|Θ|; SGD with momentum: |Θ|)
- ``state_bytes``     the method's auxiliary variables, as the method declares them
  (``estimate_state_bytes`` on its class; ``theta_moments`` gives the optimizer's): Z_t and
  U_t (t = 1..T) of every training sample for Block-ADMM (plus Adam moments of Z), one
  minibatch of Z for online ADMM, the per-layer Z, A, U, V of the lifted baselines, nothing
  for backprop
- ``data_bytes``      the training and test sets on the device

Activations of one minibatch are not counted (they are small next to Z/U for the MLPs; for
ResNet-18 they are a few hundred MB per 64 images), so ``check_fits`` is a lower bound on need.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from ..errors import ConfigError, DataError, DeviceError, check
from . import datasets as data_mod
from . import device as device_mod
from .archs import ARCHS, OWN, OWN_MESSAGE, archs_for, linear_chains, validate_split
from .config import ModelConfig, RunConfig
from .datasets import OWN_DATA
from .methods import METHODS
from .methods.base import FLOAT_BYTES, StateSizes, per_block


class MemoryRefusal(ConfigError):
    """The run does not fit: over what is free (:func:`check_fits`), over the caller's cap
    (:func:`limit_problem`), or its worker processes together (:func:`processes_memory_problem`)."""


def layers_of(cfg: RunConfig) -> list[tuple[str, tuple[int, ...], int]]:
    """[(layer name, output shape, parameter count)] of the network ``cfg`` describes."""
    ds, arch = data_mod.DATASETS[cfg.data.name], ARCHS[cfg.model.arch]
    shape = ds.input_shape
    if arch.image_input and len(shape) != 3:
        images = [n for n, d in data_mod.DATASETS.items() if d.kind == ds.kind and len(d.input_shape) == 3]
        flat = [a.label or n for n, a in ARCHS.items() if a.kind == arch.kind and not a.image_input]
        raise ConfigError(
            f"model.arch = {cfg.model.arch!r}: {arch.label or cfg.model.arch} needs image inputs (channels × height "
            f"× width), and {cfg.data.name} gives {shape}, flat vectors of {math.prod(shape)} numbers. Choose an "
            f"image data set ({', '.join(images)}) or {' or '.join('the ' + a for a in flat) or 'a network for flat inputs'}."
        )
    return arch.table(shape, cfg.model, ds.n_classes)


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


def samples(cfg: RunConfig) -> tuple[int, int]:
    """(training rows, test rows) a run of ``cfg`` uses: its data set's, cut to the sample limits."""
    ds = data_mod.DATASETS[cfg.data.name]
    n_train, n_test = ds.n_train, ds.n_test
    lim_tr, lim_te = cfg.data.train_limit, cfg.data.test_limit
    return (min(n_train, lim_tr) if lim_tr else n_train), (min(n_test, lim_te) if lim_te else n_test)


def batch_note(cfg: RunConfig) -> str | None:
    """What a batch size above the training set does, or None: the minibatches are cut from the
    samples there are, so every epoch is one minibatch of all of them (clamped, and said so)."""
    if cfg.data.name not in data_mod.DATASETS:
        return None
    n, _ = samples(cfg)
    if cfg.train.batch_size <= n:
        return None
    return (
        f"Batch size {cfg.train.batch_size:,} is more than the {n:,} training samples: it is clamped to {n:,}, so "
        "every epoch is one minibatch of all of them (one Θ-step per epoch)"
    )


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity, where the system says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def processes_note(cfg: RunConfig, processes) -> str | None:
    """What more CPU worker processes than cores do, or None: they take turns, so the run is slower
    than with one per core (allowed, and said: the dashboard's warning, the CLI's note under torchrun)."""
    try:
        on_cpu = device_mod.device_name(cfg.train.device) == "cpu"
    except DeviceError:  # a device not here: its own message
        return None
    cores = cpu_cores()
    if not (on_cpu and isinstance(processes, int) and not isinstance(processes, bool) and processes > cores):
        return None
    return (
        f"processes = {processes}: this machine has {cores} CPU core{'s' * (cores != 1)} for the run; "
        f"more processes than cores take turns, so the run is slower than with {cores}"
    )


def estimate_memory(cfg: RunConfig, layers: list | None = None) -> dict:
    """Bytes a run of ``cfg`` keeps resident: {param_bytes, optimizer_bytes, state_bytes, data_bytes, total_bytes}.

    ``layers``: :func:`layers_of` ``cfg`` where the caller has it already."""
    check(cfg.data.name in data_mod.DATASETS, "data.name", cfg.data.name, "no size known for this data set")
    layers = layers_of(cfg) if layers is None else layers
    shapes = {name: s for name, s, _ in layers}
    n_params = sum(p for _, _, p in layers)
    n, n_test = samples(cfg)
    method = cfg.method_settings
    # Z_t is the output of block t: of the layer before each split point, and of the last layer
    block_out = [math.prod(shapes[s]) for s in split_of(cfg) if s in shapes] + [math.prod(layers[-1][1])]
    sizes = StateSizes(n, cfg.train.batch_size, tuple(block_out), tuple(math.prod(s) for _, s, _ in layers))
    state = method.estimate_state_bytes(sizes)  # each method declares its own (methods/base.py)
    moments = method.theta_moments()
    shape = data_mod.DATASETS[cfg.data.name].input_shape
    data = (n + n_test) * (math.prod(shape) * FLOAT_BYTES + 8)  # float32 inputs + int64 labels
    out = {
        "param_bytes": n_params * FLOAT_BYTES,
        "optimizer_bytes": moments * n_params * FLOAT_BYTES,
        "state_bytes": int(state),
        "data_bytes": data,
    }
    out["total_bytes"] = sum(out.values())
    return out


def state_of_cuts(rows: list[dict], split: list[str], cfg: RunConfig) -> int:
    """Bytes of Z/U a run keeps for a model file cut at ``split``: the method's estimate on the
    crossing tensors' sizes (``rows``: ``admm cuts --json``'s table) and the output (one float per class)."""
    shapes = {r["name"]: r["out_shape"] or [0] for r in rows}
    block_out = tuple(math.prod(shapes[s]) for s in split if s in shapes) + (
        data_mod.DATASETS[cfg.data.name].n_classes,
    )
    sizes = StateSizes(samples(cfg)[0], cfg.train.batch_size, block_out, block_out)
    return int(cfg.method_settings.estimate_state_bytes(sizes))


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
        free = device_mod.cuda_free_bytes()
        if free is not None:
            return free, "free GPU memory"
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


def check_fits(cfg: RunConfig, available: tuple[int, str] | None = None, estimate: dict | None = None) -> dict:
    """Raise ConfigError (estimate and what is available) unless ``cfg`` fits; returns the estimate
    (``estimate``: the one :func:`estimate_memory` made of ``cfg`` already, else made here)."""
    device = device_mod.device_name(cfg.train.device).split(":")[0]
    est = estimate_memory(cfg) if estimate is None else estimate
    free, what = available if available is not None else available_memory(device)
    if est["total_bytes"] > free:
        size = ARCHS[cfg.model.arch].describe(cfg.model)
        n, _ = samples(cfg)
        raise MemoryRefusal(
            f"{size} on {cfg.data.name} ({n} training samples) with {cfg.method}: needs about "
            f"{human(est['total_bytes'])} (parameters {human(est['param_bytes'])}, optimizer "
            f"{human(est['optimizer_bytes'])}, Z/U {human(est['state_bytes'])}, data {human(est['data_bytes'])}) "
            f"but {what} is {human(free)} on {device}"
        )
    return est


def preflight(cfg: RunConfig, available: tuple[int, str] | None = None, processes: int = 1) -> dict:
    """The CLI's and the worker launch's form of :func:`preflight_problems`: raises the first
    problem (ConfigError / DeviceError / DataError naming the field); returns the estimate."""
    report = preflight_report(cfg, processes, free=available)
    if report.errors:
        raise next(iter(report.errors.values()))
    return report.estimate


MAX_PROCESSES = 64  # worker processes of one run on one machine (torchrun --nproc-per-node)


def preflight_problems(
    cfg: RunConfig,
    processes: int = 1,
    *,
    datasets: list[str] | None = None,
    free: tuple[int, str] | None = None,
    n_gpus: int | None = None,
) -> dict[str, str]:
    """Every check that can fail before any file is written, as {field: message} ({} = runnable).

    Fields are config paths (``data.name``, ``model.split``, ``train.device``, ``method``,
    ``method_params.<setting>``) plus ``processes`` (the worker processes under torchrun) and
    ``memory``. ``datasets``: the data sets present (default: looked up under the data root);
    ``free``: (bytes, what) available (default: measured); ``n_gpus``: default this machine's.
    :func:`preflight` raises the first of these (the CLI, the worker launch).
    """
    return {k: str(e) for k, e in preflight_errors(cfg, processes, datasets=datasets, free=free, n_gpus=n_gpus).items()}


def preflight_errors(cfg: RunConfig, processes: int = 1, *, datasets=None, free=None, n_gpus=None) -> dict:
    """:func:`preflight_problems` with the exceptions themselves (ConfigError, DataError, DeviceError)."""
    return preflight_report(cfg, processes, datasets=datasets, free=free, n_gpus=n_gpus).errors


@dataclasses.dataclass(frozen=True)
class PreflightReport:
    """What one preflight found: ``errors`` {field: ConfigError / DataError / DeviceError} ({} = runnable)
    and ``estimate``, the memory estimate (:func:`estimate_memory`) made once on the way, or None
    where the network could not be sized (its fields are wrong)."""

    errors: dict
    estimate: dict | None

    @property
    def problems(self) -> dict[str, str]:
        return {k: str(e) for k, e in self.errors.items()}


def preflight_report(
    cfg: RunConfig, processes: int = 1, *, datasets=None, free=None, n_gpus=None, limit=None
) -> PreflightReport:
    """Every check of :func:`preflight_problems`, with the memory estimate it made (once) of ``cfg``:
    the CLI, the worker launch and the dashboard's form all read their figures from here.

    ``limit``: (bytes, how to change it), a cap of the caller's own on the run's memory (the
    dashboard's ``ADMM_DASH_MAX_RUN_GB``), checked before what is free (:func:`limit_problem`);
    ``processes`` CPU workers are checked together against what is free and the cap
    (:func:`processes_memory_problem`)."""
    out: dict[str, Exception] = {}
    if cfg.model.arch == OWN or cfg.data.name == OWN_DATA:  # nothing here to rebuild it from
        return PreflightReport({"model.arch" if cfg.model.arch == OWN else "data.name": ConfigError(OWN_MESSAGE)}, None)

    def attempt(key: str, fn, *args):
        try:
            return fn(*args)
        except (ConfigError, DataError, DeviceError) as e:
            out.setdefault(key, e)
            return None

    device = attempt("train.device", device_mod.device_name, cfg.train.device)
    avail = data_mod.available(cfg.data.root) if datasets is None else datasets
    if cfg.data.name not in avail:
        roots = ", ".join(str(r) for r in data_mod.candidate_roots(cfg.data.root))
        out["data.name"] = DataError(
            f"data.name = {cfg.data.name!r}: not found under the data root (looked in: {roots}); set ADMM_DATA or data.root"
        )
    method_cls = METHODS[cfg.method]
    # a method trains the data sets and architectures of its own kind of run (admm_core.spec.kinds)
    kind, ds, arch = method_cls.kind, data_mod.DATASETS[cfg.data.name], ARCHS[cfg.model.arch]
    if ds.kind != kind:
        sets = ", ".join(data_mod.names_for(kind))
        out["data.name"] = ConfigError(
            f"data.name = {cfg.data.name!r}: a data set of {ds.kind} runs; method {cfg.method!r} trains on: {sets}"
        )
    if arch.kind != kind:
        archs = ", ".join(archs_for(kind))
        out["model.arch"] = ConfigError(
            f"model.arch = {cfg.model.arch!r}: a network of {arch.kind} runs; method {cfg.method!r} trains: {archs}"
        )
    if ds.kind != kind or arch.kind != kind:
        return PreflightReport(out, None)  # the checks below would only restate the mismatch
    shape = ds.input_shape
    layers = attempt("model.arch", layers_of, cfg)
    split = split_of(cfg) if layers is not None else ()
    if layers is not None:
        attempt("model.split", validate_split, cfg.model, [name for name, _, _ in layers], split)
    if method_cls.needs_linear_chain and not arch.linear_chain:  # closed-form layer solves
        out["method"] = ConfigError(
            f"method = {cfg.method!r}: needs a plain MLP (model.arch = {linear_chains(kind)}), not {cfg.model.arch!r}"
        )
    T = len(split) + 1
    method = cfg.method_settings
    if method_cls.uses_blocks and layers is not None:
        for f in dataclasses.fields(method):
            if f.metadata.get("per_block"):
                attempt(f"method_params.{f.name}", per_block, getattr(method, f.name), T, f"{cfg.method}.{f.name}")
    if problem := augment_problem(cfg, shape):
        out["data.augment"] = ConfigError(problem)
    problem = _processes_problem(processes, cfg, method, T, device, n_gpus, device_mod.cuda_device_count)
    if problem:
        out["processes"] = ConfigError(problem)
    estimate = None
    if layers is not None and not any(k == "model.split" or k.startswith("method_params.") for k in out):
        try:  # the one estimate of this preflight: the memory check below and every caller's figures
            estimate = estimate_memory(cfg, layers)
        except (ConfigError, DataError) as e:
            out.setdefault("memory", e)
    if not out and estimate is not None and limit is not None and estimate["total_bytes"] > limit[0]:
        out["memory"] = MemoryRefusal(limit_problem(cfg, estimate, limit))
    if not out:
        attempt("memory", check_fits, cfg, free, estimate)
    if not out and device == "cpu" and processes != 1 and estimate is not None:  # a wrong count: said above
        available = available_memory("cpu") if free is None else free
        if problem := processes_memory_problem(processes, estimate, available, limit):
            out["processes"] = MemoryRefusal(problem)
    return PreflightReport(out, estimate)


def limit_problem(cfg: RunConfig, mem: dict, limit: tuple[int, str]) -> str:
    """Why a run over the caller's cap (``limit``: bytes, how to change it) is refused: its memory
    (``mem``: :func:`estimate_memory`'s) by part, and what makes it smaller. Sizes are written as the
    CLI and the dashboard's form take them (``model.hidden = '128,128'``)."""
    arch = ARCHS[cfg.model.arch]
    what = arch.describe(cfg.model, lambda k, v: repr(",".join(map(str, v)) if isinstance(v, tuple) else v))
    smaller = " or ".join(f"a smaller model.{k}" for k in arch.sizes)
    return (
        f"{what}: this run needs about {human(mem['total_bytes'])} (parameters {human(mem['param_bytes'])}, "
        f"optimizer {human(mem['optimizer_bytes'])}, Z/U {human(mem['state_bytes'])} for {samples(cfg)[0]:,} "
        f"{cfg.data.name} samples, data {human(mem['data_bytes'])}), over the {human(limit[0])} limit ({limit[1]}). "
        f"Use {smaller + ', ' if smaller else ''}fewer training samples or a later split."
    )


def processes_memory_problem(
    n_proc: int, mem: dict, available: tuple[int, str], limit: tuple[int, str] | None = None
) -> str | None:
    """Why ``n_proc`` CPU worker processes would not fit together, or None.

    Each process holds the data set, the network and its optimizer state; the Z/U variables are
    sharded, so they count once in all: N (data + parameters + optimizer) + Z/U, against what is
    ``available`` (bytes, what was measured) and the caller's cap ``limit`` (bytes, how to change it).
    """
    need = n_proc * (mem["data_bytes"] + mem["param_bytes"] + mem["optimizer_bytes"]) + mem["state_bytes"]
    room, what = available if limit is None or available[0] <= limit[0] else (limit[0], f"the limit: {limit[1]}")
    if need <= room:
        return None
    return (
        f"processes = {n_proc}: each process holds the data, the network and its optimizer, so the run needs "
        f"about {human(need)} in all, over the {human(room)} available ({what}); use fewer processes"
    )


def augment_problem(cfg: RunConfig, shape: tuple[int, ...]) -> str | None:
    """Why ``cfg``'s ``data.augment`` cannot run on inputs of ``shape`` (one sample's), or None: the
    preflight's check, and the engine's for a caller of ``network.train`` that skipped the preflight."""
    if not cfg.data.augment:
        return None
    if len(shape) != 3:
        return f"data.augment = true: needs images; {cfg.data.name} gives flat vectors {tuple(shape)}"
    if not METHODS[cfg.method].supports_augment:
        return f"data.augment = true: method {cfg.method!r} does not support augmentation"
    return None


def multi_process_problem(method: str) -> str | None:
    """Why ``method`` cannot run on several processes (its record's ``multi_process``), or None: the
    preflight's refusal and the launcher's (``admm_core.distributed.distribute``) under torchrun."""
    if METHODS[method].multi_process:
        return None
    multi = " and ".join(m for m, c in METHODS.items() if c.multi_process)
    return f"only {multi} run on several processes (method {method!r})"


def _processes_problem(n, cfg, method, T, device, n_gpus, gpu_count) -> str | None:
    """Why ``n`` worker processes cannot run ``cfg``, or None: what the workers would otherwise fail on."""
    ok = isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_PROCESSES
    if not ok:
        return f"processes = {n!r}: must be a whole number from 1 to {MAX_PROCESSES}"
    if n == 1:
        return None
    if problem := multi_process_problem(cfg.method):
        return f"processes = {n}: {problem}"
    try:  # the settings' own check of n processes (block parallelism: its size, the sweep it needs)
        method.check_processes(n, T)
    except ConfigError as e:
        return f"processes = {n}: {e}"
    if device is not None and device != "cpu":
        gpus = gpu_count() if n_gpus is None else n_gpus
        if n > gpus:
            return (
                f"processes = {n}: device = {cfg.train.device!r} runs each process on a GPU of its own and "
                f"this machine has {gpus}; choose device cpu or at most {gpus} processes"
            )
    return None


__all__ = [
    "estimate_memory",
    "check_fits",
    "MemoryRefusal",
    "available_memory",
    "preflight",
    "preflight_problems",
    "preflight_report",
    "PreflightReport",
    "MAX_PROCESSES",
    "augment_problem",
    "multi_process_problem",
    "limit_problem",
    "processes_memory_problem",
    "layers_of",
    "layer_table",
    "split_of",
    "human",
    "physical_memory",
    "cpu_cores",
    "processes_note",
]
