"""LFW / LFWA faces: loader, identity-disjoint split, face backbone and triplet loss.

Data (see ../shared/data/README.md): LFW deep-funneled images as ``<root>/lfw/
lfw-deepfunneled-160/<Person>/<Person>_NNNN.jpg`` (160×160 face crops) and the LFWA labels
``<root>/lfw/lfwa_att_40.csv`` (``image`` = ``Person/Person_NNNN.jpg``, then 40 0/1
attributes; 13,143 labelled images). Any LFW folder of ``<Person>/<file>.jpg`` works too:
250×250 originals are cropped to the same 160×160 face crop (offset 48, 48, as the shared
copy was made), other sizes are centre-cropped to a square. Images are resized to the
model's input size (INTER_AREA) and kept as uint8 RGB; a decoded copy is cached under
``$ADMM_CACHE`` (default ``~/.cache/admm_core``) so later runs skip the JPEG decoding.

Split: by identity (no person on both sides), from a seeded permutation of the sorted
person names — the same seed gives the same split on every machine.

Backbone: a ResNet-18-layout CNN (four stages of two BasicBlocks) narrowed for a CPU:
widths (16, 32, 64, 64), stem 3×3 stride 2, last stage at stride 1 (the "last stride 1"
trick, so a 48×48 input keeps a 6×6 map), then a 1×1 conv to ``out_channels`` + BN + ReLU.
That non-negative (C, 8, 8) map is Z_1, the activation DeepFacto factors. For the
backbone's own training a head (global average pool, Linear, L2 normalisation) gives a
face embedding trained with the batch-hard triplet loss (Hermans et al. 2017).

The package, by job: :mod:`.lfw` (images, labels, split, cache, packs: arrays, no torch),
:mod:`.tensors` (faces as tensors, LFWA's loader), :mod:`.backbone` (the network, its weights
files, its training), :mod:`.verification` (pairs and accuracy). The records (the backbone's
table, LFWA's shape and sizes, where LFW lives) are :mod:`admm_core.spec.faces`'. Import the
names from the module that defines them.
"""
