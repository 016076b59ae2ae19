"""LFW faces as tensors: uint8 images to float inputs, and LFWA as a :class:`~admm_core.data.Dataset`
(the loader its record names, :mod:`admm_core.spec.faces`)."""

from __future__ import annotations

import numpy as np
import torch

from ..data import Dataset
from ..errors import DataError
from ..spec.faces import LFWA_SEED, LFWA_SIZE, LFWA_TEST_FRACTION
from .lfw import load_lfwa


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """(N, S, S, 3) uint8 -> (N, 3, S, S) float32 in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)


def load_lfwa_set(root=None, download=False) -> Dataset:
    """LFWA as a :class:`~admm_core.data.Dataset` (the registry record's loader): faces (N, 3, 64, 64)
    in [0, 1], y = the 40 attributes (N, 40) 0/1, split by identity (seed 0, a fifth of the people
    held out). DeepFacto reads the same faces with their identities (:func:`~.lfw.load_lfwa`)."""
    if download:
        raise DataError("data set 'lfwa' cannot be downloaded here; put it under <root>/lfw (see --data-root)")
    faces = load_lfwa(root, size=LFWA_SIZE)
    tr, te = faces.split(LFWA_SEED, LFWA_TEST_FRACTION)
    y = torch.from_numpy(faces.attributes.astype(np.int64))
    return Dataset("lfwa", to_tensor(faces.images[tr]), y[tr], to_tensor(faces.images[te]), y[te], y.shape[1])
