"""The zoo benchmark: what Block-ADMM does to networks written by others.

    python experiments/zoo.py                                  # every row that is not optional
    python experiments/zoo.py --rows lenet5-bn vgg11_bn --seeds 0 1 --markdown docs/results/zoo.md
    python experiments/zoo.py --table-only --markdown docs/results/zoo.md   # the table, no training

Each model of experiments/zoo_models.py is trained through the project's Python API
(``admm_core.own.train``, split at the row's ``cuts``) by adam, sgd, block-admm, online-admm and
gotmare with their default settings, and by ``adam-ckpt``: Adam backprop with activation
checkpointing over the same blocks (torch.utils.checkpoint, a plain loop here: same data,
epochs, batch size, minibatch order and evaluation lines), the memory anchor.

Every (model, method, seed) runs in its own subprocess, so its peak memory is that run's: the
child loads its data, resets its peak RSS (``5`` into /proc/self/clear_refs), reads its RSS
(VmRSS) just before training, and its peak RSS (VmHWM) when training ends; the table's peak
memory is the difference (both are in the result file): "peak training memory" with the
evaluations fenced off (VmHWM read before each evaluation and reset after it, :class:`Peaks`),
"peak with evaluation" without. One result file per row,
``<out>/<model>-<method>-s<seed>.json``: a row with a result is never run again (resume across
sittings); a blocked or failed row is tried again at the next sitting. A row whose network the
API refuses (its ConfigError) is recorded as ``blocked`` with that message, and the harness
moves on; once one method of a model is blocked, its other methods in the same sitting are
recorded blocked by the same check without a subprocess (the check is the model's and cuts',
not the method's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from zoo_models import BY_NAME, ROWS, ZooRow, train_own  # beside this script (its folder is on the path)

ROOT = Path(__file__).resolve().parent.parent

API_METHODS = ("adam", "sgd", "block-admm", "online-admm", "gotmare")
CKPT = "adam-ckpt"
METHODS = (*API_METHODS, CKPT)
SEEDS = (0, 1)
OUT = ROOT / "bench_out" / "zoo"
SECTION = "zoo"  # docs/results/zoo.md's generated section: <!-- generated:zoo --> … <!-- /generated:zoo -->
# the per-block figures of a metrics line that say where a split run breaks (read by `diagnostics`)
DIAGNOSTICS = ("residuals", "dual_norms", "betas", "z_step_rel", "theta_step_rel", "backprop_cosine")
SPLIT = ("block-admm", "online-admm", "gotmare")  # the methods the goal is about (gotmare: no duals)
GOAL_POINTS, GOAL_TIMES = 1.0, 1.5  # within 1 point of Adam's final accuracy at ≤ 1.5× its s/epoch
DONE = {"finished", "diverged"}  # a result file with one of these is a measured row: never run again


def result_path(out: Path, model: str, method: str, seed: int) -> Path:
    return Path(out) / f"{model}-{method}-s{seed}.json"


def read_result(path: Path) -> dict | None:
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def measured(path: Path) -> dict | None:
    """The result at ``path`` if it is a measurement (status finished or diverged), else None."""
    r = read_result(path)
    return r if r and r.get("status") in DONE else None


def finished(out: Path, model: str, method: str, seeds) -> dict[int, dict]:
    """The measured results of ``model`` × ``method`` in ``out``, by seed."""
    return {s: r for s in seeds if (r := measured(result_path(out, model, method, s)))}


def write_result(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, path)


# --- the child: one (model, method, seed) --------------------------------------------------------


def _proc_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux ≥ 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Peaks:
    """This process's peak RSS, split into training and evaluation: the evaluations (the
    project's evaluate forwards the first 10,000 training samples and the test set in chunks of
    8,192, which can outweigh a minibatch step many times) are fenced: VmHWM is read before each
    (the training peak so far), read after it (the run's peak) and reset to the current RSS."""

    def __init__(self):
        self.reset_ok = _reset_peak()
        self.before = _proc_kib("VmRSS")  # the baseline: model built, data loaded
        self.train = self.run = self.before
        # CPU seconds of this process (one torch thread) outside training: evaluations, checkpoints
        self.cpu0, self.cpu_off, self._cpu_at = time.process_time(), 0.0, None
        self.cpu_epochs: list[float] = []  # CPU seconds of each epoch alone (:meth:`epoch_clock`)

    def _max(self, a, b):
        return b if a is None else a if b is None else max(a, b)

    def before_eval(self):
        self.train = self._max(self.train, _proc_kib("VmHWM"))
        self._cpu_at = time.process_time()

    def after_eval(self):
        self.run = self._max(self.run, _proc_kib("VmHWM"))
        if self.reset_ok:
            _reset_peak()
        self.cpu_off += time.process_time() - self._cpu_at

    def off_clock(self, fn):
        """``fn`` with its CPU time left out of training's (a checkpoint write)."""

        def timed(*args, **kwargs):
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cpu_off += time.process_time() - t

        return timed

    def epoch_clock(self, run_epoch):
        """``run_epoch`` with its CPU seconds recorded: the epochs alone, so a run's set-up (tracing,
        cutting, the forward pass that gives every sample its Z) and its evaluations are off this clock."""

        def timed(*args, **kwargs):
            t = time.process_time()
            try:
                return run_epoch(*args, **kwargs)
            finally:
                self.cpu_epochs.append(time.process_time() - t)

        return timed

    def end(self) -> dict:
        self.run = self._max(self.run, _proc_kib("VmHWM"))
        if not self.reset_ok:  # no fence: the training peak is the run's
            self.train = self.run
        kib = {"rss_before_bytes": self.before, "peak_train_rss_bytes": self.train, "peak_run_rss_bytes": self.run}
        out = {k: (v * 1024 if v is not None else None) for k, v in kib.items()}
        if self.before is not None:
            out["peak_train_bytes"] = (self.train - self.before) * 1024
            out["peak_run_bytes"] = (self.run - self.before) * 1024
        out["peak_reset"] = self.reset_ok
        out["cpu_train_s"] = time.process_time() - self.cpu0 - self.cpu_off  # set-up and epochs
        out["cpu_epoch_s"] = list(self.cpu_epochs)
        return out

    def fence(self, evaluate):
        def fenced(*args, **kwargs):
            self.before_eval()
            try:
                return evaluate(*args, **kwargs)
            finally:
                self.after_eval()

        return fenced


def blocks_of(model, probe, cuts):
    """``model`` cut at ``cuts`` as own.train cuts it (its traced graph, :mod:`admm_core.cuts`): a
    BlockNet of its own modules (blocks: ``.blocks``), or the API's ConfigError."""
    from admm_core import own

    blocks, _ = own.split_model(model, probe, cuts)
    return own.blocknet(blocks)


def train_checkpointed(model, row: ZooRow, seed: int, dataset, run_dir: Path, device, peaks: Peaks) -> list[dict]:
    """Adam backprop with activation checkpointing over the row's blocks: each block's
    activations are recomputed in the backward pass instead of kept (only the blocks' inputs
    stay). The blocks are the ones own.train makes of the same cuts (own.split_model: the same
    ConfigError where the API refuses them). Adam's default settings and the same
    minibatch order, loss and evaluation lines as the ``adam`` method; returns the lines."""
    import torch
    from torch.utils.checkpoint import checkpoint

    from admm_core.losses import get_loss
    from admm_core.methods.base import evaluate
    from admm_core.methods.zsweep import minibatches
    from admm_core.network import TRAIN_EVAL_LIMIT
    from admm_core.rundir import append_metrics
    from admm_core.spec.methods.backprop import AdamSettings

    net = blocks_of(model, dataset.x_train[:2], row.cuts).to(device)
    s = AdamSettings()
    opt = torch.optim.Adam(net.parameters(), lr=s.lr, eps=s.eps)
    loss = get_loss("ce")
    gen = torch.Generator().manual_seed(seed)
    x, y = dataset.x_train.to(device), dataset.y_train.to(device)
    xt, yt = dataset.x_test.to(device), dataset.y_test.to(device)

    def forward(inp):
        for block in net.blocks:
            inp = checkpoint(block, inp, use_reentrant=False)
        return inp

    @peaks.fence
    def measure() -> dict:  # what the project's evaluate measures, the same way (its chunks)
        with torch.no_grad():
            tr_loss, tr_acc = evaluate(net, x[:TRAIN_EVAL_LIMIT], y[:TRAIN_EVAL_LIMIT], loss)
            te_loss, te_acc = evaluate(net, xt, yt, loss)
        return {"train_loss": tr_loss, "train_accuracy": tr_acc, "test_loss": te_loss, "test_accuracy": te_acc}

    run_dir.mkdir(parents=True, exist_ok=True)
    lines, wall = [], 0.0
    # The engine seeds the global generator again just before training (network.build), after the model
    # was built: the dropout masks of `adam` start there. Without this the masks here would start where
    # the model's initialisation left the generator, and the two runs would draw different masks.
    torch.manual_seed(seed)

    @peaks.epoch_clock
    def run_epoch():
        net.train()
        for idx in minibatches(len(x), row.batch_size, gen):
            idx = idx.to(device)
            opt.zero_grad(set_to_none=True)
            (loss(forward(x[idx]), y[idx]) / len(idx)).backward()
            opt.step()

    for epoch in range(row.epochs + 1):
        if epoch:
            t0 = time.perf_counter()
            run_epoch()
            wall += time.perf_counter() - t0
        m = {"epoch": epoch, "wall_time_s": wall, **measure(), "state_bytes": 0}
        append_metrics(run_dir, m)
        lines.append(m)
    return lines


def child(model_name: str, method: str, seed: int, out: Path, threads: int = 1, overrides=None) -> dict:
    """Train one row in this process and write its result file; returns the result. ``overrides``:
    settings of this row's method given on top of its defaults (an ablation's one change, ``--set``)."""
    import gc

    import torch

    if threads:  # one thread: on a shared 2-core machine, two threads' OpenMP waits made epochs 20× slower
        torch.set_num_threads(threads)

    from admm_core import data as data_mod
    from admm_core.docs import code_version
    from admm_core.errors import ConfigError
    from admm_core.rundir import read_metrics

    row = BY_NAME[model_name]
    run_dir = Path(out) / "runs" / f"{model_name}-{method}-s{seed}"
    if run_dir.exists():  # an interrupted try: start again
        import shutil

        shutil.rmtree(run_dir)
    result = {
        "model": model_name,
        "method": method,
        "seed": seed,
        "cuts": list(row.cuts),
        "data": row.data,
        "train_limit": row.train_limit,
        "test_limit": row.test_limit,
        "batch_size": row.batch_size,
        "epochs": row.epochs,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "code": code_version(),  # rows of one table can come from several sittings (and commits)
        "threads": torch.get_num_threads(),
        "run_dir": str(run_dir),
        "settings": dict(overrides or {}),
    }
    torch.manual_seed(seed)
    model = row.factory()
    result["params"] = sum(p.numel() for p in model.parameters())
    dataset = data_mod.load(
        row.data, None, train_limit=row.train_limit, test_limit=row.test_limit
    )  # own.train reuses it
    gc.collect()
    peaks = Peaks()
    result["load_start"] = os.getloadavg()[0]  # the machine's 1-minute load (this run adds about 1)
    if method != CKPT:  # the run loop's evaluations, fenced off the training peak (Peaks)
        from admm_core import network

        network.Session.evaluate = peaks.fence(network.Session.evaluate)
        network.NetworkTask.run_epoch = peaks.epoch_clock(network.NetworkTask.run_epoch)
        from admm_core import checkpoint

        checkpoint.atomic_torch_save = peaks.off_clock(checkpoint.atomic_torch_save)
    t0 = time.perf_counter()
    try:
        if method == CKPT:
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            evals = train_checkpointed(model, row, seed, dataset, run_dir, device, peaks)
            result["status"] = "finished"
        else:
            run = train_own(row, model, method, seed, overrides, run_dir)
            evals = read_metrics(run.dir)
            result["status"] = run.summary.get("status", "finished")
    except ConfigError as e:
        result.update(status="blocked", error=str(e))
        evals = []
    except Exception as e:  # noqa: BLE001 - a failed row is recorded and tried again next sitting
        result.update(status="failed", error=f"{type(e).__name__}: {e}")
        evals = []
    result["wall_s"] = time.perf_counter() - t0
    result.update(peaks.end())
    result["load_end"] = os.getloadavg()[0]
    keep = ("epoch", "wall_time_s", "test_accuracy", "train_loss", "state_bytes", *DIAGNOSTICS)
    result["evals"] = [{k: m.get(k) for k in keep if k in m} for m in evals]
    if evals:
        accs = [m["test_accuracy"] for m in evals if m.get("test_accuracy") is not None]
        last = evals[-1]
        result["final_test_accuracy"] = last.get("test_accuracy")
        result["best_test_accuracy"] = max(accs) if accs else None
        ep = last.get("epoch") or 0
        result["seconds_per_epoch"] = last.get("wall_time_s", 0.0) / ep if ep else None
        # the epochs' own CPU seconds (set-up off the clock, as in experiments/epoch_cpu.py)
        cpu = result["cpu_epoch_s"]
        result["cpu_seconds_per_epoch"] = sum(cpu) / len(cpu) if cpu else None
        result["cpu_setup_s"] = result["cpu_train_s"] - sum(cpu)
        result["state_bytes"] = max((m.get("state_bytes") or 0) for m in evals)
    for big in ("checkpoint.pt", "weights.safetensors"):  # the metrics are the result; VGG's are GiBs
        (run_dir / big).unlink(missing_ok=True)
    write_result(result_path(out, model_name, method, seed), result)
    return result


# --- the parent: rows in subprocesses ------------------------------------------------------------


THREADS = [1]  # torch threads per child (--threads)
EPOCHS = [None]  # every row's epochs, when an ablation sets them (--epochs)


def set_epochs(n: int | None) -> None:
    """Give every row ``n`` epochs (``None``: each row's own) in this process's ``BY_NAME``."""
    import dataclasses

    EPOCHS[0] = n
    if n is not None:
        for name, r in BY_NAME.items():
            BY_NAME[name] = dataclasses.replace(r, epochs=n)


OVERRIDES: dict[str, dict] = {}  # method -> settings given on top of its defaults (--set)


def parse_overrides(items) -> dict[str, dict]:
    """``["block-admm.lr=1e-3", "adam.lr=2e-3"]`` -> ``{"block-admm": {"lr": 0.001}, "adam": {"lr": 0.002}}``
    (values read as JSON where they parse, else kept as text); every malformed item named at once."""
    out: dict[str, dict] = {}
    bad = []
    for item in items or ():
        head, eq, value = item.partition("=")
        method, dot, key = head.partition(".")
        if not (eq and dot and method in METHODS and key):
            bad.append(item)
            continue
        try:
            value = json.loads(value)
        except ValueError:
            pass
        out.setdefault(method, {})[key] = value
    if bad:
        raise SystemExit(
            f"--set: {', '.join(map(repr, bad))}: expected METHOD.SETTING=VALUE, METHOD one of {', '.join(METHODS)}"
        )
    return out


def _launch(model: str, method: str, seed: int, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", model, method, str(seed), "--out", str(out)]
    cmd += ["--threads", str(THREADS[0])] + (["--epochs", str(EPOCHS[0])] if EPOCHS[0] else [])
    cmd += [f"--set={method}.{k}={json.dumps(v)}" for k, v in OVERRIDES.get(method, {}).items()]
    return subprocess.run(cmd, capture_output=True, text=True)


def _line(r: dict) -> str:
    if r.get("status") in DONE:
        mem = r.get("peak_train_bytes")
        return (
            f"{r['status']}: final {100 * (r.get('final_test_accuracy') or 0):.2f}%, "
            f"{r.get('seconds_per_epoch') or 0:.1f} s/epoch, peak +{(mem or 0) / 2**20:.0f} MiB, {r.get('wall_s', 0):.0f} s"
        )
    return f"{r.get('status')}: {r.get('error', '')}"[:300]


def run_rows(out: Path, rows, methods=METHODS, seeds=SEEDS, launch=_launch, log=print) -> list[Path]:
    """Run every (row, method, seed) without a finished result file, one subprocess at a time;
    returns the result files written (or found)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [(r, m, s) for r in rows for m in methods for s in seeds]
    blocked: dict[str, tuple[str, str]] = {}  # model -> (the first blocked row's file, its message)
    paths = []
    for i, (row, method, seed) in enumerate(todo, 1):
        path = result_path(out, row.name, method, seed)
        paths.append(path)
        tag = f"[{i}/{len(todo)}] {row.name} {method} s{seed}"
        if done := measured(path):  # a measured row: never run again
            had = done.get("settings", {})
            if had != OVERRIDES.get(method, {}):  # one folder, one reading of the settings
                raise SystemExit(
                    f"{path}: measured with settings {had}, asked for {OVERRIDES.get(method, {})}; use another --out"
                )
            epochs = done.get("epochs")
            if epochs != row.epochs:
                raise SystemExit(f"{path}: measured over {epochs} epochs, asked for {row.epochs}; use another --out")
            log(f"{tag}: done already ({path.name})")
            continue
        if row.name in blocked:
            first, msg = blocked[row.name]
            write_result(
                path,
                {
                    "model": row.name,
                    "method": method,
                    "seed": seed,
                    "status": "blocked",
                    "error": msg,
                    "same_as": first,
                },
            )
            log(f"{tag}: blocked (the same check as {first})")
            continue
        t0 = time.time()
        proc = launch(row.name, method, seed, out)
        r = read_result(path)
        if r is None or r.get("model") != row.name:  # the child died before writing (killed, out of memory …)
            err = (proc.stderr or "").strip().splitlines()[-5:] if proc is not None else []
            r = {
                "model": row.name,
                "method": method,
                "seed": seed,
                "status": "failed",
                "error": f"exit {getattr(proc, 'returncode', '?')}: " + " | ".join(err),
            }
            write_result(path, r)
        if r.get("status") == "blocked":
            blocked[row.name] = (path.name, r.get("error", ""))
        log(f"{tag}: {_line(r)} ({time.time() - t0:.0f} s in all)")
    return paths


# --- the table -----------------------------------------------------------------------------------


def _mean_spread(xs: list[float]) -> tuple[float, float]:
    """Mean and spread (half the range: for two seeds, also their standard deviation)."""
    return statistics.fmean(xs), (max(xs) - min(xs)) / 2


def _pct(xs: list[float]) -> str:
    if not xs:
        return "—"
    m, s = _mean_spread([100 * x for x in xs])
    return f"{m:.2f} ± {s:.2f}"


def _time_to(evals: list[dict], target: float) -> float | None:
    hit = next((m for m in evals if (m.get("test_accuracy") or 0) >= target), None)
    return None if hit is None else hit.get("wall_time_s")


def table(out: Path, rows, methods=METHODS, seeds=SEEDS) -> str:
    """The markdown block from the result files in ``out``: one line per (model, method) with
    results, then the machine, and the rows that are missing or blocked."""
    from admm_core.spec.resources import human

    out = Path(out)
    lines = [
        "| model | method | final test acc. % | best test acc. % | s/epoch | × Adam | CPU s/epoch | × Adam (CPU)"
        " | s to Adam's final acc. | peak training memory | peak with evaluation | state (Z/U) | seeds | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    missing, blocked, failed, machines = [], {}, [], set()
    for row in rows:
        got = {m: [r for s in seeds if (r := read_result(result_path(out, row.name, m, s)))] for m in methods}
        for m in methods:
            for s in seeds:
                r = read_result(result_path(out, row.name, m, s))
                if r is None:
                    missing.append(f"{row.name} {m} s{s}")
                elif r.get("status") == "blocked":
                    blocked.setdefault(row.name, {}).setdefault(r.get("error", ""), []).append(f"{m} s{s}")
                elif r.get("status") not in DONE:
                    failed.append(f"{row.name} {m} s{s} ({r.get('error', r.get('status'))})"[:200])
        done = {m: [r for r in got[m] if r.get("status") in DONE] for m in methods}
        for rs in done.values():
            machines.update((r.get("cpu_count"), r.get("torch")) for r in rs)
        adam = done.get("adam") or []
        adam_spe = [r["seconds_per_epoch"] for r in adam if r.get("seconds_per_epoch")]
        adam_cpu = [r["cpu_seconds_per_epoch"] for r in adam if r.get("cpu_seconds_per_epoch")]
        adam_final = [r["final_test_accuracy"] for r in adam if r.get("final_test_accuracy") is not None]
        target = statistics.fmean(adam_final) if adam_final else None
        for m in methods:
            rs = done[m]
            if not rs:
                continue
            spe = [r["seconds_per_epoch"] for r in rs if r.get("seconds_per_epoch")]
            spe_s = f"{statistics.fmean(spe):.1f}" if spe else "—"
            x_adam = f"{statistics.fmean(spe) / statistics.fmean(adam_spe):.2f}×" if spe and adam_spe else "—"
            cpu = [r["cpu_seconds_per_epoch"] for r in rs if r.get("cpu_seconds_per_epoch")]
            cpu_s = f"{statistics.fmean(cpu):.1f}" if cpu else "—"
            x_cpu = f"{statistics.fmean(cpu) / statistics.fmean(adam_cpu):.2f}×" if cpu and adam_cpu else "—"
            if target is None:
                tt = "—"
            else:
                hits = [t for r in rs if (t := _time_to(r.get("evals", []), target)) is not None]
                tt = "—" if not hits else f"{statistics.fmean(hits):.1f}"
                if hits and len(hits) < len(rs):
                    tt += f" ({len(hits)}/{len(rs)} seeds)"
            mem = [r["peak_train_bytes"] for r in rs if r.get("peak_train_bytes") is not None]
            run_mem = [r["peak_run_bytes"] for r in rs if r.get("peak_run_bytes") is not None]
            state = [r["state_bytes"] for r in rs if r.get("state_bytes") is not None]
            load = [r[k] for r in rs for k in ("load_start", "load_end") if r.get(k) is not None]
            lines.append(
                f"| {row.name} | {m} | {_pct([r['final_test_accuracy'] for r in rs])} "
                f"| {_pct([r['best_test_accuracy'] for r in rs])} | {spe_s} | {x_adam} | {cpu_s} | {x_cpu} | {tt} "
                f"| {human(statistics.fmean(mem)) if mem else '—'} | {human(statistics.fmean(run_mem)) if run_mem else '—'} "
                f"| {human(statistics.fmean(state)) if state else '—'} "
                f"| {len(rs)} | {f'{statistics.fmean(load):.1f}' if load else '—'} |"
            )
    import torch

    where = sorted(machines, key=str) or [(os.cpu_count(), torch.__version__)]
    text = "\n".join(lines) + "\n\n"
    text += "Machine: " + "; ".join(f"{c} CPU cores (os.cpu_count()), torch {t}" for c, t in where) + ".\n"
    if blocked:
        text += "\nBlocked (the API refuses the network at these cuts):\n\n"
        for model, by_msg in blocked.items():
            for msg, which in by_msg.items():
                if len(which) == len(methods) * len(seeds):
                    text += f"- {model} (every method and seed): {msg}\n"
                    continue
                text += f"- {model} ({len(which)} row{'s' * (len(which) != 1)}: {', '.join(which)}): {msg}\n"
    if failed:
        text += "\nFailed (tried again at the next sitting):\n\n" + "".join(f"- {f}\n" for f in failed)
    text += "\nMissing (not run yet): " + (", ".join(missing) if missing else "none") + ".\n"
    return text + diagnostics(out, rows, methods, seeds)


def _last_metrics(r: dict) -> dict:
    """The last metrics line of a result: its kept evaluations, or (older result files, which kept
    fewer keys) the run directory's metrics.jsonl beside it."""
    last = (r.get("evals") or [{}])[-1]
    if any(k in last for k in DIAGNOSTICS) or not r.get("run_dir"):
        return last
    path = Path(r["run_dir"]) / "metrics.jsonl"
    if not path.is_file():
        return last
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    try:
        return json.loads(lines[-1]) if lines else last
    except json.JSONDecodeError:  # a half-written last line: the one before it
        return json.loads(lines[-2]) if len(lines) > 1 else last


def time_ratio(rs: list[dict], adam: list[dict]) -> tuple[float | None, str]:
    """The rows' time per epoch over Adam's, and which time: CPU seconds where every row has them
    (one torch thread: the work done, whatever else the shared machine ran), else wall seconds."""
    for key, what in (("cpu_seconds_per_epoch", "CPU s/epoch"), ("seconds_per_epoch", "s/epoch")):
        mine, theirs = [r.get(key) for r in rs], [r.get(key) for r in adam]
        if all(mine) and all(theirs):
            return statistics.fmean(mine) / statistics.fmean(theirs), what
    return None, ""


def diagnostics(out: Path, rows, methods=METHODS, seeds=SEEDS) -> str:
    """Where each split-method row that misses the goal breaks: per block, at the last epoch of its
    first seed, the residual ‖z_t − f_t(z_{t-1})‖ (RMS), the dual's norm, β, the relative size of the
    last Z- and Θ-steps, and the cosine of the Θ-step's gradient with backprop's."""
    out = Path(out)
    lines = []
    for row in rows:
        adam = list(finished(out, row.name, "adam", seeds).values())
        if not adam:
            continue
        a_acc = statistics.fmean(r["final_test_accuracy"] for r in adam)
        for m in (x for x in methods if x in SPLIT):
            rs = list(finished(out, row.name, m, seeds).values())
            if not rs:
                continue
            gap = 100 * (a_acc - statistics.fmean(r["final_test_accuracy"] for r in rs))
            times, what = time_ratio(rs, adam)
            why = []
            if gap > GOAL_POINTS:
                why.append(f"{gap:.1f} pt below Adam")
            if times is not None and times > GOAL_TIMES:
                why.append(f"{times:.2f}× Adam's {what}")
            if not why:
                continue
            last = _last_metrics(rs[0])
            res = last.get("residuals") or []
            for t in range(len(res)):

                def cell(key, fmt="{:.2e}", t=t, last=last):
                    v = last.get(key) or []
                    return fmt.format(v[t]) if t < len(v) and v[t] is not None else "—"

                lines.append(
                    f"| {row.name} | {m} | {'; '.join(why) if t == 0 else ''} | {t + 1} | {cell('residuals')} "
                    f"| {cell('dual_norms')} | {cell('betas', '{:g}')} | {cell('z_step_rel')} "
                    f"| {cell('theta_step_rel')} | {cell('backprop_cosine', '{:.4f}')} |"
                )
    if not lines:
        return ""
    head = (
        "\n### Where the rows that miss the goal break\n\n"
        f"Split-method rows more than {GOAL_POINTS:g} point below Adam's final accuracy or above "
        f"{GOAL_TIMES:g}× its seconds per epoch; per block t, the last epoch's metrics line of the first "
        "seed: the residual ‖z_t − f_t(z_{t−1})‖ (RMS), ‖U_t‖, β_t, the last Z-step and Θ-step over "
        "the size of what they moved, and the cosine between the gradient block t's Θ-step follows "
        "(of its augmented Lagrangian term) and backprop's gradient on the same minibatch (1: backprop's "
        "direction). Online-admm records no Z- or Θ-step sizes (—).\n\n"
        "| model | method | misses by | block | residual | ‖U‖ | β | Z step (rel.) | Θ step (rel.) | cos(Θ gradient, backprop's) |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(lines) + "\n"


def per_seed(out: Path, rows, methods=METHODS, seeds=SEEDS) -> str:
    """Markdown: every finished row's final test accuracy seed by seed, and each method minus Adam on
    the same seed with the mean ± standard error (sd/√n) of those paired differences: whether a gap
    between two means stands out of the seeds' own spread."""
    lines = [
        "| model | method | seeds " + ", ".join(map(str, seeds)) + " | minus Adam, same seed | mean ± standard error |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        acc = {
            m: {
                s: 100 * r["final_test_accuracy"]
                for s, r in finished(out, row.name, m, seeds).items()
                if r.get("final_test_accuracy") is not None
            }
            for m in methods
        }
        base = acc.get("adam", {})
        for m in methods:
            if not acc[m]:
                continue
            each = ", ".join(f"{acc[m][s]:.1f}" if s in acc[m] else "—" for s in seeds)
            diffs = [acc[m][s] - base[s] for s in seeds if s in acc[m] and s in base]
            shown = ", ".join(f"{d:+.1f}" for d in diffs) if m != "adam" and diffs else ""
            stat = ""
            if m != "adam" and len(diffs) > 1:
                stat = f"{statistics.fmean(diffs):+.2f} ± {statistics.stdev(diffs) / len(diffs) ** 0.5:.2f}"
            lines.append(f"| {row.name} | {m} | {each} | {shown} | {stat} |")
    return "\n".join(lines) + "\n"


def write_table(
    out: Path,
    markdown: Path,
    rows,
    methods=METHODS,
    seeds=SEEDS,
    command=None,
    version=None,
    section=SECTION,
    seed_by_seed: bool = False,
) -> Path:
    from admm_core.docs import write_section

    text = table(out, rows, methods, seeds)
    if seed_by_seed:
        text += "\nSeed by seed (final test accuracy, %):\n\n" + per_seed(out, rows, methods, seeds)
    return write_section(markdown, section, text, command=command, version=version)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", nargs="+", choices=list(BY_NAME), help="models (default: all but the optional)")
    p.add_argument("--all", action="store_true", help="every row, the optional (heavy) ones last")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    p.add_argument("--out", type=Path, default=OUT, help="result files (default bench_out/zoo)")
    p.add_argument("--markdown", type=Path, help="write the table into this page's section 'zoo'")
    p.add_argument(
        "--section",
        default=SECTION,
        help=f"the page's generated section to write (default {SECTION!r}, every model; another name: an "
        "ablation's table of the rows and methods asked for)",
    )
    p.add_argument("--table-only", action="store_true", help="no training: the table from the result files")
    p.add_argument(
        "--per-seed", action="store_true", help="also each row seed by seed, and each method minus Adam per seed"
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1; 0: torch's default)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="METHOD.SETTING=VALUE",
        help="an ablation: a method's setting over its defaults (repeatable; give it its own --out)",
    )
    p.add_argument("--epochs", type=int, help="an ablation: every row trains this many epochs (give it its own --out)")
    p.add_argument("--child", nargs=3, metavar=("MODEL", "METHOD", "SEED"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    OVERRIDES.clear()
    OVERRIDES.update(parse_overrides(a.set))
    if a.epochs is not None and (a.epochs < 1 or a.out.resolve() == OUT.resolve()):
        raise SystemExit(f"--epochs = {a.epochs}: a positive count, with its own --out (not the main table's {OUT})")
    set_epochs(a.epochs)
    if a.child:
        model, method, seed = a.child
        child(model, method, int(seed), a.out, a.threads, OVERRIDES.get(method))
        return 0
    THREADS[0] = a.threads
    from admm_core.docs import code_version, command_line

    cmd, version = command_line(argv, prog="python experiments/zoo.py"), code_version()
    every = [BY_NAME[r.name] for r in ROWS]  # with --epochs applied
    if a.rows:
        rows = [BY_NAME[n] for n in a.rows]
    else:
        rows = [r for r in every if not r.optional] + ([r for r in every if r.optional] if a.all else [])
    if not a.table_only:
        print(f"zoo: {len(rows)} models × {len(a.methods)} methods × {len(a.seeds)} seeds into {a.out}", flush=True)
        run_rows(a.out, rows, a.methods, a.seeds, log=lambda s: print(s, flush=True))
    shown = every if a.section == SECTION else rows  # the main table has every model: the ones not run are listed
    print(table(a.out, shown, a.methods, a.seeds))
    if a.per_seed:
        print(per_seed(a.out, shown, a.methods, a.seeds))
    if a.markdown:
        write_table(
            a.out, a.markdown, shown, a.methods, a.seeds, cmd, version, section=a.section, seed_by_seed=a.per_seed
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
