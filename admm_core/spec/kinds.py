"""What kind of run a run directory holds: the one place that decides it.

A run records its kind: ``status.json["kind"]`` (written by the run loop when the run starts,
:mod:`admm_core.loop`) and ``config.json["kind"]`` (written when the run is created, before any
worker starts: the kind of its method, ``kind`` on the method class of
:data:`admm_core.spec.methods.METHODS`). Runs saved before the kind was recorded are read by the rule
of their time: a top-level ``deepfacto`` key in config.json, or a preset whose name starts with
``lfwa``, is a DeepFacto run; anything else trained a network.

No torch, no run files read here: callers pass the dicts they already hold.
"""

from __future__ import annotations

KINDS = {
    "network": "a split network trained by a method (admm_core.network)",
    "deepfacto": "DeepFacto on LFWA: face backbone, NMF module, triplet FC; attribute SVMs (admm_core.deepfacto)",
}
NETWORK, DEEPFACTO = "network", "deepfacto"


def run_kind(cfg: dict | None, status: dict | None = None) -> str:
    """The kind of the run whose config.json is ``cfg`` (and status.json ``status``, if at hand):
    the kind it recorded, else the old layout's rule (module docstring)."""
    for rec in (cfg, status):
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if isinstance(kind, str) and kind in KINDS:  # a damaged file may hold any JSON value there
            return kind
    cfg = cfg if isinstance(cfg, dict) else {}
    if DEEPFACTO in cfg or str(cfg.get("preset") or "").startswith("lfwa"):  # the layout before kinds
        return DEEPFACTO
    return NETWORK


def run_method(cfg: dict | None, status: dict | None = None) -> str | None:
    """The registry name of the method that trained the run: config.json's ``method`` for a
    network run; ``deepfacto`` for a DeepFacto run, whose config.json said "block-admm" before
    DeepFacto was a method of the registry (the kind's one method bears the kind's name)."""
    if run_kind(cfg, status) == DEEPFACTO:
        return DEEPFACTO
    method = cfg.get("method") if isinstance(cfg, dict) else None
    return method if isinstance(method, str) else None
