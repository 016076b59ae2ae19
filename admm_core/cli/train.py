"""``admm train``: one configuration into a run directory (a preset, a config file or the defaults,
changed by the options), or ``--resume`` a stopped run; DeepFacto runs go to their own commands."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

from .. import distributed, network
from ..checkpoint import verify_checkpoint
from ..deepfacto import commands as deepfacto
from ..rundir import new_run_dir, read_json, write_text_atomic
from ..spec import datasets
from ..spec.archs import OWN, OWN_MESSAGE, archs_for
from ..spec.config import DEVICES, INITS, LOSSES, ConfigError, RunConfig
from ..spec.datasets import OWN_DATA
from ..spec.deepfacto import PRESET as DEEPFACTO_PRESET
from ..spec.kinds import DEEPFACTO, NETWORK, run_kind
from ..spec.methods import DEFAULT_METHOD
from ..spec.methods import names_for as methods_for
from ..spec.methods.base import LR_SCHEDULES
from ..spec.presets import PRESETS, preset_config
from ..spec.resources import batch_note, preflight, processes_note
from ..spec.settings import parse_numbers, parse_sets, parse_widths
from ..status import RunBusy, install_stop_handlers, run_busy

NAME = "train"


def add_parser(sub) -> None:
    t = sub.add_parser(NAME, help="train one configuration into a run directory")
    t.add_argument("--preset", help=f"one of: {', '.join(PRESETS)}")
    t.add_argument(
        "--method", help=f"one of: {', '.join(methods_for(NETWORK))} (DeepFacto: --preset {DEEPFACTO_PRESET})"
    )
    t.add_argument("--config", help="a config.json to start from (e.g. of an earlier run)")
    t.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    t.add_argument(
        "--model",
        metavar="FILE.py:NAME",
        help="your own network: an nn.Module class or a no-argument function in FILE.py; --split names its cut "
        "points (admm cuts FILE.py:NAME lists them)",
    )
    t.add_argument(
        "--leaf-modules", metavar="PATHS", help="with --model: module paths kept whole, not traced (comma-separated)"
    )
    t.add_argument("--out", metavar="DIR", help="run directory (default: runs/<time>-<preset>-<method>-s<seed>)")
    t.add_argument("--epochs", type=int)
    t.add_argument("--data", help=f"data set name (overrides the preset): {', '.join(datasets.names_for(NETWORK))}")
    folders = ", ".join(datasets.data_folders())
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
        choices=list(INITS),
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
    t.add_argument("--loss", choices=list(LOSSES))
    t.add_argument("--batch-size", type=int)
    t.add_argument("--seed", type=int)
    t.add_argument("--device", choices=list(DEVICES))
    t.add_argument("--eval-every", type=int)
    t.add_argument("--lr-schedule", choices=list(LR_SCHEDULES), help="Θ step size over the run (every method)")
    t.add_argument("--lr", type=float, help="η, Θ step size")
    t.add_argument("--z-lr", type=float, help="ζ, Z step size")
    t.add_argument("--beta", help="β, one value or one per block (comma-separated)")
    t.add_argument("--primal-steps", type=int, help="k, primal passes per dual step")
    t.add_argument(
        "--set", action="append", metavar="NAME=VALUE", help="any method setting, e.g. --set z_optimizer=adam"
    )
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.add_argument("--no-tensorboard", action="store_true", help="no TensorBoard event files in the run folder")
    t.add_argument("--rank", type=int, help=f"{DEEPFACTO_PRESET}: NMF rank r (paper: 4, 32, 256)")
    t.add_argument(
        "--backbone-weights",
        metavar="FILE",
        help=f"{DEEPFACTO_PRESET}: face backbone weights (default: cached, trained here if missing)",
    )
    t.add_argument("--preflighted", action="store_true", help=argparse.SUPPRESS)  # its launcher checked it
    t.set_defaults(func=run)


TRAIN_FLAGS = ("epochs", "batch_size", "loss", "seed", "device", "eval_every", "lr_schedule")
METHOD_FLAGS = (
    ("lr", float),
    ("z_lr", float),
    ("beta", lambda text: parse_numbers(text, "beta")),
    ("primal_steps", int),
)


def config_from_args(a: argparse.Namespace) -> RunConfig:
    """Preset (or defaults) + method + command-line overrides -> validated RunConfig."""
    if a.config:
        cfg = RunConfig.from_json(config_text(a))
        if a.method:
            cfg = cfg.replace(method=a.method, method_params={})
    elif a.preset:
        cfg = preset_config(a.preset, a.method or DEFAULT_METHOD)
    else:
        cfg = RunConfig(method=a.method or DEFAULT_METHOD)
    ch: dict = {}
    if a.data:
        ch["data__name"] = a.data
    if a.data_root:
        ch["data__root"] = a.data_root
    cfg = cfg.shortened(train_limit=a.train_limit, test_limit=a.test_limit)
    if a.arch:
        ch["model__arch"] = a.arch
    if a.hidden is not None:
        ch["model__hidden"] = parse_widths(a.hidden)
    if a.width is not None:
        ch["model__width"] = a.width
    if a.init is not None or a.init_std is not None:  # --init-std alone means the normal initialisation
        ch["model__init"] = a.init or "normal"
    if a.init_std is not None:
        ch["model__init_std"] = a.init_std
    if a.split is not None:
        ch["model__split"] = tuple(s for s in a.split.split(",") if s) if a.split != "default" else None
    ch.update({f"train__{k}": getattr(a, k) for k in TRAIN_FLAGS if getattr(a, k) is not None})
    if getattr(a, "no_tensorboard", False):
        ch["train__tensorboard"] = False
    mp = {k: conv(v) if isinstance(v, str) else v for k, conv in METHOD_FLAGS if (v := getattr(a, k)) is not None}
    mp.update(parse_sets(a.set))
    if mp:
        ch["method_params"] = {**cfg.method_params, **mp}
    cfg = cfg.augmented(a.augment, a.augment_pad, False if a.no_flip else None)
    return cfg.replace(**ch) if ch else cfg


def config_text(a) -> str:
    """The text of ``--config``, read once per command (kept on ``a``: the kind check and the config
    read the same text)."""
    if getattr(a, "config_text", None) is None:
        try:
            a.config_text = Path(a.config).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--config {a.config!r}: cannot read it ({type(e).__name__}: {e})") from None
    return a.config_text


def run(a) -> int:
    joined = distributed.init_from_env(a.device or "auto")  # under torchrun: join its process group
    try:
        if _is_deepfacto(a):  # its own config and CLI (admm_core.deepfacto.commands)
            return deepfacto.cli_train(a)
        if a.model or (a.resume and own_source(Path(a.resume))):
            return _train_model_file(a)
        cfg, run_dir = _resumed(a) if a.resume else _new(a)
        return _train(a, cfg, distributed.broadcast(run_dir))  # rank 0's choice: one directory for every rank
    finally:
        if joined:
            distributed.shutdown()


def own_source(run_dir: Path) -> dict | None:
    """The model file a run of ``--model`` was built from (model.json's ``source``), else None."""
    from ..own import describe

    try:
        src = describe(run_dir).get("source")
    except (OSError, ValueError):
        return None
    return src if isinstance(src, dict) else None


def _train_model_file(a) -> int:
    """``--model FILE.py:Name`` (a new run through :mod:`admm_core.own`) or ``--resume`` of one:
    the file imported again, refused when it changed since the run started."""
    from .. import modelfile, own

    should_stop = install_stop_handlers()
    if a.resume:
        run_dir = Path(a.resume)
        cfg = RunConfig.from_json((run_dir / "config.json").read_text())
        import torch

        torch.manual_seed(cfg.train.seed)  # killed before its first checkpoint, the run starts again from the same Θ
        model = modelfile.reload(own_source(run_dir), f"--resume {str(run_dir)!r}")
        print(f"run dir: {run_dir}", file=sys.stderr, flush=True)
        bar = _bar(a, a.epochs or cfg.train.epochs, run_dir)
        run = own.resume(model, run_dir, epochs=a.epochs, on_progress=_progress(bar), should_stop=should_stop)
    else:
        if a.preset or a.arch or a.hidden or a.width:
            raise ConfigError(
                "--model: the network comes from the file; leave --preset, --arch, --hidden and --width out"
            )
        cfg = config_from_args(a)
        import torch

        torch.manual_seed(cfg.train.seed)  # the file's initialisation is the seed's, as for the built-in networks
        model, source = modelfile.load(a.model)
        split = [s for s in (a.split or "").split(",") if s and s != "default"]
        leaves = [s for s in (a.leaf_modules or "").split(",") if s]
        # every train field (a --config's too: the dashboard's form); the config's model part is the file's
        train = {f.name: getattr(cfg.train, f.name) for f in dataclasses.fields(cfg.train)}
        bar = _bar(a, cfg.train.epochs, None)
        run = own.train(
            model, split, cfg.data.name, cfg.method, leaf_modules=leaves, source=source,
            settings=cfg.method_params, train_limit=cfg.data.train_limit, test_limit=cfg.data.test_limit,
            data_root=cfg.data.root, out=a.out, name=source["name"].lower(), on_progress=_progress(bar),
            should_stop=should_stop, **train,
        )  # fmt: skip
        print(f"run dir: {run.dir}", file=sys.stderr, flush=True)
    if bar:
        bar.close()
    print(json.dumps(run.summary, indent=2))
    return 0


def _bar(a, epochs: int, run_dir: Path | None):
    if a.quiet:
        return None
    bar = tqdm(
        total=epochs,
        unit="epoch",
        bar_format="{l_bar}{bar}| {n:.2f}/{total} [{elapsed}<{remaining}] {postfix}",
        file=sys.stderr,
    )
    if run_dir is not None:
        bar.n = float((read_json(run_dir / "status.json", {}) or {}).get("epoch", 0))
    return bar


def _is_deepfacto(a) -> bool:
    """A DeepFacto run: its preset, a resume of one, or its config file (the dashboard launches those this way)."""
    if a.preset == DEEPFACTO_PRESET:
        return True
    if a.resume and run_kind(read_json(Path(a.resume) / "config.json", {})) == DEEPFACTO:
        return True
    if not a.config:
        return False
    try:
        given = json.loads(config_text(a))
    except ValueError:
        return False  # not JSON: the config's own reading says so
    return isinstance(given, dict) and run_kind(given) == DEEPFACTO


def _resumed(a) -> tuple[RunConfig, Path]:
    """The config of the run ``--resume`` names (``--epochs`` longer or shorter), checked."""
    run_dir = Path(a.resume)
    try:
        text = (run_dir / "config.json").read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--resume {str(run_dir)!r}: no readable config.json there ({type(e).__name__})") from None
    try:
        cfg = RunConfig.from_json(text)
    except ConfigError as e:
        raise ConfigError(f"--resume {str(run_dir)!r}: config.json is damaged: {e}") from None
    if cfg.model.arch == OWN or cfg.data.name == OWN_DATA:
        raise ConfigError(f"--resume {str(run_dir)!r}: {OWN_MESSAGE}")
    if run_busy(run_dir):  # a live worker trains it (started from a dashboard, or another shell)
        raise RunBusy(f"--resume {str(run_dir)!r}: being trained already; stop it first")
    if (run_dir / "checkpoint.pt").exists():
        verify_checkpoint(run_dir / "checkpoint.pt")  # refuse a damaged checkpoint before touching the run
    if a.epochs:
        cfg = cfg.replace(train__epochs=a.epochs)
    preflight(cfg, processes=processes_here())
    if a.epochs:
        distributed.barrier()  # every rank has read config.json before rank 0 rewrites it
        if distributed.is_lead():
            write_text_atomic(run_dir / "config.json", cfg.to_json())
    return cfg, run_dir


def processes_here() -> int:
    """The run's worker processes as the preflight counts them (the dashboard's Processes field):
    torchrun's world when all of it is on this machine (``--standalone``), so ``admm train`` refuses
    what the form refuses (a method of one process, too many GPUs, the processes' memory together);
    1 across machines, where the preflight's checks are this machine's and the launcher checks the
    world (``distributed.distribute``)."""
    world = distributed.world_size()
    return world if os.environ.get("LOCAL_WORLD_SIZE", str(world)) == str(world) else 1


def _new(a) -> tuple[RunConfig, Path]:
    """The config the options describe, checked before any directory exists, and its run directory."""
    cfg = config_from_args(a)
    if not a.preflighted:  # device, data, split, per-block values, memory, the worker processes
        preflight(cfg, processes=processes_here())
        if note := batch_note(cfg):
            print(f"note: {note}", file=sys.stderr)
        if (note := processes_note(cfg, processes_here())) and distributed.is_lead():
            print(f"note: {note}", file=sys.stderr)
    # new_run_dir creates the directory: only rank 0 picks it, the others take its choice
    return cfg, Path(a.out) if a.out else (new_run_dir(cfg) if distributed.is_lead() else None)


def _train(a, cfg: RunConfig, run_dir: Path) -> int:
    should_stop = install_stop_handlers()
    lead = distributed.is_lead()
    if lead:
        print(f"run dir: {run_dir}", file=sys.stderr, flush=True)
    bar = _bar(a, cfg.train.epochs, run_dir if a.resume else None) if lead else None
    # a worker the dashboard launched reads the config.json it trains (--config RUN/config.json --out
    # RUN): the file holds this config already and is not written again
    written = bool(a.config and not a.resume) and (
        Path(a.config).resolve() == (Path(run_dir) / "config.json").resolve() and config_text(a) == cfg.to_json()
    )
    summary = network.train(
        cfg, run_dir, resume=bool(a.resume), on_progress=_progress(bar), should_stop=should_stop, config_written=written
    )
    if bar:
        bar.close()
    if lead:
        print(json.dumps(summary, indent=2))
    return 0


def _progress(bar):
    """The run's ``on_progress``: the bar's epoch and the last evaluation (nothing without a bar)."""

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

    return on_progress
