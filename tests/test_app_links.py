"""Every value in a Train-page link is accounted for: applied, or named in the link's one message
with the reason (an unknown key, an unknown method or preset, a method setting for a method the
link does not choose, a value its field cannot hold), with Start held where the value was meant
for a field; the same link gets the same answer whatever else it holds. And the help of a method
setting says the value in force and where it comes from. AppTest pages on an empty runs folder."""

from __future__ import annotations

import pytest
from helpers import app_page
from streamlit.testing.v1 import AppTest

page = app_page


def said(at: AppTest) -> str:
    """Everything the page says in boxes: errors under fields, warnings, notices."""
    return " | ".join(e.value for e in [*at.error, *at.warning, *at.info])


def held(at: AppTest) -> bool:
    return at.button(key="start").disabled


# (link, what the page must say (each), whether Start waits for it)
LINKS = [
    # a setting of the method in force (the default method when the link names none): validated
    ({"m.beta": "-3"}, ["-3"], True),
    ({"m.z_step": "wrong"}, ["Z-step rule = 'wrong' in the link"], True),
    ({"method": "block-admm", "m.beta": "-3"}, ["-3"], True),
    # a setting of another method than the one in force
    ({"m.momentum": "0.9"}, ["m.momentum", "sgd", "not a setting of block-admm"], True),
    ({"method": "sgd", "m.beta": "2"}, ["m.beta", "not a setting of sgd"], True),
    # a key no field reads
    ({"beta": "-3"}, ["beta = '-3'", "unknown key", "m.beta"], True),
    ({"foo": "1"}, ["foo = '1'", "unknown key"], False),
    ({"mode": "nope"}, ["mode = 'nope'", "network", "deepfacto"], False),
    ({"df.rank": "4"}, ["df.rank", "mode=deepfacto"], False),
    # an unknown method or preset, on its own or with other fields beside it
    ({"method": "nope"}, ["method = 'nope'", "unknown method"], True),
    ({"preset": "nope"}, ["preset = 'nope'", "unknown preset"], True),
]


@pytest.mark.parametrize(
    "link, needles, start_held", LINKS, ids=["&".join(f"{k}={v}" for k, v in q.items()) for q, _, _ in LINKS]
)
@pytest.mark.parametrize("beside", [{}, {"epochs": "3"}], ids=["alone", "beside-epochs"])
def test_every_value_of_a_link_is_applied_or_named(runs, link, needles, start_held, beside):
    at = page({**beside, **link})
    text = said(at)
    for needle in needles:
        assert needle in text, (needle, text)
    assert held(at) == start_held, text
    if beside:
        assert at.number_input(key="f.epochs").value == 3  # the other values are applied


def test_a_method_setting_without_method_is_kept_in_its_field_and_the_url(runs):
    """?m.beta=-3: β shows -3 (not 1) and the URL keeps it (it was rewritten to m.beta=1)."""
    at = page({"m.beta": "-3"})
    assert at.text_input(key="f.mp.block-admm.beta").value == "-3"
    q = {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert q.get("m.beta") == "-3", q
    at.text_input(key="f.mp.block-admm.beta").set_value("2").run()
    assert not held(at), said(at)


def test_the_links_message_lasts_until_a_field_is_edited(runs):
    """The message is not a one-time notice: a rerun (a fragment, the URL rewrite) keeps it."""
    at = page({"method": "nope"})
    assert "unknown method" in said(at)
    at.run()
    assert "unknown method" in said(at) and held(at)
    at.selectbox(key="f.method").set_value("sgd").run()
    assert "unknown method" not in said(at) and not held(at), said(at)


def test_a_method_settings_help_says_the_value_in_force_and_where_it_comes_from(runs):
    """digits-mlp was measured at η = 2e-3 (the method's default 1e-3): the help says 0.002 is in force,
    from the preset; a value typed is "set here"; with no preset the default is in force."""
    from admm_core.spec.methods import make_settings

    assert make_settings("block-admm").lr == 1e-3  # else this test tells nothing
    at = page({"preset": "digits-mlp", "method": "block-admm"})
    lr = at.text_input(key="f.mp.block-admm.lr")
    assert lr.value == "0.002"
    assert "In force: 0.002, the value measured for the preset digits-mlp" in lr.help, lr.help
    assert "the method's default is 0.001" in lr.help, lr.help
    lr.set_value("0.005").run()
    lr = at.text_input(key="f.mp.block-admm.lr")
    assert "In force: 0.005, set here" in lr.help, lr.help
    at = page({"preset": "none", "method": "block-admm"})
    lr = at.text_input(key="f.mp.block-admm.lr")
    assert lr.value == "0.001" and "In force: 0.001, the method's default" in lr.help, lr.help


def test_a_measured_default_s_help_says_so_and_names_the_paper_s_value(runs):
    """A default that is a measured recipe (it differs from Alg. 1 as printed) says so in its help,
    with the printed value and the setting that restores it; one the paper agrees with does not."""
    from admm_core.spec.methods import record

    paper = record("block-admm").PAPER
    at = page({"preset": "none", "method": "block-admm"})
    drawn = {
        w.key.rsplit(".", 1)[-1]: w for w in [*at.text_input, *at.selectbox] if w.key.startswith("f.mp.block-admm.")
    }
    default = {s["name"]: s["default"] for s in record("block-admm").settings()}
    measured = [n for n in drawn if n in paper and default[n] != paper[n]]
    assert measured, sorted(drawn)  # else this test tells nothing
    for n in measured:
        h = drawn[n].help
        assert "a measured default" in h and "Recipe = paper" in h, (n, h)
        printed = paper[n]
        assert (str(printed) in h) or (f"{printed:g}" in h if isinstance(printed, float) else False), (n, h)
    agreed = [n for n in drawn if n in paper and n not in measured]
    assert agreed and all("a measured default" not in drawn[n].help for n in agreed), agreed


def test_a_config_fields_help_says_the_value_in_force_and_where_it_comes_from(runs):
    from admm_core.spec.config import TrainConfig
    from admm_core.spec.presets import preset_config

    epochs = preset_config("digits-mlp", "block-admm").train.epochs
    assert epochs != TrainConfig.epochs  # else this test tells nothing
    at = page({"preset": "digits-mlp"})
    help_ = at.number_input(key="f.epochs").help
    assert f"In force: {epochs}, the preset digits-mlp's (the default: {TrainConfig.epochs})" in help_, help_
    assert "Setting `train.epochs`" in help_
    at.number_input(key="f.epochs").set_value(epochs + 1).run()
    assert f"In force: {epochs + 1}, set here" in at.number_input(key="f.epochs").help
    assert "the network's default split" in at.multiselect(key="f.split").help
