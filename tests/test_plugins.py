"""Plugins from another installed package (entry points, admm_core.spec.plugins) reach a fresh
process: ``python -m admm_core train`` in a new interpreter and the dashboard's worker launch both
see a method, an architecture and a data set that only a throwaway distribution on PYTHONPATH
declares; a plugin whose module does not import is left out with one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the plugin's record (torch-free: the dashboard's server may read it) names its engine class
RECORD = '''
from dataclasses import dataclass

from admm_core.spec.archs import ARCHS, Arch, mlp_table
from admm_core.spec.datasets import DatasetSpec
from admm_core.spec.methods.backprop import BackpropSettings
from admm_core.spec.methods.base import setting


@dataclass(frozen=True)
class ToyRMSprop(BackpropSettings):
    """End-to-end backprop with RMSprop."""

    name = "toy-rmsprop"
    summary = "End-to-end backprop, RMSprop (a plugin)"
    implementation = "toy_plugin_engine:ToyRMSprop"
    lr: float = setting(1e-3, "η: learning rate")


TOY_MLP = Arch("admm_core.models:build_mlp", mlp_table, None, ARCHS["mlp"].default_split, "Toy MLP",
               sizes=("hidden",), linear_chain=True)
TOY_DIGITS = DatasetSpec("toy-digits", "admm_core.data:load_digits", (64,), 10, 1347, 450, bundled=True,
                         ships_with="scikit-learn")
'''

ENGINE = '''
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from admm_core.methods.backprop import Backprop
from toy_plugin import ToyRMSprop as Record


@dataclass(frozen=True)
class ToyRMSprop(Record, Backprop):
    def make_optimizer(self, params):
        Path(os.environ["TOY_PLUGIN_MARK"]).write_text("toy-rmsprop trained")  # the plugin's code ran
        return torch.optim.RMSprop(params, lr=self.lr)
'''

ENTRY_POINTS = """
[admm_core.methods]
toy-rmsprop = toy_plugin:ToyRMSprop

[admm_core.archs]
toy-mlp = toy_plugin:TOY_MLP

[admm_core.datasets]
toy-digits = toy_plugin:TOY_DIGITS
"""


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
    distribution(site, "toy_plugin", ENTRY_POINTS, {"toy_plugin": RECORD, "toy_plugin_engine": ENGINE})
    # a second package whose entry point cannot be imported: it must not break the others
    distribution(site, "broken_plugin", "[admm_core.methods]\nbroken = no_such_module_xyz:Thing\n", {})
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]),
        "TOY_PLUGIN_MARK": str(tmp_path / "mark"),
        "ADMM_RUNS": str(tmp_path / "runs"),
    }
    return tmp_path, env


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
    assert (tmp / "mark").read_text() == "toy-rmsprop trained"
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
        from admm_core.spec.config import RunConfig
        from app.dashboard import workers as W
        cfg = RunConfig.from_dict({{"method": "toy-rmsprop", "data": {{"name": "toy-digits"}},
                                   "model": {{"arch": "toy-mlp", "hidden": [16]}},
                                   "train": {{"epochs": 1, "device": "cpu"}}}})
        print(W.start_run(cfg, {str(tmp / "runs")!r}))
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
    assert (tmp / "mark").read_text() == "toy-rmsprop trained"
