"""A study's record (:class:`SweepSpec`, stored in the study's user attributes), its Optuna storage,
sampler and pruner, and its trial counts; creating, resuming and repairing a study."""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import ConfigError, check
from ..rundir import default_runs_dir, read_json, write_json
from ..spec.config import RunConfig
from ..spec.presets import preset_config
from ..spec.settings import MAX_INT
from ..status import pid_alive
from .space import Dim, parse_space, preset_values

OBJECTIVES = {"best_test_accuracy": "maximize", "time_to_95_s": "minimize"}
PRUNERS = ("median", "hyperband", "none")
HEARTBEAT_S = 60  # Optuna heartbeat: a trial silent for 2 × this is failed by the next worker


CLI_NAMES = {"trials": "--trials", "epochs": "--epochs", "train_limit": "--train-limit", "jobs": "--jobs"}


def budget_problems(trials, epochs=None, train_limit=None, jobs=1, names: dict | None = None) -> dict[str, str]:
    """{field: message} for each wrong number of a study's budget (every one at once): trials, epochs
    per trial and worker processes are positive integers, the training samples a count ≥ 0 (0 or
    None: all; epochs None: the preset's). ``names``: how the messages name the fields (default the
    command line's flags; the dashboard gives its labels)."""
    names = {**CLI_NAMES, **(names or {})}
    out = {}
    for key, v, lo in (
        ("trials", trials, 1),
        ("epochs", epochs, 1),
        ("train_limit", train_limit, 0),
        ("jobs", jobs, 1),
    ):
        if v is None and key != "trials":
            continue
        if not (isinstance(v, int) and not isinstance(v, bool) and lo <= v <= MAX_INT):
            what = "a positive integer" if lo == 1 else "a whole number ≥ 0 (0: all)"
            out[key] = f"{names[key]} = {v!r}: must be {what}"
    return out


def name_problem(name, field: str = "--name") -> str | None:
    """Why ``name`` cannot name a study, or None: it is a non-empty text without '/' (``field``: how
    the message names it; the dashboard gives its label)."""
    if isinstance(name, str) and name and "/" not in name:
        return None
    return f"{field} = {name!r}: give a non-empty name without '/'"


@dataclass
class SweepSpec:
    """What a study searches; stored in the study's user attributes so a resume needs only its name."""

    name: str
    preset: str
    method: str
    space: list[str]
    trials: int = 20  # budget: finished + pruned trials
    objective: str = "best_test_accuracy"
    epochs: int | None = None  # None: the preset's
    pruner: str = "median"
    train_limit: int | None = None
    test_limit: int | None = None
    seed: int | None = None  # sampler seed (None: random)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if why := name_problem(self.name):
            raise ConfigError(why)
        check(self.objective in OBJECTIVES, "--objective", self.objective, f"choose from {list(OBJECTIVES)}")
        check(self.pruner in PRUNERS, "--pruner", self.pruner, f"choose from {list(PRUNERS)}")
        for message in budget_problems(self.trials, self.epochs, self.train_limit).values():
            raise ConfigError(message)
        _ = self.dims  # validates the space against the base config

    def base_config(self) -> RunConfig:
        return preset_config(self.preset, self.method).shortened(self.epochs, self.train_limit, self.test_limit)

    @property
    def dims(self) -> list[Dim]:
        return parse_space(list(self.space), self.base_config())

    @property
    def direction(self) -> str:
        return OBJECTIVES[self.objective]

    def to_attrs(self) -> dict:
        return asdict(self)

    @classmethod
    def from_attrs(cls, d: dict) -> "SweepSpec":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def default_storage(root: str | Path | None = None) -> str:
    """SQLite file under the runs root."""
    root = Path(root or default_runs_dir()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'sweeps.db'}"


def open_storage(url: str | None = None, root: str | Path | None = None):
    """Optuna RDB storage with a heartbeat (stale trials of lost workers are failed and retried)."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = url or default_storage(root)
    kw = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    try:
        with warnings.catch_warnings():  # heartbeat and the retry callback are marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=kw,
                heartbeat_interval=HEARTBEAT_S,
                grace_period=2 * HEARTBEAT_S,
                heartbeat_stale_trial_callback=_retry(),
            )
    except Exception as e:  # a bad URL / unreachable server: one line naming it
        raise ConfigError(f"--storage = {url!r}: cannot open ({type(e).__name__}: {e})") from None


def _retry():
    """Queue a failed trial's settings once more (its run is lost, its point in the space is not)."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)


def make_pruner(name: str, epochs: int):
    import optuna

    if name == "median":
        # epoch 1 of ADMM is often behind and catches up: judge from epoch 2 on
        return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=min(2, max(epochs - 1, 0)))
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(epochs, 1), reduction_factor=3)
    return optuna.pruners.NopPruner()


def _sampler(spec: SweepSpec, salt: int = 0):
    import optuna

    seed = None if spec.seed is None else spec.seed + salt
    return optuna.samplers.TPESampler(n_startup_trials=min(10, max(3, spec.trials // 3)), seed=seed)


def study_names(storage) -> list[str]:
    import optuna

    return optuna.study.get_all_study_names(storage)


def load_study(name: str, storage, salt: int = 0):
    """An existing study with its SweepSpec-based sampler (seed + ``salt``) and pruner."""
    import optuna

    check(name in study_names(storage), "--name", name, "no such study in this storage")
    study = optuna.load_study(study_name=name, storage=storage)
    spec = SweepSpec.from_attrs(study.user_attrs["sweep"])
    epochs = spec.base_config().train.epochs
    return optuna.load_study(
        study_name=name, storage=storage, sampler=_sampler(spec, salt), pruner=make_pruner(spec.pruner, epochs)
    )


def worker_study(name: str, storage, worker: int = 0):
    """(study, spec) for one worker process, its sampler seeded by (seed, trials so far, worker).

    A seeded sampler restarted with the same seed replays its random draws: a resumed study
    re-ran the settings of its first trials, and parallel workers drew the same points. Salting
    by the number of trials already in the study and the worker's index keeps a one-worker study
    reproducible and makes every restart and every worker draw new points.
    """
    study = load_study(name, storage)
    spec = SweepSpec.from_attrs(study.user_attrs["sweep"])
    if spec.seed is None:
        return study, spec
    return load_study(name, storage, salt=1_000_003 * len(study.trials) + 7919 * worker), spec


def create_or_resume(spec: SweepSpec | None, name: str, storage, budget: int | None = None):
    """(study, spec): a new study for ``spec``, or the stored one called ``name`` (``spec`` must match)."""
    import optuna

    if name in study_names(storage):
        study = load_study(name, storage)
        stored = SweepSpec.from_attrs(study.user_attrs["sweep"])
        if spec is not None:
            for key in ("preset", "method", "space", "objective", "epochs", "train_limit", "test_limit"):
                a, b = getattr(spec, key), getattr(stored, key)
                if b != a and a not in (None, [], ""):
                    raise ConfigError(
                        f"--{key.replace('_', '-')} = {a!r}: study {name!r} was made with {b!r} (use another --name)"
                    )
        if budget and budget != stored.trials:
            stored.trials = budget
            study.set_user_attr("sweep", stored.to_attrs())
        return study, stored
    check(spec is not None, "--name", name, "no such study: give --preset, --method and --space to create it")
    epochs = spec.base_config().train.epochs
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction=spec.direction,
        sampler=_sampler(spec),
        pruner=make_pruner(spec.pruner, epochs),
    )
    study.set_user_attr("sweep", spec.to_attrs())
    study.set_user_attr("created", time.time())
    # trial 0 is the preset's own settings (where the space contains them): the yardstick
    base = spec.base_config()
    preset_params = preset_values(base, spec.dims)
    if preset_params:
        study.enqueue_trial(preset_params, user_attrs={"preset": True})
    return study, spec


def fail_dead_trials(study) -> list[int]:
    """Mark RUNNING trials whose worker (on this host) is gone as failed and queue their settings again."""
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        pid, thost = t.user_attrs.get("pid"), t.user_attrs.get("host")
        if not pid or thost != host or pid_alive(int(pid)):
            continue  # another machine's worker: Optuna's heartbeat handles it
        if not study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL):
            continue
        failed.append(t.number)
        run_dir = t.user_attrs.get("run_dir")
        if run_dir and (Path(run_dir) / "status.json").exists():
            st = read_json(Path(run_dir) / "status.json", {}) or {}
            write_json(
                Path(run_dir) / "status.json",
                {**st, "state": "crashed", "error": f"sweep worker {pid} died; trial {t.number} marked failed"},
            )
        _retry()(study, study._storage.get_trial(t._trial_id))
    return failed


def counts(study) -> dict:
    from optuna.trial import TrialState

    out = {s.name.lower(): 0 for s in TrialState}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name.lower()] += 1
    return out


def remaining(study, budget: int) -> int:
    c = counts(study)
    return max(0, budget - c["complete"] - c["pruned"] - c["running"])
