"""A network of one's own on the command line, ``admm train --model FILE.py:Name``: it trains on a
registered data set, ``admm cuts`` lists its cut points, a run killed mid-way resumes to the
uninterrupted run's result, and a run whose file changed since is refused (resume and evaluate)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import ROOT, cli_call
from safetensors.torch import load_file

from admm_core.rundir import read_json, read_metrics

# A user's file: functional ops in forward, a skip connection inside a block, and a short sleep per
# forward of Res so that an epoch lasts long enough to be killed in the middle of (the sleep is no
# tensor op: tracing drops it, so it only runs where Res is kept whole, --leaf-modules res)
MODEL = """
import os, time
import torch
from torch import nn
import torch.nn.functional as F


class Res(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        if SLOW:
            time.sleep(SLOW)
        return F.relu(self.fc(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, 32)
        self.res = Res(32)
        self.out = nn.Linear(32, 10)

    def forward(self, x):
        return self.out(self.res(F.relu(self.inp(x))))


def small():
    return Net()
"""


@contextlib.contextmanager
def one_torch_thread():
    """torch on one thread inside the block (as a process started with OMP_NUM_THREADS=1 runs)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def write_model(folder: Path, slow: float = 0.0) -> Path:
    f = folder / "my_net.py"
    f.write_text(f"SLOW = {slow}\n" + MODEL)
    return f


def admm(*args, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "admm_core", *args], capture_output=True, text=True, env=env, **kw)


def test_cuts_lists_valid_points_and_bad_names_are_one_line(tmp_path):
    f = write_model(tmp_path)
    rc, out, err = cli_call(["cuts", f"{f}:Net", "--json"])
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["inp"]["valid"] and rows["inp"]["out_shape"] == [32]
    assert rows["res"]["valid"] and rows["res"]["out_shape"] == [32]
    assert (
        not rows["res.fc"]["valid"] and "the skip from inp (to res) crosses here" in rows["res.fc"]["why"]
    )  # the skip jumps it
    rc, out, err = cli_call(["cuts", f"{f}:small", "--data", "digits"])  # a factory function
    assert rc == 0 and "res" in out and "yes" in out
    for spec, said in (
        (f"{f}:Nope", "has no 'Nope' (found: Net, Res, small)"),
        (f"{tmp_path / 'x.py'}:Net", "is not a Python file"),
        (str(f), "give FILE.py:Name"),
    ):
        rc, _, err = cli_call(["cuts", spec])
        assert rc == 2 and said in err and "Traceback" not in err, err
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('no GPU here')\n")
    rc, _, err = cli_call(["cuts", f"{broken}:Net"])
    assert rc == 2 and "importing broken.py failed (RuntimeError: no GPU here)" in err
    rc, _, err = cli_call(["train", "--model", f"{f}:Net", "--split", "res.fc", "--epochs", "1", "--quiet"])
    assert rc == 2 and "'res.fc'" in err and "the skip from inp" in err and "Traceback" not in err


def test_a_killed_run_resumes_to_the_uninterrupted_result_and_a_changed_file_is_refused(tmp_path):
    f = write_model(tmp_path, slow=0.05)  # 1–2 forwards of Res per minibatch of 32: epochs of about a second
    common = ["train", "--model", f"{f}:Net", "--split", "inp,res", "--leaf-modules", "res", "--data", "digits"]
    common += ["--method", "block-admm"]
    common += ["--epochs", "3", "--batch-size", "32", "--quiet", "--no-tensorboard", "--train-limit", "512"]
    # the uninterrupted run in this process (the killed run must be a process; its resume is one too,
    # as after a real crash), on one thread as they run (OMP_NUM_THREADS=1): the results agree exactly
    with one_torch_thread():
        rc, _, err = cli_call([*common, "--out", str(tmp_path / "full")])
    assert rc == 0, err[-2000:]
    info = read_json(tmp_path / "full" / "model.json")
    assert info["source"]["name"] == "Net" and info["source"]["file"] == str(f) and len(info["source"]["sha256"]) == 64
    assert info["blocks"] == [["inp"], ["res"], ["out"]]

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    p = subprocess.Popen(
        [sys.executable, "-m", "admm_core", *common, "--out", str(killed)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not (len(read_metrics(killed)) >= 2 and (killed / "checkpoint.pt").exists()):
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait()
    assert 2 <= len(read_metrics(killed)) < 4  # killed after epoch 1, before the end
    resumed = admm("train", "--resume", str(killed), "--quiet", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = read_metrics(tmp_path / "full"), read_metrics(killed)
    assert [m["epoch"] for m in b] == [0, 1, 2, 3]
    assert [(m["test_accuracy"], m["train_loss"], m["residuals"]) for m in a] == [
        (m["test_accuracy"], m["train_loss"], m["residuals"]) for m in b
    ]
    wa, wb = load_file(str(tmp_path / "full" / "weights.safetensors")), load_file(str(killed / "weights.safetensors"))
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)
    assert a[-1]["test_accuracy"] > 0.4  # it learned (digits, 3 epochs; chance 0.1)

    with one_torch_thread():
        rc, out, err = cli_call(["evaluate", "--run", str(killed)])
    assert rc == 0 and json.loads(out)["test_accuracy"] == b[-1]["test_accuracy"], err
    f.write_text(f.read_text() + "\n# edited\n")
    # refused before anything is built: in this process (a fresh interpreter each cost seconds of imports)
    for args in (("train", "--resume", str(killed), "--epochs", "4"), ("evaluate", "--run", str(killed))):
        rc, _, err = cli_call(args)
        assert rc == 2 and "changed since the run started" in err and str(f) in err, err
        assert "Traceback" not in err
    assert [m["epoch"] for m in read_metrics(killed)] == [0, 1, 2, 3]  # nothing touched


def test_the_docs_cut_table_is_what_admm_cuts_prints():
    """docs/your-own-network.md's table for PyTorch's examples' MNIST Net (pytorch/examples,
    mnist/main.py, as written there) is the command's output."""
    import re

    f = ROOT / "experiments" / "zoo_models.py"  # the zoo's copy of the examples' Net, as printed there
    rc, out, err = cli_call(["cuts", f"{f}:Net", "--data", "mnist"])
    assert rc == 0, err
    text = (ROOT / "docs" / "your-own-network.md").read_text()
    shown = re.search(r"```\n(cut point.*?)```", text, re.S).group(1)
    assert out == shown


def test_one_check_of_a_runs_model_file_serves_the_engine_and_the_dashboard(tmp_path):
    """The file gone or its bytes changed: the same words from the engine's check (what ``admm
    train --resume`` and ``admm evaluate`` raise) and from the dashboard before it launches them."""
    from admm_core.spec.archs import file_sha256, model_file_problem
    from app.dashboard.models import resume_problem

    f = tmp_path / "net.py"
    f.write_text(MODEL)
    source = {"file": str(f), "name": "Net", "sha256": file_sha256(f)}
    run = tmp_path / "run-1"
    run.mkdir()
    (run / "model.json").write_text(json.dumps({"source": source}))
    assert model_file_problem(source) is None and resume_problem(run) is None
    f.write_text(MODEL + "\n# edited\n")
    why = model_file_problem(source)
    assert "changed since the run started" in why and str(f) in why
    assert resume_problem(run) == f"run-1: {why}"
    f.unlink()
    assert "is gone" in model_file_problem(source) and resume_problem(run) == f"run-1: {model_file_problem(source)}"


def test_one_reading_of_file_py_name_for_the_command_line_and_the_models_menu(tmp_path):
    """A shape ``admm train --model`` refuses, the dashboard's menu refuses too (and the reverse)."""
    from admm_core import modelfile
    from admm_core.errors import ConfigError
    from admm_core.spec.archs import split_model_spec
    from app.dashboard.models import resolve

    (tmp_path / "net.py").write_text(MODEL)
    assert split_model_spec("net.py:Net") == ("net.py", "Net") and resolve("net.py:Net", tmp_path)[1] == "Net"
    assert modelfile.parse(f"{tmp_path / 'net.py'}:Net") == (tmp_path / "net.py", "Net")
    for bad in ("net.py", "net.py:", ":Net", "net.py:1Net", "net.py:Net.x"):
        assert split_model_spec(bad) is None
        with pytest.raises(ConfigError, match="give FILE.py:Name"):
            modelfile.parse(f"{tmp_path}/{bad}" if bad.startswith("net") else bad)
        with pytest.raises(ConfigError, match="not a FILE.py:Name"):
            resolve(bad, tmp_path)
