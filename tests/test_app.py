"""Dashboard pages under streamlit.testing.v1.AppTest, on real run directories.

The runs are made by the engine itself (admm_core.runs.train on a tiny digits config); the
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
from streamlit.testing.v1 import AppTest

from admm_core.config import RunConfig
from admm_core.presets import PRESETS, preset_config
from admm_core.runs import read_json, train, write_json
from app.dashboard import faces
from app.dashboard import form as F
from app.dashboard import workers as W

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "app"

TIMEOUT = 60


def tiny(method="block-admm", epochs=2):
    cfg = preset_config("digits-mlp", method)
    return cfg.replace(train__epochs=epochs, data__train_limit=300, data__test_limit=200)


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    """Real run directories: two finished runs, a crashed one (dead worker), a DeepFacto stub."""
    root = tmp_path_factory.mktemp("runs")
    train(tiny("block-admm"), root / "r1-digits-block-admm")
    train(tiny("sgd"), root / "r2-digits-sgd")
    crashed = root / "r3-digits-adam"
    train(tiny("adam", epochs=1), crashed)
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
    assert a.build_method() == b.build_method(), (a.build_method(), b.build_method())
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


# --- pure helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_form_round_trip_reproduces_every_preset(preset):
    """config -> form -> URL -> form -> config gives back the preset's config (split made explicit)."""
    for method in ("block-admm", "sgd"):
        cfg = preset_config(preset, method)
        form = F.form_from_config(cfg)
        back, warnings = F.from_query(F.to_query(form))
        assert not warnings
        assert back == form
        got, errs = F.config_from_form(back, available=[cfg.data.name])
        if cfg.model.arch == "resnet18" or errs.get("device"):
            continue
        assert errs == {}, errs
        assert same_config(got, cfg.replace(model__split=tuple(form["split"])))


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
    # the live panel lists the real runs and plots the newest one
    assert [s for s in at.selectbox if s.key.startswith("watch_sel")][0].options


def _start_and_capture(at, monkeypatch) -> RunConfig:
    launched = []
    monkeypatch.setattr(W, "_spawn", lambda args, run_dir: launched.append((args, run_dir)) or 12345)
    widget(at, "button", "start").click().run()
    no_exceptions(at)
    assert len(launched) == 1, form_errors(at)
    args, run_dir = launched[0]
    assert args[:2] == ["--config", str(run_dir / "config.json")] and args[2:] == ["--out", str(run_dir)]
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
        method_params={"lr": 1e-3, "z_lr": 0.5, "beta": [2.0, 0.5], "dual": "damped"},
    )
    assert same_config(cfg, expected)
    assert cfg.build_method().beta == (2.0, 0.5)


def test_train_bad_values_show_messages_not_tracebacks(env_runs):
    at = app().run()
    widget(at, "number_input", "f.epochs").set_value(0).run()
    no_exceptions(at)
    assert any("train.epochs = 0" in e for e in form_errors(at))
    assert widget(at, "button", "start").disabled
    widget(at, "number_input", "f.epochs").set_value(5).run()
    widget(at, "text_input", "f.hidden").set_value("128,x").run()
    assert any("model.hidden" in e for e in form_errors(at))
    widget(at, "text_input", "f.hidden").set_value("128,128").run()
    widget(at, "text_input", "f.mp.block-admm.lr").set_value("-0.1").run()
    assert any("block-admm.lr = -0.1" in e for e in form_errors(at))
    widget(at, "text_input", "f.mp.block-admm.lr").set_value("1e-3").run()
    widget(at, "text_input", "f.mp.block-admm.beta").set_value("1,2").run()
    assert any("one per block (T = 3)" in e for e in form_errors(at)), form_errors(at)
    widget(at, "text_input", "f.mp.block-admm.beta").set_value("1,2,3").run()
    widget(at, "radio", "f.arch").set_value("resnet18").run()
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
    assert widget(at, "multiselect", "f.split").value == []
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
    widget(at, "selectbox", "runs_sel").set_value("r3-digits-adam").run()
    assert any("worker process ended" in e for e in errors(at)), errors(at)
    widget(at, "selectbox", "runs_sel").set_value("r1-digits-block-admm").run()
    assert any(j.value for j in at.json)  # config.json
    assert [d.label for d in at.download_button] == ["config.json", "metrics.jsonl"]


def test_runs_page_deletes_a_run(env_runs, tmp_path, monkeypatch):
    root = tmp_path / "runs"
    train(tiny("adam", epochs=1), root / "victim")
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app().run()
    at.switch_page("views/runs.py").run()
    assert widget(at, "button", "runs_delete").disabled
    widget(at, "checkbox", "runs_del_sure").check().run()
    widget(at, "button", "runs_delete").click().run()
    no_exceptions(at)
    assert not (root / "victim").exists()
    assert any("No runs yet" in i.value for i in at.info)


def test_runs_page_resumes_a_stopped_run(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    train(tiny(epochs=3), root / "paused", should_stop=lambda: True)  # what SIGTERM does in a worker
    assert read_json(root / "paused" / "status.json")["state"] == "stopped"
    launched = []
    monkeypatch.setattr(W, "_spawn", lambda args, run_dir: launched.append(args) or 1)
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app().run()
    at.switch_page("views/runs.py").run()
    widget(at, "number_input", "runs_resume_epochs").set_value(5).run()
    widget(at, "button", "runs_resume").click().run()
    no_exceptions(at)
    assert launched == [["--resume", str(root / "paused"), "--epochs", "5"]]


def test_runs_page_loads_a_config_into_the_train_form(env_runs):
    at = app().run()
    at.switch_page("views/runs.py").run()
    widget(at, "selectbox", "runs_sel").set_value("r2-digits-sgd").run()
    widget(at, "button", "runs_load").click().run()
    no_exceptions(at)
    assert at.title[0].value == "Train"
    assert widget(at, "selectbox", "f.method").value == "sgd"
    assert widget(at, "number_input", "f.train_limit").value == 300
    assert widget(at, "number_input", "f.epochs").value == 2


# --- Compare page ---------------------------------------------------------------------------------


def test_compare_page_table_and_csv(env_runs):
    at = app().run()
    at.switch_page("views/compare.py").run()
    no_exceptions(at)
    widget(at, "multiselect", "cmp_runs").set_value(["r1-digits-block-admm", "r2-digits-sgd"]).run()
    table = at.dataframe[0].value
    assert list(table["run"]) == ["r1-digits-block-admm", "r2-digits-sgd"]
    assert {"final test %", "best test %", "wall time s", "Z/U memory MB", "paper test %"} <= set(table.columns)
    assert table["Z/U memory MB"].iloc[0] > 0 and table["Z/U memory MB"].iloc[1] == 0
    # filters narrow the pool
    widget(at, "multiselect", "cmp_methods").set_value(["sgd"]).run()
    assert [o.split(" · ")[0] for o in widget(at, "multiselect", "cmp_runs").options] == ["r2-digits-sgd"]
    widget(at, "radio", "cmp_x").set_value("wall time").run()
    widget(at, "slider", "cmp_smooth").set_value(0.5).run()
    no_exceptions(at)
    assert at.download_button(key="cmp_csv").label == "Download table (CSV)"


def test_compare_rows_carry_the_paper_figures(runs_root):
    cfg = json.loads((runs_root / "r1-digits-block-admm" / "config.json").read_text())
    from admm_core.bench import PAPER
    from admm_core.runs import read_metrics
    from app.dashboard.charts import run_row

    row = run_row(
        "x",
        {**cfg, "preset": "mnist-mlp-mse"},
        {"state": "finished"},
        read_metrics(runs_root / "r1-digits-block-admm"),
        PAPER,
    )
    assert row["paper test %"] == 97.61 and row["epochs"] == 2 and row["Δ vs paper"] is not None


# --- Heatmaps page ---------------------------------------------------------------------------------


def _png(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_heatmaps_page_without_deepfacto_runs(env_runs):
    at = app().run()
    at.switch_page("views/heatmaps.py").run()
    no_exceptions(at)
    assert any("No DeepFacto runs yet" in i.value and "lfwa-deepfacto" in i.value for i in at.info)


def test_heatmaps_page_lists_deepfacto_runs_and_checks_uploads(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    (root / "df1").mkdir(parents=True)
    (root / "df1" / "config.json").write_text(
        json.dumps({"method": "block-admm", "preset": "lfwa-deepfacto", "deepfacto": {"rank": 4}})
    )
    (root / "plain").mkdir()
    (root / "plain" / "config.json").write_text(tiny().to_json())
    monkeypatch.setenv("ADMM_RUNS", str(root))
    at = app().run()
    at.switch_page("views/heatmaps.py").run()
    no_exceptions(at)
    assert [o.split(" · ")[0] for o in widget(at, "selectbox", "hm_run").options] == ["df1"]
    # an LFW face is shown; this stub run has no checkpoint, which the page says (no traceback)
    warnings = " ".join(w.value for w in at.warning)
    assert "no usable DeepFacto model" in warnings or "held-out people" in warnings, warnings
    if faces.lfw_folder() is not None:  # the people offered are the run's own test identities
        from admm_core.deepfacto import test_people

        assert widget(at, "selectbox", "hm_person").options == sorted(test_people(root / "df1"))
    widget(at, "radio", "hm_source").set_value("Upload a photo").run()
    widget(at, "file_uploader", "hm_upload").set_value(("notes.txt", b"hello, not an image", "text/plain")).run()
    no_exceptions(at)
    assert any("not an image" in e for e in errors(at)), errors(at)
    blank = np.full((200, 200, 3), 127, np.uint8)
    widget(at, "file_uploader", "hm_upload").set_value(("blank.png", _png(blank), "image/png")).run()
    no_exceptions(at)
    detector, why = faces.face_detector()
    expected = "No face found" if detector else "Face detection is not available"
    assert any(expected in e for e in errors(at)), errors(at)


def _lfw_face() -> Path:
    folder = faces.lfw_folder()
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


def _wait(pred, timeout=60.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_worker_crash_is_reported_with_its_error(tmp_path):
    """A worker whose config fails its checks ends 'crashed' with the engine's message
    (start_run itself refuses such a config before launching anything)."""
    from admm_core.errors import ConfigError

    bad = tiny().replace(model__arch="resnet18", model__split=("conv3_x",))  # resnet18 on flat 8×8 digits
    with pytest.raises(ConfigError, match="image inputs"):
        W.start_run(bad, tmp_path)
    assert list(tmp_path.iterdir()) == []
    run_dir = tmp_path / "bad"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(bad.to_json())
    W._spawn(["--config", str(run_dir / "config.json"), "--out", str(run_dir)], run_dir)
    assert _wait(lambda: W.state_of(run_dir)["state"] == "crashed", 90)
    st = W.state_of(run_dir)
    assert "resnet18" in st["error"] and "image inputs" in st["error"] and st["exit_code"] == 2
    assert "launch.json" in os.listdir(run_dir)


@pytest.mark.skipif(shutil.which("nice") is None, reason="no `nice` on this system")
def test_worker_runs_at_lower_priority_and_stops(tmp_path):
    """The worker yields the CPU to the app (niceness above ours) and SIGTERM to its recorded pid stops it."""
    run_dir = W.start_run(tiny().replace(train__epochs=100000), tmp_path)
    assert _wait(lambda: W.state_of(run_dir)["state"] == "running", 90), W.state_of(run_dir)
    pid = W.worker_pid(run_dir)
    assert os.getpriority(os.PRIO_PROCESS, pid) == min(os.getpriority(os.PRIO_PROCESS, 0) + 5, 19)
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
    assert C.seconds_per_epoch(ms) == ([1, 2, 3], [2.0, 2.0, 2.0])
    figs = C.live_figures(ms)
    assert [len(figs["residuals"].data), len(figs["accuracy"].data)] == [2, 2]
    assert figs["accuracy"].data[1].y == (40.0, 40.0, 40.0, 40.0)
    assert C.smooth([1.0, None, 3.0], 0.5) == [1.0, None, 2.0]
    assert C.eta_seconds({"state": "running", "progress": 0.25, "started": 100.0}, now=110.0) == 30.0
    assert C.eta_seconds({"state": "finished", "progress": 1.0, "started": 100.0}) is None
    fig = C.compare_figure([("a", ms), ("b", ms)], "residuals", "wall_time_s")
    assert len(fig.data) == 4 and fig.data[0].x == (0.0, 2.0, 4.0, 6.0)
