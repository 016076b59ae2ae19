"""``model.init``: a network's initialisation is a setting — the config, the CLI, the Train
form, presets and run files; old run files load as the framework default."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import cli_call, tiny

from admm_core.blocks import build_blocknet
from admm_core.models import init_layers, mlp_layers, resnet18_layers
from admm_core.spec.config import ConfigError, ModelConfig, RunConfig


def _weights(net):
    return [m for m in net.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]


def test_normal_init_draws_every_weight_with_its_sigma_and_zeroes_the_biases():
    net = build_blocknet(ModelConfig("mlp", (256, 256), init="normal", init_std=0.03), (1, 28, 28), 10, seed=3)
    layers = _weights(net)
    assert len(layers) == 3
    for m in layers:
        w = m.weight.detach()
        # 784·256 draws: the sample std is σ to well under 1%; PyTorch's default is U(±1/√fan_in)
        assert abs(float(w.std()) / 0.03 - 1) < 0.02, float(w.std())
        assert abs(float(w.mean())) < 3e-3
        assert float(w.abs().max()) > 3.5 * 0.03  # a normal, not a uniform of that spread
        assert torch.count_nonzero(m.bias) == 0


def test_default_init_is_the_network_as_built_before_the_setting():
    built = build_blocknet(ModelConfig("mlp", (32, 16)), (64,), 10, seed=5)
    torch.manual_seed(5)
    ref = mlp_layers(64, (32, 16), 10)
    for a, b in zip(built.parameters(), torch.nn.ModuleList(ref.values()).parameters()):
        assert torch.equal(a, b)
    # PyTorch's default: U(±1/√fan_in) weights and nonzero biases
    w = _weights(built)[0]
    assert float(w.weight.detach().abs().max()) <= 1 / 64**0.5
    assert torch.count_nonzero(w.bias) > 0


def test_normal_init_reaches_resnet_convolutions_and_keeps_batchnorm_at_one_and_zero():
    layers = resnet18_layers((3, 32, 32), 10, width=4)
    n = init_layers(layers, "normal", 0.05)
    mods = list(torch.nn.ModuleList(layers.values()).modules())
    convs = [m for m in mods if isinstance(m, torch.nn.Conv2d)]
    assert n == len(convs) + 1  # every convolution and the head's Linear
    big = max(convs, key=lambda m: m.weight.numel())
    assert abs(float(big.weight.detach().std()) / 0.05 - 1) < 0.05
    bns = [m for m in mods if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(torch.all(m.weight == 1) and torch.all(m.bias == 0) for m in bns)


def test_the_same_seed_draws_the_same_normal_network_and_another_seed_does_not():
    cfg = ModelConfig("mlp", (32,), init="normal", init_std=0.1)
    a, b, c = (build_blocknet(cfg, (64,), 10, seed=s) for s in (1, 1, 2))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(_weights(a)[0].weight, _weights(c)[0].weight)


@pytest.mark.parametrize(
    "changes, field",
    [({"init": "xavier"}, "model.init"), ({"init_std": 0}, "model.init_std"), ({"init_std": "0.1"}, "model.init_std")],
)
def test_bad_init_values_name_the_field_and_the_value(changes, field):
    with pytest.raises(ConfigError) as e:
        ModelConfig("mlp", (8,), **changes)
    assert field in str(e.value) and repr(next(iter(changes.values()))) in str(e.value)


def test_a_config_round_trips_its_init_and_an_old_run_file_loads_as_the_default():
    cfg = tiny().replace(model__init="normal", model__init_std=0.02)
    back = RunConfig.from_json(cfg.to_json())
    assert back == cfg and back.model.init == "normal" and back.model.init_std == 0.02
    old = json.loads(tiny().to_json())
    del old["model"]["init"], old["model"]["init_std"]  # config.json as written before init was a setting
    loaded = RunConfig.from_dict(old)
    assert loaded.model.init == "default" and loaded == tiny()


def test_the_cli_sets_the_init_and_a_sigma_alone_means_normal():
    from admm_core.cli import make_parser
    from admm_core.cli.train import config_from_args

    def cfg(*args):
        return config_from_args(make_parser().parse_args(["train", "--preset", "digits-mlp", *args]))

    assert cfg().model.init == "default"
    assert cfg("--init-std", "0.02").model == cfg("--init", "normal", "--init-std", "0.02").model
    assert cfg("--init-std", "0.02").model.init == "normal"
    assert cfg("--init", "normal").model.init_std == ModelConfig().init_std
    rc, _, err = cli_call(["train", "--preset", "digits-mlp", "--init-std", "-1", "--epochs", "1"])
    assert rc == 2 and "model.init_std = -1.0" in err


def test_a_trained_run_records_its_init_and_was_built_with_it(tmp_path):
    from admm_core.network import build, train
    from admm_core.rundir import read_json

    cfg = tiny(method="adam", epochs=1).replace(model__init="normal", model__init_std=0.2)
    train(cfg, tmp_path / "r")
    rec = read_json(tmp_path / "r" / "config.json")
    assert rec["model"]["init"] == "normal" and rec["model"]["init_std"] == 0.2
    sess = build(RunConfig.from_dict(rec))  # the network a resume rebuilds
    first = _weights(sess.net)[0]
    assert torch.count_nonzero(first.bias) == 0 and float(first.weight.detach().std()) > 0.15


def test_the_train_form_shows_the_init_and_round_trips_it():
    from app.dashboard import form as F

    keys = [f.key for f in F.groups()["network"]]
    assert "init" in keys and "init_std" in keys
    cfg = tiny().replace(model__init="normal", model__init_std=0.04)
    got, errors = F.config_from_form(F.form_from_config(cfg))
    assert not errors and got.model.init == "normal" and got.model.init_std == 0.04
    bad = {**F.form_from_config(cfg), "init_std": -0.5}
    got, errors = F.config_from_form(bad)
    assert got is None and "init_std" in errors
