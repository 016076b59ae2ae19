"""torchvision's architectures as records (admm_core.spec.tv, admm_core.tv).

Their tables come from a child process (the asking process never imports torch) and a cache
file; the chains compose to torchvision's own networks; each record trains an epoch by
Block-ADMM on real CIFAR-10 images (the ones over a few seconds are in the slow tier); the
command line and the Train form list them, with split points by name, a block diagram and a
memory estimate. tests/test_archs.py checks every table against the meta-device build too."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import cli_call
from streamlit.testing.v1 import AppTest
from test_archs import built_table

from admm_core.checkpoint import load_checkpoint
from admm_core.errors import ConfigError
from admm_core.network import build, train
from admm_core.rundir import read_metrics
from admm_core.spec import tv
from admm_core.spec.archs import ARCHS, archs_for
from admm_core.spec.config import ModelConfig
from admm_core.spec.datasets import available
from admm_core.spec.presets import preset_config
from admm_core.spec.resources import estimate_memory
from admm_core.status import list_runs

ROOT = Path(__file__).resolve().parents[1]
RECORDS = list(tv.TV_RECORDS)
needs_cifar = pytest.mark.skipif("cifar10" not in available(), reason="CIFAR-10 is not under $ADMM_DATA")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache folder and no table remembered in this process."""
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tv, "_MEMO", {})
    return tmp_path / "cache"


def test_the_table_comes_from_a_child_without_torch_and_equals_an_in_process_meta_build(fresh_cache):
    """A process that imports the spec layer only asks for two tables: it never imports torch, the
    tables land in the cache, equal to this process's meta-device build; read back, no child runs."""
    asks = [("tv-resnet18-cifar", (3, 32, 32), 10), ("tv-mobilenet-v2", (1, 28, 28), 7)]
    code = (
        "import json, sys; from admm_core.spec.archs import ARCHS; from admm_core.spec.config import ModelConfig\n"
        f"asks = {asks!r}\n"
        "rows = [ARCHS[a].table(s, ModelConfig(a), n) for a, s, n in asks]\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'rows': rows}))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["torch"] is False
    for (arch, shape, n), rows in zip(asks, got["rows"]):
        mine = built_table(shape, ModelConfig(arch), n)
        assert [(a, tuple(s), k) for a, s, k in rows] == mine
        assert tv.cache_file(arch, shape, n).exists()

    def no_child(_):
        raise AssertionError("a cached table was computed again")

    tv._child, saved = no_child, tv._child
    try:
        for arch, shape, n in asks:
            assert ARCHS[arch].table(shape, ModelConfig(arch), n) == built_table(shape, ModelConfig(arch), n)
    finally:
        tv._child = saved
    assert f"torch-{torch.__version__.split('+')[0]}" in str(tv.cache_file(*asks[0]))


def test_a_damaged_cache_file_is_computed_again_and_a_too_small_image_is_one_message(fresh_cache):
    key, small = ("tv-resnet34", (3, 32, 32), 10), ("tv-vgg11-bn", (1, 28, 28), 10)
    tv.prefetch([key, small])  # one child
    tv.cache_file(*key).write_text("{not json")
    del tv._MEMO[key]
    assert ARCHS[key[0]].table(key[1], ModelConfig(key[0]), 10) == built_table(key[1], ModelConfig(key[0]), 10)
    assert tv._read(tv.cache_file(*key)) == built_table(key[1], ModelConfig(key[0]), 10)  # written again
    assert not tv.cache_file(*small).exists()  # an error is not cached on disk
    with pytest.raises(ConfigError, match=r"tv-vgg11-bn.*\(1, 28, 28\) are too small.*stage5"):
        ARCHS["tv-vgg11-bn"].table((1, 28, 28), ModelConfig("tv-vgg11-bn"), 10)
    with pytest.raises(ConfigError, match="needs image inputs"):
        ARCHS["tv-resnet18"].table((64,), ModelConfig("tv-resnet18"), 10)


@pytest.mark.parametrize("record", RECORDS)
def test_the_chain_is_torchvision_s_network(record, monkeypatch):
    """The record's layers compose to torchvision's model (eval mode, a real forward), hold all its
    parameters, and nothing is downloaded (weights=None: a download attempt fails the test)."""
    from torchvision.models import _api

    from admm_core.tv import tv_layers, tv_model

    def no_download(*a, **k):
        raise AssertionError("weights were asked for")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_download)
    monkeypatch.setattr(_api.WeightsEnum, "get_state_dict", no_download)
    torch.manual_seed(0)
    for shape in ((3, 32, 32), (1, 40, 36)):
        model = tv_model(record, shape, 10).eval()
        layers = tv_layers(record, model)
        x = torch.rand(2, *shape)
        with torch.no_grad():
            z = x
            for layer in layers.values():
                z = layer(z)
            assert torch.allclose(z, model(x), atol=1e-5)
        n = sum(p.numel() for p in model.parameters())
        assert sum(p.numel() for layer in layers.values() for p in layer.parameters()) == n
        assert [k for k, _, _ in built_table(shape, ModelConfig(record), 10)] == list(layers)
    assert ARCHS[record].default_split(list(layers))[0] in ARCHS[record].splits


@pytest.fixture
def one_thread():
    """One torch thread (a core per test worker; two threads on a loaded 2-core machine took 4× longer)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny(record: str, n: int = 32, epochs: int = 1, batch: int = 16):
    """The record's preset on ``n`` CIFAR-10 training and test images, minibatches of ``batch``."""
    return preset_config(f"cifar10-{record}", "block-admm").replace(
        data__train_limit=n, data__test_limit=n, data__augment=False, train__epochs=epochs, train__batch_size=batch
    )


# Block-ADMM on the record's default split (T = 2), on real images: every block's Θ moved, the per-block
# residuals are recorded and finite, the run reads back on the Runs list and evaluates. All in the slow
# tier (tests/conftest.py): 12-80 s each on 2 cores.
@needs_cifar
@pytest.mark.parametrize("record", RECORDS)
def test_each_record_trains_an_epoch_by_block_admm(record, tmp_path, one_thread):
    epochs = 1
    # one minibatch of 8 moves every block's Θ (a full-resolution ResNet's epoch costs in proportion);
    # tv-resnet18 gets two of 16, for its falling-loss check below
    cfg = tiny(record, n=32, epochs=epochs) if record == "tv-resnet18" else tiny(record, n=8, epochs=epochs, batch=8)
    assert estimate_memory(cfg)["param_bytes"] == 4 * sum(
        p for _, _, p in ARCHS[record].table((3, 32, 32), cfg.model, 10)
    )
    sess = build(cfg)  # the run's own start: seeded, so the same Θ train() starts from
    before = {k: v.clone() for k, v in sess.net.state_dict().items()}
    run = tmp_path / "runs" / record
    summary = train(cfg, run)
    assert summary["status"] == "finished" and summary["epochs"] == epochs
    metrics = read_metrics(run)
    assert [m["epoch"] for m in metrics] == list(range(epochs + 1))
    T = len(ARCHS[record].default_split([])) + 1
    assert len(metrics[-1]["residuals"]) == T and all(math.isfinite(r) for r in metrics[-1]["residuals"])
    after = torch.load(run / "checkpoint.pt", weights_only=True)["net"]
    for t in range(T):
        weights = [k for k in before if k.startswith(f"blocks.{t}.") and k.endswith("weight")]
        assert weights and any(not torch.equal(before[k], after[k]) for k in weights), (record, t)
    listed = {Path(r["dir"]).name: r for r in list_runs(tmp_path / "runs")}
    assert listed[record]["status"]["state"] == "finished"
    assert load_checkpoint(run / "checkpoint.pt", sess)[0] == epochs  # what `admm evaluate` does
    with torch.no_grad():
        m = sess.evaluate()
    assert 0.0 <= m["test_accuracy"] <= 1.0 and math.isfinite(m["test_loss"])
    if record == "tv-resnet18":  # the training loss falls over its two minibatches
        assert metrics[-1]["train_loss"] < metrics[0]["train_loss"], [m["train_loss"] for m in metrics]


def test_admm_archs_lists_them_with_their_split_points():
    rc, out, _ = cli_call(["archs"])
    assert rc == 0
    for record, r in tv.TV_RECORDS.items():
        assert f"{record}: {r.label} (image inputs)" in out
    assert "layers conv1, bn1, relu, layer1, layer2, layer3, layer4, avgpool, fc; split after any of layer1, " in out
    assert (
        "split after any of stem, stage1, stage2, stage3, stage4, stage5, stage6, stage7, head_conv; default stage3"
        in out
    )
    assert set(RECORDS) <= set(archs_for("network"))


def test_the_train_form_lists_them_with_split_points_a_block_diagram_and_a_memory_estimate(tmp_path, monkeypatch):
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"arch": "tv-resnet18-cifar", "data": "cifar10", "preset": "none"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    menu = at.selectbox(key="f.arch")
    assert menu.value == "tv-resnet18-cifar"
    assert {tv.TV_RECORDS[r].label for r in RECORDS} <= set(menu.options)
    split = at.multiselect(key="f.split")
    assert split.value == ["layer2"] and split.options == ["layer1", "layer2", "layer3", "layer4"]
    (chart,) = at.get("graphviz_chart")
    assert chart.proto.spec.count("shape=box") == 2
    caption = " ".join(c.value for c in at.caption)
    assert "11,173,962 parameters" in caption and "Z/U state" in caption, caption
    menu.set_value("tv-mobilenet-v2").run()
    assert not at.exception and at.multiselect(key="f.split").value == ["stage3"]
