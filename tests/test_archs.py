"""The architecture records (admm_core.models.ARCHS): each one's torch-free ``table`` (what the memory
estimate and the dashboard's block diagram read) equals the network its ``build`` makes, built on
torch's meta device (no memory, no compute), for every architecture and several widths and depths."""

from __future__ import annotations

import pytest
import torch

from admm_core.config import ModelConfig, RunConfig
from admm_core.models import ARCHS, build_layers, layer_names
from admm_core.resources import DATA_SHAPES, estimate_memory

CASES = {
    "mlp": [((64,), ModelConfig("mlp", ())), ((1, 28, 28), ModelConfig("mlp", (300, 100))), ((3, 8, 8), ModelConfig("mlp", (7,) * 19))],
    "resnet18": [((3, 32, 32), ModelConfig("resnet18", (), width=w)) for w in (8, 16, 64)] + [((1, 28, 28), ModelConfig("resnet18", (), width=16))],
    # DeepFacto's face backbone: LFWA's 64×64 faces at two widths, and sides that stride 2 rounds up (36 → 18 → 9 → 5)
    "face-resnet18s": [((3, 64, 64), ModelConfig("face-resnet18s", (), width=w)) for w in (4, 16)]
    + [((3, 36, 36), ModelConfig("face-resnet18s", (), width=8))],
}  # fmt: skip


def built_table(shape, cfg, n_out):
    """[(name, output shape, parameters)] of the layers built on the meta device, by a forward pass."""
    with torch.device("meta"):
        layers = build_layers(cfg, shape, n_out)
        x = torch.empty(2, *shape)
        out = []
        for name, layer in layers.items():
            x = layer.train()(x)
            out.append((name, tuple(x.shape[1:]), sum(p.numel() for p in layer.parameters())))
    return out


def test_every_architecture_has_cases():
    assert set(CASES) == set(ARCHS)


@pytest.mark.parametrize("arch,case", [(a, i) for a, cs in CASES.items() for i in range(len(cs))])
def test_table_equals_the_built_network(arch, case):
    shape, cfg = CASES[arch][case]
    for n_out in (10, 3):
        table = ARCHS[arch].table(shape, cfg, n_out)
        assert table == built_table(shape, cfg, n_out)
        assert [n for n, _, _ in table] == layer_names(cfg)


@pytest.mark.parametrize("width", [16, 64])
def test_memory_estimate_follows_the_resnet_width(width):
    """The estimate counted ResNet-18 at width 64 whatever ``model.width`` said (the CPU preset is 16)."""
    cfg = RunConfig().replace(model__arch="resnet18", model__width=width, data__name="cifar10", data__train_limit=100)
    shape, n_out, _, _ = DATA_SHAPES["cifar10"]
    params = sum(p for _, _, p in built_table(shape, cfg.model, n_out))
    est = estimate_memory(cfg)
    assert est["param_bytes"] == 4 * params
    # Z_1 after conv3_x (2w channels at 16×16) and Z_2 the 10 logits, with their duals, per sample
    assert est["state_bytes"] == 2 * 100 * (2 * width * 16 * 16 + 10) * 4


def test_the_face_backbone_record_is_the_network_deepfacto_trains():
    """The record's layers compose to the backbone's own ``features`` (through ``expand``) and ``forward``,
    and its Z_1 has the NMF module's C channels at S/8 × S/8 (LFWA's record gives S)."""
    from admm_core.data import DATASETS
    from admm_core.faces.backbone import FACE_ARCH, FACE_FEATURES, backbone_widths, face_backbone

    shape = DATASETS["lfwa"].input_shape
    torch.manual_seed(0)
    net = face_backbone(backbone_widths(4), emb_dim=12).eval()
    x = torch.rand(3, *shape)
    z, names = x, []
    with torch.no_grad():
        for name, layer in net.layers().items():
            z = layer(z)
            names.append(name)
            if name == "expand":
                assert torch.equal(z, net.features(x)) and z.shape[1:] == (FACE_FEATURES, shape[1] // 8, shape[2] // 8)
        assert torch.allclose(z, net(x))
    assert names == layer_names(ModelConfig(FACE_ARCH, (), width=4))
    assert ARCHS[FACE_ARCH].kind == "deepfacto" and ARCHS[FACE_ARCH].default_split(names) == ("expand",)
