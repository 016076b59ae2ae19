"""The deep-network pieces: the CIFAR-10 augmentation on tensors, the ResNet-18 width
setting, the Z/U memory check, the JPEG pack, and one epoch of each method on real images."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from admm_core import data as data_mod
from admm_core import network
from admm_core.blocks import build_blocknet
from admm_core.errors import ConfigError
from admm_core.methods import block_admm
from admm_core.methods.base import TrainBatch
from admm_core.spec import datasets
from admm_core.spec.config import ModelConfig, RunConfig
from admm_core.spec.presets import preset_config

CIFAR_DIR = next(
    (r / "cifar10-jpeg" for r in datasets.candidate_roots(None) if (r / "cifar10-jpeg" / "test.tar").exists()), None
)
needs_cifar = pytest.mark.skipif(CIFAR_DIR is None, reason="CIFAR-10 JPEG tars (../shared/data/cifar10-jpeg) absent")


# --- augmentation -----------------------------------------------------------------------------


def reference_crop_flip(x, dy, dx, flip, fill, pad=4):
    """One image by the textbook recipe: pad with the fill value, slice, maybe flip."""
    C, H, W = x.shape
    xp = torch.stack([F.pad(x[c], (pad, pad, pad, pad), value=fill[c]) for c in range(C)])
    out = xp[:, dy : dy + H, dx : dx + W]
    return out.flip(-1) if flip else out


def test_crop_flip_matches_the_textbook_recipe():
    torch.manual_seed(0)
    n = 16
    x = torch.randn(n, 3, 8, 8)
    aug = data_mod.CropFlip(n, fill=(-1.0, 0.5, 2.0), seed=3)
    aug.set_epoch(1)
    assert torch.equal(aug(x[:5], slice(0, 5)), aug(x[:5], torch.arange(5)))  # slices and index tensors agree
    idx = torch.tensor([3, 0, 15, 7, 7])
    got = aug(x[idx], idx)
    for k, i in enumerate(idx.tolist()):
        ref = reference_crop_flip(x[i], int(aug.dy[i]), int(aug.dx[i]), bool(aug.flip[i]), (-1.0, 0.5, 2.0))
        assert torch.equal(got[k], ref)
    # both flips, several offsets, and padding really drawn
    assert aug.flip.any() and (~aug.flip).any() and len(set(aug.dy.tolist())) > 3
    assert (got == -1.0).any()


def test_crop_without_flip_is_a_pure_shift():
    x = torch.rand(40, 1, 6, 6)
    aug = data_mod.CropFlip(40, pad=2, flip=False, seed=1)
    aug.set_epoch(0)
    got = aug(x, slice(None))
    assert not aug.flip.any() and len(set(aug.dx.tolist())) == 5  # offsets 0..4 = shifts −2..2
    for i in range(40):
        assert torch.equal(got[i], reference_crop_flip(x[i], int(aug.dy[i]), int(aug.dx[i]), False, (0.0,), pad=2))


@pytest.mark.parametrize(
    "field,value", [("augment_pad", -1), ("augment_pad", 17), ("augment_pad", 2.5), ("augment_flip", "no")]
)
def test_bad_augmentation_settings_name_the_field(field, value):
    from admm_core.spec.config import DataConfig

    with pytest.raises(ConfigError, match=f"data.{field}"):
        DataConfig("mnist", **{field: value})


def test_crop_flip_is_one_seeded_view_per_epoch():
    x = torch.randn(32, 3, 8, 8)
    a, b = data_mod.CropFlip(32, seed=0), data_mod.CropFlip(32, seed=0)
    assert torch.equal(a(x, slice(None)), x)  # before the first epoch: the plain inputs
    a.set_epoch(2)
    b.set_epoch(2)
    assert torch.equal(a(x, slice(None)), b(x, slice(None)))  # same seed and epoch -> same view
    v2 = a(x, slice(None))
    a.set_epoch(3)
    assert not torch.equal(a(x, slice(None)), v2)  # a new epoch, a new view
    xc = x.contiguous(memory_format=torch.channels_last)
    assert a(xc, slice(None)).is_contiguous(memory_format=torch.channels_last)


# --- ResNet-18 width and the memory check -------------------------------------------------------


def test_resnet18_width_64_has_torchvision_shapes_and_16_is_narrower():
    import torchvision

    tv = torchvision.models.resnet18(num_classes=10)
    tv.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)  # the CIFAR stem
    ours = build_blocknet(ModelConfig("resnet18", split=("conv3_x",)), (3, 32, 32), 10)
    assert sorted(p.shape for p in ours.parameters()) == sorted(p.shape for p in tv.parameters())
    small = build_blocknet(ModelConfig("resnet18", split=("conv3_x",), width=16), (3, 32, 32), 10)
    n64, n16 = (sum(p.numel() for p in m.parameters()) for m in (ours, small))
    assert 14 < n64 / n16 < 17  # conv weights scale with w²
    z1, z2 = small.forward_all(torch.randn(2, 3, 32, 32))
    assert z1.shape == (2, 32, 16, 16) and z2.shape == (2, 10)  # Z_1 after conv3_x: 2w channels, 16×16
    with pytest.raises(ConfigError, match="model.width"):
        ModelConfig("resnet18", width=0)


def test_z_u_at_the_papers_split_need_13_gb_and_stop_with_a_clear_message(monkeypatch):
    net = build_blocknet(ModelConfig("resnet18", split=("conv3_x",)), (3, 32, 32), 10).eval()
    x = torch.zeros(1, 3, 32, 32).expand(50_000, 3, 32, 32)  # 50,000 rows, one row of memory
    batch = TrainBatch(x, torch.zeros(50_000, dtype=torch.long), None, 128)
    monkeypatch.setattr(block_admm.state, "free_bytes", lambda device: 64 * 10**9)
    with torch.no_grad():
        need = block_admm.check_state_fits("block-admm", net, batch)
    assert need == 50_000 * (128 * 16 * 16 + 10) * 4 * 2  # ≈ 13.1 GB
    monkeypatch.setattr(block_admm.state, "free_bytes", lambda device: 8 * 10**9)
    with pytest.raises(ConfigError, match=r"block-admm: Z and U need 13\.1 GB .* has 8\.0 GB free"):
        with torch.no_grad():
            block_admm.check_state_fits("block-admm", net, batch)


# --- the JPEG pack and one epoch of each method on real images ---------------------------------


@pytest.fixture(scope="module")
def cifar_pack(tmp_path_factory):
    if CIFAR_DIR is None:
        pytest.skip("CIFAR-10 JPEG tars (../shared/data/cifar10-jpeg) absent")
    root = tmp_path_factory.mktemp("pack")
    info = data_mod.pack_cifar10(CIFAR_DIR, root / data_mod.CIFAR_PACK, per_class=4)
    return root, info


@needs_cifar
def test_pack_decodes_to_the_tars_pixels(cifar_pack):
    root, info = cifar_pack
    assert (info["train"], info["test"]) == (5 * 10 * 4, 10 * 4)
    _, _, te, yte = data_mod.read_cifar_pack(root / data_mod.CIFAR_PACK)
    x_tar, y_tar = data_mod.read_image_tars([CIFAR_DIR / "test.tar"], per_class=4)
    assert np.array_equal(data_mod.decode_jpegs(te), x_tar) and np.array_equal(yte, y_tar)
    ds = data_mod.load_cifar10(root, train_limit=50)  # shuffled once: a limit keeps several classes
    assert ds.x_train.shape == (50, 3, 32, 32) and len(set(ds.y_train.tolist())) > 5
    assert ds.pad_value == data_mod.CIFAR_BLACK


@needs_cifar
@pytest.mark.parametrize("method", ["sgd", "block-admm", "gotmare"])
def test_one_epoch_of_each_method_on_real_cifar(cifar_pack, method, tmp_path):
    root, _ = cifar_pack
    cfg = preset_config("cifar10-resnet18-small", method).replace(
        data__root=str(root), data__train_limit=None, data__test_limit=None, model__width=8, train__epochs=1
    )
    assert cfg.data.augment and cfg.model.split == ("conv3_x",)
    s = network.train(cfg, tmp_path / method)
    assert s["status"] == "finished" and s["epochs"] == 1
    assert math.isfinite(s["train_loss"]) and 0.0 <= s["test_accuracy"] <= 1.0
    z_bytes = 200 * (16 * 16 * 16 + 10) * 4  # Z_1 (2w = 16 channels, 16×16) and Z_2 (logits), 200 samples
    assert s["state_bytes"] == {"sgd": 0, "block-admm": 2 * z_bytes, "gotmare": z_bytes}[method]


@needs_cifar
def test_bf16_channels_last_block_admm_keeps_z_float32(cifar_pack):
    root, _ = cifar_pack
    cfg = preset_config("cifar10-resnet18-small", "block-admm").replace(
        data__root=str(root),
        data__train_limit=64,
        model__width=4,
        train__precision="bf16",
        train__channels_last=True,
        train__device="cpu",
    )
    sess = network.build(cfg)
    z_before = sess.state.z[0].clone()
    sess.batch.set_epoch(1)
    with network.autocast(cfg, sess.device):
        sess.method.run_epoch(sess.net, sess.state, sess.batch)
    assert all(z.dtype == torch.float32 for z in sess.state.z + sess.state.u)
    assert not torch.equal(sess.state.z[0], z_before) and torch.isfinite(sess.state.z[0]).all()


@needs_cifar
def test_augmentation_with_a_method_that_reads_raw_inputs_is_refused(cifar_pack):
    root, _ = cifar_pack
    cfg = preset_config("cifar10-resnet18-small", "dladmm").replace(data__root=str(root))
    with pytest.raises(ConfigError, match="data.augment.*dladmm"):
        network.build(cfg)


def test_z_step_size_can_be_set_per_block():
    from admm_core.losses import get_loss
    from admm_core.methods import make_method

    net = build_blocknet(ModelConfig("mlp", (6,)), (4,), 3)  # T = 2
    batch = TrainBatch(torch.randn(10, 4), torch.randint(0, 3, (10,)), get_loss("ce"), 5)
    state = make_method("block-admm", {"z_lr": [0.05, 0.5]}).init_state(net, batch, torch.Generator())
    assert state.z_lr == [0.05, 0.5]
    assert make_method("gotmare", {"z_lr": 0.3}).init_state(net, batch, torch.Generator()).z_lr == [0.3, 0.3]
    with pytest.raises(ConfigError, match="z_lr"):
        make_method("block-admm", {"z_lr": [0.1, 0.2, 0.3]}).init_state(net, batch, torch.Generator())


@pytest.mark.parametrize("method", ["sgd", "block-admm"])
def test_bf16_epoch_follows_the_weights_it_updates(method):
    """Under ``train.precision = 'bf16'`` one autocast context spans the epoch; every forward must
    still see the optimizer's latest Θ (autocast's cast cache would keep the epoch's first bf16
    copy). The per-step losses track the float32 run's to bf16 rounding, and fall."""

    def step_losses(precision):
        cfg = preset_config("digits-mlp", method).replace(
            train__precision=precision, train__batch_size=64, train__device="cpu"
        )
        if method == "sgd":
            cfg = cfg.replace(method_params={**cfg.method_params, "lr": 0.3})
        sess = network.build(cfg)
        losses, loss = [], sess.batch.loss

        def recording(z, y):
            out = loss(z, y)
            losses.append(float(out) / len(y))
            return out

        sess.batch.loss = recording
        with network.autocast(cfg, sess.device):
            sess.method.run_epoch(sess.net, sess.state, sess.batch)
        return np.array(losses), [p.detach().clone() for p in sess.net.parameters()]

    l32, p32 = step_losses("fp32")
    l16, p16 = step_losses("bf16")
    assert len(l32) == len(l16) > 5  # sgd: one loss per minibatch; block-admm: per Z sweep and Θ-pass
    assert np.abs(l16 - l32).max() < 0.05 * l32[0]
    if method == "sgd":  # one loss per minibatch: it falls through the epoch
        assert l16[-3:].mean() < 0.8 * l16[:3].mean()
    for a, b in zip(p32, p16):  # 5.8 % seen once for sgd in the parallel suite (bf16 rounding, lr 0.3)
        assert (a - b).norm() <= 0.08 * a.norm() + 1e-3


def test_batchnorm_calibration_makes_eval_mode_match_batch_statistics():
    """After calibrating on x in one chunk, an eval-mode pass of x gives what a train-mode pass
    gives (batch statistics, up to the n/(n−1) of the unbiased variance); before, it does not."""
    net = build_blocknet(ModelConfig("resnet18", split=("conv3_x",), width=4), (3, 16, 16), 10, seed=0)
    x = torch.randn(64, 3, 16, 16) * 3 + 1
    with torch.no_grad():
        net.train()
        want = net.forward_all(x)
        net.eval()
        before = net.forward_all(x)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()  # undo the train-mode pass above
    assert block_admm.calibrate_batchnorm(net, x, chunk=64) == sum(
        isinstance(m, torch.nn.BatchNorm2d) for m in net.modules()
    )
    assert all(m.momentum == 0.1 for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d))
    with torch.no_grad():
        net.eval()
        after = net.forward_all(x)

    def rel(a, b):
        return float((a - b).norm() / b.norm())

    assert rel(after[0], want[0]) < 0.02 and rel(after[1], want[1]) < 0.05
    assert rel(before[0], want[0]) > 0.3
    # in chunks: each BN's running mean is the average of its per-chunk batch means (first BN: exact)
    block_admm.calibrate_batchnorm(net, x, chunk=16)
    stem_conv, stem_bn = net.blocks[0].stem[0], net.blocks[0].stem[1]
    with torch.no_grad():
        means = torch.stack([stem_conv(x[s : s + 16]).mean((0, 2, 3)) for s in range(0, 64, 16)]).mean(0)
    torch.testing.assert_close(stem_bn.running_mean, means, rtol=1e-5, atol=1e-6)


def test_block_admm_z_starts_from_calibrated_statistics():
    net = build_blocknet(ModelConfig("resnet18", split=("conv3_x",), width=4), (3, 16, 16), 10, seed=0)
    from admm_core.losses import get_loss
    from admm_core.methods import make_method

    x = torch.randn(40, 3, 16, 16) * 2
    batch = TrainBatch(x, torch.randint(0, 10, (40,)), get_loss("ce"), 8)
    st = make_method("block-admm", {"chunk_size": 40}).init_state(net, batch, torch.Generator())
    with torch.no_grad():
        net.train()
        z_train = net.forward_all(x)
    assert float((st.z[0] - z_train[0]).norm() / z_train[0].norm()) < 0.02
    net2 = build_blocknet(ModelConfig("resnet18", split=("conv3_x",), width=4), (3, 16, 16), 10, seed=0)
    st2 = make_method("block-admm", {"chunk_size": 40, "bn_calibrate": False}).init_state(
        net2, batch, torch.Generator()
    )
    assert float((st2.z[0] - z_train[0]).norm() / z_train[0].norm()) > 0.3


def test_augmentation_of_flat_inputs_is_refused_by_the_engine_as_by_the_preflight():
    """network.build (a caller that skipped the preflight) refuses with the preflight's own message."""
    from admm_core.spec.resources import preflight_problems

    cfg = RunConfig(method="sgd").replace(data__name="digits", data__augment=True, model__hidden=(8,))
    said = preflight_problems(cfg)["data.augment"]
    assert said == "data.augment = true: needs images; digits gives flat vectors (64,)"
    with pytest.raises(ConfigError) as got:
        network.build(cfg)
    assert str(got.value) == said
