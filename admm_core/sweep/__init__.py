"""Sweeps: Optuna studies whose trials are ordinary run directories.

A sweep searches a preset's settings for one method. Each trial is trained by
:func:`admm_core.network.train` into its own run directory (so the Compare and Runs pages see
it) and tagged with its study and trial number in ``meta.json``
(``{"name", "tags": ["study:<name>", "trial:<n>"], "note"}``) and in ``summary.json["sweep"]``.

The search space is a list of ``NAME=KIND:ARGS`` strings::

    beta=log:0.1:10          float on a log scale, 0.1 ≤ β ≤ 10
    z_lr=float:0.1:1         float, uniform
    primal_steps=int:1:5     integer (``logint`` on a log scale)
    split=choice:fc1|fc1,fc2 one of the listed values ('|' separates them)

NAME is any setting of the method (``admm methods``), or ``split``, ``hidden`` (the MLP
widths, e.g. ``hidden=choice:64,64|128,128``), ``loss`` or ``batch_size``.

Storage is an Optuna RDB study: by default the SQLite file ``<runs root>/sweeps.db``
(embedded, nothing to start); any URL Optuna's RDBStorage accepts (``postgresql://…``,
``mysql://…``) lets workers on several machines pull trials from one study. Running the
same ``--name`` again resumes the study up to its trial budget (finished + pruned trials).
A trial whose worker died (killed, machine lost) is marked failed and its settings are
queued again: at once when the worker ran on this host (its pid is gone), otherwise by
Optuna's heartbeat after the grace period.

Pruning: after each epoch the trial reports its test accuracy (test error when the
objective is a time, which is minimised) through ``train``'s ``on_progress`` hook; the
pruner (median or Hyperband) may stop it. A pruned trial ends as a clean stop of its run
and the run directory says ``pruned`` (status.json state and summary.json status).

One module a job: :mod:`.space` (the search space), :mod:`.study` (a study's record, storage,
sampler and pruner), :mod:`.worker` (the objective and the workers), :mod:`.report` (reading a
study back, the Markdown report and its PNG), :mod:`.launcher` (the dashboard's background launch).
Their public names are re-exported here, but for the worker's (it trains, so it imports torch):
the dashboard's Sweeps page reads and launches studies without torch; the trials run in worker
processes (``from admm_core.sweep.worker import run_sweep``).
"""

from .launcher import launch
from .report import (
    best_config,
    importance_png,
    importances,
    markdown_report,
    trial_time_s,
    trials_table,
    wall_time_s,
)
from .space import (
    KINDS,
    STRUCTURAL,
    Dim,
    apply_params,
    convert,
    fmt_value,
    parse_dim,
    parse_space,
    preset_values,
    space_names,
    space_problems,
    split_dim,
)
from .study import (
    HEARTBEAT_S,
    OBJECTIVES,
    PRUNERS,
    SweepSpec,
    budget_problems,
    counts,
    create_or_resume,
    default_storage,
    fail_dead_trials,
    load_study,
    make_pruner,
    name_problem,
    open_storage,
    remaining,
    study_names,
    worker_study,
)

__all__ = [
    "KINDS", "STRUCTURAL", "Dim", "apply_params", "convert", "parse_dim", "parse_space", "preset_values",
    "space_names", "space_problems", "split_dim", "budget_problems", "HEARTBEAT_S", "OBJECTIVES", "PRUNERS", "SweepSpec", "counts", "create_or_resume",
    "default_storage", "fail_dead_trials", "load_study", "make_pruner", "name_problem", "open_storage", "remaining",
    "study_names", "worker_study",
    "best_config", "importance_png", "importances", "markdown_report", "trial_time_s", "trials_table",
    "wall_time_s", "launch",
    "fmt_value",
]  # fmt: skip
