"""A DeepFacto run: the run loop and the re-evaluation of a finished run.

The run loop and run directory are the engine's (:func:`admm_core.loop.run_loop` with
:class:`DeepFactoTask`: ``status.json``, ``summary.json``, the crash record ``error.txt``,
``metrics.jsonl``): ``config.json`` (``kind`` "deepfacto"; the top-level key ``deepfacto`` holds
:class:`DeepFactoConfig`; runs saved before the kind are read by :func:`admm_core.spec.kinds.run_kind`), ``metrics.jsonl``
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
from ..checkpoint import atomic_torch_save, safe_load
from ..device import machine, resolve_device
from ..errors import ConfigError, check
from ..faces.backbone import load_backbone, save_backbone, triplet_loss
from ..faces.lfw import FaceSet, load_lfwa
from ..faces.verification import embed_all, verification_accuracy, verification_pairs
from ..loop import STALE as STALE_FILES
from ..loop import StopRun, Task, run_loop
from ..rundir import read_json, write_files_atomic, write_json
from ..spec.deepfacto import PAPER_MEAN, PRESET, STATE_FILE, DeepFactoConfig, records, run_config_dict, saved_names
from ..spec.methods.deepfacto import DeepFacto
from .attributes import attribute_evaluation, pooled_features
from .backbone import get_backbone
from .inference import load_inference_model, save_inference
from .trainer import DeepFactoTrainer, relative

STALE = (*STALE_FILES, "attributes.json")  # files of an earlier end of the run


def run_indices(cfg: DeepFactoConfig, faces: FaceSet, tr: np.ndarray, te: np.ndarray) -> tuple:
    """The image sets of a run, all seeded by ``cfg.seed``: (Block-ADMM training images, their number of
    people, verification-check faces of training and of test people, their pairs, SVM training images)."""
    rng = np.random.default_rng(cfg.seed)

    # Block-ADMM training set: whole identities with ≥ 2 training images, up to admm_images images
    counts = np.bincount(faces.identity[tr], minlength=len(faces.people))
    multi = tr[counts[faces.identity[tr]] >= 2]
    people = rng.permutation(np.unique(faces.identity[multi]))
    take, total = [], 0
    for p in people:
        members = multi[faces.identity[multi] == p]
        if total + len(members) > cfg.admm_images and total > 0:
            continue
        take.append(members)
        total += len(members)
        if total >= cfg.admm_images:
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


class DeepFactoTask(Task):
    """DeepFacto as a task of the one run loop (:func:`admm_core.loop.run_loop`): one step is one
    Block-ADMM iteration of :class:`DeepFactoTrainer`, its metrics line the per-iteration check,
    its checkpoint ``state.pt`` (the whole loop state, every iteration), and its end-of-run hook
    the attribute SVMs, face verification on all test faces and the inference ``checkpoint.pt``."""

    kind = DeepFacto.kind
    unit = DeepFacto.live_unit
    stale = STALE

    def __init__(self, cfg: DeepFactoConfig, resume_epochs: int | None = None, log=None):
        self.cfg, self.resume_epochs = cfg, resume_epochs
        self.epochs = cfg.epochs
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.timings: dict[str, float] = {}
        self.diag: dict = {}

    def status_fields(self) -> dict:
        return {"phase": "setup"}

    def resume_point(self, run_dir: Path):
        """state.pt, checked against this config; a resume may change the length only."""
        state_path = run_dir / STATE_FILE
        if not state_path.is_file():
            raise ConfigError(
                f"--resume {str(run_dir)!r}: no {STATE_FILE} there (the run finished, or never completed an iteration)"
            )
        point = safe_load(state_path)  # weights_only: a file that would run code is refused
        saved, now = saved_names(point["config"]), self.cfg.to_dict()  # state.pt of before the renames too
        lengths = ("warmup_epochs", "finetune_epochs")  # a resume may change the length (resumed_to)
        diff = sorted(k for k in saved if k not in lengths and saved.get(k) != now.get(k))
        if diff:
            raise ConfigError(f"--resume {str(run_dir)!r}: the config differs from the run's in {diff}")
        done = point["iteration"]
        cfg = self.cfg if self.resume_epochs is None else self.cfg.resumed_to(self.resume_epochs, done)
        # equal: the epochs ran, the run stopped during its evaluation; the loop is then skipped
        check(cfg.epochs >= done, "epochs", cfg.epochs, f"the run already did {done} epochs")
        # a new length moves the end of the warm-up; the iterations already done keep their phase
        check(
            min(cfg.warmup_epochs, done) == min(saved["warmup_epochs"], done),
            "warmup_epochs",
            cfg.warmup_epochs,
            f"the run already did {done} epochs, {min(saved['warmup_epochs'], done)} of them with the backbone frozen",
        )
        self.cfg, self.epochs = cfg, cfg.epochs
        return point

    def config_text(self, resumed: bool) -> str:
        return json.dumps(run_config_dict(self.cfg), indent=2, sort_keys=True)  # a resume may change the length

    def setup(self, run_dir: Path, status, resumed: bool) -> float:
        """LFWA, block 1 (the run's own backbone.pt on resume), the image sets, the backbone's
        own scores (the baseline), and the trainer's initial factorisation."""
        cfg, log, timings = self.cfg, self.log, self.timings

        def set_status(**kw):
            status.update(force=True, **kw)

        self.device = device = resolve_device(cfg.device)
        set_status(machine=machine(device))  # beside every timing: where it was measured
        torch.manual_seed(cfg.seed)
        gen = torch.Generator().manual_seed(cfg.seed)
        t = time.time()
        self.faces = faces = load_lfwa(cfg.data_root, size=cfg.image_size, limit=cfg.data_limit, progress=log)
        tr, te = faces.split(cfg.seed, cfg.test_fraction)
        timings["load_s"] = time.time() - t
        log(
            f"LFWA: {faces.n} labelled images, {len(faces.people)} people; train {len(tr)} / test {len(te)} images (identity-disjoint, seed {cfg.seed})"
        )
        set_status(phase="backbone")
        if resumed and (run_dir / "backbone.pt").is_file():  # the backbone this run started from
            backbone, bb_meta = load_backbone(run_dir / "backbone.pt")
            backbone = backbone.to(device).eval()
            # the summary names where it came from, as an unbroken run's does
            bb_meta = {**bb_meta, "source": bb_meta.get("origin", str(run_dir / "backbone.pt"))}
        else:
            try:
                backbone, bb_meta = get_backbone(cfg, faces, tr, device, log, self.should_stop)
            except KeyboardInterrupt:  # faces.train_backbone's answer to a stop request
                if self.should_stop and self.should_stop():
                    raise StopRun() from None
                raise
            keep = {k: v for k, v in bb_meta.items() if k != "source"}
            save_backbone(run_dir / "backbone.pt", backbone, {**keep, "origin": bb_meta.get("source")})
        self.bb_meta = bb_meta
        # the draws below must not depend on whether the backbone was trained here or loaded
        torch.manual_seed(cfg.seed)
        timings["backbone_train_s"] = bb_meta.get("trained_here_s", 0.0)
        df_idx, n_people, self.ev_tr, self.ev_te, self.pairs_tr, self.pairs_te, svm_tr = run_indices(cfg, faces, tr, te)
        self.df_idx, self.svm_tr, self.te = df_idx, svm_tr, te
        self.pairs_all = verification_pairs_all(cfg, faces, svm_tr, te)
        log(
            f"Block-ADMM training set: {len(df_idx)} images of {n_people} people; verification check on {len(self.ev_tr)} + {len(self.ev_te)} faces"
        )

        # raw backbone baseline features and verification accuracy (before DeepFacto)
        set_status(phase="baseline features")
        t = time.time()
        with torch.no_grad():
            # pooled now (both ways the SVMs use): the full maps would sit in memory through training
            self.raw = pooled_features(backbone, faces.images, (svm_tr, te), {1, cfg.svm_grid}, device)
            # verification on all test faces (3,000 + 3,000 pairs, threshold from training people)
            bb_tr, bb_te = (embed_all(backbone, faces.images, idx, device) for idx in (svm_tr, te))
            self.bb_ver = verification_accuracy(bb_tr, self.pairs_all[0], bb_te, self.pairs_all[1])
        timings["baseline_features_s"] = time.time() - t
        log(f"backbone verification accuracy (all test faces, {len(self.pairs_all[1][1])} pairs): {self.bb_ver:.4f}")

        set_status(phase="init")
        t_train = time.time()
        self.trainer = DeepFactoTrainer(
            cfg, backbone, faces.images[df_idx], faces.identity[df_idx], device, gen, self.should_stop
        )
        self.feat_cache: dict = {}
        return time.time() - t_train  # the initial factorisation counts as training

    def load(self, run_dir: Path, point) -> tuple[int, float]:
        self.trainer.load_state_dict(point["trainer"])
        start, wall = point["iteration"], point["wall_time_s"]
        self.log(f"resumed at iteration {start} ({wall:.0f}s of training so far)")
        return start, wall

    def _features(self, name: str, idx: np.ndarray):
        trainer = self.trainer
        if self.feat_cache.get(name, (None,))[0] != trainer.version:  # the backbone moved: recompute
            self.feat_cache[name] = (trainer.version, trainer.features(self.faces.images[idx]))
        return self.feat_cache[name][1]

    def _initial(self) -> dict:
        """The diagnostics of iteration 0 (the trainer's starting factorisation)."""
        st = self.trainer.state
        with torch.no_grad():
            ms = nmf.reconstruct(st.m, st.s)
            return {
                "phase": "init",
                "residuals": [0.0, float((st.z1 - ms).pow(2).sum().sqrt()) / math.sqrt(len(self.df_idx)), 0.0],
                "dual_norms": [0.0, 0.0, 0.0],
                "nmf_residual": relative(ms, st.z1),
                "nmf_residual_backbone": relative(ms, st.f),
                "s_sparsity": float((st.s == 0).float().mean()),
            }

    def evaluate(self, epoch: int) -> dict:
        """The per-iteration check: verification on ``eval_images`` held-out faces, the triplet
        loss of the training people's check faces, then the iteration's own diagnostics."""
        trainer = self.trainer
        s_tr = trainer.project(self._features("tr", self.ev_tr))
        s_te = trainer.project(self._features("te", self.ev_te))
        e_tr, e_te = trainer.embed(s_tr), trainer.embed(s_te)
        loss = float(triplet_loss(e_tr, torch.from_numpy(self.faces.identity[self.ev_tr]), self.cfg.margin))
        return {
            "train_loss": loss,
            "test_accuracy": verification_accuracy(e_tr, self.pairs_tr, e_te, self.pairs_te),
            "test_s_sparsity": float((s_te == 0).float().mean()),
            **(self._initial() if epoch == 0 else self.diag),
        }

    def before_epoch(self, epoch: int) -> dict:
        return {"phase": "finetune" if epoch > self.cfg.warmup_epochs else "warmup"}

    def run_epoch(self, epoch: int, progress) -> None:
        # the trainer checks should_stop (given at construction) between chunks and backbone steps
        self.diag = self.trainer.iterate(epoch > self.cfg.warmup_epochs)

    def diverged(self, m: dict) -> str | None:
        if not all(math.isfinite(v) for v in [m["train_loss"], *m["residuals"]]):
            return "the triplet loss or a residual is not finite"
        return None

    def report(self, m: dict) -> None:
        if m["epoch"] == 0:
            self.log(
                f"iter 0: verification {m['test_accuracy']:.4f}, nmf residual {m['nmf_residual']:.3f}, S sparsity {m['s_sparsity']:.2f}"
            )
            return
        self.log(
            f"iter {m['epoch']} ({m['phase']}): verification {m['test_accuracy']:.4f}, triplet {m['train_loss']:.4f}, "
            f"res [{', '.join(f'{r:.3f}' for r in m['residuals'])}], ‖F − MS‖/‖F‖ {m['reconstruction_error']:.3f}, "
            f"S mismatch {m['s_mismatch']:.2e}, S sparsity {m['s_sparsity']:.2f} ({m['wall_time_s']:.0f}s)"
        )

    def save(self, run_dir: Path, epoch: int, wall: float) -> None:
        atomic_torch_save(
            {
                "config": self.cfg.to_dict(),
                "iteration": epoch,
                "wall_time_s": wall,
                "trainer": self.trainer.state_dict(),
            },
            run_dir / STATE_FILE,
        )

    def finish(self, run_dir: Path, status, metrics: list[dict], wall: float) -> tuple[dict, dict]:
        """The end-of-run evaluation: attribute SVMs on the test identities, verification on all
        test faces, the same-S check on the training images, ``checkpoint.pt`` for inference."""
        cfg, trainer, faces, log, timings = self.cfg, self.trainer, self.faces, self.log, self.timings
        svm_tr, te, df_idx, pairs_all = self.svm_tr, self.te, self.df_idx, self.pairs_all
        timings["deepfacto_train_s"] = wall
        status.update(force=True, phase="attribute evaluation", epoch=cfg.epochs, progress=1.0)
        t = time.time()
        s_svm_tr, z_svm_tr = trainer.scores(faces.images[svm_tr])
        s_svm_te, z_svm_te = trainer.scores(faces.images[te])
        per_attr, svm_summary = attribute_evaluation(
            cfg,
            faces,
            svm_tr,
            te,
            (s_svm_tr, s_svm_te),
            (z_svm_tr, z_svm_te),
            self.raw,
            log,
            self.should_stop,
            self.device,
        )
        timings["attribute_eval_s"] = time.time() - t
        with torch.no_grad():  # face verification of DeepFacto's embedding on all test faces
            ver = verification_accuracy(trainer.embed(s_svm_tr), pairs_all[0], trainer.embed(s_svm_te), pairs_all[1])
        log(
            f"verification accuracy (all test faces): DeepFacto {ver:.4f} | backbone before DeepFacto {self.bb_ver:.4f}"
        )
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
        last = metrics[-1]
        summary = {
            "preset": PRESET,
            "method": DeepFacto.name,
            "data": records()[0],
            "status": "finished",
            "rank": cfg.rank,
            "epochs": cfg.epochs,
            **svm_summary,
            "paper_mean_attribute_accuracy": PAPER_MEAN.get(cfg.rank),
            "test_accuracy": ver,  # verification on all test faces
            "verification_pairs": int(len(pairs_all[1][1])),  # all of them: half same-person, half not
            "test_accuracy_check": last["test_accuracy"],  # the per-iteration check (eval_images faces)
            "backbone_verification_accuracy": self.bb_ver,
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
            "backbone": self.bb_meta.get("source"),
            "device": str(self.device),
        }
        # elapsed: the whole run, its setup (data, backbone) included
        return summary, {"phase": "done", "epoch": cfg.epochs, "elapsed_s": time.time() - status.status["started"]}

    def finished(self, run_dir: Path) -> None:
        # hundreds of MB; the finished run keeps checkpoint.pt. Only now: a summary that could not
        # be written (full disk) leaves the run crashed with its state, so a resume ends it
        (run_dir / STATE_FILE).unlink(missing_ok=True)

    def summary(self, metrics: list[dict], state: str) -> dict:
        return {"preset": PRESET, "status": state, "rank": self.cfg.rank, "timings_s": self.timings}


def train_deepfacto(
    cfg: DeepFactoConfig,
    run_dir,
    *,
    resume: bool = False,
    epochs: int | None = None,
    should_stop=None,
    on_progress=None,
    log=None,
) -> dict:
    """Train DeepFacto into ``run_dir`` (run-dir files as in the module docstring); returns the summary.

    The run loop is the engine's (:func:`admm_core.loop.run_loop`) with :class:`DeepFactoTask`.
    After every iteration the whole loop state goes to ``state.pt`` (atomically); with
    ``resume`` a stopped or crashed run continues from it (same config, same draws) and
    keeps its metrics, to ``epochs`` epochs in all when given
    (:meth:`DeepFactoConfig.resumed_to`). ``state.pt`` is deleted once the run has finished.
    """
    task = DeepFactoTask(cfg, epochs if resume else None, log)
    return run_loop(task, run_dir, resume=resume, should_stop=should_stop, on_progress=on_progress)


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
