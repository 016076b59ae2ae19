"""Sweeps: Optuna studies whose trials are ordinary run directories.

A sweep searches a preset's settings for one method. Each trial is trained by
:func:`admm_core.runs.train` into its own run directory (so the Compare and Runs pages see
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
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .config import RunConfig
from .errors import ConfigError, check
from .methods import METHODS
from .presets import preset_config
from .runs import (
    DISK_FULL,
    default_runs_dir,
    pid_alive,
    read_json,
    read_metrics,
    summarize,
    train,
    unique_run_dir,
    write_json,
)

KINDS = ("float", "log", "int", "logint", "choice")
OBJECTIVES = {"best_test_accuracy": "maximize", "time_to_95_s": "minimize"}
PRUNERS = ("median", "hyperband", "none")
# settings outside the method's own: name -> the RunConfig field it replaces
STRUCTURAL = {
    "split": "model__split",
    "hidden": "model__hidden",
    "loss": "train__loss",
    "batch_size": "train__batch_size",
}
HEARTBEAT_S = 60  # Optuna heartbeat: a trial silent for 2 × this is failed by the next worker


# --- the search space ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Dim:
    """One dimension of the space: ``name=kind:low:high`` or ``name=choice:a|b|c``."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        if self.kind == "choice":
            return f"{self.name}=choice:{'|'.join(self.choices)}"
        return f"{self.name}={self.kind}:{_num(self.low)}:{_num(self.high)}"

    def suggest(self, trial):
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind in ("int", "logint"):
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.kind == "logint")
        return trial.suggest_float(self.name, self.low, self.high, log=self.kind == "log")

    def contains(self, value) -> bool:
        if self.kind == "choice":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind in ("int", "logint") and not float(value).is_integer():
            return False
        return self.low <= value <= self.high


def _num(v) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def space_names(method: str) -> list[str]:
    """Every name a space may use for ``method``."""
    return [s["name"] for s in METHODS[method].settings()] + list(STRUCTURAL)


def parse_dim(text: str, method: str) -> Dim:
    """``NAME=KIND:ARGS`` -> :class:`Dim`; a bad one raises one ConfigError naming it."""
    field_name = f"--space {text!r}"
    check(isinstance(text, str) and "=" in text and ":" in text, field_name, text, "expected NAME=KIND:ARGS")
    name, rest = text.split("=", 1)
    name = name.strip().replace("-", "_")
    kind, _, args = rest.partition(":")
    kind = kind.strip()
    names = space_names(method)
    if name not in names:
        raise ConfigError(f"{field_name}: unknown setting {name!r} for {method} (settings: {', '.join(names)})")
    if kind not in KINDS:
        raise ConfigError(f"{field_name}: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    if kind == "choice":
        choices = tuple(c.strip() for c in args.split("|"))
        check(all(choices) and len(choices) >= 1, field_name, args, "choices are separated by '|' and not empty")
        check(len(set(choices)) == len(choices), field_name, args, "a choice is listed twice")
        return Dim(name, kind, choices=choices)
    parts = args.split(":")
    check(len(parts) == 2, field_name, args, f"{kind} needs LOW:HIGH")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise ConfigError(f"{field_name}: LOW:HIGH = {args!r} must be numbers") from None
    check(math.isfinite(low) and math.isfinite(high), field_name, args, "LOW and HIGH must be finite")
    check(low <= high, field_name, args, f"low {_num(low)} > high {_num(high)}")
    if kind in ("log", "logint"):
        check(low > 0, field_name, args, f"a log range needs low > 0 (got {_num(low)})")
    if kind in ("int", "logint"):
        check(low.is_integer() and high.is_integer(), field_name, args, f"{kind} needs integer bounds")
    return Dim(name, kind, low, high)


def convert(name: str, value):
    """A sampled value (choices are strings) -> the value the config takes."""
    if not isinstance(value, str):
        return value
    if name == "split":
        return None if value == "default" else tuple(s.strip() for s in value.split(",") if s.strip())
    if name == "hidden":
        try:
            return tuple(int(w) for w in value.split(","))
        except ValueError:
            raise ConfigError(f"hidden = {value!r}: widths are integers separated by ','") from None
    if "," in value:  # a per-block value such as beta=choice:1|1,2,4
        return [_json(v) for v in value.split(",")]
    return _json(value)


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def apply_params(base: RunConfig, params: dict) -> RunConfig:
    """``base`` with the sampled ``params`` (method settings and structural ones) applied."""
    ch: dict = {}
    mp = {}
    for name, raw in params.items():
        v = convert(name, raw)
        if name in STRUCTURAL:
            ch[STRUCTURAL[name]] = v
        else:
            mp[name] = v
    if mp:
        ch["method_params"] = {**base.method_params, **mp}
    return base.replace(**ch) if ch else base


def parse_space(texts: list[str], base: RunConfig) -> list[Dim]:
    """Parse and check every dimension; each bound and choice is tried on ``base``."""
    check(bool(texts), "--space", texts, "give at least one NAME=KIND:ARGS")
    dims = [parse_dim(t, base.method) for t in texts]
    seen = [d.name for d in dims]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    check(not dup, "--space", dup, "a setting appears twice")
    for d in dims:
        values = list(d.choices) if d.kind == "choice" else [d.low, d.high]
        for v in values:
            v = int(v) if d.kind in ("int", "logint") else v
            try:
                _check_split(apply_params(base, {d.name: v}))
            except ConfigError as e:
                raise ConfigError(f"--space {d.spec!r}: value {v!r} is not valid ({e})") from None
    return dims


def _mlp_layers(cfg: RunConfig) -> list[str]:
    return [f"fc{i}" for i in range(1, len(cfg.model.hidden) + 2)]


def _check_split(cfg: RunConfig) -> None:
    """Split names are checked when the network is built; for an MLP check them here, before any trial."""
    if cfg.model.arch == "mlp" and cfg.model.split is not None:
        from .models import validate_split

        validate_split(cfg.model, _mlp_layers(cfg), cfg.model.split)


# --- a study's record ----------------------------------------------------------------------------


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
        check(bool(self.name) and "/" not in self.name, "--name", self.name, "a non-empty name without '/'")
        check(self.objective in OBJECTIVES, "--objective", self.objective, f"choose from {list(OBJECTIVES)}")
        check(self.pruner in PRUNERS, "--pruner", self.pruner, f"choose from {list(PRUNERS)}")
        check(isinstance(self.trials, int) and self.trials > 0, "--trials", self.trials, "must be a positive integer")
        check(self.epochs is None or self.epochs > 0, "--epochs", self.epochs, "must be a positive integer")
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


def preset_values(base: RunConfig, dims: list[Dim]) -> dict:
    """The base config's value of every dimension that contains it."""
    method = base.build_method()
    out = {}
    for d in dims:
        if d.name == "split":
            split = base.model.split
            if split is None and base.model.arch == "mlp":
                from .models import default_split

                split = default_split(base.model, _mlp_layers(base))
            v = "default" if split is None else ",".join(split)
            if d.kind == "choice" and v not in d.choices and base.model.split is None and "default" in d.choices:
                v = "default"
        elif d.name == "hidden":
            v = ",".join(map(str, base.model.hidden))
        elif d.name in ("loss", "batch_size"):
            v = getattr(base.train, d.name)
        else:
            v = getattr(method, d.name)
            if isinstance(v, tuple):
                v = ",".join(_num(b) for b in v)
        if d.kind == "choice":
            v = v if isinstance(v, str) else json.dumps(v)
        if d.contains(v):
            out[d.name] = v
    return out


# --- running trials --------------------------------------------------------------------------------


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


class Interrupted(Exception):
    """SIGTERM/SIGINT during a trial: the trial is failed (its settings queued again) and the sweep ends."""

    def __init__(self, number: int):
        super().__init__(f"trial {number} stopped by a signal")
        self.number = number


def make_objective(spec: SweepSpec, root: Path, should_stop=None, on_epoch=None):
    """The Optuna objective: one run directory per trial, pruning through ``on_progress``."""
    import optuna

    base = spec.base_config()
    dims = spec.dims
    maximize = spec.direction == "maximize"

    def objective(trial: optuna.Trial) -> float:
        params = {d.name: d.suggest(trial) for d in dims}
        cfg = apply_params(base, params)
        run_dir = unique_run_dir(f"{spec.name}-t{trial.number}", root)
        run_dir.mkdir(parents=True, exist_ok=True)  # unique_run_dir creates it (atomically)
        for k, v in (("run_dir", str(run_dir)), ("pid", os.getpid()), ("host", socket.gethostname())):
            trial.set_user_attr(k, v)
        tags = [f"study:{spec.name}", f"trial:{trial.number}", f"method:{spec.method}"]
        if trial.user_attrs.get("preset"):
            tags.append("preset-settings")
        note = ", ".join(f"{k}={_fmt(v)}" for k, v in params.items())
        write_json(run_dir / "meta.json", {"name": f"{spec.name} · trial {trial.number}", "tags": tags, "note": note})
        pruned = {"epoch": None}

        def on_progress(epochs_done: float, m):
            if m is None or m["epoch"] < 1:  # epoch 0 is the initialisation
                return
            acc = m["test_accuracy"]
            trial.report(acc if maximize else 1.0 - acc, m["epoch"])
            if on_epoch:
                on_epoch(trial.number, m)
            if m["epoch"] < cfg.train.epochs and trial.should_prune():
                pruned["epoch"] = m["epoch"]

        def stop() -> bool:
            return pruned["epoch"] is not None or bool(should_stop and should_stop())

        diverged = None
        try:
            summary = train(cfg, run_dir, on_progress=on_progress, should_stop=stop)
        except FloatingPointError as e:  # a diverged trial is a result (a bad one), not an error
            diverged = str(e)
            summary = summarize(cfg, read_metrics(run_dir), "diverged")
        except OSError as e:  # a full disk: the worker stops; run_worker queues these settings again
            if e.errno in DISK_FULL:
                e.trial_number = trial.number
            raise
        if pruned["epoch"] is not None:
            summary["status"] = "pruned"
            st = read_json(run_dir / "status.json", {}) or {}
            write_json(run_dir / "status.json", {**st, "state": "pruned", "pruned_at_epoch": pruned["epoch"]})
        elif summary["status"] == "stopped":
            raise Interrupted(trial.number)
        value = summary.get(spec.objective)
        if value is None:
            value = 0.0 if maximize else math.inf  # never reached the target time / no evaluation
        summary["sweep"] = {"study": spec.name, "trial": trial.number, "objective": spec.objective, "value": value}
        summary["sweep"]["params"] = params
        if diverged:
            summary["sweep"]["diverged"] = diverged
            trial.set_user_attr("diverged", diverged)
        write_json(run_dir / "summary.json", summary)
        if pruned["epoch"] is not None:
            raise optuna.TrialPruned(f"pruned at epoch {pruned['epoch']}")
        return float(value)

    return objective


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class BudgetClaim:
    """``flock`` on ``<runs root>/.sweep-<name>.lock``: held from a worker's budget check until its
    next trial exists in the study, so workers sharing a runs root never start one trial too many.
    Workers on other hosts (a PostgreSQL study) are not covered: each may overshoot by one."""

    def __init__(self, root: Path, name: str):
        self.path = Path(root) / f".sweep-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock"
        self.f = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.f is not None:
            self.f.close()  # closing releases the lock
            self.f = None


def run_worker(name: str, storage, root: Path, should_stop=None, log=print, worker: int = 0) -> None:
    """Pull trials of study ``name`` until its budget is met (one process; others may run beside it)."""
    import optuna

    create_or_resume(None, name, storage)  # refuses a study that does not exist
    study, spec = worker_study(name, storage, worker)
    failed = fail_dead_trials(study)
    if failed:
        log(f"study {name}: trial(s) {failed} of a dead worker marked failed; their settings are queued again")
    n = remaining(study, spec.trials)
    if n == 0:
        return

    def on_epoch(number, m):
        log(f"  trial {number} epoch {m['epoch']}: test {m['test_accuracy']:.4f} ({m['wall_time_s']:.1f} s)")

    def done(study, t):
        v = "—" if t.value is None else f"{t.value:.4f}"
        log(f"trial {t.number} {t.state.name.lower()}: {spec.objective} = {v} {t.params}")

    # our own log lines report every trial; Optuna's warning would repeat a stop as a traceback
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    objective = make_objective(spec, root, should_stop, on_epoch)
    claim = BudgetClaim(root, name)

    def claimed(trial):
        claim.release()  # the trial exists (RUNNING): the next worker counts it
        return objective(trial)

    try:
        # one trial per optimize call, the budget checked and the trial created under one lock: parallel
        # workers on this host never run past the budget (Optuna's MaxTrialsCallback let each of them
        # pass the check at once and start one trial too many)
        while True:
            claim.acquire()
            try:
                if remaining(study, spec.trials) == 0:
                    break
                study.optimize(claimed, n_trials=1, catch=(), callbacks=[done])
            finally:
                claim.release()
    except Interrupted as e:  # Optuna has marked the trial failed; keep its settings for the resume
        _retry()(study, study.trials[e.number])
        log(f"study {name}: stopped during trial {e.number} (failed, settings queued again); resume with --name {name}")
        raise
    except OSError as e:
        number = getattr(e, "trial_number", None)
        if number is None:
            raise
        try:  # the study database may sit on the full disk too: then the next worker's fail_dead_trials does it
            _retry()(study, study.trials[number])
        except Exception:  # noqa: BLE001 - sqlite "database or disk is full" and the like
            pass
        log(f"study {name}: trial {number} stopped (failed, settings queued again); resume with --name {name}")
        raise
    except Exception as e:  # the study database itself on a full disk: one line, not an SQL traceback
        if "disk is full" not in str(e):
            raise
        raise OSError(
            errno.ENOSPC,
            "No space left on device (the study database)",
            str(getattr(storage, "url", "the study database")),
        ) from None


def run_sweep(
    spec: SweepSpec | None,
    name: str,
    storage_url: str | None,
    root: Path,
    jobs: int = 1,
    budget=None,
    should_stop=None,
    log=print,
):
    """Create or resume study ``name`` and run it to its budget with ``jobs`` worker processes."""
    check(isinstance(jobs, int) and jobs >= 1, "--jobs", jobs, "must be a positive integer")
    root = Path(root)
    storage = open_storage(storage_url, root)
    study, spec = create_or_resume(spec, name, storage, budget)
    url = storage_url or default_storage(root)
    children = []
    for i in range(jobs - 1):  # extra workers: the same command on the same study
        cmd = [sys.executable, "-m", "admm_core", "sweep", "--name", name, "--storage", url, "--worker", str(i + 1)]
        env = {**os.environ, "ADMM_RUNS": str(root)}
        children.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
    try:
        run_worker(name, storage, root, should_stop, log)
    finally:
        for c in children:
            c.wait()
    return load_study(name, storage), spec


# --- reading studies back -------------------------------------------------------------------------


def trials_table(study) -> list[dict]:
    """One row per trial: number, state, value, params, run directory, epochs, duration."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        # a queued retry carries its failed predecessor's user attributes: no run of its own yet
        run_dir = None if t.state.name == "WAITING" else t.user_attrs.get("run_dir")
        dur = t.duration.total_seconds() if t.duration else None
        rows.append(
            {
                "trial": t.number,
                "state": t.state.name.lower(),
                "value": t.value,
                **{k: t.params.get(k) for k in sorted(t.distributions)},
                "epochs": max(t.intermediate_values) if t.intermediate_values else 0,
                "seconds": dur,
                "preset": bool(t.user_attrs.get("preset")),
                "run": Path(run_dir).name if run_dir else None,
                "run_dir": run_dir,
            }
        )
    return rows


def best_config(study) -> RunConfig:
    """The best trial's RunConfig (read from its run directory, else rebuilt from its params)."""
    spec = SweepSpec.from_attrs(study.user_attrs["sweep"])
    best = study.best_trial
    run_dir = best.user_attrs.get("run_dir")
    if run_dir and (Path(run_dir) / "config.json").exists():
        return RunConfig.from_json((Path(run_dir) / "config.json").read_text())
    return apply_params(spec.base_config(), best.params)


def trial_time_s(study) -> float:
    """Seconds spent in trials, summed (a resumed study's idle gaps left out)."""
    return sum(t.duration.total_seconds() for t in study.get_trials(deepcopy=False) if t.duration)


def wall_time_s(study) -> float:
    """From the first trial's start to the last trial's end (idle gaps between resumes included)."""
    ts = [t for t in study.get_trials(deepcopy=False) if t.datetime_start]
    if not ts:
        return 0.0
    start = min(t.datetime_start for t in ts)
    end = max(t.datetime_complete or t.datetime_start for t in ts)
    return (end - start).total_seconds()


def importance_png(study, path: Path) -> Path | None:
    """Parameter importances (fANOVA) as a PNG through Optuna's matplotlib backend (no kaleido)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization.matplotlib import plot_param_importances

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ax = plot_param_importances(study)
    fig = ax.figure
    fig.set_size_inches(7, 3.2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def importances(study) -> dict:
    import optuna

    try:
        return optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):
        return {}


def markdown_report(study, png: str | None = None, machine: str = "2-core CPU, shared with other jobs") -> str:
    """Best settings against the preset's, wall time and the trial table (written by ``sweep --markdown``)."""
    spec = SweepSpec.from_attrs(study.user_attrs["sweep"])
    rows = trials_table(study)
    c = counts(study)
    names = [d.name for d in spec.dims]
    base = spec.base_config()
    preset_row = next((r for r in rows if r["preset"] and r["state"] == "complete"), None)
    try:
        best = study.best_trial
    except ValueError:
        best = None
    lines = [
        f"# Sweep `{study.study_name}`",
        "",
        f"Written by `python -m admm_core sweep --name {study.study_name} --markdown …` on "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')} ({machine}).",
        "",
        f"- preset `{spec.preset}`, method `{spec.method}`, {base.train.epochs} epochs per trial, "
        f"objective `{spec.objective}` ({spec.direction}), pruner `{spec.pruner}`",
        f"- space: {', '.join(f'`{s}`' for s in spec.space)}",
        f"- trials: {c['complete']} complete, {c['pruned']} pruned, {c['fail']} failed (budget {spec.trials})",
        f"- time in trials: {trial_time_s(study) / 60:.1f} min (first start to last end: "
        f"{wall_time_s(study) / 60:.1f} min, including any pause before a resume)",
        "",
    ]
    done = c["complete"] + c["pruned"]
    if done < spec.trials:
        lines += [
            f"**Incomplete: {done} of {spec.trials} trials.** Continue it with "
            f"`python -m admm_core sweep --name {study.study_name}` (same runs folder / storage).",
            "",
        ]
    if best is not None:
        lines += [
            "## Best settings against the preset's",
            "",
            f"| setting | preset | best (trial {best.number}) |",
            "|---|---|---|",
        ]
        pv = preset_values(base, spec.dims)
        for n in names:
            lines.append(f"| {n} | {_fmt(pv.get(n, '—'))} | {_fmt(best.params.get(n))} |")
        pv_val = "—" if preset_row is None else _fmt(preset_row["value"])
        lines.append(
            f"| **{spec.objective}** | {pv_val} (trial {preset_row['trial'] if preset_row else '—'}) | {_fmt(best.value)} |"
        )
        lines.append("")
    imp = importances(study)
    if imp:
        lines += ["## Parameter importances (fANOVA)", ""]
        lines += [f"- {k}: {v:.2f}" for k, v in imp.items()]
        lines.append("")
        if png:
            lines += [f"![importances]({png})", ""]
    lines += ["## Trials", "", "| trial | state | " + " | ".join(names) + f" | {spec.objective} | epochs | s | run |"]
    lines.append("|" + "---|" * (len(names) + 6))
    for r in rows:
        v = "—" if r["value"] is None else _fmt(r["value"])
        mark = " (preset)" if r["preset"] else ""
        secs = "—" if r["seconds"] is None else f"{r['seconds']:.0f}"
        cells = " | ".join(_fmt(r.get(n)) for n in names)
        run = f"`{r['run']}`" if r["run"] else "—"
        lines.append(f"| {r['trial']}{mark} | {r['state']} | {cells} | {v} | {r['epochs']} | {secs} | {run} |")
    lines.append("")
    return "\n".join(lines)


def launch(spec: SweepSpec, storage_url: str | None, root: Path, jobs: int = 1) -> tuple[int, Path]:
    """Start ``sweep`` as a background worker in its own session (the dashboard's Launch); (pid, log)."""
    _ = spec.dims  # fail here, in the caller, on a bad space
    root = Path(root)
    logs = root / ".sweeps"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{spec.name}.log"
    cmd = [
        sys.executable,
        "-m",
        "admm_core",
        "sweep",
        "--name",
        spec.name,
        "--preset",
        spec.preset,
        "--method",
        spec.method,
    ]
    cmd += ["--trials", str(spec.trials), "--objective", spec.objective, "--pruner", spec.pruner, "--jobs", str(jobs)]
    for s in spec.space:
        cmd += ["--space", s]
    for flag, v in (("--epochs", spec.epochs), ("--train-limit", spec.train_limit), ("--test-limit", spec.test_limit)):
        if v:
            cmd += [flag, str(v)]
    if storage_url:
        cmd += ["--storage", storage_url]
    env = {**os.environ, "ADMM_RUNS": str(root), "PYTHONUNBUFFERED": "1"}
    if os.name == "posix":
        cmd = ["nice", "-n", "5", *cmd]
    with open(log_path, "ab") as f:
        proc = subprocess.Popen(
            cmd,
            cwd=str(Path(__file__).resolve().parent.parent),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    import threading

    threading.Thread(target=proc.wait, daemon=True).start()
    write_json(logs / f"{spec.name}.json", {"pid": proc.pid, "cmd": cmd, "launched": time.time()})
    return proc.pid, log_path
