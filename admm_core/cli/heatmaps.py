"""``admm heatmaps``: DeepFacto's NMF score heatmaps over face images, as one PNG grid."""

from __future__ import annotations

from ..heatmaps import heatmap_grid, write_png
from ..spec.settings import parse_widths

NAME = "heatmaps"


def components(text: str) -> tuple[int, ...]:
    """``--components 0,1,2``: rows of S (argparse reports a bad value by this function's name)."""
    return parse_widths(text, "--components", min_value=0)


def add_parser(sub) -> None:
    h = sub.add_parser(NAME, help="DeepFacto: grid of NMF score heatmaps over face images")
    h.add_argument("--run", required=True, help="a finished lfwa-deepfacto run directory")
    h.add_argument(
        "--image",
        required=True,
        action="append",
        nargs="+",
        metavar="FILE",
        help="face image(s); repeat or list several",
    )
    h.add_argument("--out", required=True, metavar="PNG")
    h.add_argument("--components", type=components, help="rows of S to show, e.g. 0,1,2 (default: the 6 most used)")
    h.add_argument("--alpha", type=float, default=0.5, help="colour-map opacity")
    h.add_argument(
        "--normalize",
        choices=["component", "image"],
        default="component",
        help="scale per component (over training faces) or per image",
    )
    h.set_defaults(func=run)


def run(a) -> int:
    images = [f for group in a.image for f in group]
    grid = heatmap_grid(a.run, images, a.components, alpha=a.alpha, normalize=a.normalize)
    write_png(a.out, grid)
    print(f"wrote {a.out} ({len(images)} image(s))")
    return 0
