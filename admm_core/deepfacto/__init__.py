"""DeepFacto on LFWA (paper §DeepFacto): a face backbone, an NMF module, a triplet-trained FC layer,
trained by Block-ADMM; attribute SVMs on the NMF scores S.

    backbone    block 1: a given, cached or freshly trained face backbone
    trainer     DeepFactoTrainer: the Block-ADMM iterations (the math is in its docstring)
    attributes  attribute SVMs, pooling, majority baseline
    inference   checkpoint.pt, InferenceModel, the run's held-out people
    run         DeepFactoTask (a task of the engine's run loop), train_deepfacto, evaluate_run
    commands    admm train --preset lfwa-deepfacto, admm deepfacto bench | evaluate

    python -m admm_core train --preset lfwa-deepfacto --rank 32
    python -m admm_core deepfacto bench --ranks 4,32,256 --markdown docs/results/deepfacto.md

Its records (the method, a run's DeepFactoConfig, the face backbone and LFWA) are the spec layer's:
:mod:`admm_core.spec.deepfacto`, :mod:`admm_core.spec.methods.deepfacto`, :mod:`admm_core.spec.faces`.
Import the names from the module that defines them.
"""
