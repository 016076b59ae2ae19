"""Block 1 of DeepFacto: the face backbone a run starts from: a given file, the cached one for this
split, or one trained here (:func:`admm_core.faces.backbone.train_backbone`) and cached."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from ..errors import CheckpointError
from ..faces.backbone import FaceBackbone, load_backbone, save_backbone, train_backbone
from ..faces.lfw import FaceSet
from ..spec.datasets import cache_dir
from ..spec.deepfacto import DeepFactoConfig
from ..spec.faces import backbone_widths
from . import shipped

# the settings that shape a backbone trained here: all go into its cache name
BACKBONE_FIELDS = (
    "image_size",
    "seed",
    "test_fraction",
    "backbone_epochs",
    "backbone_lr",
    "backbone_id_weight",
    "backbone_width",
    "batch_size",
    "margin",
)


def backbone_cache_path(cfg: DeepFactoConfig, train_names=(), train_pixels=None) -> Path:
    """The cache file of the backbone ``cfg`` trains on the images ``train_names`` (with pixels
    ``train_pixels``, same order, when given): the name holds a digest of every setting in
    ``BACKBONE_FIELDS``, of the training image names and of their pixels, so a backbone is reused
    only for the same settings and the same training images (another ``data_limit`` gives
    another split, whose test people this backbone may have seen; another LFW variant has the
    same file names and other pixels)."""
    h = hashlib.sha1(json.dumps({k: getattr(cfg, k) for k in BACKBONE_FIELDS}, sort_keys=True).encode())
    names = [str(n) for n in train_names]
    order = sorted(range(len(names)), key=names.__getitem__)
    h.update("\n".join(names[i] for i in order).encode())
    if train_pixels is not None:
        for i in order:
            h.update(np.ascontiguousarray(train_pixels[i]).tobytes())
    return (
        cache_dir()
        / f"lfw-backbone-{cfg.image_size}px-w{cfg.backbone_width}-e{cfg.backbone_epochs}-{h.hexdigest()[:16]}.pt"
    )


def get_backbone(
    cfg: DeepFactoConfig, faces: FaceSet, train_idx, device, log=print, should_stop=None
) -> tuple[FaceBackbone, dict]:
    """The backbone of ``cfg.backbone_weights``; else (``backbone_source="shipped"``) the shipped
    one when it was trained for exactly these settings and training images; else the cached one
    for this split; else train it (and cache it)."""
    if cfg.backbone_weights:
        net, meta = load_backbone(cfg.backbone_weights)
        meta = {**meta, "source": str(cfg.backbone_weights), "trained_here_s": 0.0}
        log(f"backbone: {cfg.backbone_weights}")
        return net.to(device).eval(), meta
    path = backbone_cache_path(cfg, [faces.files[i] for i in train_idx], faces.images[train_idx])
    if cfg.backbone_source == "shipped":
        found = shipped_backbone(path.name)  # checksum and shapes verified
        if found is not None:
            net, e = found
            log(f"backbone: shipped {shipped.path_of(e)} (backbone_source=train trains one here instead)")
            meta = {**e.get("config", {}), "history": [], "train_wall_time_s": 0.0}
            return net.to(device).eval(), {**meta, "source": f"shipped:{e['name']}", "trained_here_s": 0.0}
        log("backbone: the shipped one was trained for other settings or images; using this split's own")
    if path.is_file():
        net, meta = load_backbone(path)
        log(f"backbone: cached {path} (trained in {meta.get('train_wall_time_s', 0):.0f}s)")
        return net.to(device).eval(), {**meta, "source": str(path), "trained_here_s": 0.0}
    log(f"backbone: training one ({cfg.backbone_epochs} epochs, {cfg.image_size}px, triplet loss) — cached at {path}")
    t0 = time.time()
    net, hist = train_backbone(
        faces,
        train_idx,
        epochs=cfg.backbone_epochs,
        lr=cfg.backbone_lr,
        batch_size=cfg.batch_size,
        margin=cfg.margin,
        id_weight=cfg.backbone_id_weight,
        widths=backbone_widths(cfg.backbone_width),
        seed=cfg.seed,
        device=device,
        log=log,
        should_stop=should_stop,
    )
    wall = time.time() - t0
    meta = {
        "image_size": cfg.image_size,
        "seed": cfg.seed,
        "test_fraction": cfg.test_fraction,
        "epochs": cfg.backbone_epochs,
        "id_weight": cfg.backbone_id_weight,
        "width": cfg.backbone_width,
        "history": hist,
        "train_wall_time_s": wall,
    }
    save_backbone(path, net, meta)
    return net.eval(), {**meta, "source": str(path), "trained_here_s": wall}


def shipped_backbone_net(name: str = "lfw-backbone-w16", root: Path | None = None) -> tuple[FaceBackbone, dict]:
    """A shipped backbone as a FaceBackbone (eval mode) and its manifest entry (verified: :func:`shipped.load`)."""
    arrays, e = shipped.load(name, root)
    net = FaceBackbone(**{k: tuple(v) if isinstance(v, list) else v for k, v in e["arch"].items()})
    try:
        net.load_state_dict({k: torch.from_numpy(v) for k, v in shipped.strip(arrays, "backbone.").items()})
    except RuntimeError as err:
        raise CheckpointError(
            f"{shipped.path_of(e, root)}: does not fit the face backbone ({str(err).splitlines()[0]})"
        ) from None
    return net.eval(), e


def shipped_backbone(cache_name: str, root: Path | None = None) -> tuple[FaceBackbone, dict] | None:
    """The shipped backbone whose cache name is ``cache_name`` (see :func:`backbone_cache_path`: the
    name digests every backbone setting, the training images' names and pixels), or None when none
    was trained for exactly that."""
    for e in shipped.entries("face-backbone", root):
        if e.get("cache_name") == cache_name:
            return shipped_backbone_net(e["name"], root)
    return None
