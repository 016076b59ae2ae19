"""Heatmaps of a DeepFacto run (paper supp. §Heat maps), and the image I/O they need.

Row k of S for one image, reshaped to (H, W) and bilinearly upsampled (OpenCV) to the image,
is the attention map of component k. :func:`heatmaps`, :func:`overlay` and
:func:`heatmap_grid` serve the CLI, the dashboard and the notebooks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from .deepfacto import shipped
from .deepfacto.heldout import test_faces
from .deepfacto.inference import load_inference_model, load_shipped_model
from .errors import ImageError

# --- images --------------------------------------------------------------------------------


def read_image(image, what: str = "image") -> np.ndarray:
    """A path or an (H, W, 3) / (H, W) uint8 array -> (H, W, 3) uint8 RGB. Clear error otherwise."""
    import cv2

    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if not path.is_file():
            raise ImageError(f"cannot read image {str(path)!r}: no such file")
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise ImageError(f"cannot read image {str(path)!r}: not an image file OpenCV can decode (JPEG, PNG, ...)")
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    arr = np.asarray(image)
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4) or arr.shape[0] < 8 or arr.shape[1] < 8:
        raise ImageError(f"{what}: expected an (H, W, 3) RGB array, got shape {arr.shape}")
    if arr.dtype != np.uint8:
        if np.issubdtype(arr.dtype, np.floating) and arr.size and float(np.nanmax(arr)) <= 1.0:
            arr = arr * 255.0
        arr = np.clip(np.nan_to_num(arr), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(arr[:, :, :3])


def upsample(score_map: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(h, w) score map -> (H, W) by bilinear interpolation (OpenCV). ``size`` is (H, W)."""
    import cv2

    return cv2.resize(
        np.ascontiguousarray(score_map, dtype=np.float32), (int(size[1]), int(size[0])), interpolation=cv2.INTER_LINEAR
    )


def overlay(image, heatmap: np.ndarray, alpha: float = 0.5, colormap: int | None = None) -> np.ndarray:
    """Blend a heatmap (H, W) in [0, 1] as a colour map (JET) over an RGB image; returns (H, W, 3) uint8.

    A heatmap of another size is bilinearly resized to the image.
    """
    import cv2

    img = read_image(image)
    h = np.asarray(heatmap, dtype=np.float32)
    if h.shape != img.shape[:2]:
        h = upsample(h, img.shape[:2])
    h8 = (np.clip(h, 0.0, 1.0) * 255).astype(np.uint8)
    colour = cv2.cvtColor(cv2.applyColorMap(h8, cv2.COLORMAP_JET if colormap is None else colormap), cv2.COLOR_BGR2RGB)
    a = float(np.clip(alpha, 0.0, 1.0))
    return (img.astype(np.float32) * (1 - a) + colour.astype(np.float32) * a).round().clip(0, 255).astype(np.uint8)


@lru_cache(maxsize=4)
def _load_model(run_dir: str, mtime: float):
    return load_inference_model(run_dir)


@lru_cache(maxsize=4)
def _load_shipped(name: str, path: str, mtime: float):
    return load_shipped_model(name, Path(path).parent)


def load_model(run_dir):
    """The inference model (backbone + M + component scales) of a run directory, or of a shipped
    model named ``shipped:<name>`` (assets/models, checksum verified); cached per file."""
    if shipped.is_shipped(run_dir):
        name = str(run_dir).split(":", 1)[1]
        path = shipped.path_of(shipped.entry(name))
        if not path.is_file():
            raise FileNotFoundError(f"{path}: shipped model {name!r} is missing")
        return _load_shipped(name, str(path), path.stat().st_mtime)
    path = Path(run_dir) / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no DeepFacto checkpoint in this run directory (is it a finished lfwa-deepfacto run?)"
        )
    return _load_model(str(Path(run_dir).resolve()), path.stat().st_mtime)


def score_maps(run_dir, image) -> tuple[np.ndarray, np.ndarray]:
    """(S of one image as (r, h, w) float32, the image as the model saw it cropped: (H, W, 3) uint8)."""
    model = load_model(run_dir)
    img = model.crop(read_image(image))
    s = model.scores(img[None])[0]  # (r, h, w)
    return s, img


def heatmaps(run_dir, image, components: Sequence[int] | None = None, normalize: str = "component") -> list[np.ndarray]:
    """Heatmaps of a DeepFacto run for one image — the dashboard's entry point.

    ``run_dir``: a finished ``lfwa-deepfacto`` run directory (holds checkpoint.pt), or
    ``"shipped:deepfacto-r4"`` (``-r32``) for a model that ships with the project.
    ``image``: a path, or an (H, W, 3) uint8 RGB array (a 250×250 LFW original is centre-
    cropped to its 160×160 face crop; other sizes are centre-cropped to a square).
    ``components``: indices into the r rows of S (default: all r, in index order).
    ``normalize``: "component" divides row k by its 99th percentile over the training faces
    (maps are comparable across images; a component that is off stays dark), "image" by
    the row's maximum on this image.

    Returns one (H, W) float32 array in [0, 1] per component, H × W being the cropped image's
    size (160×160 for LFW), i.e. the size :func:`overlay` blends it onto; the cropped image
    itself is ``crop_image(run_dir, image)``.
    """
    model = load_model(run_dir)
    s, img = score_maps(run_dir, image)
    r = s.shape[0]
    comps = list(range(r)) if components is None else [int(k) for k in components]
    for k in comps:
        if not 0 <= k < r:
            raise ValueError(f"components: {k} is out of range (this run has rank r = {r})")
    out = []
    for k in comps:
        if normalize == "image":
            den = float(s[k].max())
        elif normalize == "component":
            den = float(model.scale[k])
        else:
            raise ValueError(f"normalize = {normalize!r}: choose 'component' or 'image'")
        hm = upsample(s[k] / den if den > 0 else np.zeros_like(s[k]), img.shape[:2])
        out.append(np.clip(hm, 0.0, 1.0).astype(np.float32))
    return out


def crop_image(run_dir, image) -> np.ndarray:
    """The (H, W, 3) uint8 face crop the heatmaps of :func:`heatmaps` refer to."""
    return load_model(run_dir).crop(read_image(image))


def default_components(run_dir, k: int = 6) -> list[int]:
    """The k components with the largest mean score over the training faces (most used first)."""
    return [int(i) for i in load_model(run_dir).order[:k]]


def heatmap_grid(
    run_dir,
    images: Sequence,
    components: Sequence[int] | None = None,
    alpha: float = 0.5,
    normalize: str = "component",
    labels: bool = True,
) -> np.ndarray:
    """A grid (uint8 RGB): one row per image — the face crop, then one overlay per component."""
    import cv2

    comps = list(components) if components is not None else default_components(run_dir)
    rows = []
    for im in images:
        img = crop_image(run_dir, im)
        maps = heatmaps(run_dir, im, comps, normalize=normalize)
        tiles = [img] + [overlay(img, h, alpha) for h in maps]
        rows.append(np.concatenate(tiles, axis=1))
    grid = np.concatenate(rows, axis=0)
    if labels:
        th = 22
        tile_w = rows[0].shape[1] // (len(comps) + 1)
        head = np.full((th, grid.shape[1], 3), 255, np.uint8)
        for j, k in enumerate(["image"] + [f"S[{c}]" for c in comps]):
            cv2.putText(head, k, (j * tile_w + 6, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 1, cv2.LINE_AA)
        grid = np.concatenate([head, grid], axis=0)
    return grid


def write_png(path, rgb: np.ndarray) -> None:
    import cv2

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9]):
        raise OSError(f"could not write {path}")


def grid(argv=None) -> int:
    """`admm deepfacto grid --run DIR --out PNG`: heatmaps over test faces of the run."""
    p = argparse.ArgumentParser(
        prog="admm deepfacto grid", description="heatmap grid over faces of held-out identities"
    )
    p.add_argument("--run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--faces", type=int, default=6)
    p.add_argument("--components", help="e.g. 0,3,5 (default: the 6 most used)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--normalize", choices=["component", "image"], default="component")
    a = p.parse_args(argv)
    files = test_faces(a.run, a.faces, a.seed)
    comps = [int(c) for c in a.components.split(",")] if a.components else None
    write_png(a.out, heatmap_grid(a.run, files, comps, normalize=a.normalize))
    print("\n".join(files))
    print(f"wrote {a.out}")
    return 0


def serve(inp=None, out=None, scratch: str | None = None) -> int:
    """``python -m admm_core.heatmaps serve [SCRATCH]``: the dashboard's scorer process (``app/dashboard/scorer.py``),
        so the server never imports torch. One JSON request a line on stdin, one JSON reply a line on stdout:

            {"op": "info", "ref": R}                             -> {"rank": r, "order": [k, …]}
            {"op": "maps", "ref": R, "face": NPY, "components": [k, …], "out": NPZ}
                                                                 -> {"ok": true}; NPZ holds crop, maps
            a failure                                            -> {"error": message, "type": class name}

        R is what :func:`load_model` takes; NPY an (H, W, 3) uint8 face (read without pickle). Models stay
        loaded between requests (:func:`load_model`'s cache). Ends at the end of stdin (the server closed it,
    or went: a server killed with SIGKILL closes it too) and then removes SCRATCH, the server's private
    folder for the arrays, which a killed server cannot remove itself."""
    inp = inp or sys.stdin
    out = out or sys.stdout
    sys.stdout = sys.stderr  # a stray print must not break the replies
    for line in inp:
        try:
            req = json.loads(line)
            if req.get("op") == "info":
                model = load_model(req["ref"])
                reply = {"rank": int(len(model.scale)), "order": [int(k) for k in model.order]}
            elif req.get("op") == "maps":
                face = np.load(req["face"], allow_pickle=False)
                maps = heatmaps(req["ref"], face, req["components"])
                np.savez(req["out"], crop=crop_image(req["ref"], face), maps=np.stack(maps))
                reply = {"ok": True}
            else:
                raise ValueError(f"op = {req.get('op')!r}: choose 'info' or 'maps'")
        except Exception as e:  # noqa: BLE001 - every failure is a reply; the process serves on
            reply = {"error": str(e), "type": type(e).__name__}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    if scratch and Path(scratch).name.startswith("admm-scorer-"):  # never anything but such a folder
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"] or len(sys.argv) > 3:
        raise SystemExit("usage: python -m admm_core.heatmaps serve [SCRATCH]")
    sys.exit(serve(scratch=(sys.argv[2:] or [None])[0]))
