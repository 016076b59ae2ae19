"""Command line: ``python -m admm_core {train,presets,methods,archs,datasets,evaluate,bench,sweep}``.

python -m admm_core train --preset mnist-mlp-mse --method block-admm --epochs 10
python -m admm_core train --resume runs/<dir>            # continue a stopped run
python -m admm_core presets
python -m admm_core sweep --preset digits-mlp --method block-admm --trials 12 --space 'beta=log:0.1:10'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import data as data_mod
from .config import ConfigError, ModelConfig, RunConfig, augment_changes, parse_sets
from .errors import CheckpointError, DataError, ImageError
from .kinds import NETWORK
from .methods import METHODS
from .methods import names_for as methods_for
from .models import ARCHS, archs_for
from .presets import PRESETS, preset_config


def _floats(text: str, name: str = "beta"):
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{name} = {text!r}: write a number or numbers separated by commas") from None
    if not vals:
        raise ConfigError(f"{name} = {text!r}: give a number")
    return vals[0] if len(vals) == 1 else vals


def _ints(text: str, name: str = "model.hidden") -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{name} = {text!r}: write integers separated by commas, e.g. 128,128") from None


def config_from_args(a: argparse.Namespace) -> RunConfig:
    """Preset (or defaults) + method + command-line overrides -> validated RunConfig."""
    if a.config:
        try:
            text = Path(a.config).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--config {a.config!r}: cannot read it ({type(e).__name__}: {e})") from None
        cfg = RunConfig.from_json(text)
        if a.method:
            cfg = cfg.replace(method=a.method, method_params={})
    elif a.preset:
        cfg = preset_config(a.preset, a.method or "block-admm")
    else:
        cfg = RunConfig(method=a.method or "block-admm")
    ch: dict = {}
    if a.data:
        ch["data__name"] = a.data
    if a.data_root:
        ch["data__root"] = a.data_root
    cfg = cfg.shortened(train_limit=a.train_limit, test_limit=a.test_limit)
    if a.arch:
        ch["model__arch"] = a.arch
    if a.hidden is not None:
        ch["model__hidden"] = _ints(a.hidden)
    if a.width is not None:
        ch["model__width"] = a.width
    if a.init is not None or a.init_std is not None:  # --init-std alone means the normal initialisation
        ch["model__init"] = a.init or "normal"
    if a.init_std is not None:
        ch["model__init_std"] = a.init_std
    ch.update(augment_changes(a.augment, a.augment_pad, a.no_flip))
    if a.split is not None:
        ch["model__split"] = tuple(s for s in a.split.split(",") if s) if a.split != "default" else None
    for key, attr in (
        ("epochs", "epochs"),
        ("batch_size", "batch_size"),
        ("loss", "loss"),
        ("seed", "seed"),
        ("device", "device"),
        ("eval_every", "eval_every"),
        ("lr_schedule", "lr_schedule"),
    ):
        if getattr(a, attr) is not None:
            ch[f"train__{key}"] = getattr(a, attr)
    mp = {}
    for flag, key, conv in (
        ("lr", "lr", float),
        ("z_lr", "z_lr", float),
        ("beta", "beta", _floats),
        ("primal_steps", "primal_steps", int),
    ):
        v = getattr(a, flag)
        if v is not None:
            mp[key] = conv(v) if isinstance(v, str) else v
    mp.update(parse_sets(a.set))
    if mp:
        ch["method_params"] = {**cfg.method_params, **mp}
    return cfg.replace(**ch) if ch else cfg


def cmd_train(a) -> int:
    from . import distributed

    joined = distributed.init_from_env(a.device or "auto")  # under torchrun: join its process group
    try:
        return _cmd_train(a)
    finally:
        if joined:
            distributed.shutdown()


def _cmd_train(a) -> int:
    from .checkpoint import verify_checkpoint
    from .distributed import barrier, broadcast, is_lead
    from .kinds import DEEPFACTO, run_kind
    from .network import train
    from .resources import preflight
    from .rundir import new_run_dir, read_json, read_json_dict, write_text_atomic
    from .status import RunBusy, install_stop_handlers, run_busy

    resumes_deepfacto = bool(a.resume) and run_kind(read_json(Path(a.resume) / "config.json", {})) == DEEPFACTO
    # a DeepFacto run's config file (the dashboard launches those this way)
    deepfacto_config = bool(a.config) and run_kind(read_json_dict(Path(a.config))) == DEEPFACTO
    if (
        a.preset == "lfwa-deepfacto" or resumes_deepfacto or deepfacto_config
    ):  # its own config and CLI (admm_core.deepfacto)
        from .deepfacto.commands import cli_train

        return cli_train(a)
    if a.resume:
        run_dir = Path(a.resume)
        try:
            text = (run_dir / "config.json").read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(
                f"--resume {str(run_dir)!r}: no readable config.json there ({type(e).__name__})"
            ) from None
        try:
            cfg = RunConfig.from_json(text)
        except ConfigError as e:
            raise ConfigError(f"--resume {str(run_dir)!r}: config.json is damaged: {e}") from None
        if run_busy(run_dir):  # a live worker trains it (started from a dashboard, or another shell)
            raise RunBusy(f"--resume {str(run_dir)!r}: being trained already; stop it first")
        if (run_dir / "checkpoint.pt").exists():
            verify_checkpoint(run_dir / "checkpoint.pt")  # refuse a damaged checkpoint before touching the run
        if a.epochs:
            cfg = cfg.replace(train__epochs=a.epochs)
        preflight(cfg)
        if a.epochs:
            barrier()  # every rank has read config.json before rank 0 rewrites it
            if is_lead():
                write_text_atomic(run_dir / "config.json", cfg.to_json())
    else:
        cfg = config_from_args(a)
        preflight(cfg)  # device, data, split, per-block values, memory: before any directory exists
        # new_run_dir creates the directory: only rank 0 picks it, the others take its choice
        run_dir = Path(a.out) if a.out else (new_run_dir(cfg) if is_lead() else None)
    run_dir = broadcast(run_dir)  # rank 0's choice: every rank trains into one directory
    should_stop = install_stop_handlers()
    if is_lead():
        print(f"run dir: {run_dir}", file=sys.stderr, flush=True)
    bar = None
    if not a.quiet and is_lead():
        from tqdm import tqdm

        bar = tqdm(
            total=cfg.train.epochs,
            unit="epoch",
            bar_format="{l_bar}{bar}| {n:.2f}/{total} [{elapsed}<{remaining}] {postfix}",
            file=sys.stderr,
        )
        if a.resume:
            st = read_json(run_dir / "status.json", {}) or {}
            bar.n = float(st.get("epoch", 0))

    def on_progress(epochs_done: float, m):
        if bar is None:
            return
        bar.n = round(epochs_done, 2)
        if m is not None:
            res = ",".join(f"{r:.3f}" for r in m["residuals"])
            bar.set_postfix_str(
                f"test {m['test_accuracy']:.4f} train {m['train_accuracy']:.4f} loss {m['train_loss']:.4f}"
                + (f" res [{res}]" if res else "")
            )
        bar.refresh()

    summary = train(cfg, run_dir, resume=bool(a.resume), on_progress=on_progress, should_stop=should_stop)
    if bar:
        bar.close()
    if is_lead():
        print(json.dumps(summary, indent=2))
    return 0


def cmd_presets(a) -> int:
    from .presets import OTHER_PRESETS

    width = max(map(len, [*PRESETS, *OTHER_PRESETS]))
    for name, p in PRESETS.items():
        print(f"{name:<{width}}  {p['help']}")
    for name, text in OTHER_PRESETS.items():
        print(f"{name:<{width}}  {text}")
    return 0


def cmd_methods(a) -> int:
    for name, cls in METHODS.items():
        print(f"{name}: {cls.summary}")
        for s in cls.settings():
            choices = f" {list(s['choices'])}" if s["choices"] else ""
            print(f"    {s['name']} = {s['default']!r}{choices}  — {s['help']}")
    return 0


def cmd_archs(a) -> int:
    """The architecture registry (admm_core.models.ARCHS): layers and split points, from the torch-free tables."""
    for name, arch in ARCHS.items():
        names = [n for n, _, _ in arch.table((3, 32, 32), ModelConfig(name), 10)]
        split = arch.splits if arch.splits is not None else tuple(names[:-1])
        serves = "" if arch.kind == "network" else f"; {arch.kind} runs"
        print(f"{name}: {arch.label or name}{' (image inputs)' if arch.image_input else ''}{serves}")
        print(
            f"    layers {', '.join(names)}; split after any of {', '.join(split)}; default {','.join(arch.default_split(names))}"
        )
    return 0


def cmd_datasets(a) -> int:
    """The data-set registry (admm_core.data.DATASETS) and which of its sets are present here."""
    here = set(data_mod.available(a.data_root))
    for name, s in data_mod.DATASETS.items():
        where = f"ships with {s.ships_with}" if s.bundled else "<root>/" + " or <root>/".join(s.files)
        serves = "" if s.kind == "network" else f"; {s.kind} runs"
        print(
            f"{name}: {'available' if name in here else 'not found'}; input {s.input_shape}, {s.n_classes} {s.labels}, "
            f"{s.n_train} / {s.n_test} samples; {where}{serves}"
        )
    return 0


def cmd_evaluate(a) -> int:
    import torch

    from .checkpoint import load_checkpoint
    from .network import build

    run_dir = Path(a.run)
    cfg = RunConfig.from_json((run_dir / "config.json").read_text())
    if a.data_root:
        cfg = cfg.replace(data__root=a.data_root)
    sess = build(cfg)
    epoch, _ = load_checkpoint(run_dir / "checkpoint.pt", sess)
    with torch.no_grad():
        m = sess.evaluate()
    print(json.dumps({"epoch": epoch, **m}, indent=2))
    return 0


def cmd_sweep(a) -> int:
    """Create or resume an Optuna study whose trials are run directories (admm_core.sweep)."""
    import time

    from . import sweep as S
    from .rundir import default_runs_dir
    from .status import install_stop_handlers

    root = default_runs_dir()
    storage = S.open_storage(a.storage, root)
    exists = bool(a.name) and a.name in S.study_names(storage)
    spec = None
    if a.preset or a.method or a.space or not exists:
        for flag, v in (("--preset", a.preset), ("--method", a.method), ("--space", a.space)):
            if not v and not exists:
                raise ConfigError(f"{flag}: required to create a study (or give --name of an existing one)")
        name = a.name or f"{a.preset}-{a.method}-{time.strftime('%Y%m%d-%H%M%S')}"
        if not exists:
            spec = S.SweepSpec(
                name=name,
                preset=a.preset,
                method=a.method,
                space=a.space,
                trials=a.trials or 20,
                objective=a.objective,
                epochs=a.epochs,
                pruner=a.pruner,
                train_limit=a.train_limit,
                test_limit=a.test_limit,
                seed=a.seed,
            )
        else:  # resuming with the creation flags repeated: they must agree with the stored study
            stored = S.SweepSpec.from_attrs(S.load_study(a.name, storage).user_attrs["sweep"])
            spec = S.SweepSpec(
                **{
                    **stored.to_attrs(),
                    "preset": a.preset or stored.preset,
                    "method": a.method or stored.method,
                    "space": a.space or stored.space,
                }
            )
    else:
        name = a.name
    log = (lambda *x: None) if a.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    should_stop = install_stop_handlers()
    try:
        if a.worker is not None:
            S.run_worker(name, storage, root, should_stop, log, worker=a.worker)
            return 0
        if a.report:  # the report of a stored study as it stands (dead workers' trials marked failed)
            study = S.load_study(name, storage)
            S.fail_dead_trials(study)
        else:
            log(f"study {name} in {a.storage or S.default_storage(root)}")
            study, spec = S.run_sweep(spec, name, a.storage, root, a.jobs, a.trials, should_stop, log)
    except S.Interrupted:
        return 130
    c = S.counts(study)
    out = {"study": name, "trials": c, "wall_time_s": round(S.wall_time_s(study), 1)}
    try:
        out["best"] = {"trial": study.best_trial.number, "value": study.best_value, "params": study.best_params}
        out["best"]["run_dir"] = study.best_trial.user_attrs.get("run_dir")
    except ValueError:
        out["best"] = None
    png = None
    if a.importance_png:
        png = S.importance_png(study, Path(a.importance_png))
    if a.markdown:
        md = Path(a.markdown)
        md.parent.mkdir(parents=True, exist_ok=True)
        rel = None if png is None else os.path.relpath(png, md.parent)
        md.write_text(S.markdown_report(study, rel))
        log(f"wrote {md}")
    print(json.dumps(out, indent=2))
    return 0


def cmd_heatmaps(a) -> int:
    from .heatmaps import heatmap_grid, write_png

    images = [f for group in a.image for f in group]
    grid = heatmap_grid(a.run, images, a.components, alpha=a.alpha, normalize=a.normalize)
    write_png(a.out, grid)
    print(f"wrote {a.out} ({len(images)} image(s))")
    return 0


DEEPFACTO_USAGE = (
    "usage: admm deepfacto {bench [--ranks 4,32,256] [--out DIR] [--markdown FILE] [--set NAME=VALUE ...]"
    " | evaluate --run DIR [--set svm_c=...] | grid --run DIR --out PNG | ship --run DIR [--run DIR] [--out DIR]}"
)


def deepfacto_main(argv: list) -> int:
    """`admm deepfacto bench|evaluate|grid|ship ...` (each has its own parser)."""
    from .deepfacto.commands import bench, evaluate, ship
    from .heatmaps import grid

    commands = {"bench": bench, "evaluate": evaluate, "grid": grid, "ship": ship}
    if not argv or argv[0] not in commands:
        print(DEEPFACTO_USAGE, file=sys.stderr)
        return 2
    try:
        return commands[argv[0]](argv[1:])
    except (ConfigError, DataError, ImageError, CheckpointError, FileNotFoundError) as e:  # one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk during an evaluation: one line, the run's files unchanged
        from .rundir import os_error_line

        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 1


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m admm_core", description="Block-ADMM workbench: train networks without end-to-end backprop"
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("train", help="train one configuration into a run directory")
    t.add_argument("--preset", help=f"one of: {', '.join(PRESETS)}")
    t.add_argument("--method", help=f"one of: {', '.join(methods_for(NETWORK))} (DeepFacto: --preset lfwa-deepfacto)")
    t.add_argument("--config", help="a config.json to start from (e.g. of an earlier run)")
    t.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    t.add_argument("--out", metavar="DIR", help="run directory (default: runs/<time>-<preset>-<method>-s<seed>)")
    t.add_argument("--epochs", type=int)
    t.add_argument("--data", help=f"data set name (overrides the preset): {', '.join(data_mod.names_for(NETWORK))}")
    folders = ", ".join(data_mod.data_folders())
    t.add_argument("--data-root", help=f"folder holding any of {folders} (default: $ADMM_DATA)")
    t.add_argument("--train-limit", type=int, help="use only the first N training samples")
    t.add_argument("--test-limit", type=int, help="use only the first N test samples")
    t.add_argument("--arch", choices=list(archs_for(NETWORK)))
    t.add_argument("--hidden", help="MLP hidden widths, e.g. 128,128")
    t.add_argument(
        "--split",
        help="split points, e.g. fc1,fc2 (MLP) or conv3_x (ResNet-18); 'default' for the default (see: archs)",
    )
    t.add_argument("--width", type=int, help="ResNet-18 base width (64 = standard, 16 = CPU-sized)")
    t.add_argument(
        "--init",
        choices=["default", "normal"],
        help="Θ's initialisation: the framework's, or normal (N(0, σ²) weights, zero biases)",
    )
    t.add_argument("--init-std", type=float, metavar="σ", help="σ of --init normal (implies it)")
    t.add_argument(
        "--augment", action="store_true", help="random crop (4-px padding) + flip of images, one view per epoch"
    )
    t.add_argument(
        "--augment-pad", type=int, metavar="N", help="augment with shifts of up to ± N pixels (implies --augment)"
    )
    t.add_argument(
        "--no-flip", action="store_true", help="augment without horizontal flips (digits; implies --augment)"
    )
    t.add_argument("--loss", choices=["mse", "ce"])
    t.add_argument("--batch-size", type=int)
    t.add_argument("--seed", type=int)
    t.add_argument("--device", choices=["auto", "cpu", "cuda"])
    t.add_argument("--eval-every", type=int)
    t.add_argument("--lr-schedule", choices=["constant", "cosine"], help="Θ step size over the run (every method)")
    t.add_argument("--lr", type=float, help="η, Θ step size")
    t.add_argument("--z-lr", type=float, help="ζ, Z step size")
    t.add_argument("--beta", help="β, one value or one per block (comma-separated)")
    t.add_argument("--primal-steps", type=int, help="k, primal passes per dual step")
    t.add_argument(
        "--set", action="append", metavar="NAME=VALUE", help="any method setting, e.g. --set z_optimizer=adam"
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--rank", type=int, help="lfwa-deepfacto: NMF rank r (paper: 4, 32, 256)")
    t.add_argument(
        "--backbone-weights",
        metavar="FILE",
        help="lfwa-deepfacto: face backbone weights (default: cached, trained here if missing)",
    )
    t.set_defaults(func=cmd_train)

    sub.add_parser("presets", help="list presets").set_defaults(func=cmd_presets)
    sub.add_parser("methods", help="list methods and their settings").set_defaults(func=cmd_methods)
    sub.add_parser("archs", help="list architectures, their layers and split points").set_defaults(func=cmd_archs)
    d = sub.add_parser("datasets", help="list data sets and whether each is present here")
    d.add_argument("--data-root")
    d.set_defaults(func=cmd_datasets)

    e = sub.add_parser("evaluate", help="evaluate a run's checkpoint")
    e.add_argument("--run", required=True)
    e.add_argument("--data-root")
    e.set_defaults(func=cmd_evaluate)

    sub.add_parser("bench", help="benchmarks (see python -m admm_core bench --help)", add_help=False)
    sub.add_parser("profile", help="where an epoch's seconds go, per phase (see admm profile --help)", add_help=False)
    sub.add_parser("deepfacto", help="DeepFacto on LFWA: bench | evaluate | grid (see admm deepfacto)", add_help=False)

    from .sweep import OBJECTIVES, PRUNERS

    w = sub.add_parser(
        "sweep",
        help="Optuna study over a method's settings; every trial is a run directory",
        description="Create (or resume, with --name of an existing study) an Optuna study. "
        "Space: NAME=KIND:ARGS with KIND log|float|int|logint (LOW:HIGH) or choice (A|B|C); NAME is a method "
        "setting (see `methods`), split, hidden, loss or batch_size.",
    )
    w.add_argument("--preset", help=f"one of: {', '.join(PRESETS)}")
    w.add_argument("--method", help=f"one of: {', '.join(methods_for(NETWORK))}")
    w.add_argument(
        "--trials", type=int, help="trial budget: finished + pruned trials (default 20; raises a resumed study's)"
    )
    w.add_argument(
        "--space", action="append", metavar="NAME=KIND:ARGS", help="e.g. beta=log:0.1:10 or split=choice:fc1|fc1,fc2"
    )
    w.add_argument("--objective", choices=list(OBJECTIVES), default="best_test_accuracy")
    w.add_argument("--epochs", type=int, help="epochs per trial (default: the preset's)")
    w.add_argument("--pruner", choices=list(PRUNERS), default="median")
    w.add_argument("--jobs", type=int, default=1, help="worker processes pulling trials from the study")
    w.add_argument("--storage", help="Optuna RDB URL (default: sqlite:///<runs root>/sweeps.db)")
    w.add_argument("--name", help="study name (default: <preset>-<method>-<time>); an existing one is resumed")
    w.add_argument("--train-limit", type=int, help="use only the first N training samples")
    w.add_argument("--test-limit", type=int, help="use only the first N test samples")
    w.add_argument("--seed", type=int, help="sampler seed (default: random)")
    w.add_argument("--markdown", metavar="FILE", help="write the study's report (best vs preset, trial table) here")
    w.add_argument("--importance-png", metavar="FILE", help="write the parameter-importance plot here")
    w.add_argument("--report", action="store_true", help="only write --markdown / --importance-png of study --name")
    w.add_argument("--quiet", action="store_true", help="no per-trial log lines")
    w.add_argument("--worker", type=int, help=argparse.SUPPRESS)  # index of an extra worker process
    w.set_defaults(func=cmd_sweep)

    h = sub.add_parser("heatmaps", help="DeepFacto: grid of NMF score heatmaps over face images")
    h.add_argument("--run", required=True, help="a finished lfwa-deepfacto run directory")
    h.add_argument(
        "--image",
        required=True,
        action="append",
        nargs="+",
        metavar="FILE",
        help="face image(s); repeat or list several",
    )
    h.add_argument("--out", required=True, metavar="PNG")
    h.add_argument("--components", type=_ints, help="rows of S to show, e.g. 0,1,2 (default: the 6 most used)")
    h.add_argument("--alpha", type=float, default=0.5, help="colour-map opacity")
    h.add_argument(
        "--normalize",
        choices=["component", "image"],
        default="component",
        help="scale per component (over training faces) or per image",
    )
    h.set_defaults(func=cmd_heatmaps)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the benchmark has its own parser (argparse.REMAINDER drops leading options)
        from .bench import main as bench_main

        return bench_main(argv[1:])
    if argv[:1] == ["deepfacto"]:
        return deepfacto_main(argv[1:])
    if argv[:1] == ["profile"]:
        from .speed import main as profile_main

        return profile_main(argv[1:])
    args = make_parser().parse_args(argv)
    for k, v in vars(args).items():  # argparse turns a lone "--" value (``--hidden=--``) into []
        if v == []:
            setattr(args, k, "--")
        elif isinstance(v, list) and k == "set":
            setattr(args, k, ["--" if x == [] else x for x in v])
    try:
        return args.func(args)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:  # ValueError: bad image file / argument (message names it)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # unwritable run directory, full disk: one line naming the file
        from .rundir import os_error_line

        print(f"error: {os_error_line(e)}", file=sys.stderr)
        return 1
