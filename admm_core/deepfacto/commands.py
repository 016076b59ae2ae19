"""DeepFacto's commands: ``admm train --preset lfwa-deepfacto`` and ``admm deepfacto bench|evaluate``
(``grid`` lives with the heatmaps; :func:`admm_core.cli.deepfacto_main` dispatches all three).

    python -m admm_core train --preset lfwa-deepfacto --rank 32
    python -m admm_core deepfacto bench --ranks 4,32,256 --markdown docs/results/deepfacto.md
    python -m admm_core deepfacto evaluate --run RUN_DIR [--set 'svm_c=[0.0001,0.001,0.01]']
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

import numpy as np

from ..docs import write_section
from ..errors import ConfigError, check
from ..rundir import read_json, read_metrics, unique_run_dir
from ..spec.deepfacto import DeepFactoConfig, run_dir_name, saved_names
from ..spec.kinds import DEEPFACTO, run_kind
from ..spec.settings import parse_sets
from ..status import install_stop_handlers
from .run import EVAL_FIELDS, evaluate_run, train_deepfacto
from .ship import export
from .shipped import models_dir


def config_from_cli(a) -> DeepFactoConfig:
    """`python -m admm_core train --preset lfwa-deepfacto ...` flags -> DeepFactoConfig."""
    kw: dict = {}
    if getattr(a, "config", None):
        d = json.loads(getattr(a, "config_text", None) or Path(a.config).read_text())  # the CLI's one read
        kw.update(saved_names(d.get("deepfacto", d)))  # a run's config.json, saved before the renames too
    for flag, key in (
        ("rank", "rank"),
        ("seed", "seed"),
        ("device", "device"),
        ("data_root", "data_root"),
        ("backbone_weights", "backbone_weights"),
        ("train_limit", "admm_images"),  # --train-limit: the images Block-ADMM trains on
        ("batch_size", "batch_size"),
    ):
        v = getattr(a, flag, None)
        if v is not None:
            kw[key] = v
    kw.update(parse_sets(getattr(a, "set", None)))
    cfg = DeepFactoConfig.from_dict(kw)
    epochs = getattr(a, "epochs", None)
    if epochs is not None:  # --epochs: epochs in all, as on resume; the fine-tune ones come last
        check(
            isinstance(epochs, int) and epochs >= cfg.finetune_epochs,
            "--epochs",
            epochs,
            f"must be at least the {cfg.finetune_epochs} fine-tune epochs",
        )
        cfg = cfg.replace(warmup_epochs=epochs - cfg.finetune_epochs)
    return cfg


def cli_train(a) -> int:
    """The CLI's ``train --preset lfwa-deepfacto`` (dispatched from admm_core.cli)."""

    if getattr(a, "resume", None):
        run_dir = Path(a.resume)
        saved = read_json(run_dir / "config.json")
        if not saved or run_kind(saved) != DEEPFACTO or not isinstance(saved.get("deepfacto"), dict):
            raise ConfigError(f"--resume {str(run_dir)!r}: no DeepFacto config.json there")
        cfg = DeepFactoConfig.from_saved(saved["deepfacto"])
        epochs = getattr(a, "epochs", None)  # a new length: DeepFactoConfig.resumed_to, once state.pt says how far
    else:
        epochs = None
        cfg = config_from_cli(a)
        run_dir = Path(a.out) if getattr(a, "out", None) else new_run_dir(cfg)
    print(f"run dir: {run_dir}", file=sys.stderr, flush=True)
    summary = train_deepfacto(
        cfg, run_dir, resume=bool(getattr(a, "resume", None)), epochs=epochs, should_stop=install_stop_handlers()
    )
    print(json.dumps(summary, indent=2))
    return 0


def new_run_dir(cfg: DeepFactoConfig, root=None) -> Path:
    return unique_run_dir(run_dir_name(cfg), root)


def bench(argv=None) -> int:
    """`admm deepfacto bench`: one run per rank, then the markdown table (``--out``/table.md and,
    with ``--markdown FILE``, a section of FILE the command rewrites: only its own block)."""

    p = argparse.ArgumentParser(
        prog="admm deepfacto bench", description="DeepFacto on LFWA for several ranks: attribute accuracy table"
    )
    p.add_argument("--ranks", default="4,32,256")
    p.add_argument("--out", default="bench_out/deepfacto", help="folder for the runs and table.md")
    p.add_argument("--markdown", metavar="FILE", help="also write the table into FILE (e.g. docs/results/deepfacto.md)")
    p.add_argument("--section", default="full", help="name of the block of --markdown this table replaces")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help="any DeepFactoConfig field")
    p.add_argument("--backbone-weights")
    p.add_argument("--data-root")
    p.add_argument("--seed", type=int)
    a = p.parse_args(argv)
    check(bool(re.fullmatch(r"[\w.-]+", a.section)), "--section", a.section, "letters, digits, '.', '_', '-' only")
    ranks = [int(v) for v in a.ranks.split(",") if v.strip()]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        ns = argparse.Namespace(
            rank=r, set=a.set, backbone_weights=a.backbone_weights, data_root=a.data_root, seed=a.seed
        )
        if train_deepfacto(config_from_cli(ns), out / f"r{r}").get("status") == "stopped":
            print(f"[deepfacto bench] r = {r} stopped: the later ranks are not started", file=sys.stderr)
            break  # a stop request (Ctrl-C) ends the bench, not just this rank
    # the table covers every finished run under --out (so ranks can be run separately: --ranks "")
    dirs = [d for d in out.glob("r*") if (read_json(d / "summary.json") or {}).get("status") == "finished"]
    dirs.sort(key=lambda d: read_json(d / "summary.json")["rank"])
    rows = []
    for d in dirs:  # runs from before nmf_residual_backbone was in the summary: take it from the metrics
        s, last = read_json(d / "summary.json"), (read_metrics(d) or [{}])[-1]
        rows.append({**s, "nmf_residual_backbone": s.get("nmf_residual_backbone", last.get("nmf_residual_backbone"))})
    table = bench_table(rows) + "\n" + attribute_table(dirs)
    (out / "table.md").write_text(table)
    print(table)
    if a.markdown:
        cmd = "python -m admm_core deepfacto bench " + shlex.join(argv if argv is not None else sys.argv[1:])
        write_section(a.markdown, a.section, section_text(dirs, rows, table), command=cmd)
        print(f"wrote section {a.section!r} of {a.markdown}", file=sys.stderr)
    return 0


def section_text(dirs: list[Path], rows: list[dict], table: str) -> str:
    """The block ``bench --markdown`` writes: the settings and device, then the tables."""
    default = json.loads(json.dumps(DeepFactoConfig().to_dict()))  # as config.json holds it (tuples → lists)
    cfgs = set()
    for d in dirs:  # the settings that differ from the defaults (rank aside)
        c = (read_json(d / "config.json") or {}).get("deepfacto", {})
        # the device has its own line (an `evaluate` elsewhere rewrites it in config.json)
        c = {k: v for k, v in c.items() if k not in ("rank", "device") and v != default.get(k) and k in default}
        cfgs.add(json.dumps(c, sort_keys=True))
    devices = sorted({str(r.get("device")) for r in rows})
    machines = list(dict.fromkeys(m for d in dirs if (m := (read_json(d / "status.json") or {}).get("machine"))))
    lines = [f"Device: {', '.join(devices)}" + (f" ({' | '.join(machines)})" if machines else "") + ".", ""]
    evaluated = list(dict.fromkeys(m for r in rows if (m := r.get("evaluated_on"))))
    if evaluated:  # `evaluate` re-fitted the SVMs elsewhere: the "eval s" column was timed there
        lines += [f"Attribute SVMs and the eval s column: `deepfacto evaluate` on {' | '.join(evaluated)}.", ""]
    if len(cfgs) == 1:
        lines += [f"Settings that differ from the defaults (besides r): `{next(iter(cfgs))}`", ""]
    return "\n".join(lines) + "\n" + table


def bench_table(rows: list[dict]) -> str:
    """One row per run. Verification: DeepFacto's embedding and the backbone before it, on all test faces
    (3,000 + 3,000 pairs; runs from before that: the 300-face check). S mismatch ‖S_train − S_test‖/‖S_test‖
    and the reconstruction error ‖block_1(X) − M S_test‖/‖block_1(X)‖ on the Block-ADMM training images."""
    head = [
        "r", "S mode", "DeepFacto (S, g×g)", "raw backbone (Z, g×g)", "DeepFacto (S, mean)", "raw backbone (Z, mean)",
        "fine-tuned backbone (Z, mean)", "majority", "paper DeepFacto", "verification DeepFacto", "verification backbone",
        "pairs", "S mismatch", "‖block_1(X) − M S_test‖/‖block_1(X)‖", "‖Z_1 − MS‖/‖Z_1‖", "S zeros",
        "backbone train s", "DeepFacto train s", "eval s", "SVM C",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    pct = lambda v: "—" if v is None else f"{100 * v:.1f}"  # noqa: E731  (runs from before svm_grid lack the mean columns)
    num = lambda v, f: "—" if v is None else format(v, f)  # noqa: E731
    for s in rows:
        tm = s.get("timings_s", {})
        paper = s.get("paper_mean_attribute_accuracy")
        rec = s.get("reconstruction_error", s.get("nmf_residual_backbone"))  # older runs: with the training S
        cs = s.get("svm_c", [0.01])  # runs from before the C selection used 0.01
        c_txt = f"{cs[0]:g}" if len(cs) == 1 else f"chosen from {', '.join(f'{c:g}' for c in cs)}"
        pairs = s.get("verification_pairs")
        cells = [
            s["rank"], s.get("s_mode", "admm"), f"{pct(s['mean_attribute_accuracy'])} (g={s.get('svm_grid', 1)})",
            pct(s["raw_backbone_attribute_accuracy"]), pct(s.get("mean_attribute_accuracy_global")),
            pct(s.get("raw_backbone_attribute_accuracy_global")), pct(s["finetuned_backbone_attribute_accuracy"]),
            f"{100 * s['majority_attribute_accuracy']:.1f}", "—" if paper is None else paper,
            pct(s["test_accuracy"]), pct(s.get("backbone_verification_accuracy")),
            f"{pairs // 2} + {pairs // 2}" if pairs else "500 + 500 (300 faces)", num(s.get("s_mismatch"), ".2e"),
            num(rec, ".3f"), f"{s['nmf_residual']:.3f}", f"{100 * s['s_sparsity']:.0f}%",
            f"{tm.get('backbone_train_s', 0):.0f}", f"{tm.get('deepfacto_train_s', 0):.0f}",
            f"{tm.get('attribute_eval_s', 0):.0f}", c_txt,
        ]  # fmt: skip
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def evaluate(argv=None) -> int:
    """`admm deepfacto evaluate --run DIR [--set svm_c=...]`."""

    p = argparse.ArgumentParser(
        prog="admm deepfacto evaluate", description="redo the attribute SVMs of finished DeepFacto runs (no training)"
    )
    p.add_argument("--run", action="append", required=True, help="a run folder (repeatable)")
    p.add_argument("--set", action="append", metavar="NAME=VALUE", help=f"one of {list(EVAL_FIELDS)}")
    a = p.parse_args(argv)
    overrides = parse_sets(a.set)
    for r in a.run:
        s = evaluate_run(r, overrides)
        acc, raw, maj = (
            100 * s[k]
            for k in ("mean_attribute_accuracy", "raw_backbone_attribute_accuracy", "majority_attribute_accuracy")
        )
        print(f"{r}: mean attribute accuracy {acc:.2f} (raw backbone {raw:.2f}, majority {maj:.2f})")
    return 0


def ship(argv=None) -> int:
    """`admm deepfacto ship --run DIR [--run DIR] [--out assets/models]`: export finished runs
    (and the backbone they started from) as the shipped, checksummed safetensors models."""

    p = argparse.ArgumentParser(
        prog="admm deepfacto ship", description="export finished DeepFacto runs as the project's shipped models"
    )
    p.add_argument("--run", action="append", required=True, help="a finished run folder (repeatable)")
    p.add_argument("--out", default=str(models_dir()), help="folder of the shipped models (default: %(default)s)")
    a = p.parse_args(argv)
    command = "admm deepfacto ship " + " ".join(f"--run {shlex.quote(r)}" for r in a.run)
    man = export([Path(r) for r in a.run], Path(a.out), command)
    for m in man["models"]:
        print(f"{Path(a.out) / m['file']}: {m['bytes'] / 1e6:.2f} MB, sha256 {m['sha256'][:16]}…")
    return 0


def attribute_table(run_dirs) -> str:
    """Per-attribute test accuracy (%) of each run's DeepFacto SVMs, beside raw backbone features and the majority class."""
    runs = [(read_json(Path(d) / "summary.json")["rank"], read_json(Path(d) / "attributes.json")) for d in run_dirs]
    if not runs:
        return ""
    head = "| attribute | " + " | ".join(f"DeepFacto r={r}" for r, _ in runs) + " | raw backbone | majority |"
    lines = [head, "|---" * (len(runs) + 3) + "|"]
    first = runs[0][1]
    for k, row in enumerate(first):
        vals = " | ".join(f"{100 * attrs[k]['deepfacto']:.1f}" for _, attrs in runs)
        lines.append(f"| {row['attribute']} | {vals} | {100 * row['raw_backbone']:.1f} | {100 * row['majority']:.1f} |")
    means = " | ".join(f"**{100 * np.mean([a['deepfacto'] for a in attrs]):.1f}**" for _, attrs in runs)
    lines.append(
        f"| mean | {means} | {100 * np.mean([a['raw_backbone'] for a in first]):.1f} | {100 * np.mean([a['majority'] for a in first]):.1f} |"
    )
    return "\n".join(lines) + "\n"
