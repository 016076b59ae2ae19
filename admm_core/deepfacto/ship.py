"""Making the shipped models (``admm deepfacto ship``): finished DeepFacto runs and the backbone
they started from -> safetensors files and ``manifest.json`` (:mod:`admm_core.deepfacto.shipped`
reads and verifies them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes

from ..checkpoint import safe_load
from ..errors import ConfigError
from ..faces.backbone import load_backbone
from ..faces.lfw import FACE_CROP, load_lfwa, read_face
from ..rundir import read_json, write_atomic
from ..spec.deepfacto import read_run_config
from .backbone import backbone_cache_path
from .shipped import DATA_TERMS, FORMAT, MANIFEST, PROJECT_ROOT, sha256


def _code_version() -> str:
    import subprocess

    try:
        sha = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _write(tensors: dict[str, torch.Tensor], path: Path, meta: dict) -> dict:
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    data = safetensors_bytes(tensors, metadata={k: json.dumps(v) for k, v in meta.items()})

    def write(f) -> None:
        os.fchmod(f.fileno(), 0o644)  # read by anyone, as files in git are
        f.write(data)

    write_atomic(path, write)
    return {
        "file": path.name,
        "bytes": path.stat().st_size,
        "sha256": sha256(path),
        "tensors": {k: list(v.shape) for k, v in tensors.items()},
    }


def export(run_dirs: list[Path], out: Path, command: str) -> dict:
    """Write the backbone the runs started from and each run's network into ``out`` with a
    manifest (replacing it). The runs must share one backbone cache file (same settings)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    version = _code_version()
    models, cache_names = [], set()
    for d in map(Path, run_dirs):
        cfg = read_run_config(d)
        ck = safe_load(d / "checkpoint.pt")
        summary = read_json(d / "summary.json") or {}
        name = f"deepfacto-r{cfg.rank}"
        tensors = {f"backbone.{k}": v for k, v in ck["backbone"].items()}
        tensors |= {f"fc.{k}": v for k, v in ck["fc"].items()}
        tensors |= {"m": ck["m"].float(), "scale": ck["scale"].float(), "order": ck["order"].long()}
        conf = {**cfg.to_dict(), "data_root": None, "device": "auto"}
        meta = {"name": name, "kind": "deepfacto", "config": conf, "code_version": version}
        e = _write(tensors, out / f"{name}.safetensors", meta)
        keep = (  # what the runs measured on their held-out people (docs/results/deepfacto.md, "shipped")
            "mean_attribute_accuracy",
            "raw_backbone_attribute_accuracy",
            "majority_attribute_accuracy",
            "test_accuracy",
            "backbone_verification_accuracy",
            "reconstruction_error",
            "wall_time_s",
        )
        models.append(
            {
                "name": name,
                "kind": "deepfacto",
                **e,
                "arch": ck["backbone_arch"],
                "config": conf,
                "iterations": int(ck.get("iteration", 0)),
                "metrics": {k: summary[k] for k in keep if k in summary},
                "made_from_run": d.name,
                "command": command,
                "code_version": version,
            }
        )
        faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit)
        tr, _ = faces.split(cfg.seed, cfg.test_fraction)
        cache_names.add(backbone_cache_path(cfg, [faces.files[i] for i in tr], faces.images[tr]))
    if len(cache_names) != 1:
        raise ConfigError(
            f"runs = {[str(d) for d in run_dirs]}: they started from {len(cache_names)} backbones, not one"
        )
    cache = cache_names.pop()
    net, bmeta = load_backbone(cache)
    # the mean training face at the crop size: something to draw maps over without LFW
    full = load_lfwa(cfg.data_root, size=None, limit=cfg.data_limit)  # names only: one image at a time below
    tr, _ = full.split(cfg.seed, cfg.test_fraction)
    mean = np.zeros((FACE_CROP, FACE_CROP, 3), np.float64)
    for i in tr:
        mean += read_face(full.image_dir / full.files[i], FACE_CROP)
    mean_face_u8 = torch.from_numpy(np.round(mean / len(tr)).astype(np.uint8))
    tensors = {f"backbone.{k}": v for k, v in net.state_dict().items()} | {"mean_face": mean_face_u8}
    name = f"lfw-backbone-w{bmeta.get('width', net.arch['widths'][0])}"
    meta = {"name": name, "kind": "face-backbone", "cache_name": cache.name, "code_version": version}
    e = _write(tensors, out / f"{name}.safetensors", meta)
    hist = bmeta.get("history") or []
    models.insert(
        0,
        {
            "name": name,
            "kind": "face-backbone",
            **e,
            "arch": net.arch,
            "cache_name": cache.name,
            "config": {
                k: bmeta.get(k) for k in ("image_size", "seed", "test_fraction", "epochs", "id_weight", "width")
            },
            "metrics": {
                "final_loss": hist[-1]["loss"] if hist else None,
                "train_wall_time_s": bmeta.get("train_wall_time_s"),
            },
            "command": command,
            "code_version": version,
        },
    )
    man = {"format": FORMAT, "data_terms": DATA_TERMS, "models": models}
    (out / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    return man
