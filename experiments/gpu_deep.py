"""Answers: does Block-ADMM train ResNet-18 on CIFAR-10 (and Fashion-MNIST to convergence) on a GPU?

The deep-network runs (docs/results/deep-networks.md) on a GPU machine, in one budgeted, resumable call.

The GPU machine has no copy of the data and nothing travels but the working tree (≤ 64 MiB)
and at most 8 files back (16 MiB each, 64 MiB in all). So:

    python experiments/gpu_deep.py pack --out .devpack      # here: CIFAR-10 JPEG bytes + offsets
                                                            # (≈ 20 MB) and gzipped Fashion-MNIST
    scripts/gpu_deep.sh OUT                                 # there: decode, train, bring back

``run`` does, within ``--budget-s`` seconds of wall time:

1. ``probe``: one timed epoch of block-admm and sgd on a 2,048-sample slice under each GPU
   speed option (fp32; bf16 autocast; + channels_last; + fused optimizer; + 4,096-row Z
   chunks) and keeps, per method, the fastest — the options are used only where they
   measure faster (``probe.json``).
2. CIFAR-10 ResNet-18, T = 2 (split after conv3_x): sgd, block-admm, gotmare, augmented,
   same evaluation, each given a share of the time left; a run stops at an epoch boundary
   when the next epoch would overrun its share (status 'stopped').
3. ``fmnist``: fmnist-mlp-ce's block-admm (200 epochs in the paper), with what time is left.

Everything lands in ``OUT``: ``runs.tar.gz`` (each run directory: config, metrics.jsonl,
status, summary; no checkpoints), ``table.md`` (the bench table), ``curves.png``,
``probe.json``, and ``state-<job>.pt.<k>`` parts for unfinished jobs while they fit.

**Resume across calls.** A machine is given back 30 s after a call, so an on-disk checkpoint
does not survive; what survives is what comes back. Z and U (13 GB at the paper's split)
never fit, so the resume is *warm*: Θ (weights and BatchNorm statistics; float16 for
ResNet-18 at width 64, whose float32 Θ would not fit beside the data in the next call) comes
back, while Z is re-initialised by a forward pass and U = 0 (as at Alg. 1's start) and the
Θ-optimizer's moments start afresh. ``run --resume DIR`` (DIR = the files of the previous
call's OUT, carried in .devpack/resume) continues each unfinished job from its epoch, with
its earlier metrics; finished jobs are kept as they are.

CPU check end to end on a subset (what the docs' exact call is tested with):

    python experiments/gpu_deep.py pack --out /tmp/gd/pack --per-class 30
    python experiments/gpu_deep.py run --data /tmp/gd/pack --out /tmp/gd/out1 --budget-s 60 \\
        --width 8 --train-limit 300 --test-limit 200 --fmnist-limit 2000 --device cpu
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from admm_core import network, runs
from admm_core.bench import machine, table
from admm_core.data import pack_cifar10
from admm_core.docs import add_collect_parser, write_section
from admm_core.spec.datasets import CIFAR_PACK, candidate_roots
from admm_core.spec.presets import preset_config

PART = 15 * 2**20  # bytes per returned state part (the limit is 16 MiB per file)
RETURN_BYTES = 56 * 2**20  # state parts in all (64 MiB minus the small files)
EPOCH_SLACK = 1.4  # an epoch's time in a full run against the probe's estimate (evaluations, noise)
MAX_PARTS = 3  # 8 files back: runs.tar.gz, table.md, curves.png, probe.json, log + 3 parts
SHARES = {"sgd": 0.2, "block-admm": 0.3, "online-admm": 0.3, "gotmare": 0.3, "fmnist": 0.2}
CIFAR_METHODS = ("sgd", "block-admm", "online-admm", "gotmare")


# --- pack (here) ------------------------------------------------------------------------------


def pack(out: Path, per_class: int | None) -> dict:
    """CIFAR-10 JPEG bytes + offsets (no re-encoding) and gzipped Fashion-MNIST IDX files."""
    src = next((r for r in candidate_roots(None) if (r / "cifar10-jpeg" / "test.tar").exists()), None)
    if src is None:
        raise SystemExit("pack: no cifar10-jpeg/ under $ADMM_DATA or ../shared/data")
    info = {"cifar10": pack_cifar10(src / "cifar10-jpeg", out / CIFAR_PACK, per_class)}
    raw = src / "FashionMNIST" / "raw"
    dest = out / "FashionMNIST" / "raw"
    dest.mkdir(parents=True, exist_ok=True)
    for f in sorted(raw.glob("*-ubyte")):
        with open(f, "rb") as fi, gzip.open(dest / (f.name + ".gz"), "wb", compresslevel=6) as fo:
            shutil.copyfileobj(fi, fo)
    info["fashion-mnist_bytes"] = sum(p.stat().st_size for p in dest.iterdir())
    info["total_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return info


# --- run (there) ------------------------------------------------------------------------------


def job_config(job: str, a, options: dict):
    """RunConfig of a job: the preset, the subset/width flags, the probe's speed options."""
    if job == "fmnist":
        cfg = preset_config("fmnist-mlp-ce", "block-admm").replace(train__checkpoint_every=10**6)
        if a.fmnist_limit:
            cfg = cfg.replace(data__train_limit=a.fmnist_limit, data__test_limit=a.fmnist_limit)
        if a.fmnist_epochs:
            cfg = cfg.replace(train__epochs=a.fmnist_epochs)
    else:
        # the preset's recipe for each method (chosen on the CPU proxy), cosine Θ schedule
        cfg = preset_config("cifar10-resnet18", job).replace(
            data__augment=True, model__width=a.width, train__epochs=a.epochs, train__checkpoint_every=10**6
        )
        if a.train_limit:
            cfg = cfg.replace(data__train_limit=a.train_limit)
        if a.test_limit:
            cfg = cfg.replace(data__test_limit=a.test_limit)
        opt = options.get(job, {})
        cfg = cfg.replace(
            train__precision=opt.get("precision", "fp32"), train__channels_last=opt.get("channels_last", False)
        )
        extra = {k: opt[k] for k in ("fused", "chunk_size") if k in opt}
        if job in ("sgd", "online-admm"):
            extra.pop("chunk_size", None)  # no Z sweeps over chunks of rows
        if job == "online-admm":
            extra.pop("fused", None)
        if job in ("block-admm", "gotmare") and a.z_lr:  # override the preset's ζ (one value or one per block)
            extra["z_lr"] = tuple(float(v) for v in a.z_lr.split(","))
        if job != "sgd" and a.admm_lr:
            extra["lr"] = a.admm_lr
        if extra:
            cfg = cfg.replace(method_params={**cfg.method_params, **extra})
    return cfg.replace(data__root=str(a.data), train__device=a.device)


def probe(a, log) -> dict:
    """Time one epoch (after one warm-up epoch) of block-admm and sgd on a slice under each
    speed option; return each method's fastest options and all timings."""
    variants = [
        ("fp32", {}),
        ("bf16", {"precision": "bf16"}),
        ("bf16+cl", {"precision": "bf16", "channels_last": True}),
        ("bf16+cl+fused", {"precision": "bf16", "channels_last": True, "fused": True}),
        ("bf16+cl+fused+chunk4096", {"precision": "bf16", "channels_last": True, "fused": True, "chunk_size": 4096}),
    ]
    n = min(a.probe_n, a.train_limit or a.probe_n)
    timings: dict = {}
    best: dict = {}
    for method in ("block-admm", "sgd"):
        for name, opt in variants:
            if method == "sgd" and "chunk_size" in opt:
                continue
            cfg = job_config(method, a, {method: opt}).replace(data__train_limit=n, data__test_limit=256)
            sess = runs.build(cfg)
            secs = timed_epochs(cfg, sess)
            timings.setdefault(method, {})[name] = {"warmup_s": secs[0], "epoch_s": secs[1], "samples": n}
            log(f"probe {method:10s} {name:26s} {secs[1]:.3f} s/epoch on {n} samples (warm-up {secs[0]:.2f} s)")
            if method not in best or secs[1] < timings[method][best[method][0]]["epoch_s"]:
                best[method] = (name, opt)
            del sess
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    options = {m: dict(best[m][1]) for m in best}
    options["gotmare"] = dict(options.get("block-admm", {}))  # the same code path
    options["online-admm"] = {
        k: v for k, v in options.get("block-admm", {}).items() if k in ("precision", "channels_last")
    }
    return {"timings": timings, "chosen": {m: best[m][0] for m in best}, "options": options}


def timed_epochs(cfg, sess) -> list[float]:
    """Wall seconds of two epochs of ``sess``: a warm-up (allocations, kernel choice) and a timed one."""
    secs = []
    for epoch in (1, 2):
        sess.batch.set_epoch(epoch)
        _sync(sess.device)
        t0 = time.perf_counter()
        with runs.autocast(cfg, sess.device):
            sess.method.run_epoch(sess.net, sess.state, sess.batch)
        _sync(sess.device)
        secs.append(time.perf_counter() - t0)
    return secs


def epoch_seconds(a, options: dict, methods, log) -> dict:
    """Seconds of one full-size epoch per method, with its chosen options: one epoch on a slice of
    ``--probe-n`` images after a warm-up epoch, scaled to the training set, plus one evaluation."""
    n_full = a.train_limit or 50_000
    n = min(a.probe_n, n_full)
    out = {}
    for method in methods:
        cfg = job_config(method, a, options).replace(data__train_limit=n)
        sess = runs.build(cfg)
        secs = timed_epochs(cfg, sess)
        t0 = time.perf_counter()
        with runs.autocast(cfg, sess.device):
            sess.evaluate()
        _sync(sess.device)
        out[method] = secs[1] * n_full / n + (time.perf_counter() - t0)
        log(f"epoch estimate {method:12s} {out[method]:.1f} s (slice {n}: {secs[1]:.3f} s/epoch)")
        del sess
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return out


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_job(job: str, cfg, run_dir: Path, deadline: float, state_file: Path | None, log) -> tuple[dict, object]:
    """Train ``cfg`` into ``run_dir`` until it finishes or the next epoch would pass ``deadline``.

    With ``state_file`` (a previous call's Θ), the run resumes warm from that epoch.
    Returns (summary, session) — the session for the returned state.
    """
    captured = {}
    build = runs.build

    def build_and_keep(c):  # runs.train builds its session itself; keep a handle on it
        sess = build(c)
        captured["sess"] = sess
        return sess

    resume = False
    saved = runs.safe_load(state_file) if state_file is not None else None  # tensors only: never runs code
    if saved is not None and saved["epoch"] > 0:
        sess = build(cfg)
        sess.net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in saved["net"].items()})
        # warm resume: Z from a forward pass of the restored Θ, U = 0, fresh Θ-optimizer (module docstring)
        sess.state = sess.method.init_state(
            sess.net, sess.batch, torch.Generator().manual_seed(cfg.train.seed + saved["epoch"])
        )
        runs.save_checkpoint(run_dir / "checkpoint.pt", sess, saved["epoch"], saved["wall_time_s"])
        del sess
        resume = True
        log(f"{job}: warm resume at epoch {saved['epoch']}")
    clock = {"t": None, "dur": 0.0, "boundary": False}

    def on_progress(e, m):
        if m is not None:  # an evaluation: the end of an epoch (eval_every = 1)
            now = time.time()
            if clock["t"] is not None:
                clock["dur"] = now - clock["t"]  # one epoch: training + evaluation
            clock.update(t=now, boundary=True)
            log(
                f"{job} epoch {m['epoch']}: test {m['test_accuracy']:.4f} train {m['train_accuracy']:.4f} at {m['wall_time_s']:.1f}s"
            )

    def should_stop():
        # The first poll after an evaluation is runs.train's end-of-epoch check: stop there when
        # one more epoch (as long as the last) would overrun the deadline. Mid-epoch polls stop
        # only a minute past it (that epoch is then lost).
        now = time.time()
        if clock["boundary"]:
            clock["boundary"] = False
            return now + clock["dur"] > deadline
        return now > deadline + 60

    network.build = build_and_keep  # NetworkTask.setup calls network.build
    try:
        summary = runs.train(cfg, run_dir, resume=resume, on_progress=on_progress, should_stop=should_stop)
    finally:
        network.build = build
    (run_dir / "checkpoint.pt").unlink(missing_ok=True)  # large (Z, U) and never returned
    return summary, captured.get("sess")


def save_state(sess, summary: dict) -> bytes:
    """Θ of a run (weights and BatchNorm buffers) and where it stopped, as bytes: float32 when
    that fits one returned file, else float16 (ResNet-18: 45 MB -> 22 MB, relative rounding
    ≤ 4.9e-4) so that it and the CIFAR-10 pack fit the next call's 64 MiB."""
    sd = sess.net.state_dict()
    fp32_bytes = sum(v.numel() * 4 for v in sd.values() if v.is_floating_point())
    dtype = torch.float32 if fp32_bytes <= PART else torch.float16
    net = {k: v.detach().to("cpu", dtype) if v.is_floating_point() else v.cpu() for k, v in sd.items()}
    buf = io.BytesIO()
    torch.save(
        {"epoch": summary["epochs"], "wall_time_s": summary["wall_time_s"], "dtype": str(dtype), "net": net}, buf
    )
    return buf.getvalue()


def write_parts(blob: bytes, out: Path, job: str) -> list[str]:
    names = []
    for k in range(math.ceil(len(blob) / PART)):
        name = f"state-{job}.pt.{k}"
        (out / name).write_bytes(blob[k * PART : (k + 1) * PART])
        names.append(name)
    return names


def read_parts(folder: Path, job: str, work: Path) -> Path | None:
    parts = sorted(folder.glob(f"state-{job}.pt.*"), key=lambda p: int(p.suffix[1:]))
    if not parts:
        return None
    dest = work / f"state-{job}.pt"
    dest.write_bytes(b"".join(p.read_bytes() for p in parts))
    return dest


def plot_curves(run_dirs: dict, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
    for job, d in run_dirs.items():
        ms = [m for m in runs.read_metrics(d) if m["epoch"] > 0]
        if not ms:
            continue
        ax = axes[1] if job == "fmnist" else axes[0]
        ax.plot([m["epoch"] for m in ms], [100 * m["test_accuracy"] for m in ms], marker="o", ms=3, label=job)
    axes[0].set_title("CIFAR-10 ResNet-18 (lossy JPEG copy), T = 2")
    axes[1].set_title("Fashion-MNIST 784-1000-1000-10, block-admm")
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def run(a) -> int:
    t_start = time.time()
    out, work = Path(a.out), Path(a.workdir)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    log_f = open(out / "log.txt", "a")

    def log(msg):
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        log_f.write(line + "\n")
        log_f.flush()

    here = "cuda" if a.device != "cpu" and torch.cuda.is_available() else "cpu"
    log(f"machine: {machine(here)}")
    for gz in Path(a.data).rglob("*-ubyte.gz"):  # IDX files travel gzipped
        if not gz.with_suffix("").exists():
            with gzip.open(gz) as fi, open(gz.with_suffix(""), "wb") as fo:
                shutil.copyfileobj(fi, fo)
    if torch.cuda.is_available():
        torch.backends.cudnn.benchmark = True
    jobs = [j for j in a.jobs.split(",") if j]
    bad = [j for j in jobs if j not in ("probe", *SHARES)]
    if bad:
        raise SystemExit(f"--jobs: unknown {bad}; choose from probe,{','.join(SHARES)}")
    resume = Path(a.resume) if a.resume else None
    runs_root = work / "runs"
    if resume is not None and (resume / "runs.tar.gz").exists():
        with tarfile.open(resume / "runs.tar.gz") as tf:
            tf.extractall(work, filter="data")
    done = {}
    for j in SHARES:
        s = runs.read_json(runs_root / j / "summary.json")
        if s and s.get("status") == "finished":
            done[j] = s
    probe_info = runs.read_json(resume / "probe.json") if resume is not None else None
    if "probe" in jobs and probe_info is None:
        probe_info = probe(a, log)
        (out / "probe.json").write_text(json.dumps(probe_info, indent=2))
    elif probe_info is not None:
        (out / "probe.json").write_text(json.dumps(probe_info, indent=2))
    options = (probe_info or {}).get("options", {})
    log(f"speed options: {options}")

    todo = [j for j in jobs if j in SHARES and j not in done]
    shares = {**SHARES, **{k: float(v) for k, v in (kv.split("=") for kv in a.shares.split(",") if kv)}}
    cifar = [j for j in todo if j in CIFAR_METHODS]
    allow: dict = {}  # seconds a job may take (equal epochs); the others share what is left
    if a.equal_epochs and cifar and not a.resume:
        # the same epochs (and so the same cosine schedule) for every CIFAR-10 method: as many as all
        # of them fit in the CIFAR-10 share of the budget, by each method's measured epoch time
        est = epoch_seconds(a, options, cifar, log)
        budget = a.budget_s - (time.time() - t_start) - 20.0
        cifar_budget = budget * sum(shares[j] for j in cifar) / sum(shares[j] for j in todo)
        setup = 15.0  # per job: building the run, the epoch-0 evaluation
        a.epochs = max(1, min(a.epochs, int((cifar_budget - setup * len(cifar)) / (a.epoch_slack * sum(est.values())))))
        allow = {j: setup + a.epoch_slack * est[j] * a.epochs for j in cifar}
        log(f"equal epochs: {a.epochs} for {', '.join(cifar)} (estimates {est})")
    summaries, sessions, run_dirs = dict(done), {}, {j: runs_root / j for j in SHARES if (runs_root / j).exists()}
    reserve = 20.0  # packing the results
    for i, job in enumerate(todo):
        left = a.budget_s - (time.time() - t_start) - reserve
        if job in allow:  # its equal epochs, with slack; never more than what is left
            deadline = time.time() + min(allow[job], max(0.0, left))
        else:
            rest = [j for j in todo[i:] if j not in allow]
            left -= sum(allow[j] for j in todo[i:] if j in allow)
            deadline = time.time() + max(0.0, left * shares[job] / sum(shares[j] for j in rest))
        cfg = job_config(job, a, options)
        run_dir = runs_root / job
        run_dir.mkdir(parents=True, exist_ok=True)
        state_file = read_parts(resume, job, work) if resume is not None else None
        log(
            f"{job}: {cfg.train.epochs} epochs at most, {max(0.0, deadline - time.time()):.0f} s ({cfg.method}, {cfg.data.name})"
        )
        summary, sess = run_job(job, cfg, run_dir, deadline, state_file, log)
        summaries[job], run_dirs[job] = summary, run_dir
        if summary["status"] != "finished" and summary["epochs"] > 0 and sess is not None:
            sessions[job] = save_state(sess, summary)
        del sess
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        log(f"{job}: {summary['status']} after {summary['epochs']} epochs, test {summary['test_accuracy']}")

    # the state parts of unfinished jobs, smallest first, while they fit what comes back
    used, n_parts = 0, 0
    for job, blob in sorted(sessions.items(), key=lambda kv: len(kv[1])):
        k = math.ceil(len(blob) / PART)
        if used + len(blob) > RETURN_BYTES or n_parts + k > a.max_parts:
            log(f"{job}: its Θ ({len(blob) / 2**20:.1f} MiB) does not fit what comes back; a later call restarts it")
            continue
        log(f"{job}: Θ returned in {write_parts(blob, out, job)}")
        used, n_parts = used + len(blob), n_parts + k
    rows = [summaries[j] for j in SHARES if j in summaries]
    text = f"Machine: {machine(here)}\n\n" + table(
        "cifar10-resnet18", [r for r in rows if r["preset"] == "cifar10-resnet18"]
    )
    fm = [r for r in rows if r["preset"] == "fmnist-mlp-ce"]
    if fm:
        text += "\n\nfmnist-mlp-ce:\n\n" + table("fmnist-mlp-ce", fm)
    (out / "table.md").write_text(text + "\n")
    plot_curves(run_dirs, out / "curves.png")
    runs_root.mkdir(parents=True, exist_ok=True)  # a probe-only call trained nothing: an empty archive
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tf:
        tf.add(runs_root, arcname="runs", filter=lambda ti: None if ti.name.endswith((".pt", ".tmp")) else ti)
    log(f"done in {time.time() - t_start:.0f} s")
    print(text)
    return 0


# --- collect (here) ---------------------------------------------------------------------------


def collect(src: Path, markdown: Path, section: str, call: str, note: str = "") -> str:
    """A returned OUT folder -> a docs section: the bench table (device named), each job's test
    accuracy per epoch, and the probe's timings when it ran in that call."""
    table_md = (src / "table.md").read_text().strip()
    parts = [f"Device call: `{call}`", table_md]
    with tarfile.open(src / "runs.tar.gz") as tf, tempfile.TemporaryDirectory() as tmp:
        tf.extractall(tmp, filter="data")
        lines = [
            "| job | test accuracy (%) after epochs 1, 2, … | RMS residual per block, last epoch |",
            "|---|---|---|",
        ]
        for d in sorted(Path(tmp, "runs").iterdir()):
            ms = [m for m in runs.read_metrics(d) if m["epoch"] > 0]
            if not ms:
                continue
            accs = ", ".join(f"{100 * m['test_accuracy']:.1f}" for m in ms)
            if len(ms) > 12:  # long runs: every tenth epoch and the last
                accs = ", ".join(f"{m['epoch']}: {100 * m['test_accuracy']:.1f}" for m in ms[9::10] + ms[-1:])
            res = ", ".join(f"{r:.2f}" for r in ms[-1].get("residuals", [])) or "—"
            lines.append(f"| {d.name} | {accs} | {res} |")
    parts.append("\n".join(lines))
    probe_path = src / "probe.json"
    log_text = (src / "log.txt").read_text() if (src / "log.txt").exists() else ""
    if probe_path.exists() and "probe " in log_text:  # the probe ran in this call
        info = json.loads(probe_path.read_text())
        rows = ["| method | option set | s/epoch (2,048 images, after a warm-up epoch) |", "|---|---|---|"]
        for method, t in info["timings"].items():
            for name, v in t.items():
                mark = " (chosen)" if info["chosen"].get(method) == name else ""
                rows.append(f"| {method} | {name}{mark} | {v['epoch_s']:.3f} |")
        parts.append("\n".join(rows))
    if note:
        parts.append(note)
    body = "\n\n".join(parts)
    cmd = f"python experiments/gpu_deep.py collect --from {src} --markdown {markdown} --section {section}"
    write_section(markdown, section, body, command=cmd)
    return body


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("pack", help="write .devpack (CIFAR-10 JPEG pack + gzipped Fashion-MNIST)")
    k.add_argument("--out", default=".devpack")
    k.add_argument("--per-class", type=int, help="only this many images per class and tar (tests)")
    r = sub.add_parser("run", help="train within a time budget (on the GPU machine)")
    r.add_argument("--data", required=True, help="folder with cifar10-jpeg.npz and FashionMNIST/raw")
    r.add_argument("--out", required=True)
    r.add_argument("--workdir", default="/tmp/gpu_deep")
    r.add_argument("--budget-s", type=float, default=540.0, help="wall seconds for the whole call")
    r.add_argument("--jobs", default="probe,sgd,block-admm,gotmare,fmnist")
    r.add_argument("--resume", help="the previous call's returned files")
    r.add_argument("--epochs", type=int, default=100, help="CIFAR-10 epochs at most (paper: 100)")
    r.add_argument("--width", type=int, default=64, help="ResNet-18 base width (64 = the paper's net)")
    r.add_argument("--z-lr", help="override block-admm/gotmare's ζ (one value, or ζ_1,ζ_2; default: the preset's)")
    r.add_argument("--admm-lr", type=float, help="override the Adam η of the ADMM methods (default: the preset's)")
    r.add_argument(
        "--equal-epochs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give every CIFAR-10 method the same epochs, as many as fit the budget (measured first)",
    )
    r.add_argument(
        "--epoch-slack",
        type=float,
        default=EPOCH_SLACK,
        help="a job's allowance per epoch against the probe's estimate (default %(default)s)",
    )
    r.add_argument("--train-limit", type=int, help="CIFAR-10 training subset (CPU check)")
    r.add_argument("--test-limit", type=int)
    r.add_argument("--fmnist-limit", type=int, help="Fashion-MNIST subset (CPU check)")
    r.add_argument("--fmnist-epochs", type=int)
    r.add_argument("--probe-n", type=int, default=2048)
    r.add_argument("--shares", default="", help="time shares of jobs, e.g. sgd=0.3,block-admm=0.4 (default SHARES)")
    r.add_argument(
        "--max-parts", type=int, default=MAX_PARTS, help="state parts to return (fewer when OUT holds other files)"
    )
    r.add_argument("--device", default="auto")
    c = add_collect_parser(sub, "write a returned OUT folder's results into a docs section (here)")
    c.add_argument("--note", default="", help="a line printed under the tables")
    a = p.parse_args(argv)
    if a.cmd == "collect":
        print(collect(Path(a.src), Path(a.markdown), a.section, a.call, a.note))
        return 0
    if a.cmd == "pack":
        print(json.dumps(pack(Path(a.out), a.per_class), indent=2))
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
