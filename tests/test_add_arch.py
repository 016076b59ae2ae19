"""docs/extending.md's examples, as printed there: a new architecture is a module plus one
``register_arch`` line, a new data set a loader plus one ``DatasetSpec`` record; nothing else is edited
(no test case either: tests/test_archs.py takes the record's own), and the run loop, the memory
estimate, the command line and the form's menus (read when drawn) all take them."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import torch
from helpers import cli_call
from test_archs import built_table, check_table

from admm_core import data
from admm_core.data import Dataset, load_digits
from admm_core.errors import ConfigError
from admm_core.models import build_layers
from admm_core.network import train
from admm_core.rundir import read_metrics
from admm_core.spec import archs, datasets
from admm_core.spec.config import ModelConfig, RunConfig
from admm_core.spec.datasets import DatasetSpec
from admm_core.spec.resources import estimate_memory, preflight
from app.dashboard import form as F

DOC = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()


def _blocks(after: str) -> list[str]:
    """The ```python blocks of the docs section whose heading starts with ``after``."""
    section = DOC.split(f"### {after}")[1].split("\n### ")[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def registered(monkeypatch):
    """The two examples registered by their own registry lines (undone after the test)."""
    module_code, arch_line = _blocks("An architecture")
    mod = types.ModuleType("admm_core.tiny_cnn")
    mod.__package__ = "admm_core"
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    before = dict(archs.ARCHS)
    exec(compile(module_code + "\n" + arch_line, "docs/extending.md", "exec"), mod.__dict__)  # the module's end
    (name,) = set(archs.ARCHS) - set(before)

    loader_code, spec_entry = _blocks("A data set")
    ns = {"Dataset": Dataset, "load_digits": load_digits}
    exec(compile(loader_code, "docs/extending.md", "exec"), ns)  # "in admm_core/data.py"
    monkeypatch.setattr(data, "load_digits_images", ns["load_digits_images"], raising=False)
    specs = []
    exec(
        compile(spec_entry, "docs/extending.md", "exec"),
        {"DatasetSpec": DatasetSpec, "register_dataset": specs.append, "_D": "admm_core.data:"},
    )
    (spec,) = specs
    datasets.register_dataset(spec)
    yield name, spec.name
    archs.ARCHS.pop(name, None)
    datasets.DATASETS.pop(spec.name, None)


def cfg_of(arch: str, data_name: str, **kw) -> RunConfig:
    return RunConfig(method="block-admm").replace(
        model__arch=arch, model__width=4, data__name=data_name, data__train_limit=300, data__test_limit=100, **kw
    )


def test_the_data_set_record_matches_its_loader(registered):
    _, ds_name = registered
    ds = data.load(ds_name)
    s = datasets.DATASETS[ds_name]
    assert (s.input_shape, s.n_classes, s.n_train, s.n_test) == (
        ds.input_shape,
        ds.n_classes,
        len(ds.y_train),
        len(ds.y_test),
    )
    assert ds_name in datasets.available("/nonexistent")  # bundled: present whatever the data root
    assert torch.equal(ds.x_train.flatten(1), data.load("digits").x_train)  # the same pixels and split


def test_the_architecture_table_equals_its_built_network(registered):
    arch, _ = registered
    assert check_table(arch) == 2  # the record's default cases (it gives no examples)
    for shape, width in (((1, 8, 8), 4), ((3, 32, 32), 16), ((1, 28, 28), 8)):
        cfg = ModelConfig(arch, (), width=width)
        assert archs.ARCHS[arch].table(shape, cfg, 10) == built_table(shape, cfg, 10)


def test_the_new_pair_trains_one_epoch_with_a_memory_estimate_of_the_real_network(registered, tmp_path):
    arch, ds_name = registered
    cfg = cfg_of(arch, ds_name, train__epochs=1)
    est = preflight(cfg)  # device, data present, split valid, memory: what `admm train` checks first
    summary = train(cfg, tmp_path / "run")
    assert summary["status"] == "finished" and summary["epochs"] == 1
    assert [m["epoch"] for m in read_metrics(tmp_path / "run")] == [0, 1]
    layers = build_layers(cfg.model, (1, 8, 8), 10)
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


def test_the_form_s_menus_read_the_registries_when_drawn(registered):
    """Registered after every module was imported, both are in the Train form's menus; the record's
    label is what the menu shows, and its ``sizes`` say which size fields the form enables."""
    arch, ds_name = registered
    field = {f.path: f for f in F.FIELDS}
    assert arch in F.choices(field["model.arch"]) and F.label_of(field["model.arch"], arch) == "Tiny CNN"
    assert ds_name in F.choices(field["data.name"])
    form = F.default_form()
    assert field["model.hidden"].enabled(form) and not field["model.width"].enabled(form)  # mlp reads hidden
    form["arch"] = arch
    assert field["model.width"].enabled(form) and not field["model.hidden"].enabled(form)
    # the split's menu: the network's split points, then the form's own entries that are not (said wrong)
    assert F.choices(field["model.split"], form) == ["conv1", "conv2", "fc1", "fc2"]
    assert F.choices(field["model.split"], {**form, "split": []}) == ["conv1", "conv2"]
