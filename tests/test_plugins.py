"""Plugins from another installed package (entry points, admm_core.spec.plugins) reach a fresh
process: ``python -m admm_core train`` in a new interpreter and the dashboard's worker launch both
see a method, an architecture and a data set that only a throwaway distribution on PYTHONPATH
declares; a plugin whose module does not import is left out with one line naming it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

DOC = (ROOT / "docs" / "extending.md").read_text().split("## A plugin")[1]
(PYPROJECT,) = re.findall(r"```toml\n(.*?)```", DOC, re.S)
MODULES = {re.match(r"# (\w+)\.py\n", code).group(1): code for code in re.findall(r"```python\n(.*?)```", DOC, re.S)}


def entry_points_txt(pyproject: str) -> str:
    """The entry_points.txt an installer writes from the pyproject's [project.entry-points.*] tables."""
    groups = tomllib.loads(pyproject)["project"]["entry-points"]
    return "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for g, eps in groups.items())


def distribution(where: Path, name: str, entry_points: str, modules: dict[str, str]) -> None:
    """A distribution as an installer leaves it: its modules and NAME-0.1.dist-info (METADATA, entry_points.txt)."""
    info = where / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for module, text in modules.items():
        (where / f"{module}.py").write_text(textwrap.dedent(text))


@pytest.fixture
def plugin_env(tmp_path):
    site = tmp_path / "site"
    distribution(site, "toy_plugin", entry_points_txt(PYPROJECT), MODULES)
    # a second package whose entry point cannot be imported: it must not break the others
    distribution(site, "broken_plugin", "[admm_core.methods]\nbroken = no_such_module_xyz:Thing\n", {})
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]),
        "ADMM_RUNS": str(tmp_path / "runs"),
    }
    return tmp_path, env


def trained_by_rmsprop(run_dir: Path) -> bool:
    """The checkpoint holds RMSprop's moments (square_avg), not Adam's or SGD's: the plugin's engine ran."""
    from admm_core.checkpoint import safe_load

    state = safe_load(run_dir / "checkpoint.pt")["method_state"]["opt"]["state"]
    return bool(state) and all(set(s) == {"step", "square_avg"} for s in state.values())


def admm(env, *args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "admm_core", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_a_plugin_distribution_trains_through_the_cli_in_a_fresh_process(plugin_env):
    tmp, env = plugin_env
    out = tmp / "run"
    args = ["--method", "toy-rmsprop", "--arch", "toy-mlp", "--data", "toy-digits", "--hidden", "16"]
    p = admm(env, "train", *args, "--epochs", "1", "--device", "cpu", "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["method"], cfg["model"]["arch"], cfg["data"]["name"]) == ("toy-rmsprop", "toy-mlp", "toy-digits")
    assert json.loads((out / "status.json").read_text())["state"] == "finished"
    assert trained_by_rmsprop(out)
    # the broken package: one line naming its entry point, no traceback, the other methods unharmed
    said = [line for line in p.stderr.splitlines() if "broken" in line]
    assert len(said) == 1 and "'broken'" in said[0] and "no_such_module_xyz" in said[0], p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    # listed where the built-in ones are
    listed = admm(env, "methods")
    assert listed.returncode == 0 and "toy-rmsprop" in listed.stdout, listed.stderr[-2000:]


def test_a_plugin_that_fails_to_import_is_one_error_naming_its_entry_point(plugin_env):
    tmp, env = plugin_env
    p = admm(env, "train", "--method", "broken", "--data", "digits", "--epochs", "1", "--out", str(tmp / "b"))
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    assert "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "entry point 'broken'" in last, p.stderr
    assert "No module named 'no_such_module_xyz'" in last and "broken_plugin 0.1" in last
    assert not (tmp / "b").exists()


def test_a_plugin_method_trains_from_the_dashboards_worker(plugin_env):
    """The dashboard's launch (app.dashboard.workers.start_run) in a process of its own, as the
    server runs it: the worker it spawns finds the plugin by itself."""
    tmp, env = plugin_env
    script = textwrap.dedent(f"""
        from admm_core.spec.datasets import available
        from app.dashboard import form as F
        from app.dashboard import workers as W
        form = {{**{{k: v for k, v in F.default_form().items() if not k.startswith(F.MP)}},
                **F.method_fields("toy-rmsprop"), "method": "toy-rmsprop", "arch": "toy-mlp", "hidden": "16,16",
                "data": "toy-digits", "epochs": 1, "device": "cpu"}}
        got = F.check_form(form, available())  # the Train page's check of its form, as Start runs it
        assert got.cfg is not None, got.errors
        menus = {{k: F.choices(F.BY_PATH[k], form) for k in ("method", "model.arch", "data.name")}}
        assert ["toy-rmsprop", "toy-mlp", "toy-digits"] == [v for m in menus.values() for v in m if "toy" in v], menus
        import sys
        assert "torch" not in sys.modules, "the server read the plugin's records without torch"
        print(W.start_run(got.cfg, {str(tmp / "runs")!r}, checked=True))
    """)
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    run_dir = Path(p.stdout.strip().splitlines()[-1])
    status = run_dir / "status.json"
    deadline = time.time() + 240
    while time.time() < deadline:
        state = json.loads(status.read_text()).get("state") if status.exists() else None
        if state in ("finished", "failed", "stopped"):
            break
        time.sleep(1)
    assert state == "finished", (state, [p.read_text()[-2000:] for p in run_dir.glob("*.log")])
    assert json.loads((run_dir / "config.json").read_text())["method"] == "toy-rmsprop"
    assert trained_by_rmsprop(run_dir)


def test_a_child_process_gets_the_checkout_and_the_callers_path_from_one_place(monkeypatch):
    """Every child that runs admm_core (worker, table child, scorer, backbone check) takes its
    environment from admm_core.child_env: this checkout first, the caller's PYTHONPATH (plugins) after."""
    from admm_core import child_env

    monkeypatch.setenv("PYTHONPATH", "/somewhere/plugins")
    env = child_env(OMP_NUM_THREADS="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/somewhere/plugins"]
    assert env["OMP_NUM_THREADS"] == "1"
    writers = [
        str(p.relative_to(ROOT))
        for d in ("admm_core", "app")
        for p in sorted((ROOT / d).rglob("*.py"))
        if '"PYTHONPATH"' in p.read_text()
    ]
    assert writers == ["admm_core/__init__.py"]


@pytest.fixture
def plugin_here(plugin_env, monkeypatch):
    """The plugin distribution on this process's path too (the dashboard's server), its records
    loaded afresh, and gone again after the test."""
    from admm_core.spec import plugins
    from admm_core.spec.archs import ARCHS
    from admm_core.spec.datasets import DATASETS
    from admm_core.spec.methods import METHODS

    tmp, env = plugin_env
    monkeypatch.syspath_prepend(str(tmp / "site"))
    monkeypatch.setenv("PYTHONPATH", str(tmp / "site"))  # the worker's: child_env puts the checkout first
    monkeypatch.setenv("ADMM_RUNS", str(tmp / "runs"))
    for registry in (METHODS, ARCHS, DATASETS):
        monkeypatch.setattr(registry, "_loaded", False)
    yield tmp
    for registry, name in ((METHODS, "toy-rmsprop"), (ARCHS, "toy-mlp"), (DATASETS, "toy-digits")):
        dict.pop(registry, name, None)
    for failed in plugins.FAILED.values():
        failed.clear()
    for module in ("toy_plugin", "toy_plugin_engine"):
        sys.modules.pop(module, None)


def test_a_plugin_method_trains_from_the_dashboards_start_button(plugin_here):
    """The Train page offers the plugin's method, network and data set in its menus; Start launches
    a worker (the real one: a process of its own) that trains it to the end."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60).run()
    for key, value in (("f.method", "toy-rmsprop"), ("f.arch", "toy-mlp"), ("f.data", "toy-digits")):
        at.selectbox(key=key).set_value(value).run()
    at.text_input(key="f.hidden").set_value("16,16").run()
    at.number_input(key="f.epochs").set_value(1).run()
    at.button(key="start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (run_dir,) = (plugin_here / "runs").iterdir()
    status = run_dir / "status.json"
    deadline = time.time() + 240
    state = None
    while time.time() < deadline:
        state = json.loads(status.read_text()).get("state") if status.exists() else None
        if state in ("finished", "failed", "stopped", "crashed"):
            break
        time.sleep(1)
    assert state == "finished", (state, [p.read_text()[-2000:] for p in run_dir.glob("*.log")])
    cfg = json.loads((run_dir / "config.json").read_text())
    assert (cfg["method"], cfg["model"]["arch"], cfg["data"]["name"]) == ("toy-rmsprop", "toy-mlp", "toy-digits")
    assert trained_by_rmsprop(run_dir)


def test_a_registry_loads_its_group_once_and_leaves_a_bad_entry_point_out(monkeypatch, capsys):
    """In-process: the group's entry points are loaded at the first read and only then (a record that
    reads the registry while it is added does not load it again); a bad one is one stderr line and
    the reason in the unknown-name message."""
    from importlib.metadata import EntryPoint

    from admm_core.spec import plugins

    group = "admm_core.archs"
    monkeypatch.setitem(plugins.FAILED, group, {})
    eps = [EntryPoint("good", "json:dumps", group), EntryPoint("bad", "no_such_mod_q:x", group)]
    listed = []
    monkeypatch.setattr(plugins, "entry_points", lambda g: listed.append(g) or eps)

    def add(name, obj):
        assert "built-in" in reg  # a plugin reading the registry as it loads
        dict.__setitem__(reg, name, obj)

    reg = plugins.PluginRegistry(group, {"built-in": 0}, add=add)
    assert listed == []  # nothing is loaded before the first read
    assert sorted(reg) == ["built-in", "good"] and "bad" not in reg and reg.get("good") is json.dumps
    assert listed == [group]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("admm_core: plugin entry point 'bad' = 'no_such_mod_q:x'") and "ModuleNotFoundError" in line
    assert plugins.failure(group, "bad").endswith(
        "failed to load: ModuleNotFoundError: No module named 'no_such_mod_q'"
    )
    assert plugins.failure(group, "good") == ""
