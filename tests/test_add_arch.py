"""docs/extending.md's examples, as printed there: a new architecture is a module plus one entry of
``models.ARCHS``, a new data set a loader plus one ``DatasetSpec`` of ``data.DATASETS``; nothing else
is edited, and the run loop, the memory estimate, the command line and the form all take them."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import torch
from helpers import cli_call
from test_archs import built_table

from admm_core import data, models
from admm_core.config import ModelConfig, RunConfig
from admm_core.data import Dataset, DatasetSpec, load_digits
from admm_core.errors import ConfigError
from admm_core.models import Arch
from admm_core.resources import DATA_SHAPES, estimate_memory, preflight
from admm_core.runs import read_metrics, train
from app.dashboard import form as F

DOC = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()


def _blocks(after: str) -> list[str]:
    """The ```python blocks of the docs section whose heading starts with ``after``."""
    section = DOC.split(f"### {after}")[1].split("\n### ")[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def registered(monkeypatch):
    """The two examples registered by their own registry lines (undone after the test)."""
    module_code, arch_entry = _blocks("An architecture")
    mod = types.ModuleType("admm_core.tiny_cnn")
    mod.__package__ = "admm_core"
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    exec(compile(module_code, "docs/extending.md", "exec"), mod.__dict__)
    ns = {"Arch": Arch, "tiny_cnn": mod}
    exec(compile(arch_entry, "docs/extending.md", "exec"), ns)  # ARCHS = {"tiny-cnn": Arch(...)}
    ((name, arch),) = ns["ARCHS"].items()
    monkeypatch.setitem(models.ARCHS, name, arch)

    loader_code, spec_entry = _blocks("A data set")
    ns = {"Dataset": Dataset, "load_digits": load_digits}
    exec(compile(loader_code, "docs/extending.md", "exec"), ns)
    specs = []
    exec(
        compile(spec_entry, "docs/extending.md", "exec"),
        {**ns, "DatasetSpec": DatasetSpec, "register_dataset": specs.append},
    )
    (spec,) = specs
    monkeypatch.setitem(data.DATASETS, spec.name, spec)
    return name, spec.name


def cfg_of(arch: str, data_name: str, **kw) -> RunConfig:
    return RunConfig(method="block-admm").replace(
        model__arch=arch, model__width=4, data__name=data_name, data__train_limit=300, data__test_limit=100, **kw
    )


def test_the_data_set_record_matches_its_loader(registered):
    _, ds_name = registered
    ds = data.load(ds_name)
    assert DATA_SHAPES[ds_name] == (ds.input_shape, ds.n_classes, len(ds.y_train), len(ds.y_test))
    assert ds_name in data.available("/nonexistent")  # bundled: present whatever the data root
    assert torch.equal(ds.x_train.flatten(1), data.load("digits").x_train)  # the same pixels and split


def test_the_architecture_table_equals_its_built_network(registered):
    arch, _ = registered
    for shape, width in (((1, 8, 8), 4), ((3, 32, 32), 16), ((1, 28, 28), 8)):
        cfg = ModelConfig(arch, (), width=width)
        assert models.ARCHS[arch].table(shape, cfg, 10) == built_table(shape, cfg, 10)


def test_the_new_pair_trains_one_epoch_with_a_memory_estimate_of_the_real_network(registered, tmp_path):
    arch, ds_name = registered
    cfg = cfg_of(arch, ds_name, train__epochs=1)
    est = preflight(cfg)  # device, data present, split valid, memory: what `admm train` checks first
    summary = train(cfg, tmp_path / "run")
    assert summary["status"] == "finished" and summary["epochs"] == 1
    assert [m["epoch"] for m in read_metrics(tmp_path / "run")] == [0, 1]
    layers = models.build_layers(cfg.model, (1, 8, 8), 10)
    n_params = sum(p.numel() for layer in layers.values() for p in layer.parameters())
    assert est["param_bytes"] == 4 * n_params
    # the default split (after conv2): Z_1 = conv2's 8×2×2 output, Z_2 = the 10 outputs; Z and U per sample
    assert est["state_bytes"] == 2 * 300 * (8 * 2 * 2 + 10) * 4
    assert est["data_bytes"] == (300 + 100) * (64 * 4 + 8)


def test_a_flat_data_set_is_refused_for_the_image_architecture(registered):
    arch, _ = registered
    with pytest.raises(ConfigError, match="needs image inputs.*digits gives \\(64,\\)"):
        estimate_memory(cfg_of(arch, "digits"))


def test_the_command_line_and_the_form_list_them(registered):
    arch, ds_name = registered
    rc, out, _ = cli_call(["archs"])
    assert rc == 0 and f"{arch}: Tiny CNN (image inputs)" in out and "conv1, conv2, head" in out
    rc, out, _ = cli_call(["datasets"])
    assert rc == 0 and f"{ds_name}: available; input (1, 8, 8), 10 classes, 1347 / 450 samples" in out
    rc, _, err = cli_call(["train", "--arch", "no-such-arch"])
    assert rc == 2 and f"'{arch}'" in err  # argparse lists the registered choices
    assert F.split_options(arch, ()) == (["conv1", "conv2"], ["conv2"])
    blocks = F.describe_blocks(arch, (), ["conv2"], ds_name)  # the form's diagram, at the default width 64
    assert [(b["layers"], b["out"]) for b in blocks] == [(["conv1", "conv2"], 128 * 2 * 2), (["head"], 10)]
