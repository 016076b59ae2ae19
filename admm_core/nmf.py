"""NMF module of DeepFacto, batched non-negative projection, and heatmap tensors.

DeepFacto (paper §DeepFacto) puts a non-negative factorisation between block t and t+1.
Block t's output Z_t (N, C, H, W) is read as a C × (N·H·W) matrix (one column per pixel
of every sample) and factored

    Z_t ≈ M S,   M ≥ 0 (C × r, the basis),   S ≥ 0 (r × N·H·W, the scores),

with the ADMM term γ/2 ‖Z_t − M S + V‖² (scaled dual V). Only S, reshaped to (N, r, H, W),
goes on to block t+1. Training alternates

    M ← P₊(M − (M SSᵀ − (Z+V) Sᵀ) / ‖SSᵀ‖₂)            # M-step, projected gradient
    S ← P₊(S − (MᵀM S − Mᵀ(Z+V) + ∇_S P_{t+1}) / L)     # S-step (S also feels block t+1)

where P₊ = max(·, 0). With the step 1/L (L the Lipschitz constant of the gradient) each
projected step cannot increase its objective (descent lemma), so the alternation is
monotone on a fixed Z. At test time M is fixed and S for new samples is

    S = argmin_{S ≥ 0} ½ ‖Z − M S‖²                     # :func:`nnls`

which separates per column; :func:`nnls` solves all columns at once on the device by
accelerated projected gradient (FISTA with adaptive restart) until the KKT violation is
under a tolerance.

Layout: functions take column blocks shaped ``(..., C, n)``: a plain matrix (C, n) or a
batch (N, C, H·W) — the per-sample layout avoids copying activations into one big matrix
(the math is identical: the columns are just grouped by sample). :func:`project` takes
(N, C, H, W) activations and returns (N, r, H, W) scores.

Heatmaps (paper supp. §Heat maps): row k of S for one image, reshaped to (H, W) and
bilinearly upsampled (OpenCV) to the image, is the attention map of component k;
:func:`heatmaps` / :func:`overlay` / :func:`heatmap_grid` serve the CLI and the dashboard.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

# --- tensors <-> the C × (N·H·W) matrix of the paper ----------------------------------------


def to_matrix(z: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) activations -> the paper's C × (N·H·W) matrix (a copy)."""
    n, c, h, w = z.shape
    return z.permute(1, 0, 2, 3).reshape(c, n * h * w)


def from_matrix(s: torch.Tensor, n: int, h: int, w: int) -> torch.Tensor:
    """r × (N·H·W) scores -> (N, r, H, W)."""
    r = s.shape[0]
    return s.reshape(r, n, h, w).permute(1, 0, 2, 3).contiguous()


def spectral_norm_sym(g: torch.Tensor) -> float:
    """Largest eigenvalue of a symmetric PSD matrix (r × r), at least a tiny positive number."""
    return max(float(torch.linalg.eigvalsh(g.double()).max()), 1e-12)


# --- objective, M-step, S-step --------------------------------------------------------------


def reconstruct(m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """M S for columns (..., r, n) -> (..., C, n)."""
    return torch.matmul(m, s)


def objective(z: torch.Tensor, m: torch.Tensor, s: torch.Tensor) -> float:
    """½ ‖Z − M S‖²_F (summed over every column of every sample)."""
    return 0.5 * float((z - torch.matmul(m, s)).pow(2).sum())


def gram_terms(z: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(S Sᵀ, Z Sᵀ): the M-step's sufficient statistics, summed over samples. (r, r), (C, r)."""
    ss = torch.matmul(s, s.transpose(-1, -2))
    zs = torch.matmul(z, s.transpose(-1, -2))
    if ss.dim() > 2:
        ss, zs = ss.sum(0), zs.sum(0)
    return ss, zs


def update_m(m: torch.Tensor, ss: torch.Tensor, zs: torch.Tensor, steps: int = 1) -> torch.Tensor:
    """M-step: ``steps`` projected gradient steps on ½‖Z − M S‖² over M ≥ 0.

    ∇_M = M SSᵀ − Z Sᵀ; step 1/‖SSᵀ‖₂ (the gradient's Lipschitz constant), so the objective
    never increases. ``ss``/``zs`` come from :func:`gram_terms` (they do not depend on M).
    """
    lip = spectral_norm_sym(ss)
    for _ in range(steps):
        m = (m - (m @ ss - zs) / lip).clamp_(min=0.0)
    return m


def update_s(m: torch.Tensor, z: torch.Tensor, s: torch.Tensor, steps: int = 1, coupling=None, coupling_lip: float = 0.0) -> torch.Tensor:
    """S-step: ``steps`` projected gradient steps on ½‖Z − M S‖² + C(S) over S ≥ 0.

    ``coupling(s) -> ∇C(s)`` adds the next block's coupling term (DeepFacto: β/2‖Z_{t+1} −
    block_{t+1}(S) + U_{t+1}‖²); ``coupling_lip`` is a Lipschitz bound of that gradient.
    Step 1/(‖MᵀM‖₂ + coupling_lip): monotone for a convex C with that Lipschitz bound.
    """
    g = m.T @ m
    mz = torch.matmul(m.T, z)
    lip = spectral_norm_sym(g) + coupling_lip
    for _ in range(steps):
        grad = torch.matmul(g, s) - mz
        if coupling is not None:
            grad = grad + coupling(s)
        s = (s - grad / lip).clamp_(min=0.0)
    return s


# --- NNLS projection (test time) ------------------------------------------------------------


@torch.no_grad()
def nnls(m: torch.Tensor, z: torch.Tensor, s0: torch.Tensor | None = None, tol: float = 1e-5, max_iter: int = 2000, check_every: int = 10) -> torch.Tensor:
    """S = argmin_{S ≥ 0} ½‖Z − M S‖², every column at once (batched, on z's device).

    ``m`` (C, r), ``z`` (..., C, n) -> S (..., r, n). Accelerated projected gradient (FISTA,
    step 1/‖MᵀM‖₂) with the adaptive (gradient) restart of O'Donoghue & Candès; stops when
    the KKT violation max |min(S, ∇)| is at most ``tol`` × max|MᵀZ| (scale free), or after
    ``max_iter`` iterations. Starts from ``s0`` if given, else from the projected
    least-squares solution max(M⁺Z, 0), each column scaled by its best factor in [0, 1].
    """
    m = m.to(z.dtype)
    g = m.T @ m  # (r, r)
    b = torch.matmul(m.T, z)  # (..., r, n)
    lip = spectral_norm_sym(g)
    scale = float(b.abs().max()) if b.numel() else 0.0
    if scale == 0.0:
        return torch.zeros_like(b)
    if s0 is None:
        s = torch.matmul(torch.linalg.pinv(m.double()).to(z.dtype), z).clamp_(min=0.0)
        # scale each column by its best factor in [0, 1]: never worse than S = 0 (matters when M is ill-conditioned)
        ms = torch.matmul(m, s)
        alpha = ((ms * z).sum(-2, keepdim=True) / ms.pow(2).sum(-2, keepdim=True).clamp(min=1e-30)).clamp(0.0, 1.0)
        s = s * alpha
    else:
        s = s0.to(b.dtype).clamp(min=0.0)
    y, t = s.clone(), 1.0
    for it in range(1, max_iter + 1):
        grad = torch.matmul(g, y) - b
        s_new = (y - grad / lip).clamp_(min=0.0)
        # adaptive restart: momentum pointing uphill -> drop it
        if float(((y - s_new) * (s_new - s)).sum()) > 0:
            t = 1.0
            y = s_new.clone()
        else:
            t_new = 0.5 * (1 + math.sqrt(1 + 4 * t * t))
            y = s_new + ((t - 1) / t_new) * (s_new - s)
            t = t_new
        s = s_new
        if it % check_every == 0:
            pg = torch.matmul(g, s) - b
            kkt = float(torch.minimum(s, pg).abs().max())  # 0 iff s ≥ 0, ∇ ≥ 0, s·∇ = 0
            if kkt <= tol * scale:
                break
    return s


def project(m: torch.Tensor, z: torch.Tensor, tol: float = 1e-4, max_iter: int = 500, chunk: int = 256) -> torch.Tensor:
    """Test-time scores: (N, C, H, W) activations -> S (N, r, H, W) by :func:`nnls`, in chunks of samples."""
    n, c, h, w = z.shape
    out = []
    for i in range(0, n, chunk):
        zc = z[i : i + chunk].reshape(-1, c, h * w)
        out.append(nnls(m, zc, tol=tol, max_iter=max_iter).reshape(-1, m.shape[1], h, w))
    return torch.cat(out) if out else z.new_zeros((0, m.shape[1], h, w))


def init_basis(z: torch.Tensor, r: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """Initial M (C × r): r activation columns drawn at random among the non-zero ones, plus a little noise.

    ``z`` is (..., C, n). Columns of real data start the basis inside the data's cone, so the
    first S-steps are not all-zero (a random Gaussian basis often is, for sparse ReLU maps).
    """
    c = z.shape[-2]
    cols = z.transpose(-1, -2).reshape(-1, c)  # every column as a row
    norms = cols.norm(dim=1)
    live = torch.nonzero(norms > 0).flatten()
    if live.numel() == 0:
        return torch.rand(c, r, generator=gen).to(z)
    pick = live[torch.randint(live.numel(), (r,), generator=gen)]
    m = cols[pick].T.clone()  # (C, r)
    m = m + 0.01 * m.mean() * torch.rand(m.shape, generator=gen).to(m)
    return m.clamp(min=0.0)


# --- heatmaps --------------------------------------------------------------------------------


class ImageError(ValueError):
    """An image file or array cannot be used; the message names the file."""


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

    return cv2.resize(np.ascontiguousarray(score_map, dtype=np.float32), (int(size[1]), int(size[0])), interpolation=cv2.INTER_LINEAR)


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
    from .deepfacto import load_inference_model

    return load_inference_model(run_dir)


def load_model(run_dir):
    """The run's inference model (backbone + M + component scales), cached per checkpoint file."""
    path = Path(run_dir) / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no DeepFacto checkpoint in this run directory (is it a finished lfwa-deepfacto run?)")
    return _load_model(str(Path(run_dir).resolve()), path.stat().st_mtime)


def score_maps(run_dir, image) -> tuple[np.ndarray, np.ndarray]:
    """(S of one image as (r, h, w) float32, the image as the model saw it cropped: (H, W, 3) uint8)."""
    model = load_model(run_dir)
    img = model.crop(read_image(image))
    s = model.scores(img[None])[0]  # (r, h, w)
    return s, img


def heatmaps(run_dir, image, components: Sequence[int] | None = None, normalize: str = "component") -> list[np.ndarray]:
    """Heatmaps of a DeepFacto run for one image — the dashboard's entry point.

    ``run_dir``: a finished ``lfwa-deepfacto`` run directory (holds checkpoint.pt).
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


def heatmap_grid(run_dir, images: Sequence, components: Sequence[int] | None = None, alpha: float = 0.5, normalize: str = "component", labels: bool = True) -> np.ndarray:
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
