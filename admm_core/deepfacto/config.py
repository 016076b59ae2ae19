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
from .method import DeepFacto, DeepFactoSettings, records

PRESET = "lfwa-deepfacto"
PAPER_MEAN = {4: 74.8, 32: 81.4, 256: 87.0}  # paper table attr_lfw, mean over the 40 attributes (%)
SVM_SOLVERS = ("liblinear", "newton")
BACKBONE_SOURCES = ("shipped", "train")
# fields added after runs were saved, with the value those runs used (their config.json lacks them)
SAVED_BEFORE = {"svm_solver": "liblinear", "backbone_source": "train"}
# fields renamed since (old name -> new): the engine says epochs, and data.train_limit means another thing
RENAMED = {"train_limit": "admm_images", "warmup_iters": "warmup_epochs", "finetune_iters": "finetune_epochs"}


STATE_FILE = "state.pt"  # loop state for --resume (deleted when the run finishes)


@dataclass(frozen=True)
class DeepFactoConfig(DeepFactoSettings):
    """Everything a DeepFacto run depends on (saved as config.json["deepfacto"]): the algorithm's
    settings (:class:`~admm_core.deepfacto.method.DeepFactoSettings`, declared there once, checked by
    :class:`DeepFacto`) and the run's own below. An *epoch* is one outer iteration: every update of
    the method's docstring over all ``admm_images`` training images."""

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
    admm_images: int = 2048  # images Block-ADMM trains on (whole identities with ≥ 2 images, seeded)
    warmup_epochs: int = 12  # epochs with the backbone frozen
    finetune_epochs: int = 1  # epochs that also step the backbone
    batch_size: int = 128  # minibatch (identity groups of ≤ 4 images)
    eval_images: int = 300  # train / test faces of the verification check after every epoch
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
        _ = self.method  # building DeepFacto checks the algorithm's settings ("deepfacto.<field>: ...")
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
            "admm_images",
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
        for f in ("warmup_epochs", "finetune_epochs", "seed"):
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
        for f in ("backbone_lr", "nnls_tol"):
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
    def epochs(self) -> int:
        return self.warmup_epochs + self.finetune_epochs

    @property
    def method(self) -> DeepFacto:
        """The algorithm's settings, as the method registry holds them (``METHODS["deepfacto"]``)."""
        return DeepFacto(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DeepFactoSettings)})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DeepFactoConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        bad = set(d) - known
        renamed = {k: RENAMED[k] for k in sorted(bad) if k in RENAMED}
        check(
            not renamed, "deepfacto", sorted(renamed), f"renamed: {', '.join(f'{a} → {b}' for a, b in renamed.items())}"
        )
        check(not bad, "deepfacto", sorted(bad), f"unknown keys; known: {sorted(known)}")
        return cls(**d)

    @classmethod
    def from_saved(cls, d: dict) -> "DeepFactoConfig":
        """:meth:`from_dict` for a config a run saved: a field it predates takes :data:`SAVED_BEFORE`'s value,
        a field saved under its old name (:data:`RENAMED`) is read under the new one."""
        return cls.from_dict(saved_fields(d))

    def replace(self, **kw) -> "DeepFactoConfig":
        return dataclasses.replace(self, **kw)

    def resumed_to(self, epochs: int, done: int, field_name: str = "epochs") -> "DeepFactoConfig":
        """This run's config when a resume after ``done`` epochs runs to ``epochs`` in all.

        Epochs already done keep their phase: in the warm-up the warm-up phase takes the
        change (the ``finetune_epochs`` fine-tune epochs still come last); once the fine-tune
        phase has begun, it takes the change. ``epochs == done`` ends the loop there (a run
        stopped in its evaluation then only finishes that). One :class:`ConfigError` naming
        ``field_name`` otherwise.
        """
        if epochs == self.epochs:
            return self
        check(
            isinstance(epochs, int) and not isinstance(epochs, bool) and epochs >= max(done, 1),
            field_name,
            epochs,
            f"the run has done {done} epochs; choose at least {max(done, 1)}",
        )
        if done > self.warmup_epochs:  # fine-tuning: the warm-up is history
            return self.replace(finetune_epochs=epochs - self.warmup_epochs)
        check(
            epochs - self.finetune_epochs >= done,
            field_name,
            epochs,
            f"must be at least {done + self.finetune_epochs}: {done} warm-up epochs are done "
            f"and the {self.finetune_epochs} fine-tune ones come after them",
        )
        return self.replace(warmup_epochs=epochs - self.finetune_epochs)


def saved_names(d: dict) -> dict:
    """``d`` with the fields saved under an old name (:data:`RENAMED`) under their new one."""
    return {RENAMED.get(k, k): v for k, v in d.items()}


def saved_fields(d: dict) -> dict:
    """A saved ``config.json["deepfacto"]`` as today's fields: old names renamed (:func:`saved_names`),
    a field the run predates at the value it ran with (:data:`SAVED_BEFORE`)."""
    return {**SAVED_BEFORE, **saved_names(d)}


@functools.lru_cache(maxsize=1)
def field_help() -> dict[str, str]:
    """{field: help} (the dashboard's help texts): the algorithm's settings carry theirs
    (:class:`~admm_core.deepfacto.method.DeepFactoSettings`); the run's own fields, their comment in
    :class:`DeepFactoConfig`'s source."""
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
    settings = {f.name: f.metadata["help"] for f in dataclasses.fields(DeepFactoSettings)}
    return {**settings, **{k: " ".join(v) for k, v in out.items() if v}}


def run_config_dict(cfg: DeepFactoConfig) -> dict:
    """config.json of a DeepFacto run; its ``kind`` (:mod:`admm_core.kinds`) is the method's, and it
    names the method, data set and backbone by their registry names."""
    return {
        "kind": DeepFacto.kind,
        "preset": PRESET,
        "method": DeepFacto.name,
        "data": {"name": records()[0], "root": cfg.data_root},
        "model": {"arch": records()[1], "width": cfg.backbone_width, "rank": cfg.rank},
        "train": {"epochs": cfg.epochs, "seed": cfg.seed, "device": cfg.device, "batch_size": cfg.batch_size},
        "deepfacto": cfg.to_dict(),
    }


def read_run_config(run_dir) -> DeepFactoConfig:
    """The :class:`DeepFactoConfig` a run saved (``config.json["deepfacto"]`` of :func:`run_config_dict`)."""
    return DeepFactoConfig.from_saved(json.loads((Path(run_dir) / "config.json").read_text())["deepfacto"])
