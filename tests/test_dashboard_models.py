"""Networks of one's own in the dashboard: the models folder's files in the Train page's network menu
(read, never imported, by the server), their cut points from ``admm cuts`` in a child, a link that
names a file outside the folder refused, Start launching ``admm train --model``, Resume offered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from apptest_adapter import select_points
from helpers import wait
from streamlit.testing.v1 import AppTest

from admm_core.rundir import read_json, read_metrics
from app import ui
from app.dashboard import workers as W

ROOT = Path(__file__).resolve().parent.parent

TINY = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        h = self.act(self.fc1(x.flatten(1)))
        return self.fc2(h) + 0 * h.sum()  # h crosses after fc2's input too: 'act' stays a cut, 'fc2' not


class Helper:  # not a module
    pass


def small():
    return Net()


def widen(k):  # takes an argument: not offered
    return Net()
"""


@pytest.fixture(scope="module")
def cut_cache(tmp_path_factory) -> Path:
    """One $ADMM_CACHE for the file's tests: a file's cut table (keyed by its SHA-256) is traced in a
    child once, then read back, as the server reads it. The test of the child itself gets its own."""
    return tmp_path_factory.mktemp("cut-cache")


@pytest.fixture
def folders(tmp_path, monkeypatch, cut_cache):
    models, runs = tmp_path / "models", tmp_path / "runs"
    models.mkdir()
    (models / "tiny.py").write_text(TINY)
    (models / "broken.py").write_text(
        "import no_such_package_here\nfrom torch import nn\n\nclass Net(nn.Module):\n    pass\n"
    )
    (tmp_path / "outside.py").write_text(TINY)
    (models / "escape.py").symlink_to(tmp_path / "outside.py")  # a symlink out of the folder: not offered
    monkeypatch.setenv("ADMM_MODELS", str(models))
    monkeypatch.setenv("ADMM_RUNS", str(runs))
    monkeypatch.setenv("ADMM_CACHE", str(cut_cache))
    return models, runs


def test_the_menu_reads_the_files_without_importing_them_or_torch(folders):
    models, _ = folders
    (models / "loud.py").write_text(
        f"open({str(models / 'ran')!r}, 'w')\nimport torch.nn as nn\n\nclass A(nn.Module): ...\n"
    )
    code = "import sys, json\nfrom app.dashboard import models\nprint(json.dumps([models.discover(), 'torch' in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    found, torch_loaded = json.loads(out.stdout)
    assert found == ["broken.py:Net", "loud.py:A", "tiny.py:Net", "tiny.py:small"], out.stderr
    assert not torch_loaded and not (models / "ran").exists()


def train_page(query: dict) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"preset": "none", "data": "digits", "epochs": "1", **query})
    return at.run()


def graph(at: AppTest) -> list[dict]:
    """The traces of the drawn graph of cut points (one plotly chart on the page)."""
    (chart,) = at.get("plotly_chart")
    return json.loads(chart.proto.spec)["data"]


def click(at: AppTest, name: str) -> AppTest:
    """Run the page as after a click on cut point ``name`` of the graph: the chart's selection as the
    browser sends it (AppTest has no public plotly interaction: tests/apptest_adapter.py adds it)."""
    return select_points(at, [{"customdata": [name], "curve_number": 1, "point_number": 0}])


def test_a_click_on_the_graph_toggles_a_valid_cut_and_says_why_not_for_another(folders):
    from app.dashboard.models import toggle_cut

    rows = [
        {"name": "fc1", "valid": True},
        {"name": "act", "valid": True},
        {"name": "fc2", "valid": False, "why": "2 cross"},
    ]
    assert toggle_cut(rows, ["act"], "fc1") == (["fc1", "act"], "")  # forward order, whatever the click order
    assert toggle_cut(rows, ["fc1", "act"], "fc1") == (["act"], "")
    assert toggle_cut(rows, ["act"], "fc2") == (["act"], "Not a cut point: fc2 — 2 cross.")
    at = train_page({"arch": "tiny.py:Net", "method": "block-admm"})
    for name, want in (("act", ["act"]), ("fc1", ["fc1", "act"]), ("fc2", ["fc1", "act"]), ("act", ["fc1"])):
        click(at, name)
        assert not at.exception, [e.value for e in at.exception]
        assert at.multiselect(key="f.split").value == want, (name, at.multiselect(key="f.split").value)
        assert at.query_params["split"] == ",".join(want)  # the link holds the cuts
        picked = next(t["customdata"] for t in graph(at) if t.get("name") == "picked cut")
        assert picked == [[c] for c in want]  # drawn highlighted
        said = [c.value for c in at.caption if "Not a cut point" in c.value]
        assert said == (["Not a cut point: fc2 — the skip from act (to sum_1) crosses here."] if name == "fc2" else [])
    at.multiselect(key="f.split").set_value(["act", "fc1"]).run()  # the menu, the other way: the graph follows
    assert next(t["customdata"] for t in graph(at) if t.get("name") == "picked cut") == [["fc1"], ["act"]]


def test_the_cut_graph_comes_from_the_child_and_a_bad_file_is_one_error(folders, tmp_path, monkeypatch):
    from app.dashboard.models import cache_file

    models, _ = folders
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "own-cache"))  # no table yet: the child traces it
    at = train_page({"arch": "tiny.py:Net", "split": "fc1"})
    assert cache_file(models / "tiny.py", "Net", "digits").is_file()  # the child wrote it where the server reads it
    assert not at.exception, [e.value for e in at.exception]
    assert (
        "tiny.py: Net" in at.selectbox(key="f.arch").options and "broken.py: Net" in at.selectbox(key="f.arch").options
    )
    split = at.multiselect(key="f.split")
    assert split.value == ["fc1"] and split.options == ["fc1", "act"]  # the valid cut points, in forward order
    drawn = {t["name"]: t for t in graph(at) if t.get("customdata")}  # the traced layers, each cut point a marker
    assert [t["hovertext"] for t in graph(at) if t.get("legendgroup") == "skip"] == ["skip from act to fc2"]
    assert [c for t in drawn.values() for (c,) in t["customdata"]] == ["fc1", "act", "fc2"]
    assert drawn["can cut: click to pick"]["customdata"] == [["act"]] and drawn["picked cut"]["customdata"] == [["fc1"]]
    (why,) = drawn["cannot cut: hover for why"]["hovertext"]
    assert why == "after fc2 (10): not a cut: the skip from act (to sum_1) crosses here", why
    assert not at.button(key="start").disabled
    at.selectbox(key="f.arch").set_value("broken.py:Net").run()
    assert not at.exception, [e.value for e in at.exception]
    errs = [e.value for e in at.error]
    assert len(errs) == 1 and "broken.py" in errs[0] and "no_such_package_here" in errs[0], errs
    assert "Traceback" not in errs[0] and at.button(key="start").disabled


def test_a_link_naming_a_model_file_without_cuts_starts_with_none(folders):
    """As picking it in the menu does: not the built-in network's default split (fc1, fc2 here, which
    the file's network happens to name too, one of them no valid cut)."""
    at = train_page({"arch": "tiny.py:Net"})
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="f.split").value == [] and not at.error, [e.value for e in at.error]
    assert at.multiselect(key="f.split").options == ["fc1", "act"]


@pytest.mark.parametrize("entry", ["../outside.py:Net", "escape.py:Net", "/etc/passwd.py:Net"])
def test_a_link_to_a_file_outside_the_models_folder_is_refused(folders, entry, monkeypatch):
    launched = []
    monkeypatch.setattr(W, "_spawn", lambda *a, **k: launched.append(a))
    at = train_page({"arch": entry})
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="f.arch").value != entry
    assert any(entry in e.value for e in at.error) and at.button(key="start").disabled
    with pytest.raises(Exception, match="inside the models folder"):
        W.start_model_run(entry, [], None)
    assert launched == []


def test_start_trains_the_file_s_network_and_resume_is_offered(folders):
    models, runs = folders
    at = train_page({"arch": "tiny.py:Net", "split": "fc1", "method": "block-admm", "checkpoint_every": "3"})
    at.button(key="start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (run,) = wait(lambda: list(runs.iterdir()), 30)
    assert wait(lambda: (read_json(run / "status.json", {}) or {}).get("state") == "finished", 120), W.log_tail(run)
    model = read_json(run / "model.json")
    assert model["source"]["file"] == str(models / "tiny.py") and model["source"]["name"] == "Net"
    cfg = read_json(run / "config.json")
    assert cfg["model"]["split"] == ["fc1"] and cfg["train"]["checkpoint_every"] == 3  # every train field reaches it
    status = W.state_of(run)
    assert ui.resume_refusal(run, status, 1, 2) is None  # the Runs page's Resume launches it
    # Runs -> Load into Train: the form shows the file's network, the run's cuts and settings
    at = train_page({"load": run.name})
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="f.arch").value == "tiny.py:Net" and at.multiselect(key="f.split").value == ["fc1"]
    from admm_core.spec.methods import make_settings

    ran = make_settings("block-admm", cfg["method_params"])  # the run's settings (its defaults not recorded)
    assert at.session_state["f.mp.block-admm.z_schedule"] == ran.z_schedule
    assert "Loaded the run's configuration" in " ".join(i.value for i in at.info)
    (models / "tiny.py").write_text(TINY + "\n# edited\n")
    assert "changed since the run started" in ui.resume_refusal(run, status, 1, 2)


def test_picking_a_model_file_shows_the_recipe_its_run_gets(folders):
    """The method's fields show the method's defaults (the measured recipe: what admm train --model
    gives a network no preset knows), not the preset's values, for the method in force and after a
    change of method."""
    from admm_core.spec.methods import make_settings

    at = train_page({"preset": "digits-mlp", "method": "block-admm"})
    assert at.session_state["f.mp.block-admm.dual_lr"] == "1"  # the preset's, measured on Alg. 1's α
    at.selectbox(key="f.arch").set_value("tiny.py:Net").run()
    assert not at.exception, [e.value for e in at.exception]
    want = make_settings("block-admm")
    shown = at.session_state  # the fields' values (some sit in folded expanders, not drawn)
    assert shown["f.mp.block-admm.z_schedule"] == want.z_schedule == "minibatch"
    assert shown["f.mp.block-admm.dual_lr"] == "0.01" and shown["f.mp.block-admm.bn_mode"] == want.bn_mode == "train"
    drawn = {w.key for kind in ("checkbox", "selectbox", "number_input", "text_input") for w in at.get(kind)}
    assert not drawn & {"f.augment", "f.init", "f.init_std"} and "f.epochs" in drawn  # fields the run would not read
    at.selectbox(key="f.method").set_value("online-admm").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["f.mp.online-admm.power_every"] == make_settings("online-admm").power_every == 10


def test_the_z_u_state_of_the_picked_cuts_is_shown(folders):
    """Z and U for every training sample of each crossing tensor (and the output), by hand, against
    what the page computes and shows; online-admm keeps one minibatch's."""
    from admm_core.spec.config import DataConfig, RunConfig, TrainConfig
    from admm_core.spec.resources import state_of_cuts

    rows = [{"name": "fc1", "out_shape": [16]}, {"name": "act", "out_shape": [16]}]
    cfg = RunConfig(method="block-admm", data=DataConfig("digits", train_limit=1000), train=TrainConfig(batch_size=50))
    assert state_of_cuts(rows, ["fc1"], cfg) == 1000 * (16 + 10) * 4 * 2  # Z and U, float32, plain Z steps
    online = cfg.replace(method="online-admm")
    assert state_of_cuts(rows, ["fc1"], online) < state_of_cuts(rows, ["fc1"], cfg) / 10
    at = train_page({"arch": "tiny.py:Net", "split": "fc1", "method": "block-admm"})
    assert not at.exception, [e.value for e in at.exception]
    said = [c.value for c in at.caption if "Z/U state of these cuts" in c.value]
    assert len(said) == 1, [c.value for c in at.caption]


def test_stop_and_compare_treat_a_model_file_run_as_any_other(folders):
    """Stop ends a models-folder run's worker at its next step with status 'stopped' and a
    checkpoint; Compare draws it beside itself (its rows read like any run's)."""
    from admm_core.spec.config import DataConfig, RunConfig, TrainConfig

    _, runs = folders
    cfg = RunConfig(method="online-admm", data=DataConfig("digits"), train=TrainConfig(epochs=500, batch_size=16))
    run = W.start_model_run("tiny.py:Net", ["fc1"], cfg, runs)
    assert wait(
        lambda: len(read_json(run / "status.json", {}) or {}) and W.state_of(run).get("state") == "running", 120
    )
    assert wait(lambda: len(read_metrics(run)) >= 2, 120), W.log_tail(run)  # an epoch done: a checkpoint
    assert W.stop_run(run)
    assert wait(lambda: W.state_of(run).get("state") == "stopped", 60), (W.state_of(run), W.log_tail(run))
    assert (run / "checkpoint.pt").exists() and read_json(run / "model.json")["source"]["name"] == "Net"
    at = AppTest.from_file(str(ROOT / "app" / "views" / "compare.py"), default_timeout=60)
    at.query_params["runs"] = run.name
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.get("plotly_chart") and len(at.dataframe[0].value) == 1


def test_a_setting_s_help_says_where_its_measured_value_comes_from(folders):
    """The help of η names the preset's measured value under a preset, with the method's default
    beside it; under a models-folder network (no preset knows it) the method's default, the recipe
    measured across the zoo."""
    from admm_core.spec.presets import preset_config
    from app.dashboard.form import fmt_number

    at = train_page({"preset": "digits-mlp", "method": "block-admm"})
    lr = at.text_input(key="f.mp.block-admm.lr")
    want = preset_config("digits-mlp", "block-admm").method_params["lr"]
    assert f"In force: {fmt_number(want)}, the value measured for the preset digits-mlp" in lr.help
    assert "the method's default is 0.001" in lr.help
    at.selectbox(key="f.arch").set_value("tiny.py:Net").run()
    lr = at.text_input(key="f.mp.block-admm.lr")
    assert "In force: 0.001, the method's default." in lr.help and "digits-mlp" not in lr.help


def test_bad_model_files_are_each_one_message_and_the_page_goes_on(folders):
    """A syntax error (its line named), a class that needs arguments, a network that does not take
    the data set's inputs (the shapes named), an untraceable one (the module and the leaf-module way
    out named), and a file deleted after it was picked: each one message, no traceback."""
    models, _ = folders
    (models / "typo.py").write_text("from torch import nn\n\nclass Net(nn.Module)\n    pass\n")
    (models / "more.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass Wide(nn.Module):\n    def __init__(self, width):\n"
        "        super().__init__()\n        self.fc = nn.Linear(64, width)\n\n    def forward(self, x):\n"
        "        return self.fc(x)\n\n\nclass Images(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(784, 10)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\n"
        "class Flip(nn.Module):\n    def forward(self, h):\n        return -h if h.sum() > 0 else h\n\n\n"
        "class Moody(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(64, 10)\n"
        "        self.flip = Flip()\n\n    def forward(self, x):\n        return self.flip(self.fc(x))\n"
    )
    at = train_page({"data": "digits"})
    assert not at.exception, [e.value for e in at.exception]
    said = [w.value for w in at.warning]
    assert any("typo.py: a syntax error at line 3" in w for w in said), said
    for entry, want in (
        ("more.py:Wide", "Wide() failed (TypeError"),
        ("more.py:Images", "forward failed on two training samples"),
        ("more.py:Moody", "cannot be traced by torch.fx inside 'flip' (Flip)"),
    ):
        at.selectbox(key="f.arch").set_value(entry).run()
        assert not at.exception, [e.value for e in at.exception]
        errs = [e.value for e in at.error]
        assert len(errs) == 1 and want in errs[0] and "Traceback" not in errs[0], (entry, errs)
        assert at.button(key="start").disabled
    assert "leaf_modules=['flip']" in errs[0]
    at.selectbox(key="f.arch").set_value("tiny.py:Net").run()
    (models / "tiny.py").unlink()  # deleted after it was picked
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.button(key="start").disabled and any("tiny.py" in e.value for e in at.error), [e.value for e in at.error]


def test_a_models_folder_leaves_the_shipped_deepfacto_models_found(folders):
    """$ADMM_MODELS (one's own network files) is not where the shipped DeepFacto models lie: with it
    set to a user's folder, the Heatmaps page still offers them (from assets/models)."""
    models, _ = folders
    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=120).run()
    at.switch_page("views/heatmaps.py").run()
    assert not at.exception, [e.value for e in at.exception]
    menu = at.selectbox(key="hm_model")
    assert [o.split(" (")[0] for o in menu.options][:2] == ["shipped · DeepFacto r = 4", "shipped · DeepFacto r = 32"]
    assert not any("No DeepFacto model" in i.value for i in at.info)


def test_the_cut_graph_draws_one_arc_per_skip_of_the_traced_graph():
    """Every skip of the engine's table is drawn as one arc from its producer's layer to where it
    joins the chain, hover naming the layers on its own path: a hand-written skip net (one), and
    torchvision's ResNet-18 (one per residual block, 8; the downsample's layers on their block's arc)."""
    import torch
    from test_own_network import Skip

    from admm_core import cuts
    from app.dashboard.models import cut_figure
    from experiments.zoo_models import resnet18_cifar

    for model, probe, n_blocks in ((Skip(), torch.zeros(1, 4), 1), (resnet18_cifar(), torch.zeros(1, 3, 32, 32), 8)):
        rows = cuts.table(cuts.trace(model, probe))
        arcs = [t for t in cut_figure(rows, []).to_dict()["data"] if t.get("legendgroup") == "skip"]
        assert len(arcs) == sum(len(r["skip_to"]) for r in rows) == n_blocks, (type(model).__name__, len(arcs))
        assert all(len(t["x"]) == 3 and t["line"]["shape"] == "spline" for t in arcs)
        assert all(t["x"][1] != t["x"][0] or t["y"][1] != t["y"][0] for t in arcs)  # bowed, never on the chain
        said = {t["hovertext"] for t in arcs}
        if n_blocks == 1:
            assert said == {"skip from a to b"}
        else:  # layer1.1's output to layer2.0's add, through the shortcut
            assert "skip from layer1 to layer2.0 through layer2.0.downsample.0, layer2.0.downsample" in said
            assert "skip from layer1.0 to layer1" in said


RESNET = """
from torch import nn
from torchvision.models import resnet18


def resnet18_cifar():
    m = resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)  # the CIFAR stem
    m.maxpool = nn.Identity()
    return m
"""


def test_torchvision_s_resnet18_from_a_models_file_draws_and_says_why_inside_a_block(folders):
    """torchvision's ResNet-18 as a factory in the models folder: the graph draws its ~50 layers over
    rows of at most 8, the valid cut points are the block boundaries, and a cut inside a residual
    block says which skip jumps it."""
    models, _ = folders
    (models / "rn.py").write_text(RESNET)
    at = train_page({"arch": "rn.py:resnet18_cifar", "data": "cifar10", "split": "layer2.0"})
    assert not at.exception, [e.value for e in at.exception]
    split = at.multiselect(key="f.split")
    assert split.value == ["layer2.0"] and {"layer1.0", "layer2.0", "layer3 (= layer3.1)", "layer4.0"} <= set(
        split.options
    )
    drawn = {t["name"]: t for t in graph(at) if t.get("customdata")}
    (chain,) = [t for t in graph(at) if t.get("mode") == "lines+markers+text"]
    per_row = len({x for x in chain["x"]})
    assert 4 <= per_row <= 8 and len(chain["x"]) > 45, (per_row, len(chain["x"]))
    why = dict(
        zip(
            [c for (c,) in drawn["cannot cut: hover for why"]["customdata"]],
            drawn["cannot cut: hover for why"]["hovertext"],
        )
    )
    assert why["layer2.0.conv1"].endswith("not a cut: the skip from layer1.1 (to layer2.0.downsample.0) crosses here")
    assert sum(t.get("legendgroup") == "skip" for t in graph(at)) == 8  # one per residual block


def test_a_link_or_a_run_naming_a_block_gets_its_cut_point_under_the_menu_s_name(folders):
    """``layer3.1`` (the last block of layer3) and ``layer3`` end at one graph point, listed as
    ``layer3``: a link naming ``layer3.1`` picks it (menu, graph, the link rewritten), and so does a
    run's config loaded into the form; the graph's hover gives both names."""
    from app.dashboard import form as F

    models, _ = folders
    (models / "rn.py").write_text(RESNET)
    at = train_page({"arch": "rn.py:resnet18_cifar", "data": "cifar10", "split": "layer1.1,layer3.1"})
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="f.split").value == ["layer1", "layer3"]
    assert not [e.value for e in at.error if "split" in e.value], [e.value for e in at.error]
    assert at.query_params["split"] in (["layer1,layer3"], "layer1,layer3"), at.query_params
    (picked,) = [t for t in graph(at) if t.get("name") == "picked cut"]
    assert [c for (c,) in picked["customdata"]] == ["layer1", "layer3"]
    assert picked["hovertext"][1].startswith("after layer3 = layer3.1 (256×8×8)"), picked["hovertext"]
    cfg = {"method": "block-admm", "data": {"name": "cifar10"}, "model": {"arch": "rn.py:resnet18_cifar"}}
    form, _ = F.form_from_dict({**cfg, "model": {**cfg["model"], "split": ["layer3.1", "layer4.0"]}})
    assert form["split"] == ["layer3", "layer4.0"]
