"""Answers: do the two attribute-SVM solvers agree, and how long does each take?

DeepFacto's evaluation fits 40 attributes × 3 values of C linear SVMs on 2,304 pooled features
of LFWA's training faces and scores them on the test people. ``liblinear`` (scikit-learn's
LinearSVC, one SVM per process) took about 27 minutes of it on 2 cores at r = 256;
``newton`` (admm_core/deepfacto/svm.py) solves the same problem for all SVMs at once in torch.

The features are those of a DeepFacto evaluation in shape and split, from a seeded *untrained*
width-32 backbone (block_1's 256 channels pooled on a 3 × 3 grid), so no trained run is needed:
each solver's time, the cross-validated mean accuracy, and how often the two agree (every test
prediction of every (attribute, C), and the C each picks)::

    ADMM_DATA=../shared/data python experiments/svm_solver_bench.py \\
        --markdown docs/results/deepfacto.md --section svm-solvers

``--run DIR`` takes the features from a finished DeepFacto run instead: its S (the test-time
projection, as ``deepfacto evaluate`` computes it) pooled on the run's grid, for the images of the
run's own split, so the solvers meet the sparse, unevenly scaled S that an NMF layer makes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

from admm_core.deepfacto.attributes import _fit_many, _fit_many_newton, _standardise, choose_c, pooled_features
from admm_core.device import machine
from admm_core.docs import code_version, command_line, write_section
from admm_core.faces.backbone import FaceBackbone
from admm_core.faces.lfw import load_lfwa
from admm_core.spec.faces import backbone_widths

CS = (1e-4, 1e-3, 1e-2)


def features(limit: int | None, width: int, seed: int, device) -> tuple:
    faces = load_lfwa(size=64, limit=limit, progress=lambda m: print(m, file=sys.stderr))
    tr, te = faces.split(seed, 0.2)
    torch.manual_seed(seed)
    net = FaceBackbone(backbone_widths(width)).to(device).eval()
    with torch.no_grad():
        f_tr, f_te = pooled_features(net, faces.images, (tr, te), {3}, device)[3]
    return f_tr, faces.attributes[tr], f_te, faces.attributes[te], faces.identity[te]


def run_features(run_dir, chunk: int = 512) -> tuple:
    """(S train, attributes, S test, attributes, test people) of a finished run: S pooled on its grid."""
    from admm_core.deepfacto.attributes import pooled
    from admm_core.deepfacto.inference import load_inference_model
    from admm_core.deepfacto.run import run_indices

    model = load_inference_model(run_dir)
    cfg = model.cfg
    faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit)
    tr, te = faces.split(cfg.seed, cfg.test_fraction)
    svm_tr = run_indices(cfg, faces, tr, te)[-1]

    def feats(idx):
        parts = []
        for i in range(0, len(idx), chunk):
            s = torch.from_numpy(model.scores(faces.images[idx[i : i + chunk]])).flatten(2)
            parts.append(pooled(s, cfg.svm_grid))
            print(f"S of {min(i + chunk, len(idx))}/{len(idx)} faces", file=sys.stderr, flush=True)
        return np.concatenate(parts)

    return feats(svm_tr), faces.attributes[svm_tr], feats(te), faces.attributes[te], faces.identity[te]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="first N faces only (a quick check)")
    ap.add_argument("--run", default=None, help="a finished DeepFacto run: its pooled S as the features")
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="for newton")
    ap.add_argument("--solvers", default="liblinear,newton")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--section", default="svm-solvers")
    a = ap.parse_args(argv)
    version = code_version()
    if a.run:
        x_tr, a_tr, x_te, a_te, groups = run_features(a.run)
        source = f"S of the run `{a.run}` (pooled)"
    else:
        x_tr, a_tr, x_te, a_te, groups = features(a.limit, a.width, a.seed, a.device)
        source = f"an untrained width-{a.width} backbone's block_1, pooled 3 × 3"
    xtr, xte = _standardise(x_tr, x_te)
    n_a = a_tr.shape[1]
    jobs = [(k, c) for k in range(n_a) for c in CS]
    n_jobs = int(os.environ.get("ADMM_JOBS", 0)) or os.cpu_count() or 1
    out = {}
    for solver in a.solvers.split(","):
        t = time.time()
        if solver == "newton":
            hits = _fit_many_newton(xtr, a_tr, xte, a_te, jobs, a.device)
            where = machine(a.device)
        else:
            hits = _fit_many(xtr, a_tr, xte, a_te, jobs, a.seed, n_jobs)
            where = f"{machine('cpu')}; {n_jobs} processes"
        secs = time.time() - t
        hits = np.stack(hits).reshape(n_a, len(CS), -1)
        acc, chosen = choose_c(hits, CS, groups, a.seed)
        out[solver] = dict(hits=hits, acc=acc, chosen=chosen, secs=secs, where=where)
        print(f"{solver}: {secs:.0f}s, mean accuracy {acc.mean():.4f} ({where})", file=sys.stderr)
    ref = out.get("liblinear")
    lines = [
        f"Features: {source}. "
        f"{xtr.shape[0]:,} training and {xte.shape[0]:,} test faces, {xtr.shape[1]:,} features, "
        f"{len(jobs)} SVMs (40 attributes × C in {list(CS)}).",
        "",
        "| solver | machine | seconds | mean accuracy, C by cross-validation "
        "| test predictions equal to liblinear's | chosen C equal | largest per-attribute difference |",
        "|---|---|---|---|---|---|---|",
    ]
    for solver, r in out.items():
        if ref is None or solver == "liblinear":
            same = same_c = diff = "—"
        else:
            same = f"{(r['hits'] == ref['hits']).mean():.5f}"
            same_c = f"{(r['chosen'] == ref['chosen']).mean():.3f}"
            diff = f"{100 * np.abs(r['acc'] - ref['acc']).max():.2f} points"
        lines.append(
            f"| {solver} | {r['where']} | {r['secs']:.0f} | {100 * r['acc'].mean():.2f} | {same} | {same_c} | {diff} |"
        )
    body = "\n".join(lines)
    print(body)
    if a.markdown:
        write_section(
            a.markdown, a.section, body, command_line(argv, "python experiments/svm_solver_bench.py"), version
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
