"""One rule for bad values on the dashboard: typed, from a link, from a loaded config or
a sweep's search space, every wrong field is named at once under its field, Start (Launch) waits
for it, and nothing is silently dropped. AppTest pages on an empty runs folder (no run is trained)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from admm_core.spec import resources
from admm_core.spec.presets import preset_config

APP = Path(__file__).resolve().parent.parent / "app"
BIG = "99999999999999999999"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    return tmp_path


def page(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at.run()


def messages(at) -> list[str]:
    return [e.value for e in at.error]


def start(at):
    return at.button(key="start")


def summary(at) -> str:
    return " ".join(c.value for c in at.caption)


def test_typed_out_of_range_numbers_reach_the_page_and_are_all_said(runs):
    """A browser keeps a number input's old value when the typed one is outside its min/max (a red
    outline, nothing sent): so the form's numbers carry no bounds, and 0 epochs, seed -1 and
    evaluate-every 0 are each named, the summary does not claim the old values, Start is off, and
    the memory estimate (which none of them changes) stays."""
    at = page()
    bounded = [(n.key, n.min, n.max) for n in at.number_input if n.min is not None or n.max is not None]
    assert bounded == [], bounded
    at.number_input(key="f.epochs").set_value(0)
    at.number_input(key="f.seed").set_value(-1)
    at.number_input(key="f.eval_every").set_value(0).run()
    got = messages(at)
    for needle in ("Epochs = 0", "Seed = -1", "Evaluate every = 0"):  # by their labels
        assert any(needle in m for m in got), (needle, got)
    assert start(at).disabled
    assert "Fix 3 fields" in summary(at) and " epochs." not in summary(at)
    assert "to train (limit" in summary(at)  # the estimate is still shown
    at.number_input(key="f.epochs").set_value(3)
    at.number_input(key="f.seed").set_value(1)
    at.number_input(key="f.eval_every").set_value(1).run()
    assert not messages(at) and not start(at).disabled and "3 epochs" in summary(at)


@pytest.mark.parametrize(
    "split, kept, needle",
    [
        ("fc3", ["fc3"], "Split after layers (block boundaries) = 'fc3': that is the last layer"),
        ("fc9", ["fc9"], "Split after layers (block boundaries) = 'fc9': no such layer"),
        ("fc1,fc3", ["fc1", "fc3"], "Split after layers (block boundaries) = 'fc3'"),
    ],
)
def test_a_links_wrong_split_is_kept_and_named_not_dropped(runs, split, kept, needle):
    at = page({"split": split})
    assert at.multiselect(key="f.split").value == kept  # not one block, not fc1 alone
    assert any(needle in m for m in messages(at)), messages(at)
    assert start(at).disabled
    at.multiselect(key="f.split").set_value(["fc1"]).run()  # the user fixes it
    assert not messages(at) and not start(at).disabled


def test_a_links_absurd_batch_size_and_two_wrong_fields_are_all_said(runs):
    at = page({"batch_size": BIG})
    assert any(f"Batch size = {BIG}" in m for m in messages(at)), messages(at)
    assert start(at).disabled
    at = page({"epochs": "0", "split": "fc3"})  # a wrong epoch count does not hide a wrong split
    got = messages(at)
    assert any("Epochs = 0" in m for m in got) and any(
        "Split after layers (block boundaries) = 'fc3'" in m for m in got
    ), got
    at = page({"epochs": "0", "seed": "-1"})
    assert len(messages(at)) == 2 and "to train (limit" in summary(at)


@pytest.mark.parametrize("text", ["", "128,,128", ",128"])
def test_empty_hidden_widths_are_an_error_naming_the_field(runs, text):
    at = page()
    at.text_input(key="f.hidden").set_value(text).run()
    assert any(m.startswith(f"MLP hidden widths = {text!r}") for m in messages(at)), messages(at)
    assert start(at).disabled


def test_more_processes_than_cores_on_a_cpu_is_a_warning(runs, monkeypatch):
    monkeypatch.setattr(resources, "cpu_cores", lambda: 2)
    at = page({"method": "gotmare", "device": "cpu", "processes": "2"})
    assert not [w for w in at.warning if "processes" in w.value] and not start(at).disabled
    at.number_input(key="f.processes").set_value(4).run()
    warned = [w.value for w in at.warning if "processes" in w.value]
    assert any("Processes = 4" in w and "2 CPU cores" in w for w in warned), warned
    assert not messages(at) and not start(at).disabled  # allowed: the processes take turns


def test_split_tags_follow_the_network_not_the_clicks(runs):
    at = page({"hidden": "32,16,8"})
    at.multiselect(key="f.split").set_value(["fc3", "fc1"]).run()
    assert at.multiselect(key="f.split").value == ["fc1", "fc3"]


def test_a_loaded_configs_wrong_fields_are_each_named_in_the_form(runs):
    """Runs → Load into Train of a config with several wrong values: each goes into its field and is
    named there (Start off); what no widget can hold is named in the notice, not dropped."""
    d = preset_config("digits-mlp", "block-admm").to_dict()
    d["train"].update(epochs=0, loss="hinge")
    d["model"]["split"] = ["fc9"]
    d["method_params"]["lr"] = -1
    run = runs / "r-bad"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(d))
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    at = page({"load": "r-bad"})
    got = messages(at)
    for needle in ("Epochs = 0", "Split after layers (block boundaries) = 'fc9'", "η — Θ step size = -1"):
        assert any(needle in m for m in got), (needle, got)
    assert start(at).disabled
    notice = " ".join(i.value for i in at.info)
    assert "train.loss = 'hinge'" in notice, notice


def sweeps(rows: list[dict] | None = None) -> AppTest:
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    if rows is not None:
        at.session_state["sweeps_rows"] = rows  # the space table's first rows (AppTest cannot type in it)
    at.switch_page("views/sweeps.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_sweep_budget_of_zero_is_said_as_typed_and_holds_launch(runs):
    at = sweeps()
    launch = lambda: at.button(key="sweeps_launch")  # noqa: E731
    assert not messages(at) and not launch().disabled
    assert all(n.min is None for n in at.number_input)  # a browser would keep the old value of a typed 0
    at.number_input(key="sweeps_trials").set_value(0)
    at.number_input(key="sweeps_epochs").set_value(0).run()
    got = messages(at)
    assert "Trials = 0: must be a positive integer" in got and "Epochs per trial = 0: must be a positive integer" in got
    assert launch().disabled


def test_a_study_name_with_a_slash_is_said_by_the_engines_rule_and_holds_launch(runs):
    from admm_core.sweep import name_problem

    at = sweeps()
    at.text_input(key="sweeps_name").set_value("a/b").run()
    assert messages(at) == [name_problem("a/b", "Study name")] and "without '/'" in messages(at)[0]
    assert at.button(key="sweeps_launch").disabled


def test_sweep_menus_read_in_words_and_keep_their_code_names(runs):
    at = sweeps()
    objective, pruner = at.selectbox(key="sweeps_objective"), at.selectbox(key="sweeps_pruner")
    assert objective.options == ["best test accuracy", "seconds to 95% test accuracy"]
    assert objective.value == "best_test_accuracy" and "`time_to_95_s`" in objective.help  # the CLI's names
    assert "_" not in " ".join(pruner.options) and pruner.value == "median"
    objective.set_value("time_to_95_s").run()
    assert at.selectbox(key="sweeps_objective").value == "time_to_95_s"


def test_every_bad_space_row_is_named_in_plain_words_before_launch(runs):
    rows = [
        {"setting": "beta", "kind": "log", "range": "abc"},
        {"setting": "lr", "kind": "log", "range": "0:1"},
        {"setting": "split", "kind": "choice", "range": "fc1|fc3"},
        {"setting": "z_lr", "kind": "log", "range": "0.01:1"},
    ]
    at = sweeps(rows)
    got = messages(at)
    assert len(got) == 3, got
    # each row named as the table shows it: the setting's label (the paper's symbol), the kind in words
    assert got[0].startswith("Row 1 (β — penalty weight, log-uniform) = 'abc'") and "LOW:HIGH" in got[0]
    assert got[1].startswith("Row 2 (η — Θ step size, log-uniform)") and "low > 0" in got[1]
    assert got[2].startswith("Row 3 (Split after layers (block boundaries), one of)") and "'fc3'" in got[2]
    assert "last layer" in got[2]
    assert not any("--space" in m for m in got)  # not the command line's syntax
    assert at.button(key="sweeps_launch").disabled


def test_a_link_naming_another_network_without_a_split_gets_that_networks_default_split(runs):
    """?arch=resnet18 alone: the ResNet's default split (conv3_x), not the MLP's fc1, fc2 said wrong."""
    at = page({"arch": "resnet18", "data": "cifar10", "preset": "none"})
    assert at.multiselect(key="f.split").value == ["conv3_x"]
    assert not [m for m in messages(at) if m.startswith("model.split")]


def test_a_link_value_no_widget_can_hold_holds_start_until_its_field_is_edited(runs):
    """?epochs=abc, ?loss=hinge, ?m.z_step=x: each named under its field (the widget keeps its value),
    Start off until that field is edited; never a silent fallback to the widget's value."""
    at = page({"epochs": "abc", "loss": "hinge", "m.z_step": "x"})
    got = messages(at)
    for needle in ("Epochs = 'abc' in the link", "Loss = 'hinge' in the link", "Z-step rule = 'x' in the link"):
        assert any(needle in m for m in got), (needle, got)
    assert start(at).disabled
    at.number_input(key="f.epochs").set_value(5).run()
    at.selectbox(key="f.loss").set_value("ce").run()
    at.selectbox(key="f.mp.block-admm.z_step").set_value("scaled").run()
    assert not messages(at) and not start(at).disabled


def test_a_study_of_three_trials_says_its_importances_are_noise_and_shows_percent(runs):
    """Sweeps page on a study of three complete trials (added directly, nothing trained): the best
    accuracy in % as the other pages show it, and a caveat on importances."""
    import optuna

    from admm_core import sweep as S

    spec = S.SweepSpec(name="three", preset="digits-mlp", method="block-admm", space=["beta=log:0.1:10"], trials=3)
    storage = S.open_storage(S.default_storage(runs))
    study = S.create_or_resume(spec, "three", storage)[0]
    beta = optuna.distributions.FloatDistribution(0.1, 10, log=True)
    for b, acc in [(0.5, 0.9), (1.0, 0.9512), (2.0, 0.93)]:
        study.add_trial(optuna.trial.create_trial(params={"beta": b}, distributions={"beta": beta}, value=acc))
    at = sweeps()
    text = " ".join(m.value for m in at.markdown)
    assert "best test accuracy = **95.12 %**" in text, text  # in words and in %
    table = next(d for d in at.dataframe if "trial" in d.value.columns)
    assert sorted(table.value["value"].dropna().round(2)) == [90.0, 93.0, 95.12]  # (the queued preset trial: none)
    warned = [w.value for w in at.warning]
    assert any("Fitted on 3 complete trials" in w for w in warned), warned
    # Optuna's figures in the same units: the history's points in %, named in words
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    history = next(f for f in specs if "best test accuracy (%)" in json.dumps(f.get("layout", {})))
    points = next(t for t in history["data"] if t.get("mode") == "markers")
    assert sorted(round(y, 2) for y in points["y"]) == [90.0, 93.0, 95.12], points["y"]


def test_a_studys_dimensions_are_read_by_the_engines_syntax_and_said_in_words(runs):
    from admm_core import sweep as S

    space = ["beta=log:0.1:10", "split=choice:fc1|fc1,fc2"]
    spec = S.SweepSpec(name="said", preset="digits-mlp", method="block-admm", space=space, trials=3)
    S.create_or_resume(spec, "said", S.open_storage(S.default_storage(runs)))
    text = " ".join(m.value for m in sweeps().markdown)
    assert "β — penalty weight: log-uniform 0.1 … 10 (`beta`)" in text, text
    assert "Split after layers (block boundaries): one of fc1 | fc1,fc2 (`split`)" in text, text


def test_a_preset_picked_after_a_bad_link_clears_the_links_errors(runs):
    at = page({"epochs": "abc"})
    assert start(at).disabled
    at.selectbox(key="f.preset").set_value("mnist5k-mlp").run()
    assert not [m for m in messages(at) if "in the link" in m]


def test_every_setting_a_sweep_may_search_has_the_forms_plain_label():
    """The Sweeps space table names its settings as the Train form does: a label for
    every name `admm sweep --space` takes, the code name after it, the paper's symbol where it has one."""
    from admm_core.spec.kinds import NETWORK
    from admm_core.spec.methods import names_for
    from admm_core.sweep import space_names
    from app.dashboard import form as F

    for method in names_for(NETWORK):
        labels = F.setting_labels(method)
        for name in space_names(method):
            assert name in labels and "_" not in labels[name], (method, name, labels.get(name))
    labels = F.setting_labels("block-admm")
    assert F.labelled("beta", labels) == "β — penalty weight · beta"
    assert F.labelled("split", labels) == "Split after layers (block boundaries) · split"
    assert F.labelled("batch_size", labels) == "Batch size"  # not "Batch size · batch_size"


def test_a_batch_size_above_the_training_set_is_said_to_be_clamped(tmp_path):
    """batch_size=100000 on digits (1,347 training samples): a warning under the field says it is
    clamped to the training set; a batch size that fits says nothing."""
    from admm_core.spec.datasets import DATASETS

    n = DATASETS["digits"].n_train
    at = AppTest.from_file(str(APP / "views" / "train.py"), default_timeout=60)
    at.query_params.update({"data": "digits", "batch_size": "100000"})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = [w.value for w in at.warning if "clamped" in w.value]
    assert said == [
        f"Batch size 100,000 is more than the {n:,} training samples: it is clamped to {n:,}, so every epoch "
        "is one minibatch of all of them (one Θ-step per epoch)"
    ]
    at.number_input(key="f.batch_size").set_value(64).run()
    assert not [w for w in at.warning if "clamped" in w.value]
    from helpers import cli_call  # the command line says the same

    args = ["train", "--preset", "digits-mlp", "--method", "adam", "--epochs", "1", "--quiet", "--no-tensorboard"]
    rc, _, err = cli_call([*args, "--batch-size", "100000", "--out", str(tmp_path / "r")])
    assert rc == 0 and f"note: Batch size 100,000 is more than the {n:,} training samples: it is clamped" in err
