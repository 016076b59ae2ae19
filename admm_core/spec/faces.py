"""DeepFacto's block 1 and data set, as records: the face backbone ``face-resnet18s`` (an
architecture of kind "deepfacto") and LFWA (a data set of that kind), with where LFW lives.

The backbone's network is :mod:`admm_core.faces.backbone`'s, LFWA's loader
:mod:`admm_core.faces.tensors`'; this module names them (:mod:`admm_core.spec.refs`).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from .archs import Arch, basic_block_params, needs_image, register_arch
from .datasets import DatasetSpec, candidate_roots, register_dataset
from .kinds import DEEPFACTO

FACE_FEATURES = 256  # C, channels of the backbone's feature map Z_1 (what the NMF module factors)
FACE_ARCH = "face-resnet18s"  # its name in the architecture registry (admm_core.spec.archs.ARCHS)

LFW_IMAGES = Path("lfw") / "lfw-deepfunneled-160"
LFWA_LABELS = Path("lfw") / "lfwa_att_40.csv"
LFWA_SIZE = 64  # pixels per side of a face as DeepFacto reads it by default (the 160×160 crop resized)
LFWA_SEED, LFWA_TEST_FRACTION = 0, 0.2  # the default identity-disjoint split (DeepFacto's defaults)


def backbone_widths(width: int) -> tuple[int, int, int, int]:
    """Stage widths of a FaceBackbone with base width ``width``: (w, 2w, 4w, 4w)."""
    return (width, 2 * width, 4 * width, 4 * width)


def face_backbone_table(in_shape: tuple[int, ...], cfg, n_out: int) -> list:
    """``admm_core.faces.backbone.face_backbone_layers`` by arithmetic: a 3×3 stride-2 stem,
    BasicBlock stages of widths (w, 2w, 4w, 4w) at strides (1, 2, 2, 1) (a stride 2 gives ⌈H/2⌉),
    a 1×1 conv + BN to C channels (Z_1), and a linear head on the spatial mean."""
    needs_image(FACE_ARCH, in_shape)
    c, h, w = in_shape
    ws = backbone_widths(cfg.width)
    h, w = -(-h // 2), -(-w // 2)
    out = [("stem", (ws[0], h, w), c * ws[0] * 9 + 2 * ws[0])]
    cin = ws[0]
    for name, cout, stride in zip(("conv2_x", "conv3_x", "conv4_x", "conv5_x"), ws, (1, 2, 2, 1)):
        if stride == 2:
            h, w = -(-h // 2), -(-w // 2)
        out.append((name, (cout, h, w), basic_block_params(cin, cout, stride) + basic_block_params(cout, cout, 1)))
        cin = cout
    out.append(("expand", (FACE_FEATURES, h, w), cin * FACE_FEATURES + 2 * FACE_FEATURES))
    out.append(("head", (n_out,), FACE_FEATURES * n_out + n_out))
    return out


register_arch(
    FACE_ARCH,
    Arch(
        build="admm_core.faces.backbone:face_backbone_layers",
        table=face_backbone_table,
        splits=("expand",),
        default_split=lambda names: ("expand",),  # block 1 = the backbone up to Z_1, as DeepFacto cuts it
        label="Face ResNet-18 (narrow; DeepFacto's block 1)",
        image_input=True,
        kind=DEEPFACTO,
        sizes=("width",),
        # LFWA's 64×64 faces at two widths, and sides that stride 2 rounds up (36 → 18 → 9 → 5)
        examples=tuple(((3, 64, 64), {"width": w}) for w in (4, 16)) + (((3, 36, 36), {"width": 8}),),
    ),
)

# the record (sizes: the default split of the 13,143 labelled faces; tests/test_data.py checks them)
register_dataset(
    DatasetSpec(
        "lfwa",
        "admm_core.faces.tensors:load_lfwa_set",
        (3, LFWA_SIZE, LFWA_SIZE),
        40,
        10502,
        2641,
        files=(str(LFWA_LABELS),),
        labels="attributes",
        kind=DEEPFACTO,
    )
)


def find_lfw(root=None, image_dir=None, labels=None) -> tuple[Path, Path]:
    """(image folder, label CSV). Looks under the data root(s) unless given explicitly."""
    looked = []
    if image_dir is None or labels is None:
        for r in candidate_roots(root):
            img, lab = r / LFW_IMAGES, r / LFWA_LABELS
            looked.append(r / "lfw")
            if (image_dir is not None or img.is_dir()) and (labels is not None or lab.is_file()):
                image_dir = image_dir if image_dir is not None else img
                labels = labels if labels is not None else lab
                break
    if image_dir is None or labels is None or not Path(image_dir).is_dir() or not Path(labels).is_file():
        places = ", ".join(str(p) for p in looked) or f"{image_dir}, {labels}"
        raise DataError(
            f"data set 'lfwa' not found (looked in: {places}). Put LFW deep-funneled faces in <root>/{LFW_IMAGES}/<Person>/*.jpg "
            f"and the LFWA labels in <root>/{LFWA_LABELS} (set --data-root or ADMM_DATA), or pass --image-dir/--labels"
        )
    return Path(image_dir), Path(labels)
