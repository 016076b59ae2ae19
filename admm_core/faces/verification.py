"""Face verification: embeddings of many faces, same/different-person pairs, and the accuracy
of a distance threshold chosen on one set of pairs and applied to another."""

from __future__ import annotations

import numpy as np
import torch

from .tensors import to_tensor


@torch.no_grad()
def embed_all(fn, x_uint8: np.ndarray, idx: np.ndarray, device, chunk: int = 256) -> torch.Tensor:
    """fn(batch float tensor on device) for the samples ``idx``, concatenated on the CPU."""
    out = []
    for s in range(0, len(idx), chunk):
        out.append(fn(to_tensor(x_uint8[idx[s : s + chunk]]).to(device)).cpu())
    return torch.cat(out)


def verification_pairs(identity: np.ndarray, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(pairs (2n, 2) of positions, same (2n,) bool): n same-person and n different-person pairs."""
    by_id: dict[int, list[int]] = {}
    for pos, p in enumerate(identity.tolist()):
        by_id.setdefault(p, []).append(pos)
    multi = [v for v in by_id.values() if len(v) >= 2]
    pairs, same = [], []
    for _ in range(n_pairs):
        g = multi[rng.integers(len(multi))]
        a, b = rng.choice(len(g), 2, replace=False)
        pairs.append((g[a], g[b]))
        same.append(True)
    n = len(identity)
    while len(pairs) < 2 * n_pairs:
        a, b = rng.integers(n, size=2)
        if identity[a] != identity[b]:
            pairs.append((a, b))
            same.append(False)
    return np.array(pairs), np.array(same)


def verification_accuracy(emb_fit: torch.Tensor, pairs_fit, emb_eval: torch.Tensor, pairs_eval) -> float:
    """Accuracy on ``pairs_eval`` of the distance threshold that is best on ``pairs_fit``."""

    def dists(emb, pairs):
        p, _ = pairs
        return (emb[p[:, 0]] - emb[p[:, 1]]).norm(dim=1).numpy()

    d_fit, same_fit = dists(emb_fit, pairs_fit), pairs_fit[1]
    cand = np.unique(d_fit)
    accs = [((d_fit <= c) == same_fit).mean() for c in cand]
    thr = cand[int(np.argmax(accs))]
    return float(((dists(emb_eval, pairs_eval) <= thr) == pairs_eval[1]).mean())
