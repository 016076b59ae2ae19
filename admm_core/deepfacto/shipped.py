"""The trained DeepFacto models that ship with the project (``assets/models``).

A face backbone and DeepFacto runs at r = 4 and r = 32, trained on LFW by the project's own
commands and exported by ``admm deepfacto ship`` (:mod:`admm_core.deepfacto.ship`). Each model is one
safetensors file (tensors only: loading it runs no code) listed in ``manifest.json`` with its
SHA-256, its size, every tensor's shape, its config, the command that made it and the code
version. :func:`load` checks all of that before a tensor is used, so a damaged, truncated or
swapped file gives one error naming the file and what is wrong. Arrays only (numpy): this module
reads the files (the dashboard's server lists and draws from it); the networks are built from them
by :mod:`admm_core.deepfacto.backbone` and :mod:`admm_core.deepfacto.inference`.

What ships:

    lfw-backbone-w16     block 1 as trained by the default lfwa-deepfacto settings (seed 0): it
                         stands in for the backbone cache (:func:`admm_core.deepfacto.backbone.shipped_backbone`) whenever a
                         run asks for exactly those settings and training images
    deepfacto-r4, -r32   whole DeepFacto networks (fine-tuned backbone, M, FC, component scales):
                         what the Heatmaps page and ``admm_core.heatmaps`` need for new images
                         (:func:`admm_core.deepfacto.inference.load_shipped_model`)

They are made by :mod:`admm_core.deepfacto.ship`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from ..errors import CheckpointError, ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "manifest.json"
FORMAT = "admm-shipped-models-v1"
DATA_TERMS = (
    "Trained on Labeled Faces in the Wild (LFW, University of Massachusetts Amherst; "
    "http://vis-www.cs.umass.edu/lfw/) with the LFWA attribute labels (Liu et al., ICCV 2015). "
    "LFW is published for research; its images were collected from the web and remain their "
    "owners'. These weights are derived from it: use them for research and teaching, cite LFW, "
    "and do not use them to identify people."
)


def models_dir() -> Path:
    """Where the shipped models lie: ``$ADMM_DEEPFACTO_MODELS``, else ``assets/models`` of this checkout.
    (``$ADMM_MODELS`` is the dashboard's folder of one's own network files, another thing.)"""
    return Path(os.environ.get("ADMM_DEEPFACTO_MODELS") or PROJECT_ROOT / "assets" / "models")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def read_manifest(root: Path | None = None) -> dict:
    """``manifest.json`` as a dict (``{"models": []}`` when nothing ships in ``root``)."""
    path = Path(root or models_dir()) / MANIFEST
    if not path.is_file():
        return {"format": FORMAT, "models": []}
    try:
        man = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable manifest ({e})") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT or not isinstance(man.get("models"), list):
        raise CheckpointError(f"{path}: not a shipped-models manifest (format {FORMAT!r} expected)")
    return man


def entries(kind: str | None = None, root: Path | None = None) -> list[dict]:
    """The manifest's models, optionally of one ``kind`` ("face-backbone" or "deepfacto")."""
    return [m for m in read_manifest(root)["models"] if kind is None or m.get("kind") == kind]


def entry(name: str, root: Path | None = None) -> dict:
    for m in entries(root=root):
        if m.get("name") == name:
            return m
    known = [m.get("name") for m in entries(root=root)]
    raise ConfigError(f"shipped model = {name!r}: not in {Path(root or models_dir()) / MANIFEST} (known: {known})")


def path_of(e: dict, root: Path | None = None) -> Path:
    return Path(root or models_dir()) / e["file"]


def load(name: str, root: Path | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays, manifest entry) of shipped model ``name``, verified: size, SHA-256, then the name
    and shape of every tensor against the manifest. Raises CheckpointError naming the file."""
    e = entry(name, root)
    path = path_of(e, root)
    redo = "re-create it with scripts/make_shipped_models.sh, or restore it from git"
    if not path.is_file():
        raise CheckpointError(f"{path}: shipped model {name!r} is missing ({redo})")
    if path.stat().st_size != e["bytes"]:
        raise CheckpointError(
            f"{path}: {path.stat().st_size} bytes, the manifest says {e['bytes']}: the file is damaged or was replaced ({redo})"
        )
    digest = sha256(path)
    if digest != e["sha256"]:
        raise CheckpointError(
            f"{path}: SHA-256 {digest[:16]}… does not match the manifest's {e['sha256'][:16]}…: "
            f"the file is damaged or was replaced ({redo})"
        )
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e2:
        raise CheckpointError(f"{path}: not a safetensors file ({e2})") from None
    shapes = {k: list(v.shape) for k, v in tensors.items()}
    if shapes != e["tensors"]:
        bad = sorted(set(shapes) ^ set(e["tensors"])) or sorted(k for k in shapes if shapes[k] != e["tensors"][k])
        raise CheckpointError(f"{path}: tensors do not match the manifest (first differences: {bad[:4]})")
    return tensors, e


def strip(tensors: dict, prefix: str) -> dict:
    """The arrays whose names start with ``prefix`` (``backbone.``), the prefix removed."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def mean_face(name: str = "lfw-backbone-w16", root: Path | None = None) -> np.ndarray:
    """The mean of the backbone's training faces, (160, 160, 3) uint8: a face to draw maps over
    on a machine without LFW."""
    tensors, _ = load(name, root)
    return tensors["mean_face"]


def inference_checkpoint(name: str, root: Path | None = None) -> dict:
    """A shipped DeepFacto model as the dict ``checkpoint.pt`` holds (:func:`save_inference`), with
    numpy arrays for its tensors."""
    tensors, e = load(name, root)
    if e.get("kind") != "deepfacto":
        raise ConfigError(f"shipped model = {name!r}: a {e.get('kind')}, not a DeepFacto model")
    return {
        "format": "deepfacto-v1",
        "config": e["config"],
        "backbone_arch": e["arch"],
        "backbone": strip(tensors, "backbone."),
        "fc": strip(tensors, "fc."),
        "m": tensors["m"],
        "scale": tensors["scale"],
        "order": tensors["order"],
        "iteration": e.get("iterations", 0),
    }


def is_shipped(ref) -> bool:
    """True for a reference to a shipped model: ``shipped:<name>``."""
    return isinstance(ref, str) and ref.startswith("shipped:")
