"""The DeepFacto models that ship in assets/models: they verify, they draw heatmaps without any
data root, a damaged or swapped file is refused with one clear error, an exported run gives the
same scores as its checkpoint, and a new run starts from the shipped backbone when it fits."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from admm_core import heatmaps as hm
from admm_core.deepfacto import shipped
from admm_core.deepfacto.inference import load_shipped_model
from admm_core.errors import CheckpointError

DATA = Path(os.environ.get("ADMM_DATA", "")) / "lfw"
HAVE_LFW = (DATA / "lfw-deepfunneled-160").is_dir() and (DATA / "lfwa_att_40.csv").is_file()
needs_lfw = pytest.mark.skipif(
    not HAVE_LFW, reason=f"LFW/LFWA not found under {DATA} (set ADMM_DATA to the folder holding lfw/)"
)
REPO_MODELS = Path(__file__).resolve().parent.parent / "assets" / "models"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


# --- the files in git ------------------------------------------------------------------------


def test_the_shipped_models_verify_and_draw_maps_without_data(monkeypatch, tmp_path):
    """Every file in the manifest matches its checksum and shapes; r = 4 and r = 32 draw r maps
    over the mean face with no data root at all."""
    monkeypatch.setenv("ADMM_DATA", str(tmp_path / "no-data"))
    man = shipped.read_manifest(REPO_MODELS)
    names = {m["name"]: m for m in man["models"]}
    assert {"lfw-backbone-w16", "deepfacto-r4", "deepfacto-r32"} <= set(names)
    assert "LFW" in man["data_terms"]
    total = 0
    for name, e in names.items():
        tensors, _ = shipped.load(name, REPO_MODELS)
        total += e["bytes"]
        assert e["command"] and e["code_version"] and len(e["sha256"]) == 64
        assert all(np.isfinite(v.astype(np.float64)).all() for v in tensors.values())
    assert total < 12e6  # "a few MB in all"
    face = shipped.mean_face(root=REPO_MODELS)
    assert face.shape == (160, 160, 3) and face.dtype == np.uint8 and 60 < face.mean() < 200
    for r in (4, 32):
        assert names[f"deepfacto-r{r}"]["config"]["rank"] == r
        maps = hm.heatmaps(f"shipped:deepfacto-r{r}", face)
        assert len(maps) == r and all(m.shape == (160, 160) for m in maps)
        assert all(0 <= m.min() and m.max() <= 1 for m in maps)
        assert max(float(m.max()) for m in maps) > 0.05  # the face lights some component up


def _copy_models(tmp_path) -> Path:
    root = tmp_path / "models"
    shutil.copytree(REPO_MODELS, root)
    return root


def test_a_damaged_file_gives_one_clear_error(tmp_path):
    root = _copy_models(tmp_path)
    f = root / "deepfacto-r4.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"deepfacto-r4\.safetensors: SHA-256 .* does not match"):
        load_shipped_model("deepfacto-r4", root)


def test_a_truncated_or_missing_file_is_named(tmp_path):
    root = _copy_models(tmp_path)
    f = root / "deepfacto-r32.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"deepfacto-r32\.safetensors: 1000 bytes, the manifest says"):
        load_shipped_model("deepfacto-r32", root)
    f.unlink()
    with pytest.raises(CheckpointError, match="is missing"):
        load_shipped_model("deepfacto-r32", root)


def test_a_swapped_file_is_refused_even_with_a_matching_manifest_size(tmp_path):
    """r = 32's file under r = 4's name: the checksum refuses it; a manifest edited to its
    checksum still fails on the shapes."""
    root = _copy_models(tmp_path)
    shutil.copyfile(root / "deepfacto-r32.safetensors", root / "deepfacto-r4.safetensors")
    with pytest.raises(CheckpointError, match="bytes, the manifest says|does not match"):
        load_shipped_model("deepfacto-r4", root)
    man = json.loads((root / "manifest.json").read_text())
    e4 = next(m for m in man["models"] if m["name"] == "deepfacto-r4")
    e4["bytes"] = (root / "deepfacto-r4.safetensors").stat().st_size
    e4["sha256"] = shipped.sha256(root / "deepfacto-r4.safetensors")
    (root / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="tensors do not match the manifest"):
        load_shipped_model("deepfacto-r4", root)


def test_a_pickle_in_place_of_a_model_is_refused(tmp_path):
    root = _copy_models(tmp_path)
    import pickle

    (root / "deepfacto-r4.safetensors").write_bytes(pickle.dumps({"m": 1}))
    with pytest.raises(CheckpointError):
        load_shipped_model("deepfacto-r4", root)


def test_unknown_model_and_bad_manifest(tmp_path):
    from admm_core.errors import ConfigError

    root = _copy_models(tmp_path)
    with pytest.raises(ConfigError, match="shipped model = 'deepfacto-r7'"):
        load_shipped_model("deepfacto-r7", root)
    (root / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="manifest.json: not a readable manifest"):
        shipped.read_manifest(root)


# --- export and the shipped backbone (a tiny run on real LFW) ----------------------------------

TINY = [
    "data_limit=160",
    "image_size=32",
    "backbone_epochs=1",
    "finetune_epochs=1",
    "admm_images=48",
    "eval_images=30",
    "svm_train_limit=80",
    "batch_size=32",
    "svm_c=0.01",
    "backbone_source=train",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from admm_core.cli import main

    run = tmp_path_factory.mktemp("shiprun") / "run"
    os.environ["ADMM_CACHE"] = str(tmp_path_factory.getbasetemp() / "cache")
    argv = ["train", "--preset", "lfwa-deepfacto", "--rank", "4", "--epochs", "2", "--out", str(run), "--device", "cpu"]
    for s in TINY:
        argv += ["--set", s]
    assert main(argv) == 0
    return run


@needs_lfw
def test_export_gives_the_runs_own_scores_and_a_new_run_starts_from_it(tiny_run, tmp_path, monkeypatch):
    from admm_core.cli import main
    from admm_core.deepfacto import backbone as bb
    from admm_core.deepfacto.inference import load_inference_model
    from admm_core.faces.lfw import load_lfwa
    from admm_core.spec.deepfacto import read_run_config

    out = tmp_path / "models"
    assert main(["deepfacto", "ship", "--run", str(tiny_run), "--out", str(out)]) == 0
    man = shipped.read_manifest(out)
    assert [m["name"] for m in man["models"]] == ["lfw-backbone-w16", "deepfacto-r4"]
    img = DATA / "lfw-deepfunneled-160" / "Aaron_Eckhart" / "Aaron_Eckhart_0001.jpg"
    face = hm.read_image(str(img))[None]
    s_run = load_inference_model(tiny_run).scores(face)
    monkeypatch.setenv("ADMM_DEEPFACTO_MODELS", str(out))
    s_ship = hm.load_model("shipped:deepfacto-r4").scores(face)
    # the same weights bit for bit; the scores agree to float tolerance (the run's M is a transposed
    # view, the file's is contiguous: another matmul order inside the iterative NNLS)
    from admm_core.checkpoint import safe_load

    ck, ship = safe_load(tiny_run / "checkpoint.pt"), shipped.inference_checkpoint("deepfacto-r4", out)
    for part in ("backbone", "fc"):
        for k, v in ck[part].items():
            assert torch.equal(torch.from_numpy(ship[part][k]), v), (part, k)
    assert torch.equal(torch.from_numpy(ship["m"]), ck["m"]) and torch.equal(
        torch.from_numpy(ship["order"]), ck["order"]
    )
    np.testing.assert_allclose(s_ship, s_run, rtol=1e-4, atol=1e-5)
    assert json.loads((tiny_run / "config.json").read_text())["deepfacto"]["backbone_source"] == "train"

    # a new run with the same settings and images takes the shipped backbone: nothing is trained
    cfg = read_run_config(tiny_run).replace(backbone_source="shipped")
    faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit)
    tr, _ = faces.split(cfg.seed, cfg.test_fraction)
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "empty-cache"))

    def no_training(*a, **k):
        raise AssertionError("trained a backbone although the shipped one fits")

    monkeypatch.setattr(bb, "train_backbone", no_training)
    net, meta = bb.get_backbone(cfg, faces, tr, "cpu", log=lambda *_: None)
    assert meta["source"] == "shipped:lfw-backbone-w16" and meta["trained_here_s"] == 0.0
    ref, _ = bb.shipped_backbone_net("lfw-backbone-w16", out)
    x = faces.images[tr[:4]]
    from admm_core.faces.tensors import to_tensor

    np.testing.assert_array_equal(net.features(to_tensor(x)).detach(), ref.features(to_tensor(x)).detach())
    # other settings (another split) or backbone_source=train: the shipped one is not used
    for other in (cfg.replace(seed=1), cfg.replace(backbone_source="train")):
        tr2, _ = faces.split(other.seed, other.test_fraction)
        with pytest.raises(AssertionError, match="trained a backbone"):
            bb.get_backbone(other, faces, tr2, "cpu", log=lambda *_: None)
