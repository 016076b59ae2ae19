"""Smaller things the Train and Runs pages say: the summary beside Start names fields by their labels
and the run's memory as what it is (not "a field: memory"), the memory estimate stays while a number
of the method (β) is wrong (a resumed run's first start, kept apart from its last resume: tests/test_runs.py)."""

from __future__ import annotations

from helpers import app_page

page = app_page


def summary(at) -> str:
    return " ".join(c.value for c in at.caption)


def test_a_run_too_big_is_not_called_a_field_named_memory(runs, monkeypatch):
    monkeypatch.setenv("ADMM_DASH_MAX_RUN_GB", "0.000001")
    at = page({"preset": "digits-mlp"})
    assert at.button(key="start").disabled
    text = summary(at)
    assert "does not fit in memory" in text and "field" not in text.split("does not fit")[0], text
    assert "Fix 1 field below to start: memory" not in text


def test_a_wrong_beta_keeps_the_memory_estimate(runs):
    """β sizes nothing: while it is wrong the estimate (on its default) stays beside the message."""
    at = page({"preset": "digits-mlp", "m.beta": "-3"})
    assert at.button(key="start").disabled and any("-3" in e.value for e in at.error)
    assert "to train (limit" in summary(at), summary(at)


def test_the_preset_box_says_in_words_what_was_edited_since_it_was_picked(runs, monkeypatch):
    # ResNet-18 on CIFAR-10 with the digits recipe is estimated at ~13 GiB: on a busy machine the free-memory
    # check refuses it and the box says "a field that is wrong"; the words under test do not depend on it
    from admm_core.spec import resources

    monkeypatch.setattr(resources, "available_memory", lambda device="cpu": (1 << 40, "available CPU RAM"))
    at = page({"preset": "digits-mlp"})
    assert not [c for c in at.caption if c.value.startswith("Edited since picked")]
    at.selectbox(key="f.data").set_value("cifar10").run()
    at.selectbox(key="f.arch").set_value("resnet18").run()
    said = [c.value for c in at.caption if c.value.startswith("Edited since picked")]
    assert len(said) == 1 and "Data set, Network" in said[0] and "differ from digits-mlp" in said[0], said
