"""DeepFacto's evaluation (paper §exp:hetero): linear SVMs, one per LFWA attribute, on pooled S of the
test identities, beside the majority class and the same SVMs on the raw backbone features.

Pooling: average over a g × g grid (``svm_grid``, default 3: the paper's S is r × 3 × 3) and, for
comparison, the global mean (g = 1). Each SVM's C is chosen from ``svm_c`` by 2-fold
cross-validation over the test people (:func:`attribute_svms_cv`). Two solvers of the same
problem (LinearSVC's L2-regularised squared hinge): ``"liblinear"`` (scikit-learn, one SVM per
process) and ``"newton"`` (:mod:`.svm`, every SVM at once in torch, on the GPU when there is one).
"""

from __future__ import annotations

import hashlib
import math
import os
import time
import zipfile

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..faces.lfw import FaceSet
from ..faces.verification import embed_all
from ..loop import StopRun
from ..rundir import write_atomic
from ..spec.datasets import cache_dir
from ..spec.deepfacto import DeepFactoConfig
from .svm import predict, squared_hinge_svms


def attribute_svms(
    x_train: np.ndarray,
    a_train: np.ndarray,
    x_test: np.ndarray,
    a_test: np.ndarray,
    c=0.01,
    seed: int = 0,
    n_jobs: int | None = None,
) -> np.ndarray:
    """Per-attribute test accuracy of a linear SVM (standardised features, LinearSVC(C)); (A,).

    The 40 SVMs are independent: ``n_jobs`` processes fit them (default: $ADMM_JOBS, else all cores).
    """
    xtr, xte = _standardise(x_train, x_test)
    hits = _fit_many(xtr, a_train, xte, a_test, [(k, float(c)) for k in range(a_train.shape[1])], seed, n_jobs)
    return np.array([h.mean() for h in hits])


def identity_holdout(groups: np.ndarray, fraction: float = 0.5, seed: int = 0) -> np.ndarray:
    """Boolean mask of the rows whose identity is in a seeded ``fraction`` of the identities."""
    people = np.unique(groups)
    out = np.random.default_rng(seed).permutation(people)[: max(1, round(fraction * len(people)))]
    return np.isin(groups, out)


def attribute_svms_cv(
    x_train,
    a_train,
    x_test,
    a_test,
    test_groups: np.ndarray,
    cs,
    seed: int = 0,
    n_jobs: int | None = None,
    should_stop=None,
    solver: str = "liblinear",
    device="cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """Per-attribute test accuracy (A,) with C chosen by 2-fold cross-validation over the *test people*;
    also the chosen C, (A, 2) (for fold 1, fold 2). ``solver``: "liblinear" (``n_jobs`` processes)
    or "newton" (all SVMs at once on ``device``, :func:`_fit_many_newton`).

    For every candidate C one SVM per attribute is fitted on the training images. The test people
    are split in two halves (:func:`identity_holdout`); each half is scored with the C that did
    best on the other half (ties: the smaller C), so no image's own label picks its C. Why not
    hold out training people instead: the backbone was trained on them, and there C = 0.01 wins
    (measured: it picks 0.01 for r = 256, 3 × 3, which scores 78.4 on new people vs 81.3 at 3e-4).
    """
    cs = sorted(float(c) for c in cs)
    xtr, xte = _standardise(x_train, x_test)
    n_a = a_train.shape[1]
    jobs = [(k, c) for k in range(n_a) for c in cs]
    if solver == "newton":
        hits = _fit_many_newton(xtr, a_train, xte, a_test, jobs, device, should_stop)
    else:
        hits = _fit_many(xtr, a_train, xte, a_test, jobs, seed, n_jobs, should_stop)
    return choose_c(np.stack(hits).reshape(n_a, len(cs), -1), cs, test_groups, seed)


def choose_c(hits: np.ndarray, cs, test_groups: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The cross-validation of :func:`attribute_svms_cv` from the test hits (A, len(cs), N) of every
    (attribute, C): accuracy (A,) and chosen C (A, 2), each half of the test people scored with the
    C that did best on the other half."""
    n_a = hits.shape[0]
    if len(cs) == 1:
        return hits[:, 0].mean(1), np.full((n_a, 2), cs[0])
    fold = identity_holdout(test_groups, 0.5, seed)
    pick_for_1 = hits[:, :, ~fold].mean(2).argmax(1)  # fold 1 (= `fold`) takes the best C of fold 2; argmax: first max
    pick_for_2 = hits[:, :, fold].mean(2).argmax(1)
    k = np.arange(n_a)
    correct = hits[k, pick_for_1][:, fold].sum(1) + hits[k, pick_for_2][:, ~fold].sum(1)
    return correct / hits.shape[2], np.array(cs)[np.stack([pick_for_1, pick_for_2], 1)]


def _standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.preprocessing import StandardScaler

    sc = StandardScaler().fit(x_train)
    # a component that is almost never active would be blown up to huge values and stall the
    # solver (measured: > 15 min for r = 256): floor each scale at 1% of the median scale
    sc.scale_ = np.maximum(sc.scale_, 1e-2 * np.median(sc.scale_))
    return sc.transform(x_train), sc.transform(x_test)


def _fit_many(xtr, a_tr, xte, a_te, jobs, seed, n_jobs, should_stop=None) -> list[np.ndarray]:
    """Per-test-image hits (bool) of one SVM per (attribute k, C) in ``jobs``, fitted in parallel.

    ``should_stop()`` is asked before each SVM is handed out (joblib draws them lazily), so a
    stopped run waits for at most the SVMs in flight, not the whole set (up to hours).
    """
    from joblib import Parallel, delayed

    n_jobs = n_jobs or int(os.environ.get("ADMM_JOBS", 0)) or os.cpu_count() or 1  # ADMM_JOBS: cap on a shared machine

    def tasks():
        for k, c in jobs:
            if should_stop and should_stop():
                raise StopRun()
            yield delayed(_one_svm)(xtr, a_tr[:, k], xte, a_te[:, k], c, seed)

    return Parallel(n_jobs=min(n_jobs, len(jobs)))(tasks())


def _fit_many_newton(xtr, a_tr, xte, a_te, jobs, device, should_stop=None, chunk: int = 64) -> list[np.ndarray]:
    """:func:`_fit_many` by :func:`.svm.squared_hinge_svms`: ``chunk`` SVMs at a time share every
    product with the features (float64, on ``device``). A one-class attribute predicts its class, as
    in :func:`_one_svm`; ``should_stop()`` is asked between chunks."""
    dev = torch.device(device)
    x, xt = (torch.as_tensor(v, dtype=torch.float64, device=dev) for v in (xtr, xte))
    out = []
    for i in range(0, len(jobs), chunk):
        if should_stop and should_stop():
            raise StopRun()
        part = jobs[i : i + chunk]
        ks = [k for k, _ in part]
        y = torch.as_tensor(2.0 * a_tr[:, ks] - 1, dtype=torch.float64, device=dev)
        w, b = squared_hinge_svms(x, y, torch.tensor([c for _, c in part], dtype=torch.float64, device=dev))
        pred = predict(xt, w, b).cpu().numpy()
        for j, k in enumerate(ks):
            one_class = a_tr[:, k].min() == a_tr[:, k].max()
            out.append(a_te[:, k] == a_tr[0, k] if one_class else pred[:, j] == (a_te[:, k] == 1))
    return out


def _one_svm(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, yte: np.ndarray, c: float, seed: int) -> np.ndarray:
    from sklearn.svm import LinearSVC

    if ytr.min() == ytr.max():  # one class only in training: predict it
        return yte == ytr[0]
    # the dual solver when it is the faster one: fewer samples than features, or a small C (its box
    # constraint 0 ≤ α ≤ C keeps coordinate descent short; measured 3x faster at C·n ≈ 3)
    n, d = xtr.shape
    clf = LinearSVC(C=c, dual=bool(n < d or c * n <= 10), max_iter=3000, random_state=seed).fit(xtr, ytr)
    return clf.predict(xte) == yte


def majority_baseline(a_train: np.ndarray, a_test: np.ndarray) -> np.ndarray:
    """Per-attribute accuracy of predicting the training majority class."""
    maj = (a_train.mean(0) >= 0.5).astype(a_test.dtype)
    return (a_test == maj[None, :]).mean(0)


def pooled(s: torch.Tensor, grid: int = 1) -> np.ndarray:
    """(B, k, n) with n = h·w, h = w -> (B, k·g·g): average pooling onto a g × g grid (g = 1: the mean).

    The grid cells are torch's adaptive pooling windows (for 8 → 3: rows 0–2, 2–5, 5–7).
    """
    if grid == 1:
        return s.mean(2).numpy()
    h = math.isqrt(s.shape[2])
    return F.adaptive_avg_pool2d(s.reshape(s.shape[0], s.shape[1], h, h), grid).flatten(1).numpy()


def pooled_features(net: nn.Module, images: np.ndarray, idx_sets, grids, device) -> dict[int, tuple]:
    """{g: (features of each index set)}: block_1(x) = ``net.features`` pooled on each g × g grid in
    ``grids`` (:func:`pooled`), one forward pass per image, chunked: the full (N, C, h·w) maps are
    never held (10,502 training faces: 0.7 GB per copy)."""
    grids = sorted(set(grids))

    def fn(x):
        z = net.features(x).flatten(2).cpu()
        return torch.from_numpy(np.concatenate([pooled(z, g) for g in grids], 1))

    outs = [embed_all(fn, images, idx, device).numpy() for idx in idx_sets]
    n_ch = outs[0].shape[1] // sum(g * g for g in grids)
    cuts = np.cumsum([n_ch * g * g for g in grids])[:-1]
    split = [np.split(o, cuts, axis=1) for o in outs]
    return {g: tuple(parts[i] for parts in split) for i, g in enumerate(grids)}


# attribute_svms_cv results by a digest of their inputs: runs that share a backbone (the ranks of
# one bench) have the same raw-backbone features, whose SVMs are the slowest part of `evaluate`
# (2,304 raw 3 × 3 features: ~20 min on 2 cores). Kept in memory and, so that a later process
# (another rank, `evaluate` again) reuses them too, as .npz files in the cache folder.
_SVM_MEMO: dict[str, tuple] = {}
SVM_PROTOCOL = 1  # part of the cache key: raise it when the SVM recipe changes, so old results are not reused


def _svm_cached(key: str, fit) -> tuple[tuple, bool]:
    """(accuracy, chosen C) for the inputs digested in ``key``, fitted by ``fit()`` on a miss; and
    whether it was a hit. The disk copy holds two float arrays (no pickle), written atomically."""
    if key in _SVM_MEMO:
        return _SVM_MEMO[key], True
    path = cache_dir() / f"svm-{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as f:
            _SVM_MEMO[key] = (f["accuracy"], f["chosen_c"])
        return _SVM_MEMO[key], True
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):  # absent, cut short or unreadable: refit
        pass
    acc, chosen = _SVM_MEMO[key] = fit()
    try:
        write_atomic(path, lambda f: np.savez(f, accuracy=acc, chosen_c=chosen), durable=False)
    except OSError:  # a read-only or full cache folder costs only the reuse
        pass
    return (acc, chosen), False


def _sklearn_version() -> str:
    import sklearn

    return sklearn.__version__


def _digest(*parts) -> str:
    h = hashlib.sha1()
    for x in parts:
        x = np.ascontiguousarray(np.asarray(x))
        h.update(f"{x.dtype}{x.shape}".encode())
        h.update(x.tobytes())
    return h.hexdigest()


def attribute_evaluation(
    cfg: DeepFactoConfig,
    faces: FaceSet,
    svm_tr: np.ndarray,
    te: np.ndarray,
    s: tuple,
    z: tuple,
    raw: dict,
    log=print,
    should_stop=None,
    device="cpu",
) -> tuple[list[dict], dict]:
    """The attribute SVMs of a run: (per-attribute rows, summary fields).

    ``s`` = (S of the SVM training images, S of the test images), each (B, r, n); ``z`` the same for
    block_1(x) of the fine-tuned backbone; ``raw[g]`` = (train, test) raw backbone features pooled on
    a g × g grid, for g in {1, cfg.svm_grid}. C per attribute and feature set: :func:`attribute_svms_cv`.
    """
    a_tr, a_te, g = faces.attributes[svm_tr], faces.attributes[te], cfg.svm_grid
    chosen: dict[str, np.ndarray] = {}

    def svm(name, f_tr, f_te):
        t = time.time()
        args = (f_tr, a_tr, f_te, a_te, faces.identity[te], cfg.svm_c, cfg.seed)
        solver = f"sklearn{_sklearn_version()}" if cfg.svm_solver == "liblinear" else "newton"
        key = f"{_digest(*args)}-p{SVM_PROTOCOL}-{solver}"

        def fit():
            return attribute_svms_cv(*args, should_stop=should_stop, solver=cfg.svm_solver, device=device)

        (acc, chosen[name]), hit = _svm_cached(key, fit)
        how = "same features as an earlier run: reused" if hit else f"{time.time() - t:.0f}s"
        log(
            f"attribute SVMs on {name} ({f_tr.shape[1]} features): mean accuracy {acc.mean():.4f}, median C {np.median(chosen[name]):g} ({how})"
        )
        return acc

    acc_s, acc_raw = svm("deepfacto", pooled(s[0], g), pooled(s[1], g)), svm("raw_backbone", *raw[g])
    # global-mean pooling beside it (same as g × g when g = 1); the fine-tuned backbone only so (a diagnostic)
    if g == 1:
        acc_s1, acc_raw1 = acc_s, acc_raw
    else:
        acc_s1, acc_raw1 = (
            svm("deepfacto_global", pooled(s[0], 1), pooled(s[1], 1)),
            svm("raw_backbone_global", *raw[1]),
        )
    acc_ft = svm("finetuned_backbone_global", pooled(z[0], 1), pooled(z[1], 1))
    acc_maj = majority_baseline(a_tr, a_te)
    per_attr = [
        {
            "attribute": nm,
            "deepfacto": float(acc_s[k]),
            "raw_backbone": float(acc_raw[k]),
            "deepfacto_global": float(acc_s1[k]),
            "raw_backbone_global": float(acc_raw1[k]),
            "finetuned_backbone_global": float(acc_ft[k]),
            "majority": float(acc_maj[k]),
            "svm_c": {name: [float(v) for v in c[k]] for name, c in chosen.items()},  # C of test-people fold 1, fold 2
        }
        for k, nm in enumerate(faces.attribute_names)
    ]
    summary = {
        "svm_grid": g,
        "svm_c": list(cfg.svm_c),
        "mean_attribute_accuracy": float(acc_s.mean()),  # pooled S on the g × g grid
        "raw_backbone_attribute_accuracy": float(acc_raw.mean()),
        "mean_attribute_accuracy_global": float(acc_s1.mean()),  # globally pooled S
        "raw_backbone_attribute_accuracy_global": float(acc_raw1.mean()),
        "finetuned_backbone_attribute_accuracy": float(acc_ft.mean()),  # global pooling
        "majority_attribute_accuracy": float(acc_maj.mean()),
    }
    log(
        f"mean attribute accuracy: DeepFacto(r={cfg.rank}) {acc_s.mean():.4f} | raw backbone {acc_raw.mean():.4f} | majority {acc_maj.mean():.4f}"
    )
    return per_attr, summary
