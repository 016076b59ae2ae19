"""Dashboard pages under streamlit.testing.v1.AppTest, on real run directories.

The runs are made by the engine itself (admm_core.network.train on a tiny digits config); the
Train page's Start button is checked with the worker launch replaced by a recorder, so the
config the form produces is compared with the expected RunConfig field by field.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import digits_cfg, live_traces, needs_node
from helpers import wait as _wait
from streamlit.testing.v1 import AppTest

from admm_core.errors import ConfigError, DataError
from admm_core.network import train
from admm_core.rundir import read_json, write_json
from admm_core.spec.archs import ARCHS, archs_for
from admm_core.spec.config import DataConfig, ModelConfig, RunConfig, TrainConfig
from admm_core.spec.datasets import available
from admm_core.spec.faces import find_lfw
from admm_core.spec.methods import METHODS, names_for
from admm_core.spec.presets import PRESETS, preset_config
from admm_core.spec.resources import MemoryRefusal, preflight_report, processes_memory_problem
from app.dashboard import faces
from app.dashboard import form as F
from app.dashboard import workers as W

NETWORK_METHODS = names_for("network")  # deepfacto runs with its own task

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"

TIMEOUT = 60


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """Real run directories: two finished runs, a crashed one (dead worker), a DeepFacto stub."""
    root = tmp_path_factory.mktemp("runs")
    train(digits_cfg("block-admm", 2, n=300), root / "r1-digits-block-admm")
    train(digits_cfg("sgd", 2, n=300), root / "r2-digits-sgd")
    crashed = root / "r3-digits-adam"
    train(digits_cfg("adam", 1, n=300), crashed)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that is surely dead now
    st = read_json(crashed / "status.json")
    write_json(crashed / "status.json", {**st, "state": "running", "pid": proc.pid})
    return root


@pytest.fixture
def env_runs(runs_root, monkeypatch):
    monkeypatch.setenv("ADMM_RUNS", str(runs_root))
    return runs_root


def same_config(a: RunConfig, b: RunConfig) -> bool:
    """Equal runs: same settings object (explicit defaults == omitted ones) and same rest."""
    da, db = a.to_dict(), b.to_dict()
    da.pop("method_params"), db.pop("method_params")
    assert da == db
    assert a.method_settings == b.method_settings, (a.method_settings, b.method_settings)
    return True


def app(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=TIMEOUT)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at


def no_exceptions(at: AppTest):
    assert not at.exception, [e.value for e in at.exception]


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def form_errors(at: AppTest) -> list[str]:
    """Messages of the Train form (the live panel may show the crashed fixture run)."""
    return [e for e in errors(at) if not e.startswith("The worker crashed")]


def widget(at, kind, key):
    return getattr(at, kind)(key=key)


def unfold(at, method: str | None = None):
    """Open the Train form's "More … settings" expanders: their widgets exist only while open."""
    at.session_state["train_more_open"] = True
    if method:
        at.session_state[f"mp_more_open.{method}"] = True
    return at.run()


def runs_sel(at):
    """The Runs page's details menu (keyed by the selection's generation: runs_sel.<n>)."""
    return next(s for s in at.selectbox if (s.key or "").startswith("runs_sel."))


def watch_pick(at):
    """The live panel's run menu (keyed by the selection's generation: watch_pick.<n>)."""
    return next(s for s in at.selectbox if (s.key or "").startswith("watch_pick."))


# --- pure helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_form_round_trip_reproduces_every_preset(preset):
    """config -> form -> URL -> form -> config gives back the preset's config, every field equal
    (split None stays None, method settings the preset leaves at their defaults stay out), for
    every method; the full validation (preflight) accepts it wherever the engine would."""
    from admm_core.spec.resources import preflight_problems as preflight

    for method in NETWORK_METHODS:
        cfg = preset_config(preset, method)
        form = F.form_from_config(cfg)
        back, warnings = F.from_query(F.to_query(form))
        assert not warnings
        assert back == form
        got, errs = F.read_config(back)
        assert errs == {} and got == cfg, (method, errs, got)
        got, errs = F.config_from_form(back, available=[cfg.data.name])
        engine = {k for k in preflight(cfg, datasets=[cfg.data.name]) if k != "memory"}
        if not engine and "memory" not in errs:
            assert errs == {} and got == cfg, (method, errs)
        else:  # what the engine refuses (augmentation, a lifted baseline on ResNet) the form refuses too
            assert got is None and errs


def test_form_round_trip_of_a_saved_run_and_of_every_field(tmp_path):
    """A saved run's config.json, and a config with every field off its default, read back equal."""
    saved = RunConfig.from_json(
        (tmp_path / "c.json").write_text(digits_cfg("gotmare", 2, n=300).to_json())
        and (tmp_path / "c.json").read_text()
    )
    odd = RunConfig(
        method="block-admm",
        data=DataConfig(
            "cifar10", root="/data/x", train_limit=123, test_limit=77, augment=True, augment_pad=3, augment_flip=False
        ),
        model=ModelConfig("resnet18", split=("conv2_x", "conv4_x"), width=24),
        train=TrainConfig(
            epochs=3,
            batch_size=17,
            loss="ce",
            seed=5,
            device="cpu",
            eval_every=2,
            checkpoint_every=3,
            precision="bf16",
            channels_last=True,
            diverge_factor=0.0,
            lr_schedule="cosine",
        ),
        method_params={"lr": 0.1234567891, "beta": [1.0, 0.5, 2.0], "z_step": "scaled", "primal_steps": 1},
        preset="cifar10-resnet18-small",
    )
    for cfg in (saved, odd, RunConfig(), RunConfig(model=ModelConfig(split=("fc1", "fc2")))):
        form = F.form_from_config(cfg)
        got, errs = F.read_config(form)
        assert errs == {} and got == cfg, errs
        # every config field is in the form (a new field needs no form code)
        assert {f.key for f in F.FIELDS} <= set(form)


def test_form_fields_come_from_the_config_dataclasses(monkeypatch):
    """Each settings-dataclass field is a form field with its help; the fields missing before
    (model.width, data.test_limit, train.precision ...) are there; form keys are unique."""
    import dataclasses

    paths = {f.path for f in F.FIELDS}
    for prefix, klass in (("data.", DataConfig), ("model.", ModelConfig), ("train.", TrainConfig)):
        for f in dataclasses.fields(klass):
            assert prefix + f.name in paths
    shown = {f.path: f for f in F.FIELDS if f.kind != "hidden"}
    assert {"model.width", "data.test_limit", "train.precision", "train.diverge_factor"} <= set(shown)
    assert all(f.label and f.help for f in shown.values())
    assert F.choices(shown["model.arch"]) == list(archs_for("network")) and shown["data.name"].kind == "select"
    assert shown["data.test_limit"].none == 0 and shown["model.hidden"].kind == "widths"
    form = F.form_from_config(preset_config("cifar10-resnet18-small"))
    assert (form["width"], form["test_limit"], form["train_limit"]) == (16, 1000, 1000)
    # a new settings field becomes a form field from its type and rules alone (its layout, where given)
    from admm_core.spec.settings import setting

    @dataclasses.dataclass(frozen=True)
    class Extra:
        warmup: int = setting(3, "warm-up epochs", min=0)
        tag: str | None = None
        ratio: float = 0.5
        on: bool = False
        mode: str = setting("a", "a or b", choices=("a", "b"))

    monkeypatch.setitem(F.LAYOUT, "train.warmup", {"group": "train", "label": "Warm-up"})
    got = {f.key: f for f in F._fields_of(Extra, "train.")}
    assert (got["warmup"].kind, got["warmup"].label, got["warmup"].min, got["warmup"].group) == (
        "int",
        "Warm-up",
        0,
        "train",
    )
    assert [got[k].kind for k in ("tag", "ratio", "on", "mode")] == ["text", "float", "check", "select"]
    assert got["mode"].choices == ("a", "b") and got["ratio"].group == "more"  # no group hint: "More training settings"


def test_form_messages_name_the_field():
    form = F.default_form()
    bad = {**form, "epochs": 0, "hidden": "128,abc", F.MP + "lr": "-1", "seed": -3}
    cfg, errs = F.config_from_form(bad, available=["digits"])
    assert cfg is None and "model.hidden" in errs["hidden"]
    # one at a time, each message goes next to its own field
    for field, value, needle in [
        ("epochs", 0, "train.epochs = 0"),
        ("batch_size", -1, "train.batch_size"),
        ("seed", -3, "train.seed"),
        (F.MP + "lr", "-1", "block-admm.lr"),
        (F.MP + "lr", "abc", "not a number"),
        (F.MP + "beta", "1,2", "one per block"),
        (F.MP + "primal_steps", 0, "block-admm.primal_steps"),
        ("split", ["fc3"], "model.split"),
        ("data", "cifar10", "not found under the data root"),
    ]:
        cfg, errs = F.config_from_form({**form, field: value}, available=["digits"])
        assert cfg is None and needle in errs.get(field, ""), (field, errs)


def test_a_config_field_applies_by_its_records_when_rule():
    """Shift, flip and σ are greyed out by the config records' own ``when=`` (one copy of the rule),
    read under the form's keys."""
    for path, key, on, off in [
        ("data.augment_pad", "augment", True, False),
        ("data.augment_flip", "augment", True, False),
        ("model.init_std", "init", "normal", "default"),
    ]:
        record = DataConfig if path.startswith("data.") else ModelConfig
        when = record.__dataclass_fields__[path.split(".", 1)[1]].metadata["when"]
        assert when == {key: on} and F.BY_PATH[path].enabled_if == {key: on}
        assert F.BY_PATH[path].enabled({key: on}) and not F.BY_PATH[path].enabled({key: off})


def test_form_keeps_and_checks_augmentation():
    """A preset's augmentation survives the form; shift-only round-trips through the URL (and a
    link of the old one-menu form still reads); bad pads, flat data and methods that read raw
    inputs are said next to the field."""
    form = F.form_from_config(preset_config("cifar10-resnet18-small", "block-admm"))
    assert (form["augment"], form["augment_flip"], form["augment_pad"]) == (True, True, 4)
    got, errs = F.config_from_form(form, available=["cifar10"])
    assert errs == {}, errs
    assert got.data.augment and got.data.augment_flip and got.data.augment_pad == 4
    base = F.form_from_config(preset_config("mnist-mlp-mse", "online-admm"))
    shift = {**base, "augment": True, "augment_flip": False, "augment_pad": 2}
    back, warnings = F.from_query(F.to_query(shift))
    assert back == shift and not warnings
    old_link = {k: v for k, v in F.to_query(shift).items() if k != "augment_flip"} | {"augment": "shift"}
    assert F.from_query(old_link)[0] == shift
    got, errs = F.config_from_form(back, available=["mnist"])
    assert errs == {}, errs
    assert got.data.augment and not got.data.augment_flip and got.data.augment_pad == 2
    for field, value, needle in [
        ("augment", "zoom", "data.augment = 'zoom'"),
        ("augment_pad", 40, "data.augment_pad = 40"),
        ("method", "dladmm", "method 'dladmm' does not support augmentation"),
    ]:
        bad = {**shift, field: value}
        if field == "method":
            bad = {k: v for k, v in bad.items() if not k.startswith(F.MP)}
        cfg, errs = F.config_from_form(bad, available=["mnist"])
        key = "augment" if field == "method" else field
        assert cfg is None and needle in errs.get(key, ""), (field, errs)
    flat = {**F.default_form(), "augment": True}  # digits: 64 flat features
    cfg, errs = F.config_from_form(flat, available=["digits"])
    assert cfg is None and "flat vectors (64,)" in errs["augment"]


def test_block_diagram_follows_the_split():
    blocks = F.describe_blocks("mlp", (128, 64), ["fc2"], "digits")
    assert [b["layers"] for b in blocks] == [["fc1", "fc2"], ["fc3"]]
    assert blocks[0]["params"] == 64 * 128 + 128 + 128 * 64 + 64
    dot = F.block_diagram_dot(blocks)
    assert "block 1" in dot and "block 2" in dot and "Z₁" in dot


# --- Train page ---------------------------------------------------------------------------------


def test_train_page_opens_on_digits_and_mirrors_the_url(env_runs):
    at = app().run()
    no_exceptions(at)
    assert at.title[0].value == "Train"
    assert widget(at, "selectbox", "f.data").value == "digits"
    assert widget(at, "selectbox", "f.preset").value == "digits-mlp"
    q = at.query_params
    assert q["data"] == ["digits"] or q["data"] == "digits"
    assert not form_errors(at)
    assert not widget(at, "button", "start").disabled
    # the live panel lists the real runs; none is watched until one is picked or started
    pick = watch_pick(at)
    assert pick.options and pick.value is None


def _start_and_capture(at, monkeypatch) -> RunConfig:
    launched = []
    monkeypatch.setattr(W, "_spawn", lambda args, run_dir, processes=1: launched.append((args, run_dir)) or 12345)
    widget(at, "button", "start").click().run()
    no_exceptions(at)
    assert len(launched) == 1, form_errors(at)
    args, run_dir = launched[0]
    assert args[:2] == ["--config", str(run_dir / "config.json")] and args[2:] == [
        "--out",
        str(run_dir),
        "--preflighted",
    ]
    cfg = RunConfig.from_json((run_dir / "config.json").read_text())
    import shutil

    shutil.rmtree(run_dir)
    return cfg


def test_train_widgets_map_to_the_config(env_runs, monkeypatch):
    at = app().run()
    widget(at, "selectbox", "f.method").set_value("online-admm").run()
    widget(at, "text_input", "f.hidden").set_value("64,32,16").run()
    assert widget(at, "multiselect", "f.split").value == ["fc1", "fc2", "fc3"]  # reset to one block per layer
    widget(at, "multiselect", "f.split").set_value(["fc2"]).run()
    widget(at, "number_input", "f.epochs").set_value(7).run()
    widget(at, "number_input", "f.seed").set_value(3).run()
    widget(at, "number_input", "f.train_limit").set_value(500).run()
    widget(at, "selectbox", "f.loss").set_value("ce").run()
    widget(at, "selectbox", "f.device").set_value("cpu").run()
    unfold(at, "online-admm")
    widget(at, "text_input", "f.mp.online-admm.beta").set_value("2,0.5").run()
    widget(at, "selectbox", "f.mp.online-admm.dual").set_value("damped").run()
    assert not form_errors(at), form_errors(at)
    q = {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert q["method"] == "online-admm" and q["hidden"] == "64,32,16" and q["split"] == "fc2" and q["m.beta"] == "2,0.5"
    cfg = _start_and_capture(at, monkeypatch)
    expected = preset_config("digits-mlp", "online-admm").replace(
        model__hidden=(64, 32, 16),
        model__split=("fc2",),
        train__epochs=7,
        train__seed=3,
        train__loss="ce",
        train__device="cpu",
        data__train_limit=500,
        method_params={
            **preset_config("digits-mlp", "online-admm").method_params,
            "lr": 1e-3,
            "beta": [2.0, 0.5],
            "dual": "damped",
        },
    )
    assert same_config(cfg, expected)
    assert cfg.method_settings.beta == (2.0, 0.5)


@pytest.mark.parametrize("preset", ["cifar10-resnet18-small", "mnist5k-mlp"])
def test_preset_through_the_page_starts_exactly_the_preset(preset, env_runs, monkeypatch):
    """The preset menu fills the real page; Start launches the preset's own config, every field
    (before #34 cifar10-resnet18-small gave width 64 and all 10,000 test images)."""
    cfg = preset_config(preset, "gotmare")
    if cfg.data.name not in available():
        pytest.skip(f"{cfg.data.name} is not under ADMM_DATA")
    at = app().run()
    widget(at, "selectbox", "f.method").set_value("gotmare").run()
    widget(at, "selectbox", "f.preset").set_value(preset).run()
    no_exceptions(at)
    if "width" in ARCHS[cfg.model.arch].sizes:
        assert widget(at, "number_input", "f.width").value == cfg.model.width
    unfold(at)
    kinds = ("selectbox", "number_input", "checkbox", "text_input", "multiselect", "radio")
    shown = {w.key for kind in kinds for w in getattr(at, kind)}
    form = {f.key: at.session_state[f"f.{f.key}"] for f in F.FIELDS if f"f.{f.key}" in at.session_state}
    # a widget for every config field that applies here, none for one that does not
    applies = {f"f.{f.key}" for f in F.FIELDS if f.kind != "hidden" and f.enabled(form)}
    assert applies <= shown, sorted(applies - shown)
    assert not shown & {f"f.{f.key}" for f in F.FIELDS if not f.enabled(form)}
    assert widget(at, "number_input", "f.test_limit").value == (cfg.data.test_limit or 0)
    assert _start_and_capture(at, monkeypatch) == cfg


def test_a_saved_run_through_the_page_starts_its_own_config(env_runs, monkeypatch):
    """Runs → Load into Train, then Start: the new run's config is the saved one's, every field."""
    saved = RunConfig.from_json((env_runs / "r1-digits-block-admm" / "config.json").read_text())
    at = app({"load": "r1-digits-block-admm"}).run()
    no_exceptions(at)
    assert _start_and_capture(at, monkeypatch) == saved


def test_train_bad_values_show_messages_not_tracebacks(env_runs):
    at = app({"epochs": "0"}).run()  # the widget stops at its minimum; a link can still say 0
    no_exceptions(at)
    assert any("Epochs = 0" in e for e in form_errors(at))  # by its label
    assert widget(at, "button", "start").disabled
    widget(at, "number_input", "f.epochs").set_value(5).run()
    assert not any("Epochs =" in e for e in form_errors(at))
    widget(at, "text_input", "f.hidden").set_value("128,x").run()
    assert any("MLP hidden widths" in e for e in form_errors(at))
    widget(at, "text_input", "f.hidden").set_value("128,128").run()
    widget(at, "text_input", "f.mp.block-admm.lr").set_value("-0.1").run()
    assert any("η — Θ step size = -0.1" in e for e in form_errors(at))
    widget(at, "text_input", "f.mp.block-admm.lr").set_value("1e-3").run()
    widget(at, "text_input", "f.mp.block-admm.beta").set_value("1,2").run()
    assert any("one per block (T = 3)" in e for e in form_errors(at)), form_errors(at)
    widget(at, "text_input", "f.mp.block-admm.beta").set_value("1,2,3").run()
    widget(at, "selectbox", "f.arch").set_value("resnet18").run()
    no_exceptions(at)
    assert any("resnet18" in e and "image inputs" in e for e in form_errors(at)), form_errors(at)


def test_train_form_from_a_shared_url(env_runs):
    at = app(
        {
            "preset": "digits-mlp",
            "method": "sgd",
            "epochs": "9",
            "hidden": "32",
            "split": "-",
            "m.lr": "0.02",
            "m.momentum": "0.5",
        }
    ).run()
    no_exceptions(at)
    assert widget(at, "selectbox", "f.method").value == "sgd"
    assert widget(at, "number_input", "f.epochs").value == 9
    assert widget(at, "text_input", "f.hidden").value == "32"
    assert "f.split" not in {w.key for w in at.multiselect}  # an end-to-end method: no split to edit
    assert at.session_state["f.split"] == []  # … but the link's "-" is kept, for a method with blocks
    assert widget(at, "text_input", "f.mp.sgd.lr").value == "0.02"
    assert widget(at, "text_input", "f.mp.sgd.momentum").value == "0.5"
    assert not form_errors(at)


def test_preset_and_method_menus_fill_the_form(env_runs):
    at = app().run()
    widget(at, "selectbox", "f.preset").set_value("mnist5k-mlp").run()
    assert widget(at, "selectbox", "f.data").value == "mnist-5k"
    widget(at, "selectbox", "f.method").set_value("adam").run()
    assert widget(at, "text_input", "f.mp.adam.lr").value == "0.001"
    # every setting of the method is a widget with its help line
    helps = {w.key: w.help for w in at.text_input if w.key.startswith("f.mp.adam.")}
    assert "learning rate" in helps["f.mp.adam.lr"]


# --- Runs page ------------------------------------------------------------------------------------


def test_runs_page_reads_real_run_dirs(env_runs):
    at = app().run()
    at.switch_page("views/runs.py").run()
    no_exceptions(at)
    table = at.dataframe[0].value
    by_run = dict(zip(table["run"], table["status"]))
    assert "finished" in by_run["r1-digits-block-admm"] and "finished" in by_run["r2-digits-sgd"]
    assert "crashed" in by_run["r3-digits-adam"]
    assert set(table.columns) >= {"run", "status", "data", "method", "size", "test %"}
    # the crashed run shows its error
    runs_sel(at).set_value("r3-digits-adam").run()
    assert any("worker process ended" in e for e in errors(at)), errors(at)
    runs_sel(at).set_value("r1-digits-block-admm").run()
    assert any(j.value for j in at.json)  # config.json
    labels = [d.label for d in at.download_button]
    assert labels[0] == "Whole run (.zip)" and labels[1].startswith("checkpoint.pt (") and "none" not in labels[1]
    assert labels[2:] == ["config.json", "metrics.jsonl"], labels


def test_runs_page_deletes_a_run(env_runs, tmp_path, monkeypatch):
    root = tmp_path / "runs"
    train(digits_cfg("adam", 1, n=300), root / "victim")
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app().run()
    at.switch_page("views/runs.py").run()
    runs_sel(at).set_value("victim").run()
    assert widget(at, "button", "runs_delete").disabled
    widget(at, "checkbox", "runs_del_sure").check().run()
    widget(at, "button", "runs_delete").click().run()
    no_exceptions(at)
    assert not (root / "victim").exists()
    assert any("No runs yet" in i.value for i in at.info)


def _runs_page_on(root: Path, name: str, monkeypatch) -> tuple[AppTest, list]:
    """The Runs page over ``root`` with run ``name`` picked; launches are recorded, not started."""
    launched: list = []
    monkeypatch.setattr(W, "_spawn", lambda args, run_dir, processes=1: launched.append(args) or 1)
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app().run()
    at.switch_page("views/runs.py").run()
    runs_sel(at).set_value(name).run()
    return at, launched


def test_runs_page_resumes_a_stopped_run(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    done = []  # stop after 2 of 3 epochs, as SIGTERM does in a worker
    train(
        digits_cfg("block-admm", 3, n=300),
        root / "paused",
        on_progress=lambda e, m: m and m["epoch"] >= 2 and done.append(1),
        should_stop=lambda: bool(done),
    )
    assert read_json(root / "paused" / "status.json")["state"] == "stopped"
    assert read_json(root / "paused" / "status.json")["epoch"] == 2
    at, launched = _runs_page_on(root, "paused", monkeypatch)
    # a target at or below the epochs done is refused with a message, nothing launched
    widget(at, "number_input", "runs_resume_to.paused").set_value(2).run()
    widget(at, "button", "runs_resume").click().run()
    no_exceptions(at)
    assert launched == [] and any("already done" in w.value for w in at.warning), [w.value for w in at.warning]
    widget(at, "number_input", "runs_resume_to.paused").set_value(5).run()
    widget(at, "button", "runs_resume").click().run()
    no_exceptions(at)
    assert launched == [["--resume", str(root / "paused"), "--epochs", "5"]]


def test_runs_page_resumes_a_deepfacto_run_stopped_in_its_evaluation(tmp_path, monkeypatch):
    """A DeepFacto run stopped during its SVMs (all iterations done) offers to finish them, launches
    that resume, and refuses a length that would re-label done iterations, before touching its status."""
    from admm_core.spec.deepfacto import DeepFactoConfig, run_config_dict

    root = tmp_path / "runs"
    run = root / "faces"
    run.mkdir(parents=True)
    cfg = DeepFactoConfig(warmup_epochs=2, finetune_epochs=3)
    write_json(run / "config.json", run_config_dict(cfg))
    write_json(run / "status.json", {"state": "stopped", "epoch": 5, "epochs": 5, "phase": "attribute evaluation"})
    (run / "state.pt").write_bytes(b"")  # its loop state (only its presence is checked before launch)
    at, launched = _runs_page_on(root, "faces", monkeypatch)
    no_exceptions(at)
    assert widget(at, "number_input", "runs_resume_to.faces").value == 5  # finish the evaluation
    widget(at, "number_input", "runs_resume_to.faces").set_value(4).run()  # fewer than done
    widget(at, "button", "runs_resume").click().run()
    no_exceptions(at)
    assert launched == [] and any("Resume to epoch = 4" in w.value for w in at.warning), [w.value for w in at.warning]
    assert read_json(run / "status.json")["state"] == "stopped"  # nothing lost
    widget(at, "number_input", "runs_resume_to.faces").set_value(5).run()
    widget(at, "button", "runs_resume").click().run()
    no_exceptions(at)
    assert launched == [["--resume", str(run), "--epochs", "5"]]
    # without state.pt (a finished DeepFacto run drops it) there is nothing to resume: said, not launched
    (run / "state.pt").unlink()
    write_json(run / "status.json", {"state": "stopped", "epoch": 5, "epochs": 5})
    at.run()
    widget(at, "button", "runs_resume").click().run()
    no_exceptions(at)
    assert len(launched) == 1 and any("no state.pt" in w.value for w in at.warning), [w.value for w in at.warning]


def test_runs_page_loads_a_config_into_the_train_form(env_runs):
    """Runs → Load into Train is a link to /?load=<run id>; the Train page puts that run's config
    into the form, watches the run and drops the parameter. A name not in the runs folder loads nothing."""
    at = app().run()
    at.switch_page("views/runs.py").run()
    runs_sel(at).set_value("r2-digits-sgd").run()
    links = [el for el in at.get("page_link") if el.proto.label == "Load into Train"]
    assert len(links) == 1 and "load=r2-digits-sgd" in links[0].proto.query_string, links
    at = app()
    at.query_params["load"] = "r2-digits-sgd"
    at.run()
    no_exceptions(at)
    assert at.title[0].value == "Train"
    assert widget(at, "selectbox", "f.method").value == "sgd"
    assert widget(at, "number_input", "f.train_limit").value == 300
    assert widget(at, "number_input", "f.epochs").value == 2
    assert "load" not in at.query_params and at.session_state["watch"] == "r2-digits-sgd"
    for bad in ("../r2-digits-sgd", "no-such-run"):
        at = app()
        at.query_params["load"] = bad
        at.run()
        no_exceptions(at)
        assert widget(at, "selectbox", "f.method").value == "block-admm"  # the default form, nothing loaded
        assert any(f"No run {bad!r}" in w.value for w in at.warning), [w.value for w in at.warning]


# --- Compare page ---------------------------------------------------------------------------------


def test_compare_page_table_and_csv(env_runs):
    at = app().run()
    at.switch_page("views/compare.py").run()
    no_exceptions(at)
    widget(at, "multiselect", "cmp_runs").set_value(["r1-digits-block-admm", "r2-digits-sgd"]).run()
    table = at.dataframe[0].value
    assert list(table["run"]) == ["r1-digits-block-admm", "r2-digits-sgd"]
    assert {"final test %", "best test %", "wall time s", "Z/U memory MiB", "paper test %"} <= set(table.columns)
    assert table["Z/U memory MiB"].iloc[0] > 0 and table["Z/U memory MiB"].iloc[1] == 0
    # filters narrow the pool
    widget(at, "multiselect", "cmp_methods").set_value(["sgd"]).run()
    opts = [o.split(" · ")[0] for o in widget(at, "multiselect", "cmp_runs").options]
    assert opts[0] == "r2-digits-sgd" and "r3-digits-adam" not in opts  # picked runs stay, others go
    widget(at, "radio", "cmp_x").set_value("wall time").run()
    widget(at, "slider", "cmp_smooth").set_value(0.5).run()
    no_exceptions(at)
    assert at.download_button(key="cmp_csv").label == "Download table (CSV)"
    # grouped: one mean line per kind in its band; the charts' data as CSV
    widget(at, "selectbox", "cmp_group").set_value("method").run()
    widget(at, "radio", "cmp_spread").set_value("range").run()
    no_exceptions(at)
    assert at.download_button(key="cmp_series_csv").label == "Download the charts' data (CSV)"


# --- Heatmaps page ---------------------------------------------------------------------------------


def _png(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_heatmaps_page_without_any_model(env_runs, monkeypatch, tmp_path):
    monkeypatch.setenv("ADMM_DEEPFACTO_MODELS", str(tmp_path / "no-models"))
    at = app().run()
    at.switch_page("views/heatmaps.py").run()
    no_exceptions(at)
    assert any("No DeepFacto model" in i.value and "lfwa-deepfacto" in i.value for i in at.info)


def test_heatmaps_page_works_out_of_the_box_with_the_shipped_models(env_runs, monkeypatch, tmp_path):
    """No data root, no runs: the shipped models are offered, the page starts on the upload, and the
    mean training face gets r score maps drawn."""
    monkeypatch.setenv("ADMM_DATA", str(tmp_path / "no-data"))
    monkeypatch.chdir(tmp_path)  # ./data is searched too
    monkeypatch.setattr(
        "admm_core.spec.datasets.PROJECT_ROOT", tmp_path
    )  # and so is ../shared/data beside the checkout
    at = app().run()
    at.switch_page("views/heatmaps.py").run()
    no_exceptions(at)
    menu = widget(at, "selectbox", "hm_model")
    assert [o.split(" (")[0] for o in menu.options] == ["shipped · DeepFacto r = 4", "shipped · DeepFacto r = 32"]
    assert widget(at, "radio", "hm_source").value == "Upload a photo"
    widget(at, "radio", "hm_source").set_value("LFW test faces").run()
    assert any("No LFW here" in w.value for w in at.warning)
    widget(at, "radio", "hm_source").set_value("Mean training face").run()
    no_exceptions(at)
    fig = at.get("plotly_chart")[0].proto.spec
    assert fig.count("S[") >= 4  # the default four components, one panel each
    r4 = widget(at, "multiselect", "hm_comps.shipped:deepfacto-r4").value
    widget(at, "selectbox", "hm_model").set_value("shipped:deepfacto-r32").run()
    no_exceptions(at)
    comps = widget(at, "multiselect", "hm_comps.shipped:deepfacto-r32")
    assert "r = 32" in comps.label
    # the r = 32 model's own most used rows, not the r = 4 model's picks kept
    from app.dashboard.scorer import scorer

    _, order = scorer().info("shipped:deepfacto-r32")
    assert comps.value == order[:4] and (comps.value != r4 or order[:4] == r4)


def test_heatmaps_page_lists_deepfacto_runs_and_checks_uploads(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    (root / "df1").mkdir(parents=True)
    (root / "df1" / "config.json").write_text(
        json.dumps({"method": "block-admm", "preset": "lfwa-deepfacto", "deepfacto": {"rank": 4}})
    )
    (root / "plain").mkdir()
    (root / "plain" / "config.json").write_text(digits_cfg("block-admm", 2, n=300).to_json())
    monkeypatch.setenv("ADMM_RUNS", str(root))
    monkeypatch.setenv("ADMM_DEEPFACTO_MODELS", str(tmp_path / "no-models"))  # runs only
    at = app().run()
    at.switch_page("views/heatmaps.py").run()
    no_exceptions(at)
    assert widget(at, "selectbox", "hm_model").options == ["df1"]
    # an LFW face is shown; this stub run has no checkpoint, which the page says (no traceback)
    warnings = " ".join(w.value for w in at.warning)
    assert "no usable DeepFacto model" in warnings or "held-out people" in warnings, warnings
    if _lfw_images() is not None:  # the people offered are the run's own test identities
        from admm_core.deepfacto.heldout import test_people

        assert widget(at, "selectbox", "hm_person").options == sorted(test_people(root / "df1"))
    widget(at, "radio", "hm_source").set_value("Upload a photo").run()
    widget(at, "file_uploader", "hm_upload").set_value(("notes.txt", b"hello, not an image", "text/plain")).run()
    no_exceptions(at)
    assert errors(at) == ["notes.txt: That file is not an image we can read (use a JPEG or PNG photo)."], errors(at)
    # over the photo limit (under Streamlit's own, so it reaches the page): one message naming the
    # file and the size, and the previous file's message is gone
    big = b"\xff\xd8" + bytes(25 * 2**20)
    widget(at, "file_uploader", "hm_upload").set_value(("big.jpg", big, "image/jpeg")).run()
    no_exceptions(at)
    assert len(errors(at)) == 1 and errors(at)[0].startswith("big.jpg: refused, 25.0 MB is over the 20 MB"), errors(at)
    blank = np.full((200, 200, 3), 127, np.uint8)
    widget(at, "file_uploader", "hm_upload").set_value(("blank.png", _png(blank), "image/png")).run()
    no_exceptions(at)
    detector, why = faces.face_detector()
    expected = "No face found" if detector else "Face detection is not available"
    assert any(expected in e for e in errors(at)), errors(at)


def _lfw_images() -> Path | None:
    try:
        return find_lfw()[0]
    except DataError:
        return None


def _lfw_face() -> Path:
    folder = _lfw_images()
    if folder is None:
        pytest.skip("LFW is not under the data root")
    return sorted((folder / "Aaron_Eckhart").glob("*.jpg"))[0]


def test_face_detection_and_crop():
    detector, why = faces.face_detector()
    if detector is None:
        pytest.skip(f"no OpenCV face detector here: {why}")
    path = _lfw_face()
    from PIL import Image

    img = np.asarray(Image.open(path).convert("RGB"))
    big = np.pad(img, ((100, 40), (30, 170), (0, 0)), constant_values=255)  # face off-centre in a bigger photo
    crop, box, whole = faces.face_from_upload(_png(big))
    assert crop.shape == (faces.FACE_SIZE, faces.FACE_SIZE, 3)
    x, y, w, h = box
    assert 100 <= y + h / 2 - 0 <= 100 + 160 and 30 <= x + w / 2 <= 30 + 160


def test_overlay_figure_draws_each_component():
    face = np.zeros((160, 160, 3), np.uint8)
    maps = np.random.default_rng(0).random((4, 160, 160)).astype(np.float32)
    fig = faces.overlay_figure(face, [maps[0], maps[2]], ["S[0]", "S[2]"], opacity=0.4)
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert len(heat) == 2 and all(abs(t.opacity - 0.4) < 1e-9 for t in heat)


# --- workers: real processes --------------------------------------------------------------------------


def test_worker_crash_is_reported_with_its_error(tmp_path):
    """A worker whose config fails its checks ends 'crashed' with the engine's message
    (start_run itself refuses such a config before launching anything)."""
    from admm_core.errors import ConfigError

    # resnet18 on flat 8×8 digits
    bad = digits_cfg("block-admm", 2, n=300).replace(model__arch="resnet18", model__split=("conv3_x",))
    with pytest.raises(ConfigError, match="image inputs"):
        W.start_run(bad, tmp_path)
    assert list(tmp_path.iterdir()) == []
    run_dir = tmp_path / "bad"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(bad.to_json())
    W._spawn(["--config", str(run_dir / "config.json"), "--out", str(run_dir)], run_dir)
    # 'crashed' shows as soon as the pid is gone; the reaper's record (with the exit code) follows
    assert _wait(lambda: W.state_of(run_dir).get("exit_code") is not None, 90), W.state_of(run_dir)
    st = W.state_of(run_dir)
    assert st["state"] == "crashed" and st["exit_code"] == 2
    assert "resnet18" in st["error"] and "image inputs" in st["error"]
    assert "launch.json" in os.listdir(run_dir)


@pytest.mark.skipif(shutil.which("nice") is None, reason="no `nice` on this system")
def test_worker_runs_at_lower_priority_and_stops(tmp_path):
    """The worker yields the CPU to the app (niceness above ours) and SIGTERM to its recorded pid stops it."""
    run_dir = W.start_run(digits_cfg("block-admm", 2, n=300).replace(train__epochs=100000), tmp_path)
    assert _wait(lambda: W.state_of(run_dir)["state"] == "running", 90), W.state_of(run_dir)
    pid = W.worker_pid(run_dir)
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(os.getpriority(os.PRIO_PROCESS, 0) + 5, 19)
    # where the kernel groups sessions (autogroups), nice alone ranks the worker only against itself:
    # its own session's group must carry the niceness too (without it: "nice 0")
    if Path(f"/proc/{pid}/autogroup").exists() and Path("/proc/self/autogroup").exists():
        assert open(f"/proc/{pid}/autogroup").read().split()[-1] == "5", open(f"/proc/{pid}/autogroup").read()
        assert open(f"/proc/{pid}/cmdline").read().split("\0")[1:3] == ["-m", "admm_core"]  # exec'd: the same pid
    assert W.stop_run(run_dir)
    assert _wait(lambda: W.state_of(run_dir)["state"] == "stopped", 60), W.state_of(run_dir)


def test_chart_helpers():
    from app.dashboard import charts as C

    ms = [
        {
            "epoch": e,
            "wall_time_s": 2.0 * e,
            "train_accuracy": 0.5,
            "test_accuracy": 0.4,
            "train_loss": 1.0,
            "test_loss": 1.1,
            "residuals": [0.1, 0.2],
            "dual_norms": [1.0, 2.0],
            "betas": [1.0, 1.0],
            "time": 0.0,
        }
        for e in range(4)
    ]
    fig = C.accuracy_figure(ms)
    assert len(fig.data) == 2 and fig.data[1].y == (40.0, 40.0, 40.0, 40.0)
    assert C.smooth([1.0, None, 3.0], 0.5) == [1.0, None, 2.0]
    # ETA: epochs left × measured s/epoch (from the evaluations this worker wrote) − time since the last
    ms_t = [{**m, "time": 100.0 + 3.0 * m["epoch"]} for m in ms]  # 3 s per epoch
    running = {"state": "running", "started": 99.0, "epochs": 10}
    assert C.eta_seconds(running, ms_t[:1], now=101.0) is None  # before one epoch: "estimating…"
    assert C.eta_seconds(running, ms_t, now=110.0) == pytest.approx((10 - 3) * 3.0 - 1.0)
    assert C.eta_seconds({**running, "started": 107.0}, ms_t, now=110.0) is None  # resumed: old lines do not count
    assert C.eta_seconds({**running, "state": "finished"}, ms_t) is None
    fig = C.compare_figure([("a", ms), ("b", ms)], "residuals", C.Overlay(x_key="wall_time_s"))
    assert len(fig.data) == 4 and fig.data[0].x == (0.0, 2.0, 4.0, 6.0)


# --- arithmetic diagram, memory, ticks, meta, images, selection ----------------------------------


def test_layer_arithmetic_matches_the_built_network():
    """Parameter counts and Z sizes by the engine's arithmetic (admm_core.spec.resources.layer_table, which the
    diagram and the memory estimate use) equal those of the real layers (MLP and ResNet-18)."""
    import torch

    from admm_core.models import build_layers
    from admm_core.spec.config import ModelConfig
    from admm_core.spec.resources import layer_table

    for arch, hidden, shape in [
        ("mlp", (33, 7, 5), (1, 8, 8)),
        ("resnet18", (), (3, 32, 32)),
        ("resnet18", (), (1, 28, 28)),
    ]:
        rows = layer_table(arch, hidden, shape, 10)
        layers = build_layers(ModelConfig(arch, hidden), shape, 10)
        assert [r[0] for r in rows] == list(layers) == F.layer_names(arch, hidden)
        x = torch.zeros(1, *shape)
        for (name, out_shape, params), layer in zip(rows, layers.values()):
            layer.eval()
            x = layer(x)
            assert params == sum(p.numel() for p in layer.parameters()), name
            assert out_shape == tuple(x.shape[1:]), name


def test_memory_estimate_refuses_absurd_sizes_without_building_them():
    import resource

    from admm_core.spec.resources import estimate_memory, split_of

    blocks = F.describe_blocks("mlp", (100000, 100000), ["fc1", "fc2"], "digits")
    params = 64 * 100000 + 100000 + 100000 * 100000 + 100000 + 100000 * 10 + 10
    assert sum(b["params"] for b in blocks) == params and [b["out"] for b in blocks] == [100000, 100000, 10]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    form = {**F.default_form(), "hidden": "100000,100000"}
    cfg, errs = F.config_from_form(form, available=["digits"])
    assert cfg is None and "memory" in errs
    assert "model.hidden = '100000,100000'" in errs["memory"] and "GiB" in errs["memory"] and "limit" in errs["memory"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 50_000  # KB: nothing was allocated
    ok = F.config_from_form(F.default_form(), available=["digits"])[0]
    assert ok is not None
    # the page's figures are the engine's: Θ as float32, Z and U for every training sample and block
    mem = F.check_form(F.default_form(), available=["digits"]).memory
    assert mem == estimate_memory(ok)
    blocks = F.describe_blocks(ok.model.arch, ok.model.hidden, list(split_of(ok)), ok.data.name)
    assert mem["param_bytes"] == 4 * sum(b["params"] for b in blocks)
    z_copies = 4 if ok.method_settings.z_optimizer == "adam" else 2
    assert mem["state_bytes"] == 1347 * sum(b["out"] for b in blocks) * z_copies * 4


def test_train_page_shows_the_memory_message_and_blocks_start(env_runs):
    at = app().run()
    widget(at, "text_input", "f.hidden").set_value("100000,100000").run()
    no_exceptions(at)
    assert any("this run needs about" in e for e in form_errors(at)), form_errors(at)
    assert widget(at, "button", "start").disabled


def test_log_ticks_keep_every_decade():
    from app.dashboard import charts as C

    vals, text = C.log_ticks([0.5, 0.2, 0.1, 0.05, 0.02])
    assert text == ["0.02", "0.05", "0.1", "0.2", "0.5"] and vals == [0.02, 0.05, 0.1, 0.2, 0.5]
    vals, text = C.log_ticks([0.19, 0.6])  # under a decade: a finer ladder, still whole numbers
    assert text == ["0.2", "0.3", "0.4", "0.5", "0.6"]
    vals, text = C.log_ticks([1e-6, 1e3])
    assert len(vals) <= 8 and vals == sorted(vals) and text[0] == "1e-6"
    ms = [{"epoch": e, "train_loss": 0.5 / (e + 1)} for e in range(25)]
    fig = C.compare_figure([("a", ms)], "train_loss", C.Overlay(log_y=True))
    assert fig.layout.yaxis.type == "log" and list(fig.layout.yaxis.ticktext)[:2] == ["0.02", "0.05"]
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0  # legend below, never on the title
    assert "<br>" in C.wrap("Primal residual ‖Z_t − block_t(Z_{t−1})‖ per block")


@needs_node
def test_backprop_cosine_is_plotted_when_present():
    from app.dashboard import charts as C

    ms = [{"epoch": e, "residuals": [0.1, 0.2], "backprop_cosine": [0.9, -0.2]} for e in range(3)]
    spec = C.live_spec()
    cosine = live_traces(spec["backprop_cosine"], ms)
    assert len(cosine) == 2 and cosine[1]["y"] == [-0.2, -0.2, -0.2]
    assert spec["backprop_cosine"]["when"] == "backprop_cosine"  # drawn once a line carries it (live_series.js shown)
    # every live title fits one line (plotly drew a wrapped title's lines over the plot); the
    # math is on the y axis
    frames = {n: C.spec_frame(c) for n, c in spec.items()}
    assert all("<br>" not in f["title"]["text"] for f in frames.values()), [f["title"]["text"] for f in frames.values()]
    assert "‖Zₜ − blockₜ(Zₜ₋₁)‖" in frames["residuals"]["yaxis"]["title"]["text"]  # subscripts, not TeX underscores


def test_meta_is_stored_shown_and_filterable(tmp_path, monkeypatch):
    from app.dashboard import meta as M

    root = tmp_path / "runs"
    train(digits_cfg("sgd", 1, n=300), root / "a-sgd")
    train(digits_cfg("adam", 1, n=300), root / "b-adam")
    M.write_meta(root / "a-sgd", "baseline SGD", "baseline, small", "first try")
    assert M.read_meta(root / "a-sgd") == {"name": "baseline SGD", "tags": ["baseline", "small"], "note": "first try"}
    assert M.read_meta(root / "b-adam") == {"name": "", "tags": [], "note": ""}
    with pytest.raises(Exception, match="name = "):
        M.write_meta(root / "a-sgd", "x" * 200)
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app().run()
    at.switch_page("views/runs.py").run()
    table = at.dataframe[0].value
    assert dict(zip(table["run"], table["name"]))["a-sgd"] == "baseline SGD"
    at.text_input(key="runs_filter").set_value("baseline").run()
    assert list(at.dataframe[0].value["run"]) == ["a-sgd"]
    at.text_input(key="runs_filter").set_value("").run()
    # edit in the page: the file changes
    runs_sel(at).set_value("b-adam").run()
    at.text_input(key="meta_name.b-adam").set_value("adam try").run()
    at.text_input(key="meta_tags.b-adam").set_value("deep, deep , x").run()
    at.button(key="meta_save.b-adam").click().run()
    no_exceptions(at)
    assert M.read_meta(root / "b-adam") == {"name": "adam try", "tags": ["deep", "x"], "note": ""}


def test_selection_is_by_id_and_stable(tmp_path, monkeypatch):
    """The watched run stays the picked one when runs are added, finish or change state; it is in the URL."""
    root = tmp_path / "runs"
    train(digits_cfg("sgd", 1, n=300), root / "20260101-000001-a")
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app({"run": "20260101-000001-a"}).run()
    no_exceptions(at)
    assert watch_pick(at).value == "20260101-000001-a"
    # a newer run appears and one is 'running' (listed first): the pick does not move
    train(digits_cfg("adam", 1, n=300), root / "20260101-000002-b")
    st_b = read_json(root / "20260101-000002-b" / "status.json")
    write_json(root / "20260101-000002-b" / "status.json", {**st_b, "state": "running", "pid": os.getpid()})
    at.run()
    assert watch_pick(at).value == "20260101-000001-a"
    q = {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert q["run"] == "20260101-000001-a"
    # picking another run in the menu watches it (and the menu then shows it)
    watch_pick(at).set_value("20260101-000002-b").run()
    at.run()
    assert watch_pick(at).value == "20260101-000002-b" and at.session_state["watch"] == "20260101-000002-b"
    watch_pick(at).set_value("20260101-000001-a").run()
    at.run()
    assert watch_pick(at).value == "20260101-000001-a"
    # the Runs page details show the same run, with the table's state
    at.switch_page("views/runs.py").run()
    assert runs_sel(at).value == "20260101-000001-a"
    assert any("finished" in m.value for m in at.markdown if m.value.startswith("#### "))


def test_start_is_idempotent_per_click(env_runs, monkeypatch):
    launched = []
    monkeypatch.setattr(W, "_spawn", lambda args, run_dir, processes=1: launched.append(run_dir) or 1)
    at = app().run()
    widget(at, "button", "start").click().run()
    widget(at, "button", "start").click().run()  # a double click: the same config at once
    no_exceptions(at)
    assert len(launched) == 1, launched
    assert watch_pick(at).value == launched[0].name  # the new run is watched
    shutil.rmtree(launched[0])


def test_start_click_checks_the_form_once_and_estimates_memory_once(env_runs, monkeypatch):
    """A Start click runs one preflight (one memory estimate): the drawing after the callback reuses
    the callback's check of the same form; a drawing without a click checks once too."""
    import admm_core.spec.resources as R

    monkeypatch.setattr(W, "_spawn", lambda args, run_dir, processes=1: 1)
    calls = {"check": 0, "estimate": 0}
    check, estimate = F.check_form, R.estimate_memory

    def counted_check(*a, **k):
        calls["check"] += 1
        return check(*a, **k)

    def counted_estimate(*a, **k):
        calls["estimate"] += 1
        return estimate(*a, **k)

    monkeypatch.setattr(F, "check_form", counted_check)
    monkeypatch.setattr(R, "estimate_memory", counted_estimate)
    at = app().run()
    assert calls == {"check": 1, "estimate": 1}, calls  # one drawing
    widget(at, "button", "start").click().run()
    no_exceptions(at)
    assert calls == {"check": 2, "estimate": 2}, calls  # the click's check, reused by its drawing


def test_processes_field_starts_the_worker_under_torchrun(env_runs, monkeypatch):
    """Processes = 2 reaches the launcher (torchrun, sample-sharded Z/U); methods that cannot be
    sharded, and counts out of range, are said next to the field."""
    form = F.default_form()
    assert form["processes"] == 1 and F.from_query(F.to_query({**form, "processes": 3}))[0]["processes"] == 3
    for method, n, needle in [("sgd", 2, "only block-admm and gotmare"), ("block-admm", 0, "processes = 0")]:
        bad = {**F.default_form("digits-mlp", method), "processes": n}
        cfg, errs = F.config_from_form(bad, available=["digits"])
        assert cfg is None and needle in errs.get("processes", ""), errs
    assert F.config_from_form({**form, "processes": 2, "device": "cpu"}, available=["digits"])[1] == {}
    launched = []
    monkeypatch.setattr(W, "_spawn", lambda args, run_dir, processes=1: launched.append((run_dir, processes)) or 1)
    at = app().run()
    widget(at, "selectbox", "f.device").set_value("cpu").run()  # the same on a machine with one GPU
    widget(at, "number_input", "f.processes").set_value(2).run()
    widget(at, "button", "start").click().run()
    no_exceptions(at)
    assert [p for _, p in launched] == [2], (launched, form_errors(at))  # the torchrun command: test_distributed
    shutil.rmtree(launched[0][0])


def test_preflight_returns_every_problem_by_field():
    """preflight gives one message per field (not the first problem only); the CLI's wrapper
    raises the first of them, naming the field and the value."""
    from admm_core.spec.resources import preflight as raising
    from admm_core.spec.resources import preflight_problems as preflight

    cfg = preset_config("digits-mlp", "sgd").replace(data__name="mnist", data__augment=True)
    assert preflight(cfg, datasets=["mnist"]) == {}  # images, a method that reads inputs through the batch
    bad = preset_config("digits-mlp", "block-admm").replace(
        data__augment=True, model__split=("fc2", "fc1"), method_params={"beta": [1.0, 2.0]}
    )
    got = preflight(bad, 0, datasets=["mnist"])
    assert set(got) == {"data.name", "data.augment", "model.split", "method_params.beta", "processes"}, got
    assert "flat vectors (64,)" in got["data.augment"] and "processes = 0" in got["processes"]
    per_block = preflight(bad.replace(model__split=None, data__augment=False), datasets=["digits"])
    assert set(per_block) == {"method_params.beta"} and "one per block" in per_block["method_params.beta"]
    with pytest.raises(ConfigError, match=r"model\.split"):
        raising(bad.replace(data__augment=False))


def test_processes_field_refuses_what_the_workers_would_fail_on(monkeypatch):
    """Before launch (the engine's preflight, given the process count): under parallel = 'blocks'
    the engine's own check (at most one process per block, the Jacobi sweep), and one GPU per
    process when the run would use CUDA."""
    from admm_core.spec import device as device_mod
    from admm_core.spec.resources import preflight_problems as preflight

    def pe(n, method="block-admm", parallel="samples", device="cpu", n_gpus=0, z_sweep="jacobi"):
        cfg = preset_config("digits-mlp", method).replace(
            method_params__parallel=parallel,
            method_params__z_sweep=z_sweep,
            method_params__z_schedule="sweep",  # parallel = 'blocks' needs it (the preset's is 'minibatch')
            method_params__z_start="previous",
            method_params__dual_theta="new",
            method_params__theta_input="new",
            train__device=device,
        )
        free = (2**40, "a test's memory")  # not measured: CUDA memory cannot be asked on this machine
        return {
            k: v
            for k, v in preflight(cfg, n, datasets=["digits"], free=free, n_gpus=n_gpus).items()
            if k == "processes"
        }

    assert pe(3, parallel="blocks") == {}  # digits-mlp: 3 blocks
    assert pe(2, parallel="blocks") == {}  # blocks 1-2 on one process, block 3 on the other
    assert "T = 3 blocks but world size 4" in pe(4, parallel="blocks")["processes"]
    assert "z_sweep" in pe(3, parallel="blocks", z_sweep="gauss-seidel")["processes"]
    minibatch = preset_config("digits-mlp", "block-admm").replace(
        method_params__parallel="blocks", method_params__z_sweep="jacobi"
    )
    assert "set z_schedule=sweep (or parallel=samples)" in preflight(minibatch, 3, datasets=["digits"])["processes"]
    assert pe(2, parallel="samples") == {}  # samples: any count
    sgd = preflight(preset_config("digits-mlp", "sgd"), 2, datasets=["digits"])
    assert "only block-admm and gotmare" in sgd["processes"]
    monkeypatch.setattr(device_mod, "cuda_device_count", lambda: 1)  # a machine with one GPU
    assert "has 1" in pe(2, device="auto", n_gpus=1)["processes"]  # auto: CUDA here, one GPU per process
    assert "has 1" in pe(2, "gotmare", device="cuda", n_gpus=1)["processes"]
    assert pe(2, device="cuda", n_gpus=2) == {} and pe(2, device="cpu", n_gpus=1) == {}
    monkeypatch.setattr(device_mod, "cuda_device_count", lambda: 0)
    assert pe(2, device="auto") == {}  # auto without a GPU: CPU processes
    form = {**F.default_form("digits-mlp", "block-admm"), "processes": 2, "device": "cpu"}  # split: 3 blocks
    form[F.MP + "parallel"] = "blocks"
    cfg, errs = F.config_from_form(form, available=["digits"])
    assert cfg is None and "z_sweep=jacobi" in errs["processes"], errs  # the engine's own check
    form[F.MP + "z_sweep"] = "jacobi"
    cfg, errs = F.config_from_form({**form, "processes": 3}, available=["digits"])
    assert cfg is None and "z_schedule=sweep" in errs["processes"], errs  # the preset's minibatch recipe
    sweep = {"z_schedule": "sweep", "z_start": "previous", "dual_theta": "new", "theta_input": "new"}
    form.update({F.MP + k: v for k, v in sweep.items()})
    cfg, errs = F.config_from_form({**form, "processes": 4}, available=["digits"])
    assert cfg is None and "world size 4" in errs["processes"], errs
    assert F.config_from_form({**form, "processes": 3}, available=["digits"])[1] == {}
    # memory: N copies of data, network and optimizer, the sharded Z/U once (the preflight's check)
    mem = {"data_bytes": 100, "param_bytes": 50, "optimizer_bytes": 50, "state_bytes": 400}
    free = (800, "available CPU RAM")
    assert processes_memory_problem(2, mem, free) is None  # 2 * 200 + 400
    assert "needs about" in processes_memory_problem(3, mem, free)  # 3 * 200 + 400
    assert "over the 700 B available (the limit: x)" in processes_memory_problem(2, mem, free, (700, "x"))
    # in the preflight, for the form and the CLI alike: the run alone fits, its N processes do not
    cfg = preset_config("digits-mlp", "block-admm").replace(train__device="cpu")
    one = preflight_report(cfg, 1, datasets=["digits"], free=(2**40, "a test's memory")).estimate
    per_process = one["data_bytes"] + one["param_bytes"] + one["optimizer_bytes"]
    room = (one["total_bytes"] + per_process, "a test's memory")  # room for two processes, not three
    assert preflight_report(cfg, 2, datasets=["digits"], free=room).errors == {}
    got = preflight_report(cfg, 3, datasets=["digits"], free=room).errors
    assert list(got) == ["processes"] and isinstance(got["processes"], MemoryRefusal)
    assert str(got["processes"]).startswith(
        "processes = 3: each process holds the data"
    ) and "(a test's memory)" in str(got["processes"])


def test_diverged_run_shows_its_message(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    train(digits_cfg("sgd", 1, n=300), root / "div")
    st_ = read_json(root / "div" / "status.json")
    write_json(root / "div" / "status.json", {**st_, "state": "diverged", "error": "loss is nan at epoch 1"})
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app({"run": "div"}).run()
    no_exceptions(at)
    assert any("diverged" in e and "loss is nan" in e for e in errors(at)), errors(at)


def test_bad_runs_folder_is_one_sidebar_message(tmp_path, monkeypatch):
    bad = tmp_path / "not-a-folder"
    bad.write_text("x")
    monkeypatch.setenv("ADMM_RUNS", str(bad))
    for page in (None, "views/runs.py", "views/compare.py", "views/heatmaps.py"):
        at = app().run()
        if page:
            at.switch_page(page).run()
        no_exceptions(at)
        msgs = [e.value for e in at.sidebar.error]
        assert len(msgs) == 1 and "is a file" in msgs[0], msgs
        assert not [e.value for e in at.main.error], page


def test_compare_settings_columns_and_url_selection(env_runs):
    at = app({"runs": "r1-digits-block-admm,r2-digits-sgd"}).run()
    at.switch_page("views/compare.py").run()
    # switch_page drops the URL; open the Compare page with its link instead
    at = AppTest.from_file(str(APP / "views" / "compare.py"), default_timeout=TIMEOUT)
    at.query_params["runs"] = "r1-digits-block-admm,r2-digits-sgd"
    at.run()
    no_exceptions(at)
    assert widget(at, "multiselect", "cmp_runs").value == ["r1-digits-block-admm", "r2-digits-sgd"]
    table = at.dataframe[0].value
    assert "⚙ m.lr" in table.columns and "⚙ data.name" not in table.columns
    assert "method" in table.columns and "⚙ method" not in table.columns  # one method column
    assert "⚙ m.z_lr" not in table.columns  # a block-admm setting sgd has not: no difference
    assert list(table["paper"]) == ["no figure", "no figure"]
    # on screen: the settings that differ before empty columns; no figure for any run: "paper" (why) last
    shown = list(at.dataframe[0].proto.column_order)
    assert shown.index("⚙ m.lr") < shown.index("paper") == len(shown) - 1, shown
    assert not {"name", "paper test %", "Δ vs paper"} & set(shown), shown
    assert {"name", "paper test %", "Δ vs paper"} <= set(table.columns)  # kept in the data (and the CSV)
    # on screen the settings read as the Train form names them (the code name in the help), the id unpinned
    columns = json.loads(at.dataframe[0].proto.columns)
    assert columns["⚙ m.lr"]["label"] == "⚙ η — Θ step size" and "`m.lr`" in columns["⚙ m.lr"]["help"], columns
    assert not columns["run"].get("pinned"), columns["run"]
    assert at.get("plotly_chart")[-1].proto.spec and '"parcoords"' in at.get("plotly_chart")[-1].proto.spec
    widget(at, "multiselect", "cmp_runs").set_value(["r2-digits-sgd"]).run()
    q = {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert q["runs"] == "r2-digits-sgd"


def test_compare_sends_its_charts_after_the_browser_has_drawn_the_controls(env_runs, monkeypatch):
    """Served with the routes (app/serve.py), a tab's first Compare draw sends the picker and
    placeholders, not plotly charts, and one sentinel per waiting fragment; each sentinel's answer
    (the browser has painted the page) draws its fragment; from then on the tab draws at once."""
    from app.dashboard import follow as FL

    monkeypatch.setenv(FL.ENV, "1")
    at = AppTest.from_file(str(APP / "views" / "compare.py"), default_timeout=TIMEOUT)
    at.query_params["runs"] = "r1-digits-block-admm,r2-digits-sgd"
    at.run()
    no_exceptions(at)
    assert widget(at, "multiselect", "cmp_runs").value == ["r1-digits-block-admm", "r2-digits-sgd"]
    assert not at.get("plotly_chart"), "charts sent with the controls"
    assert not at.dataframe, "the data grid sent with the controls"
    assert sum("Drawing the chart" in c.value for c in at.caption) == 5  # 4 charts + parallel coordinates
    assert sum("Drawing the table" in c.value for c in at.caption) == 1
    sentinels = {"cmp_charts", "cmp_parallel", "cmp_table_section"}
    assert {k for k in sentinels if f"follow.{k}.painted" in at.session_state} == sentinels  # drawn, not answered
    at.run()  # a rerun before any answer (a filter changed): still waiting
    assert not at.get("plotly_chart") and not at.dataframe
    at.session_state["follow.cmp_charts.painted"] = {"stamp": "painted", "count": 1}  # what its sentinel sends
    at.run()
    assert len(at.get("plotly_chart")) == 4 and not at.dataframe  # the others wait for their own answers
    for k in ("cmp_parallel", "cmp_table_section"):
        at.session_state[f"follow.{k}.painted"] = {"stamp": "painted", "count": 1}
    at.run()
    assert len(at.get("plotly_chart")) == 5 and '"parcoords"' in at.get("plotly_chart")[-1].proto.spec
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 2  # the table of the 2 runs
    at.run()
    assert len(at.get("plotly_chart")) == 5  # drawn at once from now on
    monkeypatch.delenv(FL.ENV)
    at = AppTest.from_file(str(APP / "views" / "compare.py"), default_timeout=TIMEOUT)  # no routes: at once
    at.query_params["runs"] = "r1-digits-block-admm,r2-digits-sgd"
    assert len(at.run().get("plotly_chart")) == 5


def _png16(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr.astype(np.uint16)).save(buf, format="PNG")
    return buf.getvalue()


def test_image_decoding_16bit_alpha_gray_and_large():
    from PIL import Image

    g16 = np.tile(np.linspace(0, 65535, 64, dtype=np.float64), (64, 1))
    rgb = faces.read_image(_png16(g16))  # 16-bit grayscale: scaled, not clipped to white
    assert rgb.shape == (64, 64, 3) and rgb[0, 0, 0] == 0 and rgb[0, -1, 0] == 255 and 120 < rgb[0, 32, 0] < 140
    rgba = np.zeros((40, 40, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[:20, :, 3] = 255  # top half opaque red, bottom half transparent
    out = faces.read_image(_png(rgba))
    assert tuple(out[0, 0]) == (200, 0, 0) and tuple(out[-1, -1]) == (255, 255, 255)
    gray = faces.read_image(_png(np.full((50, 60), 77, np.uint8)))
    assert gray.shape == (50, 60, 3) and (gray == 77).all()
    buf = io.BytesIO()
    Image.new("L", (3000, 2500), 128).save(buf, format="PNG")
    big = faces.read_image(buf.getvalue())  # downscaled to MAX_SIDE
    assert max(big.shape[:2]) == faces.MAX_SIDE
    buf = io.BytesIO()
    Image.new("1", (8000, 8000)).save(buf, format="PNG")  # 64 MP, a tiny file
    with pytest.raises(faces.UploadError, match="too large: 8000×8000"):
        faces.read_image(buf.getvalue())


# --- DeepFacto from the Train page -----------------------------------------------------------------


def test_deepfacto_form_validates_each_field_and_round_trips_the_url():
    from admm_core.spec.deepfacto import DeepFactoConfig

    values = F.deepfacto_form()
    cfg, errs = F.deepfacto_config(values)
    assert errs == {} and cfg == DeepFactoConfig()
    bad = {"rank": 0, "batch_size": 0, "svm_c": "[-1]", "s_mode": "nope", "m_update": "lbfgs", "gamma": "abc"}
    cfg, errs = F.deepfacto_config({**values, **{"df." + k: v for k, v in bad.items()}})
    assert cfg is None and set(errs) == {"df." + k for k in bad}, errs
    assert "deepfacto.m_update" in errs["df.m_update"] and "lbfgs" in errs["df.m_update"]
    assert "deepfacto.rank" in errs["df.rank"] and "0" in errs["df.rank"]
    assert "deepfacto.svm_c" in errs["df.svm_c"] and "deepfacto.gamma" in errs["df.gamma"]
    # text fields read like --set: JSON lists, null, plain strings; 0 labelled images = all of them
    mine = {"rank": 8, "svm_c": "[0.001, 0.1]", "data_limit": 0, "s_mode": "admm", "margin": "0.5"}
    mine = {**values, **{"df." + k: v for k, v in mine.items()}}
    cfg, errs = F.deepfacto_config(mine, backbone_weights="/w.pt")
    assert errs == {}
    assert cfg == DeepFactoConfig(rank=8, svm_c=(0.001, 0.1), s_mode="admm", margin=0.5, backbone_weights="/w.pt")
    q = F.to_query(mine, "deepfacto")
    assert q == {
        "mode": "deepfacto",
        "df.rank": "8",
        "df.svm_c": "[0.001, 0.1]",
        "df.s_mode": "admm",
        "df.margin": "0.5",
    }
    back, warnings = F.from_query({**q, "df.nope": "1", "df.seed": "x", "df.device": "tpu"})
    assert F.deepfacto_config(back)[0] == cfg.replace(backbone_weights=None)
    assert len(warnings) == 3 and any("df.nope" in w for w in warnings) and any("tpu" in w for w in warnings)
    # a run's saved settings come back into the same widgets
    assert F.deepfacto_config(F.deepfacto_form(cfg.to_dict()), "/w.pt")[0] == cfg


def test_deepfacto_backbone_upload_keeps_only_plain_weights(tmp_path, monkeypatch):
    import pickle

    import torch

    from admm_core.faces.backbone import FaceBackbone
    from app.dashboard import workers as D

    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="mine.pt"):
        D.save_upload("mine.pt", b"not a weights file")

    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    with pytest.raises(ValueError, match="refused"):
        D.save_upload("evil.pt", pickle.dumps(Payload()))
    assert not (tmp_path / "pwned").exists()
    assert list(D.uploads_dir().iterdir()) == []  # nothing refused is kept
    buf = io.BytesIO()
    torch.save(FaceBackbone().state_dict(), buf)
    path = D.save_upload("../../etc/whatever.pt", buf.getvalue())
    assert path.parent == D.uploads_dir() and path.name != "whatever.pt" and path.suffix == ".pt"
    assert D.saved_backbones() == [path]
    with pytest.raises(ValueError, match="over the"):
        D.save_upload("big.pt", b"0" * (D.UPLOAD_LIMIT + 1))


def test_train_page_deepfacto_messages_and_start(env_runs, monkeypatch, tmp_path):
    from admm_core.spec.faces import find_lfw

    at = app({"mode": "deepfacto", "df.rank": "0"}).run()
    no_exceptions(at)
    assert any("deepfacto.rank = 0" in e for e in form_errors(at)), form_errors(at)
    assert widget(at, "button", "start_df").disabled
    try:
        find_lfw()
    except Exception:  # noqa: BLE001
        pytest.skip("LFW is not under the data root: Start stays disabled")
    launched = []
    monkeypatch.setattr(W, "_spawn", lambda args, run_dir, processes=1: launched.append((args, run_dir)) or 1)
    widget(at, "number_input", "df.rank").set_value(32).run()
    widget(at, "text_input", "df.svm_c").set_value("0.01").run()
    assert not form_errors(at), form_errors(at)
    widget(at, "button", "start_df").click().run()
    widget(at, "button", "start_df").click().run()  # a double click starts one run
    no_exceptions(at)
    assert len(launched) == 1
    args, run_dir = launched[0]
    assert args == ["--config", str(run_dir / "config.json"), "--out", str(run_dir)]
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["preset"] == "lfwa-deepfacto" and saved["deepfacto"]["rank"] == 32
    assert saved["deepfacto"]["svm_c"] == [0.01]
    assert watch_pick(at).value == run_dir.name
    # loading it into the form: a fresh page shows its settings in the DeepFacto form
    at2 = app().run()
    at2.session_state["load_config"] = saved
    at2.run()
    no_exceptions(at2)
    assert at2.session_state["train_mode"] == "deepfacto" and widget(at2, "number_input", "df.rank").value == 32
    shutil.rmtree(run_dir)


def test_cli_runs_a_deepfacto_config_file_through_its_own_loop(tmp_path, monkeypatch):
    from admm_core import cli
    from admm_core.deepfacto import commands
    from admm_core.spec.deepfacto import DeepFactoConfig, run_config_dict

    seen = []
    monkeypatch.setattr(commands, "cli_train", lambda a: seen.append(commands.config_from_cli(a)) or 0)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(run_config_dict(DeepFactoConfig(rank=4, seed=3))))
    assert cli.main(["train", "--config", str(path), "--out", str(tmp_path / "run")]) == 0
    assert seen == [DeepFactoConfig(rank=4, seed=3)]


def test_live_stamp_changes_only_with_what_the_panel_shows(tmp_path):
    """The live panel redraws when its stamp changes: the run launched (before its worker reports),
    its state, its name (meta.json), a run added to the folder; not when the worker rewrites
    status.json with more progress or appends a metrics line (the live charts fetch those)."""
    from app.dashboard.live import live_stamp

    root = tmp_path / "runs"
    run = root / "20260101-000001-a"
    run.mkdir(parents=True)
    s_none = live_stamp(root, run.name)
    write_json(run / "launch.json", {"pid": os.getpid(), "cmd": [], "launched": 0.0})  # launched, not reporting
    s_launched = live_stamp(root, run.name)
    assert s_launched != s_none and s_launched[-1] == "starting"  # it read 'unknown' here
    status = {"state": "running", "pid": os.getpid(), "epoch": 1, "epochs": 10, "progress": 0.10}
    write_json(run / "status.json", status)
    s0 = live_stamp(root, run.name)
    assert s0 != s_launched and s0[-1] == "running"
    assert live_stamp(root, run.name) == s0  # nothing changed: no redraw
    write_json(run / "status.json", {**status, "epoch": 2, "progress": 0.2})
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 1}\n')
    assert live_stamp(root, run.name) == s0  # progress and lines: the charts' page has them
    write_json(run / "meta.json", {"name": "mine"})
    s1 = live_stamp(root, run.name)
    assert s1 != s0
    write_json(run / "status.json", {**status, "progress": 0.16, "state": "finished"})
    s2 = live_stamp(root, run.name)
    assert s2 != s1 and s2[-1] == "finished"
    (root / "20260101-000002-b").mkdir()  # a new run: the menu lists it
    assert live_stamp(root, run.name) != s2
    assert live_stamp(root, None) != live_stamp(root, run.name)


def test_study_storage_is_confined_to_the_runs_root(tmp_path, monkeypatch):
    """Sweeps' "Study storage": a SQLite file only inside the allowed root; server URLs pass."""
    from admm_core.errors import ConfigError
    from app.dashboard.storage import confine_storage_url

    base = tmp_path / "runs"
    base.mkdir()
    monkeypatch.chdir(base)
    inside = f"sqlite:///{base / 'sweeps.db'}"
    assert confine_storage_url(inside, base) == inside
    assert confine_storage_url("sqlite:///sub/s.db", base) == "sqlite:///sub/s.db"  # relative: cwd is the root
    assert confine_storage_url("postgresql+psycopg2://u@db/optuna", base).startswith("postgresql")
    for bad in ("sqlite:///../outside.db", f"sqlite:///{tmp_path / 'x.db'}", "sqlite://", "file:///etc/x", "oops"):
        with pytest.raises(ConfigError, match="study storage"):
            confine_storage_url(bad, base)
    (base / "link").symlink_to(tmp_path)  # a symlink out of the root is resolved first
    with pytest.raises(ConfigError, match="outside"):
        confine_storage_url("sqlite:///link/escape.db", base)


def test_compare_groups_runs_into_mean_and_spread_bands():
    """Two seeds of one setting: one mean line inside a ± std band (or min-max), per group."""
    from app.dashboard import charts as C

    a = [{"epoch": e, "test_accuracy": 0.5 + 0.1 * e} for e in range(3)]
    b = [{"epoch": e, "test_accuracy": 0.7 + 0.1 * e} for e in range(3)]
    fig = C.group_figure([("lr = 0.1", [a, b])], "test_accuracy", C.Overlay(percent=True))
    hi, lo, mean = fig.data
    assert list(mean.y) == pytest.approx([60, 70, 80]) and mean.name == "lr = 0.1 (n = 2)"
    assert list(hi.y) == pytest.approx([70, 80, 90]) and list(lo.y) == pytest.approx([50, 60, 70])
    assert lo.fill == "tonexty" and not hi.showlegend and not lo.showlegend
    rng = C.group_figure([("g", [a, b])], "test_accuracy", spread="range")
    assert list(rng.data[1].y) == pytest.approx([0.5, 0.6, 0.7]) and list(rng.data[0].y) == pytest.approx(
        [0.7, 0.8, 0.9]
    )
    # per-block columns are averaged over the blocks
    res = C.group_figure([("g", [[{"epoch": 0, "residuals": [1.0, 3.0]}]])], "residuals")
    assert list(res.data[2].y) == [2.0]


def test_parallel_coordinates_only_over_settings_every_run_has():
    from app.dashboard import charts as C

    flat = [{"method": "sgd", "m.lr": 0.1, "m.eps": None}, {"method": "adam", "m.lr": 0.01, "m.eps": 1e-8}]
    rows = [{"final test %": 90.0}, {"final test %": 92.0}]
    dims = C.parallel_figure(rows, flat, ["method", "m.lr", "m.eps"]).data[0].dimensions
    assert [d.label for d in dims] == ["method", "lr (log)", "final test %"]  # no axis for eps (sgd has none)
    assert dims[1].ticktext == ("0.01", "0.02", "0.05", "0.1")  # log10 positions named by value


# --- worker system metrics and the end-of-run notice ----------------------------------


def test_worker_writes_system_metrics_and_train_charts_them(env_runs):
    """The tiny digits run's heartbeat thread wrote system.jsonl (CPU %, RSS); the section
    "Worker: CPU, memory" draws it once opened (closed it sends no figure)."""
    lines = [json.loads(x) for x in (env_runs / "r1-digits-block-admm" / "system.jsonl").read_text().splitlines()]
    assert lines and all(x["rss_bytes"] > 10 * 2**20 and x["time"] > 1.7e9 for x in lines), lines
    cpu = [x["cpu_percent"] for x in lines if x["cpu_percent"] is not None]
    assert cpu and all(c >= 0 for c in cpu), lines
    at = app({"run": "r1-digits-block-admm"}).run()
    no_exceptions(at)
    assert [e.label for e in at.expander if e.label == "Worker: CPU, memory"]
    assert not [c for c in at.get("plotly_chart") if "Worker: CPU and memory" in c.proto.spec]
    at.session_state["worker_open"] = True
    at.run()
    no_exceptions(at)
    charts = [c for c in at.get("plotly_chart") if "Worker: CPU and memory" in c.proto.spec]
    assert len(charts) == 1, [c.proto.spec[:80] for c in at.get("plotly_chart")]


def test_a_watched_run_that_ends_gives_one_notice(tmp_path, monkeypatch):
    """running → finished while watched: one toast, its icon drawn from Streamlit's own icon font, and a
    line; not again on the next rerun; a run that had ended before the tab opened gives none."""
    from admm_core.status import proc_start

    root = tmp_path / "runs"
    train(digits_cfg("sgd", 1, n=300), root / "done")
    shutil.copytree(root / "done", root / "live")
    st_ = read_json(root / "live" / "status.json")
    me = {"pid": os.getpid(), "pid_start": proc_start(os.getpid())}
    write_json(root / "live" / "status.json", {**st_, **me, "state": "running"})
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app({"run": "done"}).run()
    no_exceptions(at)
    assert not at.toast and not [s for s in at.success if "Run done" in s.value]  # ended before the tab opened
    at = app({"run": "live"}).run()
    assert not at.toast
    write_json(root / "live" / "status.json", {**st_, **me, "state": "finished"})
    at.run()
    no_exceptions(at)
    assert [t.value for t in at.toast] == ["Run live finished at epoch 1/1"], [t.value for t in at.toast]
    # a Material Symbols icon (Streamlit ships that font): the ✅ emoji showed as an empty box where the
    # system fonts lack it
    assert [t.icon for t in at.toast] == [":material/check_circle:"], [t.icon for t in at.toast]
    assert [s.value for s in at.success if s.value.startswith("Run live finished")]
    at.run()
    assert not at.toast  # once per state change
    assert [s.value for s in at.success if s.value.startswith("Run live finished")]  # the line stays


def test_folded_settings_keep_their_values_and_are_not_sent_while_closed(env_runs, monkeypatch):
    """The Train form's "More … settings" expanders send their widgets only while open; a value
    set there stays while the expander is closed (runs of the page in between), reaches the
    started run's config and is shown again when the expander opens."""
    at = app().run()
    kinds = ("selectbox", "number_input", "checkbox", "text_input")
    closed = {w.key for kind in kinds for w in getattr(at, kind)}
    unfold(at, "block-admm")
    folded = {w.key for kind in kinds for w in getattr(at, kind)} - closed  # sent only while open
    settings = {f"f.mp.block-admm.{s['name']}" for s in METHODS["block-admm"].settings()}
    # those that apply with the preset's values
    shown = len(METHODS["block-admm"].shown_settings(preset_config("digits-mlp", "block-admm").method_params))
    assert {"f.mp.block-admm.dual_lr", "f.precision", "f.channels_last"} <= folded
    assert len(folded & settings) == shown - 8 >= 10  # all but the first 8 that apply
    widget(at, "text_input", "f.mp.block-admm.dual_lr").set_value("0.25").run()
    widget(at, "selectbox", "f.precision").set_value("bf16").run()
    at.session_state["mp_more_open.block-admm"] = False
    at.session_state["train_more_open"] = False
    at.run()
    at.run()
    keys = {w.key for kind in ("selectbox", "text_input") for w in getattr(at, kind)}
    assert "f.mp.block-admm.dual_lr" not in keys and "f.precision" not in keys
    cfg = _start_and_capture(at, monkeypatch)
    assert cfg.method_params["dual_lr"] == 0.25 and cfg.train.precision == "bf16"
    unfold(at, "block-admm")
    assert widget(at, "text_input", "f.mp.block-admm.dual_lr").value == "0.25"


def test_an_absurd_learning_rate_is_warned_not_refused(env_runs):
    """lr = 1e9 (and a step size in "More settings") gets a warning naming the field and the
    value; Start stays enabled (the run would end 'diverged')."""
    at = app().run()
    assert not [w for w in at.warning if "very large" in w.value]
    widget(at, "text_input", "f.mp.block-admm.lr").set_value("1e9").run()
    unfold(at, "block-admm")
    widget(at, "text_input", "f.mp.block-admm.dual_lr").set_value("50").run()
    at.session_state["mp_more_open.block-admm"] = False  # closed by the user: opened again, its field is warned about
    at.run()
    no_exceptions(at)
    assert widget(at, "text_input", "f.mp.block-admm.dual_lr").value == "50"
    warned = [w.value for w in at.warning if "very large" in w.value]
    assert any(w.startswith("η — Θ step size = 1e+09") for w in warned), warned
    assert any(w.startswith("α — dual step size = 50") for w in warned), warned
    assert not form_errors(at) and not widget(at, "button", "start").disabled


def test_zero_series_on_a_log_axis_keep_no_legend_entry():
    """Compare: a run whose residuals are all 0 vanishes from a log axis, and so does its entry."""
    from app.dashboard import charts as C

    zero = [{"epoch": e, "train_loss": 0.0, "residuals": [0.0, 0.0]} for e in range(3)]
    ok = [{"epoch": e, "train_loss": 1.0 / (e + 1), "residuals": [0.1, 0.2]} for e in range(3)]

    def legend(fig):
        return [t.name for t in fig.data if t.showlegend is not False]

    for key in ("train_loss", "residuals"):
        fig = C.compare_figure([("zero", zero), ("ok", ok)], key, C.Overlay(log_y=True))
        assert legend(fig) and not [n for n in legend(fig) if n.startswith("zero")], legend(fig)
        assert [n for n in legend(C.compare_figure([("zero", zero), ("ok", ok)], key)) if n.startswith("zero")]
    grouped = C.group_figure([("zero", [zero]), ("ok", [ok])], "train_loss", C.Overlay(log_y=True))
    assert legend(grouped) == ["ok (n = 1)"], legend(grouped)


def test_system_sampler_records_gpu_memory_when_cuda_is_in_use(tmp_path, monkeypatch):
    """The GPU fields come from torch.cuda only once CUDA is initialised (faked here: no GPU on CI);
    a CPU-only process gets none, and the sampler never initialises CUDA itself."""
    import torch

    from admm_core.status import SystemSampler

    s = SystemSampler(tmp_path / "system.jsonl")
    first = s.sample(0)
    assert "gpu_allocated_bytes" not in first and first["rss_bytes"] > 10 * 2**20
    # the first figure covers the process's life so far (pytest has run for seconds): a short run gets one too
    assert first["cpu_percent"] is not None and first["cpu_percent"] > 0
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 3 * 2**20)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 5 * 2**20)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 8 * 2**20)
    time.sleep(0.25)
    rec = s.sample(1)
    assert rec["gpu_allocated_bytes"] == 3 * 2**20 and rec["gpu_max_allocated_bytes"] == 5 * 2**20
    assert rec["cpu_percent"] is not None and rec["cpu_percent"] >= 0
    lines = [json.loads(x) for x in (tmp_path / "system.jsonl").read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [0, 1]
    from app.dashboard import system as S

    fig = S.system_figure(S.read_system(tmp_path))
    assert {t.name for t in fig.data} == {"CPU %", "RSS (MB)", "GPU allocated (MB)", "GPU peak (MB)"}


def test_error_tail_prefers_the_traceback_to_the_worker_log(tmp_path):
    """The Runs page's 'error output' of a failed run: error.txt's end, else worker.log's."""
    assert W.error_tail(tmp_path) == ""
    (tmp_path / "worker.log").write_text("".join(f"line {i}\n" for i in range(40)))
    assert W.error_tail(tmp_path).splitlines() == [f"line {i}" for i in range(15, 40)]
    (tmp_path / "error.txt").write_text("x" * 5000 + "Traceback: boom")
    assert W.error_tail(tmp_path, 100) == ("x" * 5000 + "Traceback: boom")[-100:]
