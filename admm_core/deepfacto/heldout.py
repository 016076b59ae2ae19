"""A DeepFacto model's config and its held-out people, without torch: the dashboard's server lists
them (Heatmaps) and leaves the network to the scorer process (:mod:`admm_core.heatmaps`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..faces.lfw import load_lfwa
from ..spec.deepfacto import DeepFactoConfig, read_run_config
from . import shipped


def model_config(run_dir) -> DeepFactoConfig:
    """The config of a run directory, or of a shipped model (``shipped:<name>``, its manifest entry)."""
    if shipped.is_shipped(run_dir):
        return DeepFactoConfig.from_saved(shipped.entry(str(run_dir).split(":", 1)[1])["config"])
    return read_run_config(run_dir)


def test_people(run_dir) -> dict[str, list[Path]]:
    """{person: image paths} of the *test* identities of a run (or shipped model): its own split
    of the labelled people (``data_limit`` included), not of the LFW folder names."""
    cfg = model_config(run_dir)
    fs = load_lfwa(cfg.data_root, size=None, limit=cfg.data_limit)
    _, te = fs.split(cfg.seed, cfg.test_fraction)
    out: dict[str, list[Path]] = {}
    for i in te:
        out.setdefault(fs.people[fs.identity[i]], []).append(fs.image_dir / fs.files[i])
    return out


def test_faces(run_dir, n: int = 6, seed: int = 0) -> list[str]:
    """Paths of ``n`` faces of distinct *test* identities of a run (its own split), seeded."""
    cfg = model_config(run_dir)
    fs = load_lfwa(cfg.data_root, size=None, limit=cfg.data_limit)
    _, te = fs.split(cfg.seed, cfg.test_fraction)
    rng = np.random.default_rng(seed)
    people = rng.permutation(np.unique(fs.identity[te]))[:n]
    picks = [rng.choice(te[fs.identity[te] == p]) for p in people]
    return [str(fs.image_dir / fs.files[i]) for i in picks]
