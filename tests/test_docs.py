"""Generated docs sections and the one ``--set`` parser."""

from __future__ import annotations

import json

import pytest

from admm_core.docs import write_section
from admm_core.spec.config import ConfigError
from admm_core.spec.settings import parse_sets


def test_write_section_replaces_only_its_own_block(tmp_path):
    page = tmp_path / "docs" / "r.md"
    write_section(page, "mnist", "| a |\n|---|\n| 1 |", command="python -m admm_core bench --x")
    page.write_text("# Results\n\nhand-written intro\n\n" + page.read_text() + "\nhand-written outro\n")
    write_section(page, "other", "second table")
    write_section(page, "mnist", "| a |\n|---|\n| 2 |", command="python -m admm_core bench --y")
    text = page.read_text()
    assert text.startswith("# Results\n\nhand-written intro")
    assert "hand-written outro" in text
    assert "| 2 |" in text and "| 1 |" not in text  # replaced, not appended
    assert text.count("<!-- generated:mnist -->") == 1 and text.count("<!-- generated:other -->") == 1
    assert "`python -m admm_core bench --y`" in text and "--x" not in text
    with pytest.raises(ConfigError, match="section"):
        write_section(page, "bad name", "x")


def test_bench_writes_its_table_into_a_docs_page(tmp_path):
    from admm_core import bench

    page = tmp_path / "mnist.md"
    argv = ["--preset", "digits-mlp", "--methods", "adam", "--epochs", "1", "--out", str(tmp_path / "b")]
    assert bench.main([*argv, "--markdown", str(page)]) == 0
    text = page.read_text()
    assert "<!-- generated:digits-mlp -->" in text and "| adam | 1 |" in text
    assert "--preset digits-mlp" in text  # the command that wrote it


def test_parse_sets_reads_json_values_and_names_bad_flags():
    got = parse_sets(["beta=[1, 0.5]", "z-optimizer=adam", "lr=1e-3", "flag=true", "x=null"])
    assert got == {"beta": [1, 0.5], "z_optimizer": "adam", "lr": 1e-3, "flag": True, "x": None}
    assert parse_sets(["s=a=b"]) == {"s": "a=b"}  # only the first '=' splits
    assert json.dumps(parse_sets(None)) == "{}"
    for bad in ("novalue", "=3"):
        with pytest.raises(ConfigError, match="--set"):
            parse_sets([bad])


def test_the_backprop_method_example_registers_and_trains(tmp_path, monkeypatch, request):
    """docs/extending.md's backprop method example, as printed, is a working method."""
    import re
    import sys
    import types
    from pathlib import Path

    from admm_core.network import train
    from admm_core.spec import methods
    from admm_core.spec.config import RunConfig

    readme = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    code = re.search(r"```python\n(# admm_core/methods/rmsprop.py\n.*?)```", readme, re.S).group(1)
    mod = types.ModuleType("admm_core.methods.rmsprop")
    mod.__package__ = "admm_core.methods"
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    exec(compile(code, "docs/extending.md", "exec"), mod.__dict__)
    request.addfinalizer(lambda: methods.METHODS.pop("rmsprop", None))
    methods.register_method(mod.RMSpropSettings)  # the registry line

    cfg = RunConfig(method="rmsprop", method_params={"lr": 3e-3}).replace(train__epochs=3)
    summary = train(cfg, tmp_path / "run")
    assert summary["status"] == "finished" and summary["method"] == "rmsprop"
    assert summary["test_accuracy"] > 0.5  # it learned (10 classes: chance is 0.1)
    assert {s["name"] for s in mod.RMSpropSettings.settings()} == {"lr", "lr_decay"}  # lr_decay comes with Backprop
