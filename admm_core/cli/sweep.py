"""``admm sweep``: create or resume an Optuna study whose trials are run directories (:mod:`admm_core.sweep`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .. import sweep as S
from ..rundir import default_runs_dir
from ..spec.config import ConfigError
from ..spec.kinds import NETWORK
from ..spec.methods import names_for as methods_for
from ..spec.presets import PRESETS
from ..status import install_stop_handlers
from ..sweep import OBJECTIVES, PRUNERS
from ..sweep.worker import Interrupted, run_sweep, run_worker

NAME = "sweep"


def add_parser(sub) -> None:
    # the kinds and the settings beyond a method's own, from the space's own tables
    ranged = "|".join(k for k in S.KINDS if k != "choice")
    *structural, last = S.STRUCTURAL
    w = sub.add_parser(
        NAME,
        help="Optuna study over a method's settings; every trial is a run directory",
        description="Create (or resume, with --name of an existing study) an Optuna study. "
        f"Space: NAME=KIND:ARGS with KIND {ranged} (LOW:HIGH) or choice (A|B|C); NAME is a method "
        f"setting (see `methods`), {', '.join(structural)} or {last}.",
    )
    w.add_argument("--preset", help=f"one of: {', '.join(PRESETS)}")
    w.add_argument("--method", help=f"one of: {', '.join(methods_for(NETWORK))}")
    w.add_argument(
        "--trials", type=int, help="trial budget: finished + pruned trials (default 20; raises a resumed study's)"
    )
    w.add_argument(
        "--space", action="append", metavar="NAME=KIND:ARGS", help="e.g. beta=log:0.1:10 or split=choice:fc1|fc1,fc2"
    )
    w.add_argument("--objective", choices=list(OBJECTIVES), default="best_test_accuracy")
    w.add_argument("--epochs", type=int, help="epochs per trial (default: the preset's)")
    w.add_argument("--pruner", choices=list(PRUNERS), default="median")
    w.add_argument("--jobs", type=int, default=1, help="worker processes pulling trials from the study")
    w.add_argument("--storage", help="Optuna RDB URL (default: sqlite:///<runs root>/sweeps.db)")
    w.add_argument("--name", help="study name (default: <preset>-<method>-<time>); an existing one is resumed")
    w.add_argument("--train-limit", type=int, help="use only the first N training samples")
    w.add_argument("--test-limit", type=int, help="use only the first N test samples")
    w.add_argument("--seed", type=int, help="sampler seed (default: random)")
    w.add_argument("--markdown", metavar="FILE", help="write the study's report (best vs preset, trial table) here")
    w.add_argument("--importance-png", metavar="FILE", help="write the parameter-importance plot here")
    w.add_argument("--report", action="store_true", help="only write --markdown / --importance-png of study --name")
    w.add_argument("--quiet", action="store_true", help="no per-trial log lines")
    w.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # index of an extra worker process
    w.set_defaults(func=run)


def run(a) -> int:
    """Create or resume an Optuna study whose trials are run directories (admm_core.sweep)."""
    root = default_runs_dir()
    storage = S.open_storage(a.storage, root)
    exists = bool(a.name) and a.name in S.study_names(storage)
    spec = None
    if a.preset or a.method or a.space or not exists:
        for flag, v in (("--preset", a.preset), ("--method", a.method), ("--space", a.space)):
            if not v and not exists:
                raise ConfigError(f"{flag}: required to create a study (or give --name of an existing one)")
        name = a.name or f"{a.preset}-{a.method}-{time.strftime('%Y%m%d-%H%M%S')}"
        if not exists:
            spec = S.SweepSpec(
                name=name,
                preset=a.preset,
                method=a.method,
                space=a.space,
                trials=a.trials or 20,
                objective=a.objective,
                epochs=a.epochs,
                pruner=a.pruner,
                train_limit=a.train_limit,
                test_limit=a.test_limit,
                seed=a.seed,
            )
        else:  # resuming with the creation flags repeated: they must agree with the stored study
            stored = S.SweepSpec.from_attrs(S.load_study(a.name, storage).user_attrs["sweep"])
            spec = S.SweepSpec(
                **{
                    **stored.to_attrs(),
                    "preset": a.preset or stored.preset,
                    "method": a.method or stored.method,
                    "space": a.space or stored.space,
                }
            )
    else:
        name = a.name
    log = (lambda *x: None) if a.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    should_stop = install_stop_handlers()
    try:
        if a.worker is not None:
            run_worker(name, storage, root, should_stop, log, worker=a.worker)
            return 0
        if a.report:  # the report of a stored study as it stands (dead workers' trials marked failed)
            study = S.load_study(name, storage)
            S.fail_dead_trials(study)
        else:
            log(f"study {name} in {a.storage or S.default_storage(root)}")
            study, spec = run_sweep(spec, name, a.storage, root, a.jobs, a.trials, should_stop, log)
    except Interrupted:
        return 130
    c = S.counts(study)
    out = {"study": name, "trials": c, "wall_time_s": round(S.wall_time_s(study), 1)}
    try:
        out["best"] = {"trial": study.best_trial.number, "value": study.best_value, "params": study.best_params}
        out["best"]["run_dir"] = study.best_trial.user_attrs.get("run_dir")
    except ValueError:
        out["best"] = None
    png = None
    if a.importance_png:
        png = S.importance_png(study, Path(a.importance_png))
    if a.markdown:
        md = Path(a.markdown)
        md.parent.mkdir(parents=True, exist_ok=True)
        rel = None if png is None else os.path.relpath(png, md.parent)
        md.write_text(S.markdown_report(study, rel))
        log(f"wrote {md}")
    print(json.dumps(out, indent=2))
    return 0
