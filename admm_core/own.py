"""Your own network, trained by any method of the registry: the Python API (docs/your-own-network.md).

    from admm_core import own
    run = own.train(net, split_after=["conv2"], data="mnist", method="block-admm", epochs=3)
    run.dir, run.summary                      # an ordinary run directory: Runs, Compare, TensorBoard
    own.resume(net, run.dir)                  # after a kill: the same module again
    own.evaluate(net, run.dir)                # its checkpoint on the test and training sets

**The chain.** ``net``'s top-level children (``net.named_children()``, in the order they were
assigned) are the network's layers, ``layer_1 … layer_L``; the network must compute
``layer_L ∘ … ∘ layer_1`` and nothing else, as an ``nn.Sequential`` does. The one operation
allowed between two children is a flatten to (N, −1) (``torch.flatten(x, 1)``, as torchvision's
ResNets and VGGs do before their classifier): the chain puts an ``nn.Flatten`` in front of that
child. The rule is checked, not assumed: ``net`` runs once on two training samples (in eval
mode, no gradient) with hooks on its children, and a child that is not called, is called twice,
runs out of order, or receives anything but its predecessor's output (a skip connection, a
branch, another operation) is named in a :class:`ConfigError`, as is a forward that changes the
last child's output.

**Blocks.** ``split_after`` names children; a block ends after each (block_t maps Z_{t−1} to
Z_t, as for the built-in networks: :class:`admm_core.blocks.BlockNet`, which holds ``net``'s own
child modules, so ``net`` itself is the trained network when the run ends).

**Data.** A registered data set's name (``"mnist"``; ``train_limit`` / ``test_limit`` apply), a
pair of tensors ``(x, y)`` (y: class indices), or a map-style ``torch.utils.data.Dataset`` whose
items are ``(x, y)``; tensors and Datasets need ``test_data`` in the same form.

**The run.** The config is an ordinary :class:`RunConfig` (``model.arch = 'own'``, and
``data.name = 'own'`` for tensors or a Dataset), trained by :class:`admm_core.network.NetworkTask`
through the one run loop: the same metrics lines, checkpoint, status, summary, TensorBoard files.
Besides them: ``model.json`` (the chain: each child's class, output shape and parameters; the
blocks) and, at the end, ``weights.safetensors`` (``net.state_dict()``, its own keys: load it into
a fresh instance with ``safetensors.torch.load_file``). Nothing is ever unpickled.
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


# --- the chain -----------------------------------------------------------------------------------


class _Flatten(nn.Module):
    """A child that the network's forward fed with its predecessor's output flattened to (N, −1)."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.flatten, self.layer = nn.Flatten(), layer

    def forward(self, x):
        return self.layer(self.flatten(x))


def chain(model: nn.Module, probe: torch.Tensor) -> tuple[OrderedDict, list[dict]]:
    """``model``'s top-level children as the named layers of a chain, checked on ``probe`` (a
    batch of inputs) against ``model``'s own forward; (layers, one row per layer for model.json).
    A :class:`ConfigError` names the child that breaks the rule (module docstring)."""
    what = type(model).__name__
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model: {what} is not a torch.nn.Module")
    children = list(model.named_children())
    if not children:
        raise ConfigError(f"model: {what} has no child modules to make a chain of (e.g. an nn.Sequential)")
    seen: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    inputs: dict[str, object] = {}

    def pre(name):
        def hook(mod, args):
            inputs[name] = args[0].detach().clone() if len(args) == 1 and torch.is_tensor(args[0]) else args

        return hook

    def post(name):
        def hook(mod, args, out):
            seen.append((name, inputs.get(name), out.detach().clone() if torch.is_tensor(out) else out))

        return hook

    param = next(model.parameters(), None)
    probe = probe.to(param.device) if param is not None else probe  # where the user's module is
    handles = [h for n, c in children for h in (c.register_forward_pre_hook(pre(n)), c.register_forward_hook(post(n)))]
    was = model.training
    try:
        model.eval()  # batch norm on running statistics, no dropout: the same function twice
        with torch.no_grad():
            out = model(probe)
    except Exception as e:  # noqa: BLE001 - the user's forward can fail in any way
        raise ConfigError(f"model: {what}.forward failed on two training samples ({type(e).__name__}: {e})") from None
    finally:
        for h in handles:
            h.remove()
        model.train(was)
    names = [n for n, _ in children]
    called = [n for n, _, _ in seen]
    for n, c in children:
        k = called.count(n)
        if k != 1:
            how = "is not called by" if k == 0 else f"is called {k} times by"
            raise ConfigError(
                f"model: child {n!r} ({type(c).__name__}) {how} {what}.forward: every top-level child must be "
                f"one layer of the chain, called once, in order (children: {', '.join(names)})"
            )
    if called != names:
        raise ConfigError(
            f"model: {what}.forward calls its children in the order {', '.join(called)}, not in the order they "
            f"were assigned ({', '.join(names)}); the chain follows the assignment order"
        )
    layers, rows, prev, prev_name = OrderedDict(), [], probe, "the input"
    for (n, c), (_, inp, o) in zip(children, seen):
        flat = torch.is_tensor(prev) and prev.dim() > 2 and _same(inp, prev.flatten(1))
        if not (_same(inp, prev) or flat):
            raise ConfigError(
                f"model: child {n!r} ({type(c).__name__}) does not take the output of {prev_name} as its input: "
                f"{what}.forward does something between them (a skip connection, a branch, another operation); "
                "only a flatten to (N, -1) may come between two children"
            )
        if not torch.is_tensor(o):
            raise ConfigError(f"model: child {n!r} ({type(c).__name__}) returns {type(o).__name__}, not a tensor")
        layers[n] = _Flatten(c) if flat and not _same(inp, prev) else c
        rows.append(
            {
                "name": n,
                "class": type(c).__name__,
                "out_shape": list(o.shape[1:]),
                "params": sum(p.numel() for p in c.parameters()),
                "flatten_before": layers[n] is not c,
            }
        )
        prev, prev_name = o, f"child {n!r}"
    if not _same(out, prev):
        raise ConfigError(
            f"model: {what}.forward does something after its last child {names[-1]!r} (its output differs from "
            "that child's): the chain's output is the last child's"
        )
    return layers, rows


def _same(a, b) -> bool:
    return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)


def check_split(rows: list[dict], split_after: Sequence[str]) -> tuple[str, ...]:
    """``split_after`` checked against the chain: every bad name at once, with the names allowed."""
    if isinstance(split_after, str):
        split_after = [split_after]
    names = [r["name"] for r in rows]
    allowed = ", ".join(names[:-1]) or "none: the network has one child"
    split = tuple(split_after)
    bad = [f"{s!r}: no such child" for s in split if s not in names]
    bad += [f"{s!r}: the last child (a split must fall before it)" for s in split if s == names[-1]]
    if len(set(split)) != len(split):
        bad.append("a name appears twice")
    if not bad and [names.index(s) for s in split] != sorted(names.index(s) for s in split):
        bad.append("the names must follow the order of the children")
    if bad:
        raise ConfigError(f"split_after = {list(split)!r}: {'; '.join(bad)} (children to split after: {allowed})")
    return split


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

    def __init__(self, cfg: RunConfig, model: nn.Module, net: BlockNet, dataset: data_mod.Dataset, rows: list[dict]):
        super().__init__(cfg)
        self.model, self.net, self.dataset, self.rows = model, net, dataset, rows

    def setup(self, run_dir, status, resumed: bool) -> float:
        from .device import machine
        from .network import build

        self.sess = build(self.cfg, net=self.net, dataset=self.dataset)
        status.update(force=True, machine=machine(self.sess.device))
        if self.lead and not resumed:
            write_json(
                Path(run_dir) / MODEL_FILE,
                {
                    "class": type(self.model).__name__,
                    "layers": self.rows,
                    "split": list(self.cfg.model.split),
                    "blocks": self.net.block_layers,
                },
            )
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
    """Train ``model`` split after ``split_after`` on ``data`` by ``method`` into a new run directory.

    ``settings``: the method's settings (``admm methods`` lists them; checked by its record);
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
    layers, rows = chain(model, dataset.x_train[:2])
    split = check_split(rows, split_after)
    cfg = RunConfig(
        method=method,
        data=DataConfig(data_name, root=data_root, train_limit=train_limit, test_limit=test_limit),
        model=ModelConfig(OWN, hidden=(), split=split),
        train=TrainConfig(**train_settings),
        method_params=dict(settings or {}),
    )
    net = BlockNet(layers, split)
    if METHODS[cfg.method].needs_linear_chain:  # the lifted baselines' closed-form solves: refused before any file
        from .methods.lifted import mlp_linears

        mlp_linears(net, cfg.method)
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", name or type(model).__name__.lower()).strip("-.")[:60] or "own"
    run_dir = Path(out) if out else unique_run_dir(f"{label}-{cfg.method}-s{cfg.train.seed}", runs_dir)
    task = OwnTask(cfg, model, net, dataset, rows)
    summary = run_loop(task, run_dir, should_stop=should_stop, on_progress=on_progress)
    return Run(run_dir, summary)


def _reopen(model: nn.Module, run_dir: Path, data, test_data) -> tuple[RunConfig, OrderedDict, list, data_mod.Dataset]:
    """A run of the API with ``model`` handed again: (config, layers, model.json rows, data), checked."""
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
    layers, rows = chain(model, dataset.x_train[:2])
    recorded = (read_json(run_dir / MODEL_FILE, {}) or {}).get("layers", [])
    now = [(r["name"], r["class"], r["params"]) for r in rows]
    was = [(r.get("name"), r.get("class"), r.get("params")) for r in recorded]
    if recorded and now != was:
        diff = next(
            (f"{a} against the run's {b}" for a, b in zip(now, was) if a != b),
            f"{len(now)} children, the run's {len(was)}",
        )
        raise ConfigError(f"model: not the run's network (child, class, parameters): {diff}")
    return cfg, layers, rows, dataset


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
    cfg, layers, rows, dataset = _reopen(model, run_dir, data, test_data)
    if run_busy(run_dir):
        raise RunBusy(f"run_dir = {str(run_dir)!r}: being trained already; stop it first")
    if epochs:
        cfg = cfg.replace(train__epochs=epochs)
        write_text_atomic(run_dir / "config.json", cfg.to_json())
    task = OwnTask(cfg, model, BlockNet(layers, cfg.model.split), dataset, rows)
    summary = run_loop(task, run_dir, resume=True, should_stop=should_stop, on_progress=on_progress)
    return Run(run_dir, summary)


def evaluate(model: nn.Module, run_dir: str | Path, data=None, *, test_data=None) -> dict:
    """What ``admm evaluate`` gives for the workbench's networks: the run's checkpoint loaded into
    ``model`` (the same network), measured on its test set and training set: {"epoch", metrics…}."""
    from .checkpoint import load_checkpoint
    from .network import build

    run_dir = Path(run_dir)
    cfg, layers, _, dataset = _reopen(model, run_dir, data, test_data)
    sess = build(cfg, net=BlockNet(layers, cfg.model.split), dataset=dataset)
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
    """A run's model.json (its chain and blocks), {} when it has none."""
    return json.loads((Path(run_dir) / MODEL_FILE).read_text()) if (Path(run_dir) / MODEL_FILE).exists() else {}
