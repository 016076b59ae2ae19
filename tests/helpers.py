"""Small pieces several test files share (imported as ``helpers``: pytest puts tests/ on the path).

Configs (``digits_cfg``, ``tiny``), the command line in-process (``cli_call``, ``cli_run``) and as a
fresh interpreter (``cli_proc``), and the dashboard in a real Chromium (``dashboard``, ``CHROMIUM``,
``ARGS``, ``needs_chromium``; the ``browser`` fixture is in conftest.py), and a page under Streamlit's
AppTest (``app_page``; the ``runs`` fixture, an empty runs folder, is in conftest.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from admm_core import cli, status
from admm_core.blocks import BlockNet
from admm_core.models import mlp_layers
from admm_core.spec.config import RunConfig
from admm_core.spec.presets import preset_config

ROOT = Path(__file__).resolve().parent.parent

# --- configs -----------------------------------------------------------------------------------


def digits_cfg(method="block-admm", epochs=3, n=None, hidden=None, test_n=200, **params) -> RunConfig:
    """The digits-mlp preset of ``method`` for ``epochs`` epochs, its settings updated by ``params``;
    ``n`` training (and ``test_n`` test) samples and ``hidden`` widths when given."""
    cfg = preset_config("digits-mlp", method)
    cfg = cfg.replace(train__epochs=epochs, method_params={**cfg.method_params, **params})
    if n is not None:
        cfg = cfg.replace(data__train_limit=n, data__test_limit=test_n)
    if hidden is not None:
        cfg = cfg.replace(model__hidden=hidden)
    return cfg


def tiny(method="block-admm", epochs=2, **kw) -> RunConfig:
    """The default config of ``method`` made small: 200 training and 100 test digits, widths (32, 16)."""
    return RunConfig(method=method).replace(
        data__train_limit=200, data__test_limit=100, model__hidden=(32, 16), train__epochs=epochs, **kw
    )


def tiny_mlp(n: int, d: int = 7, hidden=(6, 5), classes: int = 4, seed: int = 0):
    """A float64 MLP split after every layer (T = 3) and n random samples: (net, x, y)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = BlockNet(mlp_layers(d, hidden, classes), ("fc1", "fc2")).double()
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=g)
    return net, x, y


def mlp_weights(net) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Copies of (W_t, b_t) of tiny_mlp's three Linear layers: fc1 = (Flatten, Linear, ReLU),
    fc2 = (Linear, ReLU), fc3 = (Linear,)."""
    lin = [net.blocks[0][0][1], net.blocks[1][0][0], net.blocks[2][0][0]]
    return [(l.weight.detach().clone(), l.bias.detach().clone()) for l in lin]


# --- the command line ----------------------------------------------------------------------------


def cli_call(argv) -> tuple[int, str, str]:
    """cli.main in-process: (exit code, stdout, stderr); an argparse usage error is its exit code
    (2), not a SystemExit; the process's signal handlers are left as they are."""
    out, err = io.StringIO(), io.StringIO()
    saved = status.install_stop_handlers  # the CLI imports it from admm_core.status when it runs
    status.install_stop_handlers = lambda: lambda: False
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                rc = cli.main(list(argv))
            except SystemExit as e:
                rc = e.code
    finally:
        status.install_stop_handlers = saved
    return rc, out.getvalue(), err.getvalue()


def cli_run(argv) -> tuple[int, str]:
    """cli.main in-process: (exit code, stderr)."""
    rc, _, err = cli_call(argv)
    return rc, err


def cli_proc(*argv, timeout=300, **kw) -> subprocess.CompletedProcess:
    """``python -m admm_core ARGV`` in a fresh interpreter from the checkout (text output captured):
    for what only a real process shows (the module entry point, exit codes, signals)."""
    cmd = [sys.executable, "-m", "admm_core", *map(str, argv)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


# --- waiting -------------------------------------------------------------------------------------


def fresh_python_json(code: str, *args, runs_root=None, timeout=300):
    """Run ``code`` in a fresh interpreter (``python -c``; the repository importable, ``$ADMM_RUNS``
    = ``runs_root`` when given) and return the JSON its last stdout line prints. A fresh process
    is how a test sees what a page imports (this one has torch already)."""
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT)} | ({"ADMM_RUNS": str(runs_root)} if runs_root else {})
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def wait(pred, timeout=60.0, every=0.1):
    """pred()'s first true value within ``timeout`` seconds (looked at every ``every`` s, and once
    more at the end), else None."""
    end = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.time() >= end:
            return None
        time.sleep(every)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the dashboard in a real Chromium ------------------------------------------------------------

from app.chromium import ARGS, CHROMIUM  # noqa: E402, F401 - re-exported for the browser tests

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"system Chromium not found at {CHROMIUM} (apt-get install -y chromium)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVERS: dict[int, Path] = {}  # pid -> log of the running dashboards of this checkout (helpers.dashboard)


def server_stacks() -> str:
    """Every running dashboard's threads, as its SIGUSR1 handler writes them into its log (app/ui.py's
    stacks_on_usr1): what a failed browser test adds to its report (tests/conftest.py)."""
    out = []
    for pid, log in list(SERVERS.items()):
        try:
            start = log.stat().st_size
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            continue
        wait(lambda log=log, start=start: log.stat().st_size > start, 3.0, 0.1)
        time.sleep(0.3)  # the rest of the dump
        with open(log, "rb") as f:
            f.seek(start)
            out.append(f"server {pid} ({log}):\n" + f.read()[-20000:].decode(errors="replace"))
    return "\n".join(out)


@contextlib.contextmanager
def dashboard(env: dict, log_path: Path, checkout: Path = ROOT, health_timeout: float = 60, entry: str = "serve.py"):
    """The dashboard of ``checkout`` on 127.0.0.1:<free port> (headless, no file watcher, its own
    process group, output to ``log_path``): yields (url, process) once it answers its health check
    (fails the test with the log if it exits first); on exit stops the whole process group.
    ``entry``: app/serve.py as scripts/run.sh starts it (with the live charts' route), or main.py."""
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(checkout / "app" / entry), "--server.address", "127.0.0.1"]
    cmd += ["--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    cmd += ["--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

        def healthy():
            try:
                return urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok"
            except OSError:
                return proc.poll() is not None  # ended: stop waiting

        try:
            wait(healthy, health_timeout, 0.2)
            if proc.poll() is not None:
                pytest.fail("streamlit did not start:\n" + Path(log_path).read_text())
            if checkout == ROOT:  # this code's servers dump their threads on SIGUSR1
                SERVERS[proc.pid] = Path(log_path)
            yield url, proc
        finally:
            SERVERS.pop(proc.pid, None)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def app_page(query: dict | None = None):
    """The dashboard drawn once by Streamlit's AppTest with ``query`` as its link; no exception raised."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app" / "main.py"), default_timeout=60)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


# --- the live charts' rules, run in node ---------------------------------------------------------

NODE = shutil.which("node") or shutil.which("nodejs")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (scripts/test.sh installs it with apt)")
LIVE_JS = ROOT / "app" / "dashboard" / "live_series.js"
_LIVE_RUNNER = """
const L = require(process.argv[1]);
const calls = JSON.parse(require('fs').readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(calls.map(([name, ...args]) => L[name](...args))));
"""


def live_js(*calls: list) -> list:
    """Each call ``[name, *args]`` of app/dashboard/live_series.js's functions, run in node: their results."""
    proc = subprocess.run(
        [NODE, "-e", _LIVE_RUNNER, str(LIVE_JS)], input=json.dumps(calls), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def live_traces(chart: dict, lines: list[dict], log: bool | None = None) -> list[dict]:
    """The traces the live page draws for a declared chart (``charts.live_spec``) over ``lines``."""
    from app.dashboard.charts import STYLE

    return live_js(["traces", chart, lines, chart["log"] if log is None else log, STYLE])[0]
