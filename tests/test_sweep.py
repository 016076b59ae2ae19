"""Sweeps (admm_core.sweep): Optuna studies whose trials are run directories, on tiny digits.

The study database is read back with Optuna itself and compared with the run directories the
trials wrote; the kill test SIGKILLs a real sweep process mid-trial and resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from streamlit.testing.v1 import AppTest

from admm_core import sweep as S
from admm_core.errors import ConfigError
from admm_core.rundir import read_json, read_metrics
from admm_core.spec.presets import preset_config
from admm_core.sweep.worker import run_sweep

ROOT = Path(__file__).resolve().parent.parent
SPACE = ["beta=log:0.1:10", "z_lr=log:0.01:1", "split=choice:fc1|fc1,fc2"]
TINY = {"preset": "digits-mlp", "method": "block-admm", "train_limit": 300, "test_limit": 200}


def spec(name, trials=6, epochs=2, space=SPACE, **kw):
    return S.SweepSpec(name=name, space=list(space), trials=trials, epochs=epochs, seed=0, **{**TINY, **kw})


@pytest.fixture(scope="module")
def study_root(tmp_path_factory):
    """A finished 6-trial, 2-epoch study (run in this process)."""
    root = tmp_path_factory.mktemp("sweeps")
    study, _ = run_sweep(spec("six"), "six", None, root, log=lambda m: None)
    return root, study


def test_six_trials_in_the_database_equal_the_runs(study_root):
    root, _ = study_root
    study = optuna.load_study(study_name="six", storage=S.default_storage(root))  # read back from SQLite
    trials = study.get_trials()
    assert len(trials) == 6
    assert {t.state for t in trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert trials[0].params["beta"] == 1.0 and trials[0].params["z_lr"] == 0.5  # trial 0: the preset's settings
    for t in trials:
        run = Path(t.user_attrs["run_dir"])
        assert run.parent == root
        summary, meta, config = (read_json(run / f) for f in ("summary.json", "meta.json", "config.json"))
        assert "study:six" in meta["tags"] and f"trial:{t.number}" in meta["tags"]
        assert summary["sweep"] == {
            "study": "six",
            "trial": t.number,
            "objective": "best_test_accuracy",
            "value": t.value,
            "params": t.params,
        }
        assert config["method_params"]["beta"] == t.params["beta"]
        assert config["model"]["split"] == t.params["split"].split(",")
        accs = {m["epoch"]: m["test_accuracy"] for m in read_metrics(run)}
        assert t.intermediate_values == {e: a for e, a in accs.items() if e >= 1}
        if t.state == TrialState.COMPLETE:
            assert t.value == summary["best_test_accuracy"] == max(accs.values())
            assert summary["status"] == "finished" and summary["epochs"] == 2
        else:
            assert summary["status"] == "pruned" and read_json(run / "status.json")["state"] == "pruned"
    best = max((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert study.best_trial.number == best.number
    cfg = S.best_config(study)
    assert cfg.method_params["beta"] == best.params["beta"] and cfg.train.epochs == 2


def test_pruned_trial_stops_early_and_its_run_says_so(tmp_path, monkeypatch):
    # a pruner that prunes everything below 99% after epoch 1
    monkeypatch.setattr(S.study, "make_pruner", lambda name, epochs: optuna.pruners.ThresholdPruner(lower=0.99))
    study, _ = run_sweep(spec("pr", trials=2, epochs=4), "pr", None, tmp_path, log=lambda m: None)
    for t in study.get_trials():
        assert t.state == TrialState.PRUNED
        run = Path(t.user_attrs["run_dir"])
        assert [m["epoch"] for m in read_metrics(run)] == [0, 1]  # stopped after the first epoch
        assert read_json(run / "status.json")["state"] == "pruned"
        assert read_json(run / "status.json")["pruned_at_epoch"] == 1
        assert read_json(run / "summary.json")["status"] == "pruned"
        assert t.value == t.intermediate_values[1]


def _cli(*args, root, **kw):
    env = {**os.environ, "ADMM_RUNS": str(root), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "admm_core", "sweep", *args], cwd=ROOT, env=env, text=True, **kw)


def test_killed_sweep_resumes_to_its_budget_with_the_killed_trial_failed(tmp_path):
    args = ["--preset", "digits-mlp", "--method", "block-admm", "--trials", "2", "--epochs", "4"]
    args += ["--space", "beta=log:0.1:10", "--pruner", "none", "--name", "k", "--train-limit", "300"]
    proc = _cli(*args, root=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    storage = S.default_storage(tmp_path)
    deadline = time.time() + 300
    victim = None
    while time.time() < deadline and victim is None and proc.poll() is None:
        time.sleep(0.05)  # wait until trial 1 has finished one of its 4 epochs (files: cheap to poll)
        for run in tmp_path.glob("*-k-t1"):
            if len(read_metrics(run)) >= 2 and (read_json(run / "status.json") or {}).get("state") == "running":
                victim = run
    assert victim is not None, "the sweep never reached trial 1"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    study = optuna.load_study(study_name="k", storage=storage)
    assert study.trials[1].state == TrialState.RUNNING  # what a kill leaves behind

    out = _cli("--name", "k", root=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = out.communicate(timeout=600)  # seconds unloaded; a shared CI box is slower
    assert out.returncode == 0, stderr
    assert "trial(s) [1] of a dead worker marked failed" in stderr
    study = optuna.load_study(study_name="k", storage=storage)
    states = [t.state for t in study.trials]
    assert states.count(TrialState.FAIL) == 1 and study.trials[1].state == TrialState.FAIL
    assert states.count(TrialState.COMPLETE) == 2  # the budget, finished
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == 1]
    assert len(retry) == 1 and retry[0].params == study.trials[1].params  # its settings were run again
    st = read_json(Path(study.trials[1].user_attrs["run_dir"]) / "status.json")
    assert st["state"] == "crashed" and "trial 1 marked failed" in st["error"]
    assert json.loads(stdout)["trials"]["complete"] == 2


@pytest.mark.parametrize(
    "space, words",
    [
        ("gamma=log:0.1:1", ["'gamma'", "unknown setting", "block-admm"]),
        ("beta=float:10:1", ["beta=float:10:1", "low 10 > high 1"]),
        ("z_lr=log:0:1", ["z_lr=log:0:1", "low > 0"]),
        ("beta=normal:0:1", ["beta=normal:0:1", "unknown kind 'normal'"]),
        ("split=choice:fc1|fc3", ["fc3", "last layer"]),
    ],
)
def test_bad_space_is_one_clear_error(space, words):
    with pytest.raises(ConfigError) as e:
        S.parse_space([space], preset_config("digits-mlp"))
    for w in words:
        assert w in str(e.value)


def test_a_study_name_is_checked_once_for_the_command_line_and_the_page():
    """One rule (non-empty, no '/'): ``admm sweep --name`` raises it, the Sweeps page names its field."""
    assert S.name_problem("digits-beta") is None
    for bad in ("", "a/b"):
        assert S.name_problem(bad, "Study name") == f"Study name = {bad!r}: give a non-empty name without '/'"
        with pytest.raises(ConfigError, match="give a non-empty name without '/'") as e:
            spec(bad)
        assert str(e.value) == S.name_problem(bad)


def test_the_space_syntax_has_one_reading_the_checked_dims_agree_with():
    for text in ("beta=log:0.1:10", " z-lr =float:0:2", "split=choice:fc1|fc1,fc2"):
        name, kind, args, values = S.split_dim(text)
        d = S.parse_dim(text, "block-admm")
        assert (d.name, d.kind) == (name, kind) and args == text.partition(":")[2]
        assert list(d.choices) == values if kind == "choice" else [d.low, d.high] == [float(v) for v in values]


def test_the_kinds_and_extra_settings_of_the_help_are_the_spaces_own():
    """``admm sweep --help`` lists the kinds and the settings beyond a method's from the tables
    parse_dim checks against (the Sweeps page's kind menu reads the same KINDS)."""
    from helpers import cli_call

    rc, out, _ = cli_call(["sweep", "--help"])
    said = " ".join(out.split())
    assert rc == 0 and "KIND float|log|int|logint (LOW:HIGH) or choice (A|B|C)" in said, said
    assert f"(see `methods`), {', '.join(list(S.STRUCTURAL)[:-1])} or {list(S.STRUCTURAL)[-1]}." in said, said
    assert set(S.KINDS) == {"float", "log", "int", "logint", "choice"} and S.KINDS["log"] == "log-uniform"


def test_bad_space_on_the_command_line_is_one_line(tmp_path):
    p = _cli(
        "--preset", "digits-mlp", "--method", "block-admm", "--space", "beta=log:-1:1",
        root=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = p.communicate(timeout=300)
    assert p.returncode == 2
    assert err.strip().splitlines() == ["error: --space 'beta=log:-1:1' = '-1:1': a log range needs low > 0 (got -1)"]


def test_seeded_sampler_draws_new_points_after_a_resume_and_per_worker(tmp_path):
    """A seeded sampler restarted with its seed replays its draws: the resumed MNIST study re-ran
    trial 1's settings twice. worker_study salts the seed by the trials so far and the worker."""
    storage = S.open_storage(None, tmp_path)
    S.create_or_resume(spec("salt", trials=20), "salt", storage)

    def ask(study, spec_):
        t = study.ask()
        return t, {d.name: d.suggest(t) for d in spec_.dims}

    def draw(worker=0, store=storage):
        study, spec_ = S.worker_study("salt", store, worker)
        t, params = ask(study, spec_)
        study.tell(t, 0.5)
        return params

    preset = draw()  # trial 0: the preset's settings, enqueued
    first = draw()  # first random draw of this worker
    resumed = draw()  # a new process on the same study (one more trial in it)
    assert preset["beta"] == 1.0 and first != preset and resumed != first
    (w1, sp), w0 = S.worker_study("salt", storage, 1), S.worker_study("salt", storage, 0)[0]
    assert ask(w1, sp)[1] != ask(w0, sp)[1]  # two workers started together
    fresh = S.open_storage(None, tmp_path / "b")  # the same seed on a new study: reproducible
    S.create_or_resume(spec("salt", trials=20), "salt", fresh)
    assert draw(store=fresh) == preset and draw(store=fresh) == first


def test_space_values_reach_the_config():
    base = preset_config("digits-mlp")
    cfg = S.apply_params(base, {"split": "fc1", "hidden": "64,32", "loss": "ce", "beta": "1,2", "primal_steps": 2})
    assert cfg.model.split == ("fc1",) and cfg.model.hidden == (64, 32) and cfg.train.loss == "ce"
    assert cfg.method_settings.beta == (1.0, 2.0) and cfg.method_settings.primal_steps == 2
    dims = S.parse_space(["split=choice:fc1|fc1,fc2", "lr=log:1e-4:1e-2", "batch_size=int:16:64"], base)
    lr = base.method_params["lr"]  # the preset's own Θ step (2e-3: the minibatch recipe)
    assert S.preset_values(base, dims) == {"split": "fc1,fc2", "lr": lr, "batch_size": 32} and lr == 2e-3


def test_resnet_splits_are_checked_from_its_record_and_the_preset_split_is_in_the_space():
    """Split names of every architecture come from its torch-free table: a ResNet-18 space with an
    MLP layer is refused before any trial (it used to fail in each trial), and the preset's split
    (the architecture's default, conv3_x) is trial 0's when the space lists it."""
    base = preset_config("cifar10-resnet18-small")
    with pytest.raises(ConfigError, match="'fc1': no such layer in this resnet18"):
        S.parse_space(["split=choice:conv3_x|fc1"], base)
    dims = S.parse_space(["split=choice:conv2_x|conv3_x"], base.replace(model__split=None))
    assert S.preset_values(base.replace(model__split=None), dims) == {"split": "conv3_x"}


def test_the_background_launch_starts_in_the_project_root():
    """sweep/launcher.py sits a level deeper than sweep.py did: `python -m admm_core` must still resolve."""
    from admm_core.sweep import launcher

    assert (launcher.PROJECT_ROOT / "admm_core" / "__main__.py").is_file()


def test_resume_with_another_space_is_refused(study_root):
    root, _ = study_root
    with pytest.raises(ConfigError, match="study 'six' was made with"):
        S.create_or_resume(spec("six", space=["beta=log:1:2"]), "six", S.open_storage(None, root))


def test_sweeps_page_lists_the_study_and_its_best_trial(study_root, monkeypatch):
    root, study = study_root
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60)
    at.switch_page("views/sweeps.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="sweeps_study").value == "six"
    best = study.best_trial
    text = " ".join(m.value for m in at.markdown)
    assert (
        f"best trial **{best.number}**" in text and f"{100 * best.value:.2f} %" in text
    )  # in %, as the page shows accuracy
    assert "objective: best test accuracy (maximize)" in text and "best_test_accuracy" not in text  # in words
    grid = next(d for d in at.dataframe if "trial" in d.value.columns)  # the trials table
    table, cols = grid.value, json.loads(grid.proto.columns)
    floats = [k for k in best.params if isinstance(best.params[k], float)]
    assert floats and all(cols[k]["type_config"]["format"] == "%.3g" for k in floats), cols  # lr 1.5e-4, not 0.0001
    assert sorted(table["trial"]) == list(range(6))
    assert set(table["run"]) == {Path(t.user_attrs["run_dir"]).name for t in study.trials}
    at.button(key="sweeps_load_best").click().run()  # switches to Train with the best config in its form
    assert not at.exception, [e.value for e in at.exception]


def test_optunas_figures_name_the_settings_as_the_form_does(study_root, monkeypatch):
    """The importances, slice and parallel-coordinates figures say "β — penalty weight" (or
    "β" on a narrow axis), never the code name ``beta`` that Optuna labels them with."""
    from app.dashboard import form as F

    root, study = study_root
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60)
    at.switch_page("views/sweeps.py").run()
    assert not at.exception, [e.value for e in at.exception]
    labels = F.setting_labels("block-admm")
    names = {d.split("=")[0] for d in SPACE}
    texts = []  # every axis title, tick text, bar category and hover text of every figure
    for chart in at.get("plotly_chart"):
        fig = json.loads(chart.proto.spec)
        for k, axis in fig["layout"].items():
            if k.startswith(("xaxis", "yaxis")):
                texts += [(axis.get("title") or {}).get("text"), *(axis.get("ticktext") or [])]
        for tr in fig["data"]:
            texts += [*(tr.get("y") or [])] if tr.get("type") == "bar" else []
            texts += [c for row in tr.get("customdata") or [] if isinstance(row, list) for c in row]
    texts = [t for t in texts if isinstance(t, str)]
    assert texts and not names & set(texts), sorted(names & set(texts))
    assert {labels["beta"], labels["z_lr"]} <= set(texts), sorted(set(texts))
    assert labels["beta"].split(" — ")[0] in texts  # the parallel coordinates' narrow axis
