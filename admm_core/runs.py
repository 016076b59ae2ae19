"""Run directories and the training loop every face (CLI, dashboard, notebooks) uses.

A run directory holds:

- ``config.json``   the :class:`RunConfig` (enough to re-run it)
- ``metrics.jsonl`` one JSON object per evaluation, appended and flushed as it goes
- ``status.json``   state (running / finished / stopped / crashed / diverged), progress, pid, error
- ``summary.json``  final and best accuracy, wall time, state memory
- ``checkpoint.pt`` network + method state + epoch, written atomically; ``resume`` continues it
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from . import data as data_mod
from .blocks import build_blocknet
from .config import RunConfig
from .losses import get_loss
from .methods.base import TrainBatch, evaluate

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TRAIN_EVAL_LIMIT = 10_000  # train loss/accuracy are measured on the first 10k training samples


def default_runs_dir() -> Path:
    return Path(os.environ.get("ADMM_RUNS", PROJECT_ROOT / "runs"))


def unique_run_dir(name: str, root: Path | None = None) -> Path:
    """``<root>/<time>-<name>``, with -2, -3 … appended if that exists already."""
    root = Path(root or default_runs_dir())
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"
    path, i = root / stem, 1
    while path.exists():
        i += 1
        path = root / f"{stem}-{i}"
    return path


def new_run_dir(cfg: RunConfig, root: Path | None = None) -> Path:
    return unique_run_dir(f"{cfg.preset or cfg.data.name}-{cfg.method}-s{cfg.train.seed}", root)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device = 'cuda': no CUDA device is available here (use auto or cpu)")
    return torch.device(name)


def write_json(path: Path, obj) -> None:
    """Atomic JSON write (readers never see half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def read_json(path: Path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return default


def read_metrics(run_dir: Path) -> list[dict]:
    """All complete lines of metrics.jsonl (a line being written is skipped)."""
    out = []
    try:
        with open(Path(run_dir) / "metrics.jsonl") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    except OSError:
        pass
    return out


class StopRun(Exception):
    """Raised inside the loop when a stop was requested (SIGTERM / SIGINT / should_stop)."""


class Diverged(Exception):
    """Raised inside the loop when the run diverged; the message names the epoch and quantity."""


def _all_finite(obj) -> bool:
    """True when every tensor / number in obj (nested lists, tuples, dicts) is finite."""
    if torch.is_tensor(obj):
        return not obj.is_floating_point() or bool(torch.isfinite(obj).all())
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, (list, tuple)):
        return all(_all_finite(v) for v in obj)
    if isinstance(obj, dict):
        return all(_all_finite(v) for v in obj.values())
    return True


def divergence(
    sess: "Session", m: dict, best_loss: float | None, first_loss: float | None, factor: float
) -> str | None:
    """Why the run diverged at this evaluation, or None.

    Non-finite training loss, residuals, Θ or any tensor of the method state (Z, U), or a
    training loss above ``factor`` × the best so far *and* above the loss at epoch 0 (so a
    loss that is merely noisy near zero does not count). ``factor`` 0 turns the loss test off.
    """
    if not math.isfinite(m["train_loss"]):
        return f"training loss is {m['train_loss']}"
    if not _all_finite(m.get("residuals", [])):
        return f"residuals are not finite ({m['residuals']})"
    if not all(bool(torch.isfinite(p).all()) for p in sess.net.parameters()):
        return "Θ (network parameters) is not finite"
    st = sess.state.__dict__ if hasattr(sess.state, "__dict__") else {}
    for name in ("z", "u"):
        if name in st and not _all_finite(st[name]):
            return f"{name.upper()} is not finite"
    loss = m["train_loss"]
    if factor and best_loss is not None and loss > factor * best_loss and (first_loss is None or loss > first_loss):
        return f"training loss {m['train_loss']:.4g} exceeds {factor:g} × its best {best_loss:.4g}"
    return None


@dataclass
class Session:
    """A built experiment: data on the device, network, method and its state."""

    cfg: RunConfig
    device: torch.device
    dataset: data_mod.Dataset
    net: torch.nn.Module
    method: object
    state: object
    batch: TrainBatch

    def evaluate(self) -> dict:
        loss = get_loss(self.cfg.train.loss)
        x_te, y_te = self.dataset.x_test.to(self.device), self.dataset.y_test.to(self.device)
        tr_loss, tr_acc = evaluate(self.net, self.batch.x[:TRAIN_EVAL_LIMIT], self.batch.y[:TRAIN_EVAL_LIMIT], loss)
        te_loss, te_acc = evaluate(self.net, x_te, y_te, loss)
        diag = self.method.diagnostics(self.net, self.state, self.batch)
        return {
            "train_loss": tr_loss,
            "train_accuracy": tr_acc,
            "test_loss": te_loss,
            "test_accuracy": te_acc,
            **diag,
            "state_bytes": self.method.state_bytes(self.state),
        }


def build(cfg: RunConfig) -> Session:
    """Load data, build the split network and the method's initial state (seeded)."""
    device = resolve_device(cfg.train.device)
    torch.manual_seed(cfg.train.seed)
    ds = data_mod.load(cfg.data.name, cfg.data.root, train_limit=cfg.data.train_limit, test_limit=cfg.data.test_limit)
    net = build_blocknet(cfg.model, ds.input_shape, ds.n_classes, seed=cfg.train.seed).to(device)
    method = cfg.build_method()
    gen = torch.Generator().manual_seed(cfg.train.seed)
    batch = TrainBatch(ds.x_train.to(device), ds.y_train.to(device), get_loss(cfg.train.loss), cfg.train.batch_size)
    state = method.init_state(net, batch, gen)
    return Session(cfg, device, ds, net, method, state, batch)


def atomic_torch_save(obj, path: Path) -> None:
    """torch.save through a temporary file: a kill mid-write leaves the previous file intact."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(path: Path, sess: Session, epoch: int, wall: float) -> None:
    atomic_torch_save(
        {"epoch": epoch, "wall_time_s": wall, "net": sess.net.state_dict(), "method_state": sess.state.state_dict()},
        path,
    )


def load_checkpoint(path: Path, sess: Session) -> tuple[int, float]:
    ck = torch.load(path, map_location=sess.device, weights_only=False)
    sess.net.load_state_dict(ck["net"])
    sess.state.load_state_dict(ck["method_state"])
    return ck["epoch"], ck["wall_time_s"]


def summarize(cfg: RunConfig, metrics: list[dict], status: str) -> dict:
    last = metrics[-1] if metrics else {}
    best = max(metrics, key=lambda m: m["test_accuracy"]) if metrics else {}

    def time_to(acc):
        hit = next((m for m in metrics if m["test_accuracy"] >= acc), None)
        return None if hit is None else hit["wall_time_s"]

    epochs = last.get("epoch", 0)
    return {
        "method": cfg.method,
        "preset": cfg.preset,
        "data": cfg.data.name,
        "status": status,
        "epochs": epochs,
        "test_accuracy": last.get("test_accuracy"),
        "best_test_accuracy": best.get("test_accuracy"),
        "best_epoch": best.get("epoch"),
        "train_accuracy": last.get("train_accuracy"),
        "train_loss": last.get("train_loss"),
        "wall_time_s": last.get("wall_time_s", 0.0),
        "seconds_per_epoch": (last.get("wall_time_s", 0.0) / epochs) if epochs else None,
        "state_bytes": last.get("state_bytes"),
        "time_to_90_s": time_to(0.90),
        "time_to_95_s": time_to(0.95),
    }


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    on_progress: Callable[[float, dict | None], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Train ``cfg`` into ``run_dir`` (resuming from its checkpoint if asked); returns the summary.

    ``on_progress(epochs_done_as_float, metrics_or_None)`` is called during epochs and after
    each evaluation. ``should_stop()`` is polled; when true the run ends at once as 'stopped'
    (the last checkpoint remains, so it can be resumed).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    status_path, metrics_path, ckpt_path = run_dir / "status.json", run_dir / "metrics.jsonl", run_dir / "checkpoint.pt"
    status = {
        "state": "running",
        "pid": os.getpid(),
        "started": time.time(),
        "updated": time.time(),
        "epoch": 0,
        "epochs": cfg.train.epochs,
        "progress": 0.0,
        "error": None,
    }
    write_json(status_path, status)
    last_status_write = [0.0]

    def set_status(force=False, **kw):
        status.update(kw, updated=time.time())
        if force or time.time() - last_status_write[0] > 0.5:
            write_json(status_path, status)
            last_status_write[0] = time.time()

    try:
        sess = build(cfg)
        start_epoch, wall = 0, 0.0
        if resume and ckpt_path.exists():
            start_epoch, wall = load_checkpoint(ckpt_path, sess)
            kept = [m for m in read_metrics(run_dir) if m["epoch"] <= start_epoch]
            with open(metrics_path, "w") as f:  # drop lines logged after the checkpoint
                f.writelines(json.dumps(m) + "\n" for m in kept)
        else:
            (run_dir / "config.json").write_text(cfg.to_json())
            metrics_path.write_text("")
            for stale in ("summary.json", "error.txt"):
                (run_dir / stale).unlink(missing_ok=True)
        t_start = time.time()

        def log(epoch: int) -> dict:
            m = {"epoch": epoch, "wall_time_s": wall, **sess.evaluate(), "time": time.time()}
            with open(metrics_path, "a") as f:
                f.write(json.dumps(m) + "\n")
                f.flush()
            if on_progress:
                on_progress(float(epoch), m)
            return m

        factor = getattr(cfg.train, "diverge_factor", 100.0)
        logged = read_metrics(run_dir) if start_epoch else [log(0)]
        best_loss = min((x["train_loss"] for x in logged if math.isfinite(x["train_loss"])), default=None)
        first_loss = logged[0]["train_loss"] if logged else None
        for epoch in range(start_epoch + 1, cfg.train.epochs + 1):

            def progress(frac, epoch=epoch):
                if should_stop and should_stop():
                    raise StopRun()
                set_status(progress=(epoch - 1 + frac) / cfg.train.epochs, epoch=epoch - 1)
                if on_progress:
                    on_progress(epoch - 1 + frac, None)

            t0 = time.perf_counter()
            sess.method.run_epoch(sess.net, sess.state, sess.batch, progress)
            if sess.device.type == "cuda":
                torch.cuda.synchronize()
            wall += time.perf_counter() - t0
            if epoch % cfg.train.eval_every == 0 or epoch == cfg.train.epochs:
                m = log(epoch)
                # a loss that exploded past its best and its starting value ends the run
                why = divergence(sess, m, best_loss, first_loss, factor)
                if why:
                    raise Diverged(f"epoch {epoch}: {why}")
                if math.isfinite(m["train_loss"]):
                    best_loss = m["train_loss"] if best_loss is None else min(best_loss, m["train_loss"])
            if epoch % cfg.train.checkpoint_every == 0 or epoch == cfg.train.epochs:
                save_checkpoint(ckpt_path, sess, epoch, wall)
            set_status(force=True, epoch=epoch, progress=epoch / cfg.train.epochs)
            if should_stop and should_stop():
                raise StopRun()
        summary = summarize(cfg, read_metrics(run_dir), "finished")
        write_json(run_dir / "summary.json", summary)
        set_status(force=True, state="finished", progress=1.0, elapsed_s=time.time() - t_start)
        return summary
    except StopRun:
        summary = summarize(cfg, read_metrics(run_dir), "stopped")
        write_json(run_dir / "summary.json", summary)
        set_status(force=True, state="stopped")
        return summary
    except Diverged as e:
        summary = summarize(cfg, read_metrics(run_dir), "diverged")
        write_json(run_dir / "summary.json", summary)
        set_status(force=True, state="diverged", error=str(e))
        return summary
    except BaseException as e:
        (run_dir / "error.txt").write_text(traceback.format_exc())
        set_status(force=True, state="crashed", error=f"{type(e).__name__}: {e}")
        raise


def install_stop_handlers() -> Callable[[], bool]:
    """SIGTERM/SIGINT request a clean stop; returns the ``should_stop`` poll."""
    flag = {"stop": False}

    def handler(signum, frame):
        flag["stop"] = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    return lambda: flag["stop"]


def run_status(run_dir: Path) -> dict:
    """Status with a dead worker detected: 'running' whose pid is gone is reported as crashed."""
    st = read_json(Path(run_dir) / "status.json", {}) or {}
    if st.get("state") == "running" and st.get("pid") and not pid_alive(st["pid"]):
        st = {**st, "state": "crashed", "error": st.get("error") or "worker process ended without reporting (killed?)"}
    return st


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child still "exists"; treat it as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def list_runs(root: Path | None = None) -> list[dict]:
    """Every run directory under root (newest first) with its config, status and summary."""
    root = Path(root or default_runs_dir())
    out = []
    if not root.exists():
        return out
    for d in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
        if not (d / "config.json").exists() and not (d / "status.json").exists():
            continue
        out.append(
            {
                "dir": d,
                "name": d.name,
                "config": read_json(d / "config.json", {}),
                "status": run_status(d),
                "summary": read_json(d / "summary.json"),
            }
        )
    return out
