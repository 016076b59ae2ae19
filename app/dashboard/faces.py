"""Faces for the Heatmaps page: read an upload, find the face with OpenCV, crop it; overlays.

Face detection uses OpenCV's Haar cascade when this OpenCV has ``CascadeClassifier`` (4.x,
or 5.x with the contrib modules) and a ``haarcascade_frontalface_default.xml`` can be found
(OpenCV's own data folder, Debian's ``opencv-data`` package, or ``$ADMM_FACE_CASCADE``);
otherwise YuNet (``cv2.FaceDetectorYN``) when ``$ADMM_FACE_MODEL`` names its ONNX file.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

FACE_SIZE = 160  # LFW deep-funneled crops here are 160×160 with the face centred
CASCADE_NAME = "haarcascade_frontalface_default.xml"


class UploadError(ValueError):
    """The upload is not an image, or holds no face; the message says which."""


MAX_PIXELS = 40_000_000  # refused above this (40 megapixels): decoding alone would take ~160 MB and seconds
MAX_SIDE = 2048  # larger images are downscaled to this longest side before face detection
MAX_UPLOAD_MB = 20  # a photo larger than this is refused: the Heatmaps uploader's own limit, checked here again by name


def upload_bytes(name: str, size: int, read) -> bytes:
    """The uploaded file's bytes, or UploadError naming the file when it is over
    :data:`MAX_UPLOAD_MB` (checked before ``read()``: a refused file is never copied)."""
    if size > MAX_UPLOAD_MB * 2**20:
        raise UploadError(
            f"{name}: refused, {size / 2**20:.1f} MB is over the {MAX_UPLOAD_MB} MB a photo may have "
            "(a face needs a few hundred kB: export it smaller and upload it again)."
        )
    return read()


def _to_rgb8(img) -> np.ndarray:
    """Any PIL mode -> (H, W, 3) uint8: 16-bit and float scaled to their range, alpha over white."""
    from PIL import Image

    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        a = np.asarray(img, np.float64)
        hi = 65535.0 if img.mode.startswith("I;16") or a.max(initial=0) > 255 else 255.0
        if img.mode == "F" and a.max(initial=0) <= 1.0:
            hi = 1.0
        g = np.clip(a / hi * 255.0 + 0.5, 0, 255).astype(np.uint8)
        return np.repeat(g[..., None], 3, axis=2)
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.asarray(Image.alpha_composite(white, rgba).convert("RGB"), np.uint8)
    return np.asarray(img.convert("RGB"), np.uint8)


def read_image(data: bytes) -> np.ndarray:
    """Decode an uploaded file to (H, W, 3) uint8 RGB, or raise UploadError.

    8- and 16-bit, grayscale, palette and alpha images are read (alpha laid over white);
    images over MAX_PIXELS are refused with their size, those with a side over MAX_SIDE are
    downscaled to it.
    """
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise UploadError("The file is empty.")
    limit = f"{MAX_PIXELS / 1e6:.0f} megapixels"
    try:
        with Image.open(io.BytesIO(data)) as img:
            w, h = img.size  # from the header: nothing decoded yet
            if w * h > MAX_PIXELS:
                raise UploadError(
                    f"The image is too large: {w}×{h} pixels ({w * h / 1e6:.0f} megapixels); the limit is {limit}. "
                    f"Scale it down (a face needs only a few hundred pixels) and upload it again."
                )
            if max(w, h) > MAX_SIDE:
                img.draft("RGB", (MAX_SIDE, MAX_SIDE))  # JPEG: decode at a reduced scale
            img.load()
            if max(img.size) > MAX_SIDE:
                img.thumbnail((MAX_SIDE, MAX_SIDE), Image.BILINEAR)
            arr = _to_rgb8(img)
    except UploadError:
        raise
    except Image.DecompressionBombError:
        raise UploadError(f"The image is too large (far over {limit}); scale it down and upload it again.") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise UploadError("That file is not an image we can read (use a JPEG or PNG photo).") from None
    if arr.shape[0] < 32 or arr.shape[1] < 32:
        raise UploadError(f"The image is too small ({arr.shape[1]}×{arr.shape[0]} pixels) to find a face in.")
    return arr


def _cascade_paths() -> list[Path]:
    import cv2

    own = os.environ.get("ADMM_FACE_CASCADE")
    cv2_data = getattr(getattr(cv2, "data", None), "haarcascades", None)
    folders = [cv2_data, "/usr/share/opencv4/haarcascades", "/usr/share/opencv/haarcascades"]
    return ([Path(own)] if own else []) + [Path(d) / CASCADE_NAME for d in folders if d]


def face_detector():
    """(detect(rgb) -> list of (x, y, w, h), description) or (None, why not)."""
    import cv2

    if hasattr(cv2, "CascadeClassifier"):
        for path in _cascade_paths():
            if path.is_file():
                clf = cv2.CascadeClassifier(str(path))
                if not clf.empty():

                    def detect(rgb, clf=clf):
                        gray = cv2.equalizeHist(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))
                        side = min(gray.shape)
                        found = clf.detectMultiScale(
                            gray, scaleFactor=1.1, minNeighbors=5, minSize=(max(24, side // 10),) * 2
                        )
                        return [tuple(int(v) for v in b) for b in found]

                    return detect, f"OpenCV {cv2.__version__} Haar cascade ({path.name})"
    model = os.environ.get("ADMM_FACE_MODEL")
    if hasattr(cv2, "FaceDetectorYN") and model and Path(model).is_file():

        def detect(rgb, model=model):
            h, w = rgb.shape[:2]
            det = cv2.FaceDetectorYN.create(model, "", (w, h), 0.8)
            _, faces = det.detect(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            return [] if faces is None else [tuple(int(v) for v in f[:4]) for f in faces]

        return detect, f"OpenCV {cv2.__version__} YuNet ({Path(model).name})"
    why = (
        f"OpenCV {cv2.__version__} here has no face detector: OpenCV 5 moved the Haar cascade to its contrib "
        "modules (pip opencv-contrib-python-headless) and ships no cascade files (apt-get install opencv-data)."
    )
    if hasattr(cv2, "CascadeClassifier"):
        why = f"no {CASCADE_NAME} found (apt-get install opencv-data, or set ADMM_FACE_CASCADE)"
    return None, why


def crop_face(
    rgb: np.ndarray, box: tuple[int, int, int, int], size: int = FACE_SIZE, margin: float = 0.35
) -> np.ndarray:
    """Square crop around ``box`` with a margin (edge-padded where it leaves the image), resized."""
    from PIL import Image

    x, y, w, h = box
    cx, cy, half = x + w / 2, y + h / 2, max(w, h) * (0.5 + margin)
    x0, y0, x1, y1 = int(round(cx - half)), int(round(cy - half)), int(round(cx + half)), int(round(cy + half))
    H, W = rgb.shape[:2]
    pad = max(0, -x0, -y0, x1 - W, y1 - H)
    if pad:
        rgb = np.pad(rgb, ((pad, pad), (pad, pad), (0, 0)), mode="edge")
        x0, y0, x1, y1 = x0 + pad, y0 + pad, x1 + pad, y1 + pad
    crop = rgb[y0:y1, x0:x1]
    return np.asarray(Image.fromarray(crop).resize((size, size), Image.BILINEAR))


def face_from_upload(data: bytes, detector=None) -> tuple[np.ndarray, tuple[int, int, int, int], np.ndarray]:
    """(cropped face, box, whole image) of the largest face in an upload; UploadError otherwise."""
    rgb = read_image(data)
    if detector is None:
        detector, why = face_detector()
        if detector is None:
            raise UploadError(f"Face detection is not available: {why}")
    boxes = detector(rgb)
    if not boxes:
        raise UploadError("No face found in that image. Use a photo with one clearly visible, roughly frontal face.")
    box = max(boxes, key=lambda b: b[2] * b[3])
    return crop_face(rgb, box), box, rgb


def overlay_figure(face: np.ndarray, maps: list[np.ndarray], labels: list[str], opacity: float = 0.5):
    """The face with each score map (already upsampled to the face, values in [0, 1]) over it."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n = max(1, len(maps))
    fig = make_subplots(rows=1, cols=n, subplot_titles=list(labels)[:n], horizontal_spacing=0.02)
    for i, m in enumerate(maps, start=1):
        fig.add_trace(go.Image(z=face), row=1, col=i)
        fig.add_trace(
            go.Heatmap(
                z=np.asarray(m, np.float32),
                opacity=opacity,
                colorscale="Jet",
                showscale=i == n,
                zmin=0,
                zmax=1,
                hoverinfo="skip",
            ),
            row=1,
            col=i,
        )
        fig.update_yaxes(autorange="reversed", showticklabels=False, scaleanchor=f"x{i if i > 1 else ''}", row=1, col=i)
        fig.update_xaxes(showticklabels=False, row=1, col=i)
    fig.update_layout(height=280, margin={"l": 0, "r": 0, "t": 56, "b": 0})  # the titles clear the toolbar
    return fig
