"""DeepFacto on LFWA (paper §DeepFacto): a face backbone, an NMF module, a triplet-trained FC layer,
trained by Block-ADMM; attribute SVMs on the NMF scores S.

    config      DeepFactoConfig (validated with admm_core.errors.check), a run's config.json
    backbone    block 1: a given, cached or freshly trained face backbone
    trainer     DeepFactoTrainer: the Block-ADMM iterations (the math is in its docstring)
    attributes  attribute SVMs, pooling, majority baseline
    inference   checkpoint.pt, InferenceModel, the run's held-out people
    run         train_deepfacto (the engine's run lifecycle), evaluate_run
    commands    admm train --preset lfwa-deepfacto, admm deepfacto bench | evaluate

    python -m admm_core train --preset lfwa-deepfacto --rank 32
    python -m admm_core deepfacto bench --ranks 4,32,256 --markdown docs/results/deepfacto.md
"""

from .attributes import (
    attribute_evaluation,
    attribute_svms,
    attribute_svms_cv,
    identity_holdout,
    majority_baseline,
    pooled,
    pooled_features,
)
from .backbone import backbone_cache_path, get_backbone
from .commands import bench, bench_table, cli_train, config_from_cli, evaluate, new_run_dir
from .config import PAPER_MEAN, PRESET, S_MODES, DeepFactoConfig, run_config_dict
from .inference import InferenceModel, load_inference_model, save_inference, test_faces, test_people
from .run import EVAL_FIELDS, STATE_FILE, evaluate_run, run_indices, train_deepfacto
from .trainer import DeepFactoState, DeepFactoTrainer

__all__ = [
    "EVAL_FIELDS",
    "PAPER_MEAN",
    "PRESET",
    "STATE_FILE",
    "S_MODES",
    "DeepFactoConfig",
    "DeepFactoState",
    "DeepFactoTrainer",
    "InferenceModel",
    "attribute_evaluation",
    "attribute_svms",
    "attribute_svms_cv",
    "backbone_cache_path",
    "bench",
    "bench_table",
    "cli_train",
    "config_from_cli",
    "evaluate",
    "evaluate_run",
    "get_backbone",
    "identity_holdout",
    "load_inference_model",
    "majority_baseline",
    "new_run_dir",
    "pooled",
    "pooled_features",
    "run_config_dict",
    "run_indices",
    "save_inference",
    "test_faces",
    "test_people",
    "train_deepfacto",
]
