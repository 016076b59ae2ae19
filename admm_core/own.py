"""Your own network, trained by any method of the registry: the Python API (docs/your-own-network.md).

    from admm_core import own
    run = own.train(net, split_after=["conv2"], data="mnist", method="block-admm", epochs=3)
    run.dir, run.summary                      # an ordinary run directory: Runs, Compare, TensorBoard
    own.resume(net, run.dir)                  # after a kill: the same module again
    own.evaluate(net, run.dir)                # its checkpoint on the test and training sets

**Blocks.** ``split_after`` names cut points on ``net``'s traced graph (:mod:`admm_core.cuts`):
a module path (``"layer2.1"``: after that module's last operation) or a graph node name; exactly
one tensor must cross each cut (block_t maps Z_{t−1} to Z_t and nothing else passes). ``admm cuts``
or :func:`cut_table` lists a model's valid cut points with their shapes. The blocks hold ``net``'s
own module objects, so ``net`` itself is the trained network when the run ends. A submodule that
torch.fx cannot trace (control flow on the data) can be kept whole: ``leaf_modules=["path"]``.

**Data.** A registered data set's name (``"mnist"``; ``train_limit`` / ``test_limit`` apply), a
pair of tensors ``(x, y)`` (y: class indices), or a map-style ``torch.utils.data.Dataset`` whose
items are ``(x, y)``; tensors and Datasets need ``test_data`` in the same form.

**The run.** The config is an ordinary :class:`RunConfig` (``model.arch = 'own'``, and
``data.name = 'own'`` for tensors or a Dataset), trained by :class:`admm_core.network.NetworkTask`
through the one run loop: the same metrics lines, checkpoint, status, summary, TensorBoard files.
Besides them: ``model.json`` (the network's children, the cut points and what each block
holds) and, at the end, ``weights.safetensors`` (``net.state_dict()``, its own keys: load it into a
fresh instance with ``safetensors.torch.load_file``). Nothing is ever unpickled.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import data as data_mod
from .blocks import BlockNet
from .cuts import cut, table, trace
from .errors import ConfigError
from .loop import run_loop
from .network import NetworkTask
from .rundir import read_json, unique_run_dir, write_atomic, write_json, write_text_atomic
from .spec.archs import OWN
from .spec.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from .spec.datasets import DATASETS, OWN_DATA
from .spec.methods import METHODS
from .status import RunBusy, run_busy

MODEL_FILE, WEIGHTS_FILE = "model.json", "weights.safetensors"


@dataclass(frozen=True)
class Run:
    """A finished (or stopped, diverged) run: its directory and summary (summary.json's)."""

    dir: Path
    summary: dict


# --- the blocks ----------------------------------------------------------------------------------


def children_rows(model: nn.Module) -> list[dict]:
    """``model``'s top-level children (name, class, parameters): what identifies the network when
    a run is resumed with a module handed again."""
    return [
        {"name": n, "class": type(c).__name__, "params": sum(p.numel() for p in c.parameters())}
        for n, c in model.named_children()
    ]


def split_model(
    model: nn.Module, probe: torch.Tensor, split_after: Sequence[str], leaf_modules: Sequence[str] = ()
) -> tuple[OrderedDict, list[dict]]:
    """``model`` traced and cut after each of ``split_after`` (module paths or graph node names,
    :mod:`admm_core.cuts`), checked on ``probe`` (two training samples): (the blocks, one row per
    block for model.json). One :class:`ConfigError` names what is wrong."""
    graph = trace(model, probe, leaf_modules)
    return cut(graph, split_after)


def cut_table(model: nn.Module, probe: torch.Tensor, leaf_modules: Sequence[str] = (), everything: bool = False):
    """``model``'s cut points on inputs like ``probe``: rows (name, other names, output shape per
    sample, valid, why not), in the order its forward runs them (what ``admm cuts`` prints)."""
    return table(trace(model, probe, leaf_modules), everything)


def model_info(model: nn.Module, split: Sequence[str], leaf_modules: Sequence[str], block_rows: list[dict]) -> dict:
    """model.json: the network's class and top-level children, the cut points, the modules kept
    whole, and per block what it holds and its output shape."""
    return {
        "class": type(model).__name__,
        "layers": children_rows(model),
        "split": list(split),
        "leaf_modules": list(leaf_modules),
        "blocks": [r["modules"] for r in block_rows],
        "block_rows": block_rows,
    }


def blocknet(blocks: OrderedDict) -> BlockNet:
    """The engine's :class:`BlockNet` over the traced blocks (one "layer" each, cut after all but the last)."""
    return BlockNet(blocks, tuple(blocks)[:-1])


# --- the data ------------------------------------------------------------------------------------


def _tensors(data, field: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(x float32, y int64) from a pair of tensors or a map-style Dataset of (x, y) items."""
    if isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = data
    elif isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__"):
        if len(data) == 0:
            raise ConfigError(f"{field}: the Dataset is empty")
        items = [data[i] for i in range(len(data))]
        if not all(isinstance(it, (tuple, list)) and len(it) == 2 for it in items[:1]):
            raise ConfigError(f"{field}: a Dataset's items must be (x, y) pairs, got {type(items[0]).__name__}")
        x = torch.stack([torch.as_tensor(it[0]) for it in items])
        y = torch.as_tensor([int(it[1]) for it in items])
    else:
        raise ConfigError(
            f"{field}: a registered data set's name, a pair of tensors (x, y) or a map-style Dataset of (x, y) "
            f"items, got {type(data).__name__}"
        )
    x, y = torch.as_tensor(x), torch.as_tensor(y)
    if not x.is_floating_point() or y.dim() != 1 or y.is_floating_point() or len(x) != len(y) or len(x) == 0:
        raise ConfigError(
            f"{field}: x must be floats (N, ...) and y N class indices (integers); got x {tuple(x.shape)} "
            f"{x.dtype}, y {tuple(y.shape)} {y.dtype}"
        )
    return x.float(), y.long()


def dataset_of(data, test_data, train_limit=None, test_limit=None, root=None) -> tuple[data_mod.Dataset, str]:
    """The run's :class:`admm_core.data.Dataset` and its ``data.name`` (the set's, or 'own')."""
    if isinstance(data, str):
        if data not in DATASETS:
            raise ConfigError(f"data = {data!r}: no such registered data set (choose from {sorted(DATASETS)})")
        if test_data is not None:
            raise ConfigError("test_data: a registered data set brings its own test set; leave test_data out")
        return data_mod.load(data, root, train_limit=train_limit, test_limit=test_limit), data
    if test_data is None:
        raise ConfigError("test_data: needed when data is tensors or a Dataset (the metrics' test set)")
    (x, y), (xt, yt) = _tensors(data, "data"), _tensors(test_data, "test_data")
    if x.shape[1:] != xt.shape[1:]:
        raise ConfigError(
            f"test_data: samples of shape {tuple(xt.shape[1:])}, the training data's are {tuple(x.shape[1:])}"
        )
    n_classes = int(max(y.max(), yt.max())) + 1
    return data_mod.Dataset(OWN_DATA, x, y, xt, yt, n_classes).limit(train_limit, test_limit), OWN_DATA


# --- the run -------------------------------------------------------------------------------------


class OwnTask(NetworkTask):
    """:class:`NetworkTask` with the network and data handed over: the same loop, checkpoint and
    metrics; model.json when the run starts, weights.safetensors when it finishes."""

    def __init__(self, cfg: RunConfig, model: nn.Module, net: BlockNet, dataset: data_mod.Dataset, info: dict):
        super().__init__(cfg)
        self.model, self.net, self.dataset, self.info = model, net, dataset, info

    def setup(self, run_dir, status, resumed: bool) -> float:
        from .device import machine
        from .network import build

        self.sess = build(self.cfg, net=self.net, dataset=self.dataset)
        status.update(force=True, machine=machine(self.sess.device))
        if self.lead and not resumed:
            write_json(Path(run_dir) / MODEL_FILE, self.info)
        return 0.0

    def finished(self, run_dir) -> None:
        if not self.lead:
            return
        from safetensors.torch import save

        state = {k: v.detach().cpu().clone().contiguous() for k, v in self.model.state_dict().items()}
        write_atomic(Path(run_dir) / WEIGHTS_FILE, lambda f: f.write(save(state)))


def train(
    model: nn.Module,
    split_after: Sequence[str],
    data,
    method: str = "block-admm",
    *,
    test_data=None,
    leaf_modules: Sequence[str] = (),
    source: dict | None = None,
    settings: dict | None = None,
    train_limit: int | None = None,
    test_limit: int | None = None,
    data_root: str | None = None,
    out: str | Path | None = None,
    runs_dir: str | Path | None = None,
    name: str | None = None,
    on_progress: Callable[[float, dict | None], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    **train_settings,
) -> Run:
    """Train ``model`` cut after ``split_after`` on ``data`` by ``method`` into a new run directory.

    ``split_after``: cut points (module paths such as ``"layer2.1"`` or graph node names; ``[]``:
    one block); ``leaf_modules``: module paths torch.fx must not trace into (kept whole);
    ``source``: where the module came from ({file, name, sha256}: ``admm train --model``), kept in
    model.json so that the run can be resumed from the command line;

    ``settings``: the method's settings (``admm methods`` lists them; checked by its record), over
    the method's defaults, which are the recipe measured across the zoo of others' networks (block-admm
    and gotmare on the minibatch schedule, not Alg. 1's sweep); ``{"recipe": "paper"}`` gives Alg. 1 /
    Alg. 2 as printed;
    ``train_settings``: any field of the config's ``train`` part (``epochs``, ``batch_size``,
    ``loss``, ``seed``, ``device``, ``eval_every``, ``lr_schedule``, ``tensorboard`` …). ``out``:
    the run directory (default: a new ``<runs_dir>/<time>-<name>-<method>-s<seed>``, ``runs_dir``
    default ``$ADMM_RUNS`` or ./runs). Returns the :class:`Run`. Bad values raise one ConfigError.
    """
    bad = sorted(set(train_settings) - {f.name for f in dataclasses.fields(TrainConfig)})
    if bad:
        raise ConfigError(
            f"{', '.join(bad)}: not a train setting (choose from {[f.name for f in dataclasses.fields(TrainConfig)]})"
        )
    dataset, data_name = dataset_of(data, test_data, train_limit, test_limit, data_root)
    split = (split_after,) if isinstance(split_after, str) else tuple(split_after)
    blocks, block_rows = split_model(model, dataset.x_train[:2], split, leaf_modules)
    info = model_info(model, split, leaf_modules, block_rows)
    if source:
        info["source"] = dict(source)
    cfg = RunConfig(
        method=method,
        data=DataConfig(data_name, root=data_root, train_limit=train_limit, test_limit=test_limit),
        model=ModelConfig(OWN, hidden=(), split=split),
        train=TrainConfig(**train_settings),
        method_params=dict(settings or {}),
    )
    net = blocknet(blocks)
    if METHODS[cfg.method].needs_linear_chain:  # the lifted baselines' closed-form solves: refused before any file
        from .methods.lifted import mlp_linears

        mlp_linears(net, cfg.method)
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", name or type(model).__name__.lower()).strip("-.")[:60] or "own"
    run_dir = Path(out) if out else unique_run_dir(f"{label}-{cfg.method}-s{cfg.train.seed}", runs_dir)
    task = OwnTask(cfg, model, net, dataset, info)
    summary = run_loop(task, run_dir, should_stop=should_stop, on_progress=on_progress)
    return Run(run_dir, summary)


def _reopen(model: nn.Module, run_dir: Path, data, test_data) -> tuple[RunConfig, BlockNet, dict, data_mod.Dataset]:
    """A run of the API with ``model`` handed again: (config, its blocks, model.json, data), checked."""
    d = read_json(run_dir / "config.json")
    if not isinstance(d, dict):
        raise ConfigError(f"run_dir = {str(run_dir)!r}: no readable config.json there")
    cfg = RunConfig.from_dict(d)
    if cfg.model.arch != OWN:
        raise ConfigError(f"run_dir = {str(run_dir)!r}: not a run of the Python API (use admm train --resume)")
    if cfg.data.name != OWN_DATA and data is not None:
        raise ConfigError(f"data: the run trained on the registered set {cfg.data.name!r}; leave data out")
    if cfg.data.name == OWN_DATA and data is None:
        raise ConfigError("data: the run trained on tensors or a Dataset you passed; pass the same data again")
    src = cfg.data.name if data is None else data
    dataset, _ = dataset_of(src, test_data, cfg.data.train_limit, cfg.data.test_limit, cfg.data.root)
    recorded_info = read_json(run_dir / MODEL_FILE, {}) or {}
    recorded = recorded_info.get("layers", [])
    now = [(r["name"], r["class"], r["params"]) for r in children_rows(model)]
    was = [(r.get("name"), r.get("class"), r.get("params")) for r in recorded]
    if recorded and now != was:
        diff = next(
            (f"{a} against the run's {b}" for a, b in zip(now, was) if a != b),
            f"{len(now)} children, the run's {len(was)}",
        )
        raise ConfigError(f"model: not the run's network (child, class, parameters): {diff}")
    leaves = tuple(recorded_info.get("leaf_modules", ()))
    blocks, block_rows = split_model(model, dataset.x_train[:2], cfg.model.split or (), leaves)
    return cfg, blocknet(blocks), model_info(model, cfg.model.split or (), leaves, block_rows), dataset


def resume(
    model: nn.Module,
    run_dir: str | Path,
    data=None,
    *,
    test_data=None,
    epochs: int | None = None,
    on_progress: Callable[[float, dict | None], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Run:
    """Continue the run in ``run_dir`` from its last checkpoint, with ``model`` (the same network:
    the same children, of the same shapes). Its config comes from ``run_dir``; ``data`` again
    only where the run trained on tensors or a Dataset; ``epochs``: a new length."""
    run_dir = Path(run_dir)
    cfg, net, info, dataset = _reopen(model, run_dir, data, test_data)
    if run_busy(run_dir):
        raise RunBusy(f"run_dir = {str(run_dir)!r}: being trained already; stop it first")
    if epochs:
        cfg = cfg.replace(train__epochs=epochs)
        write_text_atomic(run_dir / "config.json", cfg.to_json())
    task = OwnTask(cfg, model, net, dataset, info)
    summary = run_loop(task, run_dir, resume=True, should_stop=should_stop, on_progress=on_progress)
    return Run(run_dir, summary)


def evaluate(model: nn.Module, run_dir: str | Path, data=None, *, test_data=None) -> dict:
    """What ``admm evaluate`` gives for the workbench's networks: the run's checkpoint loaded into
    ``model`` (the same network), measured on its test set and training set: {"epoch", metrics…}."""
    from .checkpoint import load_checkpoint
    from .network import build

    run_dir = Path(run_dir)
    cfg, net, _, dataset = _reopen(model, run_dir, data, test_data)
    sess = build(cfg, net=net, dataset=dataset)
    epoch, _ = load_checkpoint(run_dir / "checkpoint.pt", sess)
    with torch.no_grad():
        return {"epoch": epoch, **sess.evaluate()}


def load_weights(model: nn.Module, run_dir: str | Path) -> nn.Module:
    """Load a finished run's ``weights.safetensors`` into ``model`` (a fresh instance of the
    network; safetensors: no code runs) and return it."""
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(Path(run_dir) / WEIGHTS_FILE)))
    return model


def describe(run_dir: str | Path) -> dict:
    """A run's model.json (the network's children, its cut points and blocks), {} when it has none."""
    return json.loads((Path(run_dir) / MODEL_FILE).read_text()) if (Path(run_dir) / MODEL_FILE).exists() else {}
