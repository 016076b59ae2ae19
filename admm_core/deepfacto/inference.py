"""A trained DeepFacto for new images (heatmaps, dashboard): ``checkpoint.pt`` of a run and the
straight-through inference S = argmin_{S≥0}‖block_1(x) − M S‖ (:func:`admm_core.nmf.project`),
embedding = normalise(block_2(S)). The run's held-out people are :mod:`.heldout`'s (no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import nmf
from ..checkpoint import atomic_torch_save, safe_load
from ..errors import CheckpointError
from ..faces.backbone import FaceBackbone
from ..faces.lfw import crop_face
from ..faces.tensors import to_tensor
from ..spec.deepfacto import DeepFactoConfig
from . import shipped


def save_inference(
    path, cfg: DeepFactoConfig, backbone: FaceBackbone, fc: nn.Module, m: torch.Tensor, scale, order, iteration: int = 0
) -> None:
    """checkpoint.pt of a run: what inference and heatmaps need (backbone, M, FC, component scales/order)."""
    atomic_torch_save(
        {
            "format": "deepfacto-v1",
            "config": cfg.to_dict(),
            "backbone_arch": backbone.arch,
            "backbone": {k: v.cpu() for k, v in backbone.state_dict().items()},
            "fc": {k: v.cpu() for k, v in fc.state_dict().items()},
            "m": m.detach().cpu(),
            "scale": torch.as_tensor(np.asarray(scale), dtype=torch.float32),
            "order": torch.as_tensor(np.asarray(order).copy()),
            "iteration": iteration,
        },
        Path(path),
    )


class InferenceModel:
    """A trained DeepFacto (backbone + M + FC) for new images: scores S (:meth:`scores`) and the
    face embedding normalise(block_2(S)) (:meth:`embed`). On the CPU: it serves a few images at a
    time (heatmaps); the run's own evaluation projects thousands on the run's device."""

    def __init__(self, ck: dict):
        self.cfg = DeepFactoConfig.from_saved(ck["config"])
        arch = {k: tuple(v) if isinstance(v, list) else v for k, v in ck["backbone_arch"].items()}
        self.backbone = FaceBackbone(**arch)
        self.backbone.load_state_dict(ck["backbone"])
        self.backbone.eval()
        self.m = ck["m"].float()
        self.fc = nn.Linear(self.m.shape[1] * (self.cfg.image_size // 8) ** 2, self.cfg.emb_dim)
        self.fc.load_state_dict(ck["fc"])
        self.scale = ck["scale"].numpy()
        self.order = ck["order"].numpy()

    @property
    def rank(self) -> int:
        return int(self.m.shape[1])

    def crop(self, img: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(crop_face(img))

    @torch.no_grad()
    def scores(self, images: np.ndarray) -> np.ndarray:
        """(B, H, W, 3) uint8 face crops (any equal size) -> S (B, r, h, w) float32."""
        import cv2

        size = self.cfg.image_size
        x = np.stack(
            [cv2.resize(im, (size, size), interpolation=cv2.INTER_AREA) if im.shape[0] != size else im for im in images]
        )
        z = self.backbone.features(to_tensor(x))
        return nmf.project(self.m, z, tol=self.cfg.nnls_tol, max_iter=self.cfg.nnls_max_iter).numpy()

    @torch.no_grad()
    def embed(self, s: np.ndarray) -> np.ndarray:
        """S (B, r, h, w) from :meth:`scores` -> unit-length embeddings (B, emb_dim)."""
        e = self.fc(torch.as_tensor(s, dtype=torch.float32).flatten(1))
        return torch.nn.functional.normalize(e, dim=1).numpy()


def _tensors(v):
    """A shipped checkpoint's numpy arrays (alone or in a dict of them) as tensors; other values as they are."""
    if isinstance(v, np.ndarray):
        return torch.from_numpy(v)
    if isinstance(v, dict):
        return {k: _tensors(x) for k, x in v.items()}
    return v


def load_shipped_model(name: str, root: Path | None = None) -> InferenceModel:
    """A shipped DeepFacto model (assets/models, verified: :func:`shipped.load`) for new images."""
    ck = shipped.inference_checkpoint(name, root)
    ck = {k: _tensors(v) for k, v in ck.items()}
    try:
        return InferenceModel(ck)
    except (RuntimeError, KeyError) as err:
        raise CheckpointError(
            f"{shipped.path_of(shipped.entry(name, root), root)}: does not fit a DeepFacto network "
            f"({str(err).splitlines()[0]})"
        ) from None


def load_inference_model(run_dir) -> InferenceModel:
    path = Path(run_dir) / "checkpoint.pt"
    ck = safe_load(path)  # weights_only: a file that would run code is refused (CheckpointError)
    if not isinstance(ck, dict) or ck.get("format") != "deepfacto-v1":
        raise ValueError(f"{path}: not a DeepFacto checkpoint")
    return InferenceModel(ck)
