"""DeepFacto's run configuration: :class:`DeepFactoConfig` and the ``config.json`` of a DeepFacto run.

The algorithm's settings are the :class:`~admm_core.spec.methods.deepfacto.DeepFacto` record's
(declared once there, checked by its rules); a run's config derives from that record and declares the
run's own fields here the same way (:func:`~admm_core.spec.settings.setting`: default and help).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import check
from .archs import archs_for
from .config import DEVICES
from .datasets import DATASETS
from .datasets import names_for as datasets_for
from .faces import LFWA_TEST_FRACTION
from .methods.deepfacto import DeepFacto
from .settings import check_fields, setting

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
class DeepFactoConfig(DeepFacto):
    """Everything a DeepFacto run depends on (saved as config.json["deepfacto"]): the algorithm's
    settings (the method's record, :class:`~admm_core.spec.methods.deepfacto.DeepFacto`, declared there
    once, checked by their rules) and the run's own below (the same way; ``__post_init__`` adds the checks no
    rule says). An *epoch*
    is one outer iteration: every update of the method's docstring over all ``admm_images`` training
    images."""

    seed: int = setting(0, "fixes split, init and draws", min=0, label="Seed")
    data_root: str | None = setting(None, "folder holding lfw/ (None: $ADMM_DATA, ./data, ../shared/data)")
    image_size: int = setting(
        DATASETS["lfwa"].input_shape[-1],
        "input pixels (the 160×160 crop is resized; default: LFWA's record); Z_1 is C × size/8 × size/8",
        check=False,
        label="Image size (pixels)",
    )
    test_fraction: float = setting(
        LFWA_TEST_FRACTION,
        "share of identities held out (attribute SVM test + verification)",
        check=False,
        label="Held-out share of people",
    )
    data_limit: int | None = setting(
        None,
        "smoke mode: only the first N labelled images (alphabetical by person)",
        type=int,
        min=20,
        none=True,
        label="Labelled images (0 = all)",
    )
    backbone_weights: str | None = setting(None, "a backbone file; None: see backbone_source")
    backbone_source: str = setting(
        "shipped",
        'where block 1 comes from when no file is given: "shipped" = the project\'s trained backbone '
        '(assets/models) when it was trained for exactly these settings and images, else as "train"; '
        '"train" = the one trained here for these settings (cached), trained now if missing',
        choices=BACKBONE_SOURCES,
        label="Backbone source",
    )
    backbone_epochs: int = setting(
        30, "epochs of the backbone training (if it is trained here; ≈ 25 min on one CPU core)", label="Backbone epochs"
    )
    backbone_lr: float = setting(3e-3, "peak Adam lr of that training (one-cycle)", label="Backbone peak step size")
    backbone_id_weight: float = setting(
        1.0,
        "weight of the identity softmax beside the triplet loss (0: triplet only, as in the paper)",
        positive=False,
        label="Identity-loss weight",
    )
    backbone_width: int = setting(
        16,
        "base width w of a backbone trained here: stages (w, 2w, 4w, 4w); 32 scores higher but costs ~4x",
        label="Backbone width",
    )
    admm_images: int = setting(
        2048,
        "images Block-ADMM trains on (whole identities with ≥ 2 images, seeded)",
        label="Block-ADMM training images",
    )
    warmup_epochs: int = setting(12, "epochs with the backbone frozen", min=0, label="Epochs, backbone frozen")
    finetune_epochs: int = setting(1, "epochs that also step the backbone", min=0, label="Epochs, fine-tuning it")
    batch_size: int = setting(128, "minibatch (identity groups of ≤ 4 images)", label="Batch size")
    eval_images: int = setting(
        300, "train / test faces of the verification check after every epoch", label="Verification faces per epoch"
    )
    svm_train_limit: int = setting(
        20000, "training-identity images the attribute SVMs are fitted on (default: all)", label="SVM training images"
    )
    svm_c: tuple = setting(
        (1e-4, 1e-3, 1e-2),
        "C of LinearSVC (features standardised first): one value, or candidates chosen per attribute by "
        "2-fold cross-validation over the test people (attribute_svms_cv; a fixed 0.01 overfit r = 256's "
        "2,304 features)",
        check=False,
        label="SVM C (one, or candidates)",
    )
    svm_grid: int = setting(
        3,
        "S and Z_1 are average-pooled to a g × g grid for the SVMs (the paper's S is r × 3 × 3); 1 = global mean",
        label="SVM pooling grid g",
    )
    svm_solver: str = setting(
        "newton",
        'who fits the SVMs (the same problem, the same answers): "newton" = all of them at once in torch on '
        '`device` (deepfacto/svm.py; 2,304 features: ~2 min on 2 cores); "liblinear" = scikit-learn\'s '
        "LinearSVC, one per process (~20 min there; the runs saved before this field used it)",
        choices=SVM_SOLVERS,
        label="SVM solver",
    )
    nnls_tol: float = setting(
        1e-3, "tolerance of the test-time projection (relative KKT violation)", label="Projection tolerance"
    )
    nnls_max_iter: int = setting(300, "iteration cap of the test-time projection", label="Projection iteration cap")
    device: str = setting("auto", "auto | cpu | cuda", choices=DEVICES, label="Device")

    def __post_init__(self):
        check_fields(self, "deepfacto")  # the algorithm's settings and the run's, by their rules
        check(
            isinstance(self.image_size, int) and self.image_size >= 32 and self.image_size % 8 == 0,
            "deepfacto.image_size",
            self.image_size,
            "must be a multiple of 8, ≥ 32",
        )
        check(0 < self.test_fraction < 1, "deepfacto.test_fraction", self.test_fraction, "must be in (0, 1)")
        cs = self.svm_c if isinstance(self.svm_c, (list, tuple)) else (self.svm_c,)
        ok = len(cs) > 0 and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0 for c in cs
        )
        check(ok, "deepfacto.svm_c", self.svm_c, "must be a number > 0 or a non-empty list of them")
        # frozen; ascending: ties go to the smaller C
        object.__setattr__(self, "svm_c", tuple(sorted(float(c) for c in cs)))

    @property
    def epochs(self) -> int:
        return self.warmup_epochs + self.finetune_epochs

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


def field_help() -> dict[str, str]:
    """{field: help} of every field (the dashboard's help texts), as each field declares it."""
    return {f.name: f.metadata["help"] for f in dataclasses.fields(DeepFactoConfig)}


def records() -> tuple[str, str]:
    """(data set, architecture) of DeepFacto's runs: the registry entries of its kind (their ``kind``
    fields say so; one of each)."""
    (data,), (arch,) = datasets_for(DeepFacto.kind), archs_for(DeepFacto.kind)
    return data, arch


def run_dir_name(cfg: DeepFactoConfig) -> str:
    """The name a new DeepFacto run directory takes after its time stamp (admm_core.rundir.unique_run_dir)."""
    return f"{PRESET}-r{cfg.rank}-s{cfg.seed}"


def run_config_dict(cfg: DeepFactoConfig) -> dict:
    """config.json of a DeepFacto run; its ``kind`` (:mod:`admm_core.spec.kinds`) is the method's, and it
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
