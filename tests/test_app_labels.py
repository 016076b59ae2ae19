"""The Train form in a user's words: method settings under plain labels from
their records (the paper's symbol first where it has one, the code name in the help), only the
settings that apply to the method shown, no registry names in the help, readable messages, and a
block diagram that agrees with its caption. AppTest pages on an empty runs folder."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from admm_core.spec.methods import METHODS, names_for

APP = Path(__file__).resolve().parent.parent / "app"
KINDS = ("selectbox", "number_input", "checkbox", "text_input")


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("ADMM_RUNS", str(tmp_path))
    return tmp_path


def page(query: dict | None = None, method: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    if method:
        unfold(at, method)
    assert not at.exception, [e.value for e in at.exception]
    return at


def unfold(at, method: str) -> AppTest:
    """Every folded setting drawn (AppTest does not keep an expander open across a widget's change)."""
    at.session_state["train_more_open"] = True
    at.session_state[f"mp_more_open.{method}"] = True
    return at.run()


def settings_widgets(at, method: str) -> dict:
    prefix = f"f.mp.{method}."
    return {w.key[len(prefix) :]: w for kind in KINDS for w in getattr(at, kind) if w.key.startswith(prefix)}


def test_method_settings_carry_their_records_labels_and_the_code_name_in_the_help(runs):
    got = settings_widgets(page(method="block-admm"), "block-admm")
    assert got["z_lr"].label == "ζ — Z-step size" and "`z_lr`" in got["z_lr"].help
    assert got["beta"].label.startswith("β") and got["lr"].label.startswith("η")
    fields = {f.name: f for f in dataclasses.fields(METHODS["block-admm"])}
    for name, w in got.items():  # the label is the record's, not a table of the page's
        assert w.label == fields[name].metadata["label"], name
        assert "_" not in w.label and f"`{name}`" in w.help, (name, w.label)


@pytest.mark.parametrize("method", [m for m in names_for("network") if m != "block-admm"])
def test_no_setting_of_any_method_shows_its_code_name(runs, method):
    got = settings_widgets(page({"method": method}, method), method)
    assert got, method
    assert all("_" not in w.label and f"`{name}`" in w.help for name, w in got.items()), {
        n: w.label for n, w in got.items()
    }


def test_settings_that_do_not_apply_are_not_shown(runs):
    gotmare = settings_widgets(page({"method": "gotmare"}, "gotmare"), "gotmare")
    assert not {"u_init", "u_init_scale", "dual_lr", "dual_theta"} & set(gotmare)  # no duals: U ≡ 0
    assert {"beta", "z_lr", "primal_steps"} <= set(gotmare)
    at = page(method="block-admm")
    shown = settings_widgets(unfold(at, "block-admm"), "block-admm")  # digits-mlp: the minibatch recipe
    assert {"z_start", "theta_input", "dual_theta"} <= set(shown)
    assert "power_steps" not in shown and "rho_c" not in shown  # a fixed Z step, no adaptive ρ
    at.selectbox(key="f.mp.block-admm.z_step").set_value("scaled").run()
    unfold(at, "block-admm").selectbox(key="f.mp.block-admm.z_schedule").set_value("minibatch").run()
    unfold(at, "block-admm").checkbox(key="f.mp.block-admm.adaptive_rho").check().run()
    shown = settings_widgets(unfold(at, "block-admm"), "block-admm")
    assert {"power_steps", "power_every", "z_start", "theta_input", "dual_theta", "rho_c", "beta_max"} <= set(shown)


def test_the_network_help_is_plain_and_the_resnet_on_digits_message_is_readable(runs):
    at = page()
    menu = at.selectbox(key="f.arch")
    assert menu.help and "admm_core" not in menu.help, menu.help
    menu.set_value("resnet18").run()
    msg = next(e.value for e in at.error if e.value.startswith("Network = "))
    assert "flat vectors of 64 numbers" in msg and "Choose an image data set" in msg, msg
    # drawn below the row, at the row's width: not in the menu's narrow column
    assert not [e for c in at.columns for e in c.error if e.value.startswith("Network = ")]
    assert at.button(key="start").disabled


def _boxes(at) -> int:
    (chart,) = at.get("graphviz_chart")
    return chart.proto.spec.count("shape=box")


def test_an_end_to_end_method_draws_one_block_as_its_caption_says(runs):
    at = page()
    assert _boxes(at) == 3  # block-admm, split after fc1 and fc2: T = 3
    at.selectbox(key="f.method").set_value("adam").run()
    assert _boxes(at) == 1
    caption = " ".join(c.value for c in at.caption)
    assert "T = 1 block ·" in caption and "f.split" not in {w.key for w in at.multiselect}  # no split to edit
    at.selectbox(key="f.method").set_value("block-admm").run()  # the split is back as it was
    assert at.multiselect(key="f.split").value == ["fc1", "fc2"] and _boxes(at) == 3


def test_form_rows_hold_at_most_five_fields_as_even_as_can_be():
    """At 1440 px ten fields in one row cut their labels ("Evaluat e every", "Au…" for augment)."""
    from app.dashboard import form as F

    assert [len(r) for r in F.rows(list(range(10)))] == [5, 5]
    assert [len(r) for r in F.rows(list(range(7)))] == [4, 3]
    assert [len(r) for r in F.rows(list(range(4)))] == [4] and F.rows([]) == []
    assert [len(r) for r in F.rows(list(range(11)))] == [4, 4, 3]
    groups = F.groups()
    assert all(len(r) <= F.ROW_MAX for g in ("data", "network") for r in F.rows(groups[g]))


def test_the_preset_box_says_when_its_values_were_edited(runs):
    at = page()
    assert at.selectbox(key="f.preset").options[at.selectbox(key="f.preset").index] == "digits-mlp"
    at.number_input(key="f.epochs").set_value(7).run()
    box = at.selectbox(key="f.preset")
    assert box.value == "digits-mlp" and box.options[box.index] == "digits-mlp (edited)"
    box.set_value("mnist5k-mlp").run()  # picking a preset again: its own values, not edited
    box = at.selectbox(key="f.preset")
    assert box.options[box.index] == "mnist5k-mlp"


def test_a_diverged_run_is_offered_a_new_start_not_resume(runs):
    import json

    run = runs / "div"
    run.mkdir()
    cfg = {"method": "sgd", "train": {"epochs": 3}}
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "status.json").write_text(json.dumps({"state": "diverged", "error": "loss is nan at epoch 1"}))
    at = page({"run": "div"})
    keys = {b.key for b in at.button}
    assert "live_resume" not in keys and "live_load" in keys, keys
    assert any("diverged" in e.value for e in at.error)


def test_runs_page_shows_the_whole_setup_and_says_saved_beside_save(runs):
    """The run's configuration with the method's defaults written out (config.json keeps only the
    settings given), and "Saved." under the Save button, not at the top of the page."""
    import json

    from admm_core.spec.presets import preset_config

    run = runs / "r1"
    run.mkdir()
    cfg = preset_config("digits-mlp", "block-admm")
    (run / "config.json").write_text(cfg.to_json())
    (run / "status.json").write_text(json.dumps({"state": "finished", "epochs": 30}))
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    at.query_params["run"] = "r1"
    at.run().switch_page("views/runs.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = next(j.value for j in at.json if "method_params" in j.value)
    shown = json.loads(shown) if isinstance(shown, str) else shown
    params = shown["method_params"]
    assert set(params) == {s["name"] for s in METHODS["block-admm"].settings()}  # every setting
    assert params["chunk_size"] == 8192 and "chunk_size" not in cfg.method_params  # a default, shown
    (expander,) = [e for e in at.expander if e.label == "Name, tags and note"]
    at.text_input(key="meta_name.r1").set_value("first try")
    at.button(key="meta_save.r1").click().run()
    (expander,) = [e for e in at.expander if e.label == "Name, tags and note"]
    assert [s.value for s in expander.success] == ["Saved."]


def test_deepfacto_settings_carry_their_records_labels(runs):
    """The DeepFacto form's labels come from its records too (no table of them in app/)."""
    at = page({"mode": "deepfacto"})
    got = {w.key[len("df.") :]: w for kind in KINDS for w in getattr(at, kind) if w.key.startswith("df.")}
    assert got["rank"].label == "NMF rank r" and got["z_lr"].label == "ζ — Z₂ step size"
    assert "`deepfacto.z_lr`" in got["z_lr"].help
    assert all("_" not in w.label for w in got.values()), {n: w.label for n, w in got.items() if "_" in w.label}


def test_runs_table_times_and_its_columns_on_screen(runs):
    import json

    run = runs / "r2"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "sgd", "train": {"epochs": 2}}))
    t0 = 1_780_000_000.0
    status = {"state": "finished", "epochs": 2, "started": t0, "updated": t0 + 3725.0, "elapsed_s": 3724.6}
    (run / "status.json").write_text(json.dumps(status))
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    at.run().switch_page("views/runs.py").run()
    grid = next(d for d in at.dataframe if "run" in d.value.columns)
    df = grid.value
    row = df[df["run"] == "r2"].iloc[0]
    assert row["duration"] == "1 h 02 min"
    assert row["started"].timestamp() == t0 and row["updated"].timestamp() == t0 + 3725.0  # times: they sort as times
    columns = json.loads(grid.proto.columns)
    assert columns["started"]["type_config"]["format"] == "MMM D HH:mm", columns["started"]  # no year: narrower
    # the id column is not pinned: Streamlit fades a pinned column like an index
    assert not columns["run"].get("pinned"), columns["run"]
    # on screen: no column that no run fills (five pushed "updated" past the edge at 1440 px), the size last
    shown = list(grid.proto.column_order)
    assert not {"name", "tags", "preset", "error", "note"} & set(shown), shown
    assert shown[:2] == ["run", "status"] and shown[-3:] == ["duration", "updated", "size"]
    assert "started" not in shown and "started" in df.columns  # not drawn: at 1280 px it pushed "updated" out
    assert {"name", "tags", "note", "error"} <= set(df.columns)  # the data keeps them
    (run / "meta.json").write_text(json.dumps({"name": "long try", "tags": [], "note": ""}))
    at.run()
    shown = list(next(d for d in at.dataframe if "run" in d.value.columns).proto.column_order)
    assert "name" in shown and "tags" not in shown, shown  # one run named: its column is back
    assert shown.index("test %") < shown.index("name") < shown.index("size")  # after the run's state


def test_runs_table_shortens_a_long_id_and_picks_the_whole_one(runs):
    """A sweep trial's 56-character id is drawn "20261202-052512…t9" (its start stamp and its trial kept)
    so the table fits a 1280-px window; the details show, and ?run= holds, the whole id."""
    import json

    long = "20261202-052512-digits-mlp-block-admm-20261202-052506-t9"
    run = runs / long
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"method": "sgd", "train": {"epochs": 2}}))
    (run / "status.json").write_text(json.dumps({"state": "finished", "epochs": 2}))
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    at.query_params["run"] = long
    at.run().switch_page("views/runs.py").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = list(next(d for d in at.dataframe if "run" in d.value.columns).value["run"])
    assert shown == ["20261202-052512…t9"], shown
    assert any(f"`{long}`" in c.value for c in at.caption), [c.value for c in at.caption]  # the details: whole
    assert any(" · started " in m.value for m in at.markdown), [m.value for m in at.markdown]  # not in the table


def test_short_id_keeps_a_stamp_and_its_last_part_else_both_ends():
    from app.ui import ID_CHARS, short_id

    assert short_id("digits-block-admm-s0") == "digits-block-admm-s0"  # short: whole
    assert short_id("20261202-055640-mnist5k-mlp-block-admm-s0") == "20261202-055640…s0"
    assert short_id("20261202-055246-digits-mlp-block-admm-20261202-055234-t11") == "20261202-055246…t11"
    # no stamp, or a last part too long to be a trial or seed: its first and last characters, ID_CHARS in all
    cut = short_id("my-long-study-of-penalties-on-digits-second-try")
    assert cut == "my-long-stu…-second-try" and len(cut) == ID_CHARS, cut
    cut = short_id("20261202-055246-digits-mlp-block-admm-with-penalties")
    assert cut == "20261202-05…h-penalties" and len(cut) == ID_CHARS, cut


def test_short_id_knows_the_stamp_the_engine_names_a_run_with(tmp_path):
    """The stamp is the engine's (admm_core.rundir): a run directory it makes keeps its start time."""
    import time

    from admm_core.rundir import STAMP_FORMAT, unique_run_dir
    from app.ui import short_id

    run = unique_run_dir("mnist5k-mlp-block-admm-with-a-long-name-s0", tmp_path)
    start = run.name[: len(time.strftime(STAMP_FORMAT))]
    assert time.strptime(start, STAMP_FORMAT) and short_id(run.name) == f"{start}…s0"


def _rows_of_columns(node) -> list[list[list[str]]]:
    """Every row of columns under ``node`` (a block whose children are columns), as the widget keys in
    each of its columns: the layout as the page declares it (AppTest has no pixels)."""
    from streamlit.testing.v1.element_tree import Column

    out, kids = [], list(getattr(node, "children", {}).values())
    if kids and all(isinstance(k, Column) for k in kids):

        def keys(n) -> list[str]:
            mine = [n.key] if isinstance(getattr(n, "key", None), str) else []
            return mine + [k for c in getattr(n, "children", {}).values() for k in keys(c)]

        out.append([keys(c) for c in kids])
    for k in kids:
        out += _rows_of_columns(k)
    return out


def test_deepfacto_main_settings_stand_in_two_rows_of_three(runs):
    """DeepFacto's six main settings in two rows of three columns, one setting each, in the record's
    order: six in one row wrapped "Block-ADMM training images" onto two lines and hid the number
    boxes' − / + at 1280 px (seen in screenshots, held here)."""
    from app.dashboard import form as F

    at = AppTest.from_file(str(APP / "main.py"), default_timeout=60)
    at.query_params["mode"] = "deepfacto"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    names = F.DF_GROUPS["main"]
    main = {"df." + n for n in names}
    rows = [r for r in _rows_of_columns(at.main) if {k for col in r for k in col} & main]
    got = [[[k for k in col if k in main] for col in r] for r in rows]
    want = [[["df." + n] for n in names[:3]], [["df." + n] for n in names[3:]]]
    assert len(names) == 6 and got == want, got
