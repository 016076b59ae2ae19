"""A DeepFacto run: the run loop and the re-evaluation of a finished run.

The run directory is the engine's (:mod:`admm_core.runs`: :class:`~admm_core.runs.RunStatus`
for ``status.json``, ``summary.json`` and the crash record ``error.txt``; ``metrics.jsonl``
through :func:`~admm_core.runs.reset_metrics` / :func:`~admm_core.runs.append_metrics`):
``config.json`` (top-level key ``deepfacto`` holds :class:`DeepFactoConfig`), ``metrics.jsonl``
(per iteration: epoch, phase, train_loss, test_accuracy = face-verification accuracy on
``eval_images`` held-out faces, residuals [‖Z_1 − block_1(X)‖, ‖Z_1 − MS‖, ‖Z_2 − block_2(S)‖] RMS
per sample, dual_norms, nmf_residual ‖Z_1 − MS‖/‖Z_1‖, nmf_residual_backbone
‖block_1(X) − MS‖/‖block_1(X)‖, and on the first ``eval_images`` training images
reconstruction_error (the same with S_test) and s_mismatch ‖S_train − S_test‖/‖S_test‖,
s_sparsity, wall_time_s), ``status.json``, ``summary.json`` (verification on all test faces,
3,000 + 3,000 pairs; S mismatch and reconstruction error on all Block-ADMM training images, with
S_test recomputed from the images: backbone forward, then the projection, which
:func:`admm_core.nmf.nnls` does per sample, as inference does for one face), ``attributes.json`` (per-attribute table), ``checkpoint.pt`` (inference model:
backbone, M, FC, component scales), ``backbone.pt`` (the backbone DeepFacto started from) and,
while the run is unfinished, ``state.pt`` (the loop state ``--resume`` continues from).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from .. import nmf
from ..errors import ConfigError, check
from ..faces import (
    FaceSet,
    embed_all,
    load_backbone,
    load_lfwa,
    save_backbone,
    triplet_loss,
    verification_accuracy,
    verification_pairs,
)
from ..runs import (
    Diverged,
    RunStatus,
    StopRun,
    append_metrics,
    atomic_torch_save,
    machine,
    read_json,
    read_metrics,
    reset_metrics,
    resolve_device,
    safe_load,
    write_files_atomic,
    write_json,
    write_text_atomic,
)
from .attributes import attribute_evaluation, pooled_features
from .backbone import get_backbone
from .config import PAPER_MEAN, PRESET, STATE_FILE, DeepFactoConfig, run_config_dict
from .inference import load_inference_model, save_inference
from .trainer import DeepFactoTrainer, relative

STALE = ("summary.json", "error.txt", "attributes.json")  # files of an earlier end of the run


def run_indices(cfg: DeepFactoConfig, faces: FaceSet, tr: np.ndarray, te: np.ndarray) -> tuple:
    """The image sets of a run, all seeded by ``cfg.seed``: (Block-ADMM training images, their number of
    people, verification-check faces of training and of test people, their pairs, SVM training images)."""
    rng = np.random.default_rng(cfg.seed)

    # Block-ADMM training set: whole identities with ≥ 2 training images, up to train_limit images
    counts = np.bincount(faces.identity[tr], minlength=len(faces.people))
    multi = tr[counts[faces.identity[tr]] >= 2]
    people = rng.permutation(np.unique(faces.identity[multi]))
    take, total = [], 0
    for p in people:
        members = multi[faces.identity[multi] == p]
        if total + len(members) > cfg.train_limit and total > 0:
            continue
        take.append(members)
        total += len(members)
        if total >= cfg.train_limit:
            break
    df_idx = np.sort(np.concatenate(take))
    # verification check sets: faces of other training people (threshold) and of test people (accuracy)
    ev_tr_pool = np.setdiff1d(multi, df_idx)
    pool = ev_tr_pool if len(ev_tr_pool) >= 50 else multi
    ev_tr = np.sort(rng.choice(pool, min(cfg.eval_images, len(pool)), replace=False))
    te_counts = np.bincount(faces.identity[te], minlength=len(faces.people))
    te_multi = te[te_counts[faces.identity[te]] >= 2]
    ev_te = np.sort(rng.choice(te_multi, min(cfg.eval_images, len(te_multi)), replace=False))
    pairs_tr = verification_pairs(faces.identity[ev_tr], 500, np.random.default_rng(cfg.seed + 2))
    pairs_te = verification_pairs(faces.identity[ev_te], 500, np.random.default_rng(cfg.seed + 3))
    svm_tr = np.sort(rng.choice(tr, min(cfg.svm_train_limit, len(tr)), replace=False))
    return df_idx, len(take), ev_tr, ev_te, pairs_tr, pairs_te, svm_tr


VERIFICATION_PAIRS = 3000  # same-person and different-person pairs each, as experiments/backbone_study.py


def verification_pairs_all(cfg: DeepFactoConfig, faces: FaceSet, svm_tr: np.ndarray, te: np.ndarray) -> tuple:
    """Pairs of the final verification: among the SVM training faces (threshold) and among all test
    faces (accuracy), positions into ``svm_tr`` and ``te``; seeded like the backbone study."""
    return (
        verification_pairs(faces.identity[svm_tr], VERIFICATION_PAIRS, np.random.default_rng(cfg.seed + 2)),
        verification_pairs(faces.identity[te], VERIFICATION_PAIRS, np.random.default_rng(cfg.seed + 3)),
    )


def train_deepfacto(
    cfg: DeepFactoConfig,
    run_dir,
    *,
    resume: bool = False,
    iters: int | None = None,
    should_stop=None,
    on_progress=None,
    log=None,
) -> dict:
    """Train DeepFacto into ``run_dir`` (run-dir files as in the module docstring); returns the summary.

    After every iteration the whole loop state goes to ``state.pt`` (atomically); with
    ``resume`` a stopped or crashed run continues from it (same config, same draws) and
    keeps its metrics, to ``iters`` iterations in all when given
    (:meth:`DeepFactoConfig.resumed_to`). ``state.pt`` is deleted once the run has finished.
    """
    run_dir = Path(run_dir)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    state_path = run_dir / STATE_FILE
    resume_from = None
    if resume:
        if not state_path.is_file():
            raise ConfigError(
                f"--resume {str(run_dir)!r}: no {STATE_FILE} there (the run finished, or never completed an iteration)"
            )
        resume_from = safe_load(state_path)  # weights_only: a file that would run code is refused
        saved, now = resume_from["config"], cfg.to_dict()
        lengths = ("warmup_iters", "finetune_iters")  # a resume may change the length (resumed_to)
        diff = sorted(k for k in saved if k not in lengths and saved.get(k) != now.get(k))
        if diff:
            raise ConfigError(f"--resume {str(run_dir)!r}: the config differs from the run's in {diff}")
        done = resume_from["iteration"]
        if iters is not None:
            cfg = cfg.resumed_to(iters, done)
        # equal: the iterations ran, the run stopped during its evaluation; the loop is then skipped
        check(cfg.iters >= done, "epochs", cfg.iters, f"the run already did {done} iterations")
        # a new length moves the end of the warm-up; the iterations already done keep their phase
        check(
            min(cfg.warmup_iters, done) == min(saved["warmup_iters"], done),
            "warmup_iters",
            cfg.warmup_iters,
            f"the run already did {done} iterations, {min(saved['warmup_iters'], done)} of them with the backbone frozen",
        )
    status = RunStatus(run_dir, cfg.iters, phase="setup")

    def set_status(**kw):
        status.update(force=True, **kw)

    timings: dict[str, float] = {}
    try:  # from here every failure, a write on a full disk included, ends the run's status (crash)
        write_text_atomic(run_dir / "config.json", json.dumps(run_config_dict(cfg), indent=2, sort_keys=True))
        # a new run starts empty; a resumed one keeps the metrics of the iterations its state covers
        reset_metrics(run_dir, None if resume_from is None else resume_from["iteration"], STALE)
        device = resolve_device(cfg.device)
        set_status(machine=machine(device))  # beside every timing: where it was measured
        torch.manual_seed(cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed)
        t = time.time()
        faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit, progress=log)
        tr, te = faces.split(cfg.seed, cfg.test_fraction)
        timings["load_s"] = time.time() - t
        log(
            f"LFWA: {faces.n} labelled images, {len(faces.people)} people; train {len(tr)} / test {len(te)} images (identity-disjoint, seed {cfg.seed})"
        )
        set_status(phase="backbone")
        if resume_from is not None and (run_dir / "backbone.pt").is_file():  # the backbone this run started from
            backbone, bb_meta = load_backbone(run_dir / "backbone.pt")
            backbone = backbone.to(device).eval()
            # the summary names where it came from, as an unbroken run's does
            bb_meta = {**bb_meta, "source": bb_meta.get("origin", str(run_dir / "backbone.pt"))}
        else:
            backbone, bb_meta = get_backbone(cfg, faces, tr, device, log, should_stop)
            keep = {k: v for k, v in bb_meta.items() if k != "source"}
            save_backbone(run_dir / "backbone.pt", backbone, {**keep, "origin": bb_meta.get("source")})
        # the draws below must not depend on whether the backbone was trained here or loaded
        torch.manual_seed(cfg.seed)
        timings["backbone_train_s"] = bb_meta.get("trained_here_s", 0.0)
        df_idx, n_people, ev_tr, ev_te, pairs_tr, pairs_te, svm_tr = run_indices(cfg, faces, tr, te)
        pairs_all = verification_pairs_all(cfg, faces, svm_tr, te)
        log(
            f"Block-ADMM training set: {len(df_idx)} images of {n_people} people; verification check on {len(ev_tr)} + {len(ev_te)} faces"
        )

        # raw backbone baseline features and verification accuracy (before DeepFacto)
        set_status(phase="baseline features")
        t = time.time()
        with torch.no_grad():
            # pooled now (both ways the SVMs use): the full maps would sit in memory through training
            raw = pooled_features(backbone, faces.images, (svm_tr, te), {1, cfg.svm_grid}, device)
            # verification on all test faces (3,000 + 3,000 pairs, threshold from training people)
            bb_tr, bb_te = (embed_all(backbone, faces.images, idx, device) for idx in (svm_tr, te))
            bb_ver = verification_accuracy(bb_tr, pairs_all[0], bb_te, pairs_all[1])
        timings["baseline_features_s"] = time.time() - t
        log(f"backbone verification accuracy (all test faces, {len(pairs_all[1][1])} pairs): {bb_ver:.4f}")

        set_status(phase="init")
        t_train = time.time()
        trainer = DeepFactoTrainer(
            cfg, backbone, faces.images[df_idx], faces.identity[df_idx], device, gen, should_stop
        )
        wall = time.time() - t_train

        feat_cache: dict = {}

        def ev_features(name, idx):
            if feat_cache.get(name, (None,))[0] != trainer.version:  # the backbone moved: recompute
                feat_cache[name] = (trainer.version, trainer.features(faces.images[idx]))
            return feat_cache[name][1]

        def evaluate_iteration() -> dict:
            s_tr = trainer.project(ev_features("tr", ev_tr))
            s_te = trainer.project(ev_features("te", ev_te))
            e_tr, e_te = trainer.embed(s_tr), trainer.embed(s_te)
            loss = float(triplet_loss(e_tr, torch.from_numpy(faces.identity[ev_tr]), cfg.margin))
            return {
                "train_loss": loss,
                "test_accuracy": verification_accuracy(e_tr, pairs_tr, e_te, pairs_te),
                "test_s_sparsity": float((s_te == 0).float().mean()),
            }

        def log_metrics(epoch: int, m: dict) -> dict:
            m = {"epoch": epoch, "wall_time_s": wall, **m, "time": time.time()}
            append_metrics(run_dir, m)
            if on_progress:
                on_progress(float(epoch), m)
            return m

        start = 0
        if resume_from is not None:
            trainer.load_state_dict(resume_from["trainer"])
            start, wall = resume_from["iteration"], resume_from["wall_time_s"]
            log(f"resumed at iteration {start} ({wall:.0f}s of training so far)")
        st = trainer.state
        with torch.no_grad():
            ms = nmf.reconstruct(st.m, st.s)
            init = {
                "phase": "init",
                "residuals": [0.0, float((st.z1 - ms).pow(2).sum().sqrt()) / math.sqrt(len(df_idx)), 0.0],
                "dual_norms": [0.0, 0.0, 0.0],
                "nmf_residual": relative(ms, st.z1),
                "nmf_residual_backbone": relative(ms, st.f),
                "s_sparsity": float((st.s == 0).float().mean()),
            }
        if start == 0:
            m0 = log_metrics(0, {**evaluate_iteration(), **init})
            log(
                f"iter 0: verification {m0['test_accuracy']:.4f}, nmf residual {m0['nmf_residual']:.3f}, S sparsity {m0['s_sparsity']:.2f}"
            )
        for it in range(start + 1, cfg.iters + 1):
            if should_stop and should_stop():
                raise StopRun()
            finetune = it > cfg.warmup_iters
            set_status(phase="finetune" if finetune else "warmup", epoch=it - 1, progress=(it - 1) / max(cfg.iters, 1))
            t0 = time.perf_counter()
            diag = trainer.iterate(finetune)  # the trainer checks should_stop (given at construction)
            wall += time.perf_counter() - t0
            m = log_metrics(it, {**evaluate_iteration(), **diag})
            if not all(math.isfinite(v) for v in [m["train_loss"], *m["residuals"]]):
                raise Diverged(f"iteration {it}: the triplet loss or a residual is not finite")
            log(
                f"iter {it} ({m['phase']}): verification {m['test_accuracy']:.4f}, triplet {m['train_loss']:.4f}, "
                f"res [{', '.join(f'{r:.3f}' for r in m['residuals'])}], ‖F − MS‖/‖F‖ {m['reconstruction_error']:.3f}, "
                f"S mismatch {m['s_mismatch']:.2e}, S sparsity {m['s_sparsity']:.2f} ({wall:.0f}s)"
            )
            atomic_torch_save(
                {"config": cfg.to_dict(), "iteration": it, "wall_time_s": wall, "trainer": trainer.state_dict()},
                state_path,
            )
        timings["deepfacto_train_s"] = wall

        # attribute evaluation on the test identities
        set_status(phase="attribute evaluation", epoch=cfg.iters, progress=1.0)
        t = time.time()
        s_svm_tr, z_svm_tr = trainer.scores(faces.images[svm_tr])
        s_svm_te, z_svm_te = trainer.scores(faces.images[te])
        per_attr, svm_summary = attribute_evaluation(
            cfg, faces, svm_tr, te, (s_svm_tr, s_svm_te), (z_svm_tr, z_svm_te), raw, log, should_stop, device
        )
        timings["attribute_eval_s"] = time.time() - t
        with torch.no_grad():  # face verification of DeepFacto's embedding on all test faces
            ver = verification_accuracy(trainer.embed(s_svm_tr), pairs_all[0], trainer.embed(s_svm_te), pairs_all[1])
        log(f"verification accuracy (all test faces): DeepFacto {ver:.4f} | backbone before DeepFacto {bb_ver:.4f}")
        # the same S? block 2 trained on trainer.state.s; inference recomputes it from the images
        s_test, f_test = trainer.scores(faces.images[df_idx])
        s_train, m_cpu = trainer.state.s.cpu(), trainer.state.m.cpu()
        same_s = {
            "s_mismatch": relative(s_train, s_test),
            "reconstruction_error": relative(nmf.reconstruct(m_cpu, s_test), f_test),
            "reconstruction_error_train_s": relative(nmf.reconstruct(m_cpu, s_train), f_test),
        }
        log(
            f"training images: ‖S_train − S_test‖/‖S_test‖ = {same_s['s_mismatch']:.2e}, "
            f"‖block_1(X) − M S_test‖/‖block_1(X)‖ = {same_s['reconstruction_error']:.4f}"
        )

        # component statistics for heatmaps: 99th percentile and mean of each row of S on training faces
        s_flat = s_svm_tr.transpose(0, 1).reshape(cfg.rank, -1)
        scale = torch.quantile(s_flat[:, :: max(1, s_flat.shape[1] // 200_000)], 0.99, dim=1).numpy()
        order = np.argsort(-s_flat.mean(1).numpy())
        save_inference(
            run_dir / "checkpoint.pt",
            cfg,
            trainer.backbone,
            trainer.fc,
            trainer.state.m,
            scale,
            order,
            trainer.state.iteration,
        )

        write_json(run_dir / "attributes.json", per_attr)
        last = read_metrics(run_dir)[-1]
        summary = {
            "preset": PRESET,
            "method": "block-admm",
            "data": "lfwa",
            "status": "finished",
            "rank": cfg.rank,
            "epochs": cfg.iters,
            **svm_summary,
            "paper_mean_attribute_accuracy": PAPER_MEAN.get(cfg.rank),
            "test_accuracy": ver,  # verification on all test faces
            "verification_pairs": int(len(pairs_all[1][1])),  # all of them: half same-person, half not
            "test_accuracy_check": last["test_accuracy"],  # the per-iteration check (eval_images faces)
            "backbone_verification_accuracy": bb_ver,
            **same_s,
            "s_mode": cfg.s_mode,
            "nmf_residual": last["nmf_residual"],
            "nmf_residual_backbone": last.get("nmf_residual_backbone"),
            "s_sparsity": last["s_sparsity"],
            "test_s_sparsity": last.get("test_s_sparsity"),
            "train_loss": last["train_loss"],
            "wall_time_s": wall,
            "timings_s": timings,
            "n_admm_train": int(len(df_idx)),
            "n_svm_train": int(len(svm_tr)),
            "n_test": int(len(te)),
            "n_test_people": int(len(np.unique(faces.identity[te]))),
            "backbone": bb_meta.get("source"),
            "device": str(device),
        }
        done = status.finish(summary, phase="done", epoch=cfg.iters)
        # hundreds of MB; the finished run keeps checkpoint.pt. Only now: a summary that could not
        # be written (full disk) leaves the run crashed with its state, so a resume ends it
        state_path.unlink(missing_ok=True)
        return done
    except (StopRun, KeyboardInterrupt):
        return status.stop({"preset": PRESET, "status": "stopped", "rank": cfg.rank, "timings_s": timings})
    except Diverged as e:  # as the engine's runs: state "diverged", the error names the iteration
        summary = {"preset": PRESET, "status": "diverged", "rank": cfg.rank, "timings_s": timings}
        return status.end(summary, state="diverged", error=str(e))
    except BaseException as e:
        status.crash(e)
        raise


EVAL_FIELDS = (
    "svm_c",
    "svm_grid",
    "svm_train_limit",
    "svm_solver",
    "nnls_tol",
    "nnls_max_iter",
    "device",
)  # what `evaluate` may change


def evaluate_run(run_dir, overrides: dict | None = None, log=None) -> dict:
    """Redo the attribute SVMs of a finished run from its files (no training); returns the new summary.

    The features come from ``checkpoint.pt`` (fine-tuned backbone, M) and ``backbone.pt`` (the
    backbone before DeepFacto), the images from the run's own split. ``overrides`` may change the
    evaluation fields only (:data:`EVAL_FIELDS`); ``attributes.json``, ``summary.json`` and
    ``config.json`` are rewritten, the training metrics are kept.
    """
    run_dir = Path(run_dir)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    summary = read_json(run_dir / "summary.json") or {}
    if (
        summary.get("status") != "finished"
        or not (run_dir / "checkpoint.pt").is_file()
        or not (run_dir / "backbone.pt").is_file()
    ):
        raise ConfigError(
            f"--run {str(run_dir)!r}: not a finished DeepFacto run (needs summary.json with status 'finished', checkpoint.pt and backbone.pt)"
        )
    overrides = dict(overrides or {})
    bad = sorted(set(overrides) - set(EVAL_FIELDS))
    check(
        not bad, "--set", bad, f"evaluate may only change {list(EVAL_FIELDS)} (the rest would need a new training run)"
    )
    saved = read_json(run_dir / "config.json")
    cfg = DeepFactoConfig.from_saved({**saved["deepfacto"], **overrides})
    device = resolve_device(cfg.device)
    if len(cfg.svm_c) == 1:  # e.g. a run from before the C selection
        log(
            f"SVM C = {cfg.svm_c[0]:g} (the run's setting); --set 'svm_c=[0.0001,0.001,0.01]' chooses it by cross-validation"
        )
    t = time.time()
    faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit, progress=log)
    tr, te = faces.split(cfg.seed, cfg.test_fraction)
    svm_tr = run_indices(cfg, faces, tr, te)[-1]
    model = load_inference_model(run_dir)
    raw_bb = load_backbone(run_dir / "backbone.pt")[0].to(device).eval()
    fine_bb, m = model.backbone.to(device).eval(), model.m.to(device)
    with torch.no_grad():

        def feats(net, idx):
            return embed_all(lambda x: net.features(x).flatten(2), faces.images, idx, device)

        def scores(z):
            return torch.cat(
                [
                    nmf.nnls(m, z[i : i + 256].to(device), tol=cfg.nnls_tol, max_iter=cfg.nnls_max_iter).cpu()
                    for i in range(0, len(z), 256)
                ]
            )

        raw = pooled_features(raw_bb, faces.images, (svm_tr, te), {1, cfg.svm_grid}, device)
        z_tr, z_te = feats(fine_bb, svm_tr), feats(fine_bb, te)
        s_tr, s_te = scores(z_tr), scores(z_te)
    log(f"features of {len(svm_tr)} + {len(te)} images ({time.time() - t:.0f}s)")
    per_attr, svm_summary = attribute_evaluation(
        cfg, faces, svm_tr, te, (s_tr, s_te), (z_tr, z_te), raw, log, device=device
    )
    timings = {**summary.get("timings_s", {}), "attribute_eval_s": time.time() - t}
    summary = {
        **summary,
        **svm_summary,
        "timings_s": timings,
        "n_svm_train": int(len(svm_tr)),
        "evaluated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "evaluated_on": machine(device),  # may differ from the training's machine (status.json)
    }
    # one set: a full disk while writing any of the three leaves all three as they were
    write_files_atomic(
        {
            run_dir / "attributes.json": json.dumps(per_attr, indent=2),
            run_dir / "summary.json": json.dumps(summary, indent=2),
            run_dir / "config.json": json.dumps({**saved, "deepfacto": cfg.to_dict()}, indent=2, sort_keys=True),
        }
    )
    return summary
