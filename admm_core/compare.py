"""What tells runs apart, and how they ended: the comparison of run directories, torch-free.

Read by the dashboard's Compare page (its legends, groups, table and CSV) and by ``admm compare``
(the same table and CSV on the command line). Everything here works on what a run directory holds:
``config.json`` (as a dict: a run of a method since removed still compares), ``status.json`` and
the lines of ``metrics.jsonl``. Figures are the dashboard's (``app/dashboard/charts.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
from dataclasses import dataclass

from .errors import ConfigError
from .spec import archs, kinds
from .spec.config import ModelConfig
from .spec.methods import METHODS, make_settings
from .spec.presets import PRESETS, preset_config


def finite(v) -> bool:
    """A number that can be drawn: int or float, not bool, not nan or inf."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def metric_values(metrics: list[dict], key: str, scale: float = 1.0) -> list:
    """One value per line; a per-block list is averaged over its blocks."""
    out = []
    for m in metrics:
        v = m.get(key)
        if isinstance(v, list):
            vals = [x for x in v if finite(x)]
            v = sum(vals) / len(vals) if vals else None
        out.append(v * scale if finite(v) else None)
    return out


def run_kind(cfg: dict) -> str:
    """What a run is, for Compare's menus and labels: the method that trained it as the run recorded
    it (:func:`admm_core.spec.kinds.run_method`: 'deepfacto' for a DeepFacto run, also one saved when its
    config said block-admm), '?' when unknown."""
    return kinds.run_method(cfg) or "?"


PAPER_KEYS = (
    ("data.name", "data"),
    ("data.train_limit", "training samples"),
    ("data.test_limit", "test samples"),
    ("model.arch", "network"),
    ("model.hidden", "hidden widths"),
    ("train.epochs", "epochs"),
    ("train.loss", "loss"),
)


def settings_of(cfg: dict) -> dict:
    """A config.json flattened to 'section.key' -> value (lists as text), the method's settings as 'm.<name>'."""
    out: dict = {"method": cfg.get("method"), "preset": cfg.get("preset")}
    for section in ("data", "model", "train"):
        for k, v in (cfg.get(section) or {}).items():
            if k == "root":
                continue
            out[f"{section}.{k}"] = ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
    if out.get("model.split") is None and (split := default_split(cfg)) is not None:
        out["model.split"] = ",".join(split)  # the run's own split: its network's default one
    for k, v in method_params(cfg).items():
        out[f"m.{k}"] = ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
    return out


def default_split(cfg: dict) -> tuple[str, ...] | None:
    """The split a run without one in its config had: its network's default split (the blocks it was
    trained in); None for an end-to-end method (no blocks) or a network no record rebuilds."""
    rec = METHODS.get(cfg.get("method")) if isinstance(cfg.get("method"), str) else None
    model = cfg.get("model") or {}
    if rec is None or not rec.uses_blocks or not isinstance(model, dict) or kinds.run_method(cfg) != cfg.get("method"):
        return None
    try:
        hidden = tuple(model.get("hidden", ModelConfig.hidden))
        return _default_split(model.get("arch", ModelConfig.arch), hidden, model.get("width", ModelConfig.width))
    except Exception:  # noqa: BLE001 - a network since removed, a bad config: no value to show
        return None


@functools.lru_cache(maxsize=256)
def _default_split(arch: str, hidden: tuple, width: int) -> tuple[str, ...]:
    cfg = ModelConfig(arch, hidden, width=width)
    return tuple(archs.default_split(cfg, archs.layer_names(cfg)))


def method_params(cfg: dict) -> dict:
    """Every setting of the run's method: config.json's ``method_params`` (the ones given) over the
    method's defaults, so a run left at the default and one given it explicitly compare equal, and
    a legend can say 'lr 0.001' of a run that never named lr. As recorded when the method or its
    settings are unknown (a method since removed)."""
    given = cfg.get("method_params") or {}
    method = cfg.get("method")
    if not isinstance(given, dict) or not isinstance(method, str):
        return given if isinstance(given, dict) else {}
    try:
        full = make_settings(method, given)
    except (ConfigError, KeyError, TypeError, ValueError):
        return given
    return {**dataclasses.asdict(full), **given} if dataclasses.is_dataclass(full) else given


def differing_settings(cfgs: list[dict]) -> list[str]:
    """Settings whose values differ between the configs (a setting one run lacks counts as differing)."""
    flat = [settings_of(c) for c in cfgs]
    keys: list[str] = []
    for f in flat:
        keys += [k for k in f if k not in keys]
    return [k for k in keys if len({json_key(f.get(k)) for f in flat}) > 1]


def json_key(v) -> str:
    return repr(v)


def paper_setup(cfg: dict) -> tuple[bool, str]:
    """(does this run reproduce the paper's setup of its preset?, what differs).

    It does when its preset has a figure in the paper and data set, sample limits, network,
    epochs and loss are the preset's (the full data, all epochs).
    """
    preset, method = cfg.get("preset"), cfg.get("method")
    if not preset or preset not in PRESETS:
        return False, "no preset"
    try:
        ref = settings_of(preset_config(preset, method).to_dict())
    except (KeyError, ValueError) as e:
        return False, f"preset unavailable: {e}"
    mine = settings_of(cfg)
    diffs = [
        f"{label} {mine.get(k) if mine.get(k) is not None else 'all'} ≠ {ref.get(k) if ref.get(k) is not None else 'all'}"
        for k, label in PAPER_KEYS
        if mine.get(k) != ref.get(k)
    ]
    return (not diffs), "; ".join(diffs)


def run_row(name: str, cfg: dict, status: dict, metrics: list[dict], paper: dict, meta: dict | None = None) -> dict:
    """One line of the Compare table: final / best accuracy, the paper's figure (same setup only), time, memory."""
    last = metrics[-1] if metrics else {}
    best = max(metrics, key=lambda m: m.get("test_accuracy") or -1) if metrics else {}
    preset, method = cfg.get("preset"), cfg.get("method")
    paper_acc = (paper.get(preset) or {}).get(method)
    same, why = paper_setup(cfg) if paper_acc is not None else (False, "")
    epochs = last.get("epoch")
    final = last.get("test_accuracy")
    return {
        "run": name,
        "name": (meta or {}).get("name", ""),
        "method": method,
        "final test %": None if final is None else round(100 * final, 2),
        "paper test %": paper_acc if same else None,
        "Δ vs paper": None if (not same or final is None) else round(100 * final - paper_acc, 2),
        "paper": ("same setup" if same else f"setup differs: {why}") if paper_acc is not None else "no figure",
        "best test %": None if best.get("test_accuracy") is None else round(100 * best["test_accuracy"], 2),
        "best epoch": best.get("epoch"),
        "epochs": epochs,
        "data": (cfg.get("data") or {}).get("name"),
        "preset": preset,
        "status": status.get("state"),
        "tags": ", ".join((meta or {}).get("tags", [])),
        "wall time s": None if last.get("wall_time_s") is None else round(last["wall_time_s"], 2),
        "s / epoch": round(last["wall_time_s"] / epochs, 3) if epochs else None,
        "Z/U memory MiB": None if last.get("state_bytes") is None else round(last["state_bytes"] / 2**20, 3),
    }


def compare_table(recs: list[dict], metrics: list[list[dict]], paper: dict) -> tuple[list[dict], list[str]]:
    """Compare's table -> (rows, settings): one :func:`run_row` per run, its method as :func:`run_kind`
    says, and a ``⚙ <setting>`` column for each setting :func:`table_settings` shows.

    ``recs``: the runs as {name, config, status, meta} (meta optional: the engine never reads meta.json);
    ``metrics``: each run's metrics lines; ``paper``: the paper's figures by preset and method."""
    cfgs = [r.get("config") or {} for r in recs]
    differ = table_settings(cfgs)
    rows = []
    for r, cfg, lines in zip(recs, cfgs, metrics):
        row = run_row(r["name"], cfg, r.get("status") or {}, lines, paper, r.get("meta"))
        row["method"] = run_kind(cfg)
        flat = settings_of(cfg)
        for k in (k for k in differ if k != "method"):  # the method has its own column
            v = flat.get(k)
            row[f"⚙ {k}"] = v if v is None or isinstance(v, (int, float, str)) else str(v)
        rows.append(row)
    return rows, differ


@dataclass(frozen=True)
class Series:
    """One run as Compare draws it: its full id, its legend (:func:`legend_labels`), its metrics
    lines and its group's label ('' when not grouped)."""

    run: str
    legend: str
    metrics: list
    group: str = ""


def series_csv(
    charts: dict[str, list[Series]], keys: dict[str, str], x_key: str, percent: frozenset | set = frozenset()
) -> str:
    """The plotted columns of every run, long format: chart, run (the full run id), legend, group,
    x, value, unit (per-block columns averaged over blocks), for the Compare page's download. The
    charts named in ``percent`` are in % as drawn (the metrics file keeps fractions)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["chart", "run", "legend", "group", x_key, "value", "unit"])
    for chart, series in charts.items():
        scale, unit = (100.0, "%") if chart in percent else (1.0, "")
        for s in series:
            for x, y in zip(metric_values(s.metrics, x_key), metric_values(s.metrics, keys[chart], scale)):
                if x is not None and y is not None:
                    x = int(x) if float(x).is_integer() else x  # epoch 3, not 3.0
                    w.writerow([chart, s.run, s.legend, s.group, x, f"{y:.6g}", unit])
    return buf.getvalue()


@dataclass(frozen=True)
class CompareChart:
    """One of Compare's charts: the metrics column it draws, whose runs (network or DeepFacto), in %
    (the metrics file keeps fractions) and its title (the page's element keys are the page's)."""

    key: str
    runs: str
    percent: bool
    title: str


COMPARE_CHARTS = {
    "test accuracy": CompareChart("test_accuracy", "nets", True, "Test accuracy (%)"),
    "train accuracy": CompareChart("train_accuracy", "nets", True, "Train accuracy (%)"),
    "train loss": CompareChart("train_loss", "nets", False, "Train loss per sample"),
    "residuals": CompareChart("residuals", "nets", False, "Primal residual"),
    "verification": CompareChart("test_accuracy", "faces", True, "Face verification accuracy (%)"),
    "nmf residual": CompareChart("nmf_residual", "faces", False, "NMF residual ‖Z₁ − MS‖/‖Z₁‖"),
}


def compare_csv(nets: list[Series], faces: list[Series], x_key: str) -> str:
    """The Compare page's "Download the charts' data (CSV)": :func:`series_csv` of its charts."""
    runs = {"nets": nets, "faces": faces}
    charts = {name: runs[c.runs] for name, c in COMPARE_CHARTS.items() if runs[c.runs]}
    keys = {name: c.key for name, c in COMPARE_CHARTS.items()}
    return series_csv(charts, keys, x_key, {name for name, c in COMPARE_CHARTS.items() if c.percent})


# --- Compare: what differs between runs, as legends and groups --------------------------------------

SEED = "train.seed"


def _per_method(key: str) -> bool:
    """A setting only some methods' runs have: a method's own, and the split (none end to end)."""
    return key.startswith("m.") or key == "model.split"


NOT_IN_LEGEND = ("method", "preset")  # the method leads every legend; the preset only names defaults


def table_settings(cfgs: list[dict]) -> list[str]:
    """The settings Compare's table and settings chart show: those that differ
    (:func:`differing_settings`), less a method's setting that only its runs have, at one value
    (block-admm's thirty settings beside an sgd run are no difference between them)."""
    flat = [settings_of(c) for c in cfgs]
    return [
        k
        for k in differing_settings(cfgs)
        if not _per_method(k) or len({json_key(f[k]) for f in flat if f.get(k) is not None}) > 1
    ]


def distinguishing_settings(cfgs: list[dict]) -> list[str]:
    """The settings that tell runs apart beyond their method: a data, network or training setting
    that differs at all, a method's setting that differs between runs of that method (another
    method's lacking it, or its own default, is told by the method's name)."""
    flat = [settings_of(c) for c in cfgs]
    kinds_ = [run_kind(c) for c in cfgs]
    out = []
    for k in differing_settings(cfgs):
        if k in NOT_IN_LEGEND:
            continue
        if _per_method(k):
            per: dict[str, set] = {}
            for f, kind in zip(flat, kinds_):
                if f.get(k) is not None:
                    per.setdefault(kind, set()).add(json_key(f[k]))
            if not any(len(v) > 1 for v in per.values()):
                continue
        out.append(k)
    return out


SHORT_NAMES = {"data.name": "data", "model.arch": "network", "model.hidden": "hidden widths"}


def setting_name(key: str) -> str:
    """A setting's short name for legends and menus: 'm.lr' → 'lr', 'train.seed' → 'seed',
    'data.name' → 'data'."""
    return SHORT_NAMES.get(key) or (key.split(".", 1)[1] if "." in key else key)


def fmt_value(v) -> str:
    """A setting's value as a legend shows it: 5e-4 (not 0.0005), 0.1, 128, on/off."""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        if v == 0 or 1e-2 <= abs(v) < 1e5:
            return f"{v:.4g}"
        m, e = f"{v:.3e}".split("e")
        return f"{m.rstrip('0').rstrip('.')}e{int(e)}"
    return str(v)


def setting_part(key: str, v) -> str:
    """'s1' for a seed (the legend's shortest part), else 'lr 5e-4'."""
    return f"s{v}" if key == SEED else f"{setting_name(key)} {fmt_value(v)}"


def legend_labels(cfgs: list[dict], names: list[str] | None = None, skip: tuple = (), number: bool = True) -> list[str]:
    """What tells the runs apart, from their configs: 'block-admm · s1 · lr 5e-4' (method, then the
    seed, then the other settings that differ among ``cfgs``, leaving out ``skip``); a run's own
    name (meta.json) after the method. Runs alike in all of it are numbered (#1, #2…) when
    ``number``."""
    differ = [k for k in distinguishing_settings(cfgs) if k not in skip]
    differ.sort(key=lambda k: k != SEED)  # the seed first
    out = []
    for i, cfg in enumerate(cfgs):
        flat = settings_of(cfg)
        parts = [run_kind(cfg)]
        if names and names[i]:
            parts.append(names[i])
        parts += [setting_part(k, flat[k]) for k in differ if flat.get(k) is not None]
        out.append(" · ".join(parts))
    if not number:
        return out
    seen: dict[str, int] = {}
    plain = list(out)
    for i, lab in enumerate(plain):
        seen[lab] = seen.get(lab, 0) + 1
        if plain.count(lab) > 1:
            out[i] = f"{lab} #{seen[lab]}"
    return out


def group_options(cfgs: list[dict]) -> list[str]:
    """Compare's "Group runs by" choices for the runs of ``cfgs``: 'nothing', 'seeds' (runs alike
    but for the seed: the mean over seeds), 'method', 'method × <setting>' for each setting that
    tells runs apart (:func:`distinguishing_settings`), '<setting>' alone for each but the seed
    (grouping by seed alone would pool different methods), and 'tag'. A setting is given by its
    config key."""
    keys = distinguishing_settings(cfgs)
    out = ["nothing"]
    if SEED in keys:
        out.append("seeds")
    out.append("method")
    out += [f"method × {k}" for k in keys]
    out += [k for k in keys if k != SEED]
    return [*out, "tag"]


def group_labels(cfgs: list[dict], tags: list[list[str]], by: str) -> list[str]:
    """Each run's group under the choice ``by`` (:func:`group_options`), named by what the group's
    runs share: 'block-admm · lr 5e-4' for 'seeds' or 'method × m.lr', 'block-admm' for 'method'.
    Every choice but a setting alone or a tag keeps different methods apart."""
    if by == "tag":
        return _pooling([", ".join(t) or "no tag" for t in tags], cfgs, ())
    if by == "seeds":
        return legend_labels(cfgs, skip=(SEED,), number=False)
    if by == "method":
        return _pooling([run_kind(c) for c in cfgs], cfgs, ())
    key = by[len("method × ") :] if by.startswith("method × ") else by
    out = []
    for c in cfgs:
        v = settings_of(c).get(key)
        part = f"no {setting_name(key)}" if v is None else setting_part(key, v)
        out.append(f"{run_kind(c)} · {part}" if by.startswith("method × ") else part)
    return _pooling(out, cfgs, (key,))


POOLED_VALUES = 3  # values of a pooled setting a legend names before "…"


def _pooling(labels: list[str], cfgs: list[dict], skip: tuple) -> list[str]:
    """Each group's label with what its runs differ in besides the seed (and ``skip``): 'block-admm ·
    pools hidden widths 64,64,64 / 128,128, epochs 6 / 20 / 60', so runs of different setups are
    never pooled as if they were seeds without a word."""
    out = list(labels)
    for label in dict.fromkeys(labels):
        idx = [i for i, lab in enumerate(labels) if lab == label]
        group = [cfgs[i] for i in idx]
        keys = [k for k in distinguishing_settings(group) if k != SEED and k not in skip]
        if len(group) < 2 or not keys:
            continue
        parts = []
        for k in keys:
            vals = list(
                dict.fromkeys(fmt_value(settings_of(c).get(k)) for c in group if settings_of(c).get(k) is not None)
            )
            more = " / …" if len(vals) > POOLED_VALUES else ""
            parts.append(f"{setting_name(k)} {' / '.join(vals[:POOLED_VALUES])}{more}")
        for i in idx:
            out[i] = f"{label} · pools {', '.join(parts)}"
    return out
