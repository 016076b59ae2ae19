"""DeepFacto on LFWA (paper §DeepFacto): a face backbone, an NMF module, a triplet-trained FC layer,
trained by Block-ADMM; attribute SVMs on the NMF scores S.

    config      DeepFactoConfig (validated with admm_core.errors.check), a run's config.json
    backbone    block 1: a given, cached or freshly trained face backbone
    trainer     DeepFactoTrainer: the Block-ADMM iterations (the math is in its docstring)
    attributes  attribute SVMs, pooling, majority baseline
    inference   checkpoint.pt, InferenceModel, the run's held-out people
    run         DeepFactoTask (a task of the engine's run loop), train_deepfacto, evaluate_run
    commands    admm train --preset lfwa-deepfacto, admm deepfacto bench | evaluate

    python -m admm_core train --preset lfwa-deepfacto --rank 32
    python -m admm_core deepfacto bench --ranks 4,32,256 --markdown docs/results/deepfacto.md

The names below are imported from their submodule when first used (PEP 562), so reading a
run's config (``admm_core.deepfacto.config``) does not import the trainer, the SVMs or PyTorch:
the dashboard's Runs, Compare and Train pages stay without torch (admm_core.lazy).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "DeepFactoConfig": "config",
    "DeepFactoState": "trainer",
    "DeepFactoTask": "run",
    "DeepFactoTrainer": "trainer",
    "EVAL_FIELDS": "run",
    "InferenceModel": "inference",
    "PAPER_MEAN": "config",
    "PRESET": "config",
    "STATE_FILE": "config",
    "S_MODES": "method",
    "attribute_evaluation": "attributes",
    "attribute_svms": "attributes",
    "attribute_svms_cv": "attributes",
    "backbone_cache_path": "backbone",
    "bench": "commands",
    "bench_table": "commands",
    "cli_train": "commands",
    "config_from_cli": "commands",
    "evaluate": "commands",
    "evaluate_run": "run",
    "get_backbone": "backbone",
    "identity_holdout": "attributes",
    "load_inference_model": "inference",
    "majority_baseline": "attributes",
    "new_run_dir": "commands",
    "pooled": "attributes",
    "pooled_features": "attributes",
    "run_config_dict": "config",
    "run_indices": "run",
    "save_inference": "inference",
    "test_faces": "heldout",
    "test_people": "heldout",
    "train_deepfacto": "run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # once: later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
