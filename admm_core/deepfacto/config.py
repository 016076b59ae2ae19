"""DeepFacto's settings: :class:`DeepFactoConfig` (validated by the engine's :func:`admm_core.errors.check`)
and the ``config.json`` of a DeepFacto run."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..data import DATASETS
from ..errors import check
from ..faces.lfw import LFWA_TEST_FRACTION
from .method import M_UPDATES, S_MODES, DeepFacto

PRESET = "lfwa-deepfacto"
PAPER_MEAN = {4: 74.8, 32: 81.4, 256: 87.0}  # paper table attr_lfw, mean over the 40 attributes (%)
SVM_SOLVERS = ("liblinear", "newton")
BACKBONE_SOURCES = ("shipped", "train")
# fields added after runs were saved, with the value those runs used (their config.json lacks them)
SAVED_BEFORE = {"svm_solver": "liblinear", "backbone_source": "train"}


STATE_FILE = "state.pt"  # loop state for --resume (deleted when the run finishes)


@dataclass(frozen=True)
class DeepFactoConfig:
    """Everything a DeepFacto run depends on (saved as config.json["deepfacto"])."""

    rank: int = 32  # r, rank of the NMF module (paper: 4, 32, 256)
    seed: int = 0  # fixes split, init and draws
    data_root: str | None = None  # folder holding lfw/ (None: $ADMM_DATA, ./data, ../shared/data)
    # input pixels (the 160×160 crop is resized; default: LFWA's record); Z_1 is C × size/8 × size/8
    image_size: int = DATASETS["lfwa"].input_shape[-1]
    test_fraction: float = LFWA_TEST_FRACTION  # share of identities held out (attribute SVM test + verification)
    data_limit: int | None = None  # smoke mode: only the first N labelled images (alphabetical by person)
    backbone_weights: str | None = None  # a backbone file; None: see backbone_source
    # where block 1 comes from when no file is given: "shipped" = the project's trained backbone
    # (assets/models) when it was trained for exactly these settings and images, else as "train";
    # "train" = the one trained here for these settings (cached), trained now if missing
    backbone_source: str = "shipped"
    backbone_epochs: int = 30  # epochs of the backbone training (if it is trained here; ≈ 25 min on one CPU core)
    backbone_lr: float = 3e-3  # peak Adam lr of that training (one-cycle)
    backbone_id_weight: float = (
        1.0  # weight of the identity softmax beside the triplet loss (0: triplet only, as in the paper)
    )
    backbone_width: int = (
        16  # base width w of a backbone trained here: stages (w, 2w, 4w, 4w); 32 scores higher but costs ~4x
    )
    train_limit: int = 2048  # Block-ADMM training images (whole identities with ≥ 2 images, seeded)
    warmup_iters: int = 12  # iterations with the backbone frozen
    finetune_iters: int = 1  # iterations that also step the backbone
    gamma: float = 1.0  # γ, weight of the NMF term
    beta: float = 1.0  # β_1 = β_2, weight of the coupling terms
    z_lr: float = 0.1  # ζ, step of the Z_2 update
    # how block 2's input S is made in training: "projection" = the test-time map S = P_M(block_1(X))
    # (block 2 learns on what inference gives it; M is fitted to block_1(X) while the backbone is frozen);
    # "admm" = the paper's free variable S (feels block 2, but inference does not reproduce it)
    s_mode: str = "projection"
    # V ← V + step·(Z_1 − MS); 1 = ADMM, 0 = penalty only. With Θ_1 fixed Z_1 = MS and Z_1 = block_1(X) cannot
    # both hold, and V settles at (β/γ)(block_1(X) − MS − U_1) (the fixed point of the Z_1-step) instead of growing
    nmf_dual_step: float = 1.0
    s_steps: int = 3  # projected S steps per iteration
    m_steps: int = 5  # projected M steps per iteration (m_update "gradient")
    # the M-step: "gradient" = m_steps projected gradient steps; "exact" = the convex NNLS in M solved
    # (nmf.solve_m; the paper: with S fixed, M is "a normal convex least-squares problem"). Measured at
    # r = 256: "exact" stalls at a worse factorisation than gradient steps (docs/results/deepfacto.md)
    m_update: str = "gradient"
    fc_lr: float = 1e-3  # η_2, Adam step of block_2 (FC)
    backbone_lr_ft: float = 1e-4  # η_1, Adam step of block_1 in the fine-tune phase
    emb_dim: int = 128  # d, embedding size of the FC layer
    margin: float = 0.2  # triplet margin
    batch_size: int = 128  # minibatch (identity groups of ≤ 4 images)
    eval_images: int = 300  # train / test faces used for the per-iteration verification check
    svm_train_limit: int = 20000  # training-identity images the attribute SVMs are fitted on (default: all)
    # C of LinearSVC (features standardised first): one value, or candidates chosen per attribute by
    # 2-fold cross-validation over the test people (attribute_svms_cv; a fixed 0.01 overfit r = 256's 2,304 features)
    svm_c: tuple = (1e-4, 1e-3, 1e-2)
    svm_grid: int = (
        3  # S and Z_1 are average-pooled to a g × g grid for the SVMs (the paper's S is r × 3 × 3); 1 = global mean
    )
    # who fits the SVMs (the same problem, the same answers): "newton" = all of them at once in torch on
    # `device` (deepfacto/svm.py; 2,304 features: ~2 min on 2 cores); "liblinear" = scikit-learn's
    # LinearSVC, one per process (~20 min there; the runs saved before this field used it)
    svm_solver: str = "newton"
    nnls_tol: float = 1e-3  # tolerance of the test-time projection (relative KKT violation)
    nnls_max_iter: int = 300  # iteration cap of the test-time projection
    device: str = "auto"  # auto | cpu | cuda

    def __post_init__(self):
        check(isinstance(self.rank, int) and self.rank >= 1, "deepfacto.rank", self.rank, "must be a positive integer")
        check(
            isinstance(self.image_size, int) and self.image_size >= 32 and self.image_size % 8 == 0,
            "deepfacto.image_size",
            self.image_size,
            "must be a multiple of 8, ≥ 32",
        )
        check(
            self.data_limit is None or (isinstance(self.data_limit, int) and self.data_limit >= 20),
            "deepfacto.data_limit",
            self.data_limit,
            "must be null or an integer ≥ 20",
        )
        check(
            self.backbone_source in BACKBONE_SOURCES,
            "deepfacto.backbone_source",
            self.backbone_source,
            f"choose one of {list(BACKBONE_SOURCES)}",
        )
        check(0 < self.test_fraction < 1, "deepfacto.test_fraction", self.test_fraction, "must be in (0, 1)")
        for f in (
            "backbone_epochs",
            "backbone_width",
            "train_limit",
            "s_steps",
            "m_steps",
            "emb_dim",
            "batch_size",
            "eval_images",
            "svm_train_limit",
            "svm_grid",
            "nnls_max_iter",
        ):
            v = getattr(self, f)
            check(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                f"deepfacto.{f}",
                v,
                "must be a positive integer",
            )
        for f in ("warmup_iters", "finetune_iters", "seed"):
            v = getattr(self, f)
            check(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"deepfacto.{f}", v, "must be an integer ≥ 0"
            )
        cs = self.svm_c if isinstance(self.svm_c, (list, tuple)) else (self.svm_c,)
        ok = len(cs) > 0 and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0 for c in cs
        )
        check(ok, "deepfacto.svm_c", self.svm_c, "must be a number > 0 or a non-empty list of them")
        object.__setattr__(
            self, "svm_c", tuple(sorted(float(c) for c in cs))
        )  # frozen; ascending: ties go to the smaller C
        for f in ("gamma", "beta", "z_lr", "fc_lr", "backbone_lr", "backbone_lr_ft", "margin", "nnls_tol"):
            v = getattr(self, f)
            check(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0,
                f"deepfacto.{f}",
                v,
                "must be a number > 0",
            )
        check(
            isinstance(self.backbone_id_weight, (int, float))
            and not isinstance(self.backbone_id_weight, bool)
            and self.backbone_id_weight >= 0,
            "deepfacto.backbone_id_weight",
            self.backbone_id_weight,
            "must be a number ≥ 0",
        )
        check(
            isinstance(self.nmf_dual_step, (int, float)) and 0 <= self.nmf_dual_step <= 1,
            "deepfacto.nmf_dual_step",
            self.nmf_dual_step,
            "must be in [0, 1]",
        )
        check(self.s_mode in S_MODES, "deepfacto.s_mode", self.s_mode, f"choose from {list(S_MODES)}")
        check(self.m_update in M_UPDATES, "deepfacto.m_update", self.m_update, f"choose from {list(M_UPDATES)}")
        check(
            self.svm_solver in SVM_SOLVERS,
            "deepfacto.svm_solver",
            self.svm_solver,
            f"choose from {list(SVM_SOLVERS)}",
        )
        check(
            self.device in ("auto", "cpu", "cuda"),
            "deepfacto.device",
            self.device,
            "choose from ['auto', 'cpu', 'cuda']",
        )

    @property
    def iters(self) -> int:
        return self.warmup_iters + self.finetune_iters

    @property
    def method(self) -> DeepFacto:
        """The algorithm's settings, as the method registry holds them (``METHODS["deepfacto"]``)."""
        return DeepFacto(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DeepFacto)})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DeepFactoConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        bad = set(d) - known
        check(not bad, "deepfacto", sorted(bad), f"unknown keys; known: {sorted(known)}")
        return cls(**d)

    @classmethod
    def from_saved(cls, d: dict) -> "DeepFactoConfig":
        """:meth:`from_dict` for a config a run saved: a field it predates takes :data:`SAVED_BEFORE`'s value."""
        return cls.from_dict({**SAVED_BEFORE, **d})

    def replace(self, **kw) -> "DeepFactoConfig":
        return dataclasses.replace(self, **kw)

    def resumed_to(self, iters: int, done: int, field_name: str = "epochs") -> "DeepFactoConfig":
        """This run's config when a resume after ``done`` iterations runs to ``iters`` in all.

        Iterations already done keep their phase: in the warm-up the warm-up phase takes the
        change (the ``finetune_iters`` fine-tune iterations still come last); once the fine-tune
        phase has begun, it takes the change. ``iters == done`` ends the loop there (a run
        stopped in its evaluation then only finishes that). One :class:`ConfigError` naming
        ``field_name`` otherwise.
        """
        if iters == self.iters:
            return self
        check(
            isinstance(iters, int) and not isinstance(iters, bool) and iters >= max(done, 1),
            field_name,
            iters,
            f"the run has done {done} iterations; choose at least {max(done, 1)}",
        )
        if done > self.warmup_iters:  # fine-tuning: the warm-up is history
            return self.replace(finetune_iters=iters - self.warmup_iters)
        check(
            iters - self.finetune_iters >= done,
            field_name,
            iters,
            f"must be at least {done + self.finetune_iters}: {done} warm-up iterations are done "
            f"and the {self.finetune_iters} fine-tune ones come after them",
        )
        return self.replace(warmup_iters=iters - self.finetune_iters)


@functools.lru_cache(maxsize=1)
def field_help() -> dict[str, str]:
    """{field: its comment in :class:`DeepFactoConfig`'s source} (the dashboard's help texts)."""
    import inspect
    import io
    import tokenize

    names = {f.name for f in dataclasses.fields(DeepFactoConfig)}
    out: dict[str, list[str]] = {}
    current, above = None, []  # comments on lines of their own belong to the field below them
    toks = tokenize.generate_tokens(io.StringIO(inspect.getsource(DeepFactoConfig)).readline)
    for tok in toks:
        if tok.type == tokenize.NAME and tok.start[1] == 4 and tok.string in names:
            current = tok.string  # a field's line starts at the class body's indent
            out[current], above = above, []
        elif tok.type == tokenize.NAME and tok.start[1] == 4 and tok.string == "def":
            break
        elif tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("# ").strip()
            if tok.line.strip().startswith("#"):
                above.append(text)
            elif current:
                out[current].append(text)
    return {k: " ".join(v) for k, v in out.items() if v}


def run_config_dict(cfg: DeepFactoConfig) -> dict:
    """config.json of a DeepFacto run; its ``kind`` (:mod:`admm_core.kinds`) is the method's, and it
    names the method, data set and backbone by their registry names."""
    return {
        "kind": DeepFacto.kind,
        "preset": PRESET,
        "method": DeepFacto.name,
        "data": {"name": DeepFacto.data[0], "root": cfg.data_root},
        "model": {"arch": DeepFacto.archs[0], "width": cfg.backbone_width, "rank": cfg.rank},
        "train": {"epochs": cfg.iters, "seed": cfg.seed, "device": cfg.device, "batch_size": cfg.batch_size},
        "deepfacto": cfg.to_dict(),
    }


def read_run_config(run_dir) -> DeepFactoConfig:
    """The :class:`DeepFactoConfig` a run saved (``config.json["deepfacto"]`` of :func:`run_config_dict`)."""
    return DeepFactoConfig.from_saved(json.loads((Path(run_dir) / "config.json").read_text())["deepfacto"])
