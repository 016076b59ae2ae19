"""The architecture records (admm_core.spec.archs.ARCHS): each one's torch-free ``table`` (what the memory
estimate and the dashboard's block diagram read) equals the network its ``build`` makes, built on
torch's meta device (no memory, no compute), for every architecture and several widths and depths."""

from __future__ import annotations

import pytest
import torch

from admm_core.models import build_layers
from admm_core.spec import tv
from admm_core.spec.archs import ARCHS, layer_names
from admm_core.spec.config import ModelConfig, RunConfig
from admm_core.spec.datasets import DATASETS
from admm_core.spec.resources import estimate_memory


@pytest.fixture(scope="module", autouse=True)
def _tv_tables():
    """The torchvision records' tables come from a child process (admm_core.spec.tv): all their
    cases asked at once, one child for all (a cold cache otherwise pays torch's import per case)."""
    tv.prefetch([(a, shape, n) for a in tv.TV_RECORDS for shape, _ in ARCHS[a].test_cases() for n in (10, 3)])


def cases_of(arch: str) -> list:
    """(input shape, ModelConfig) cases of an architecture: those its record gives (``examples``), or
    its record's default (small sizes of the fields it reads, inputs of the kind it takes)."""
    return [(shape, ModelConfig(arch, **sizes)) for shape, sizes in ARCHS[arch].test_cases()]


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


def check_table(arch: str) -> int:
    """Every case of ``arch``: its table equals the built network, for two output sizes; the count."""
    cases = cases_of(arch)
    for shape, cfg in cases:
        for n_out in (10, 3):
            table = ARCHS[arch].table(shape, cfg, n_out)
            assert table == built_table(shape, cfg, n_out), (arch, shape, cfg)
            assert [n for n, _, _ in table] == layer_names(cfg)
    return len(cases)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_table_equals_the_built_network(arch):
    """Every registered architecture, on the cases its record gives (a record without ``examples``
    gets its default cases: nothing to edit here for a new one)."""
    assert check_table(arch) >= 2


@pytest.mark.parametrize("width", [16, 64])
def test_memory_estimate_follows_the_resnet_width(width):
    """The estimate counted ResNet-18 at width 64 whatever ``model.width`` said (the CPU preset is 16)."""
    cfg = RunConfig().replace(model__arch="resnet18", model__width=width, data__name="cifar10", data__train_limit=100)
    shape, n_out = DATASETS["cifar10"].input_shape, DATASETS["cifar10"].n_classes
    params = sum(p for _, _, p in built_table(shape, cfg.model, n_out))
    est = estimate_memory(cfg)
    assert est["param_bytes"] == 4 * params
    # Z_1 after conv3_x (2w channels at 16×16) and Z_2 the 10 logits, with their duals, per sample
    assert est["state_bytes"] == 2 * 100 * (2 * width * 16 * 16 + 10) * 4


def test_the_face_backbone_record_is_the_network_deepfacto_trains():
    """The record's layers compose to the backbone's own ``features`` (through ``expand``) and ``forward``,
    and its Z_1 has the NMF module's C channels at S/8 × S/8 (LFWA's record gives S)."""
    from admm_core.faces.backbone import face_backbone
    from admm_core.spec.datasets import DATASETS
    from admm_core.spec.faces import FACE_ARCH, FACE_FEATURES, backbone_widths

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
