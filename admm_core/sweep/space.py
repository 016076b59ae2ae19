"""The search space: ``NAME=KIND:ARGS`` strings parsed into :class:`Dim` s, checked against a
base config, sampled values applied to it (see the package docstring for the syntax)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ..errors import ConfigError, check
from ..spec.archs import default_split, layer_names, validate_split
from ..spec.config import RunConfig
from ..spec.methods import METHODS
from ..spec.settings import parse_widths

# a dimension's kinds: how each draws its values, in words (the dashboard's menu, `admm sweep --help`)
KINDS = {
    "float": "uniform",
    "log": "log-uniform",
    "int": "integer",
    "logint": "log-uniform integer",
    "choice": "one of",
}
# settings outside the method's own: name -> the RunConfig field it replaces
STRUCTURAL = {
    "split": "model__split",
    "hidden": "model__hidden",
    "loss": "train__loss",
    "batch_size": "train__batch_size",
}


@dataclass(frozen=True)
class Dim:
    """One dimension of the space: ``name=kind:low:high`` or ``name=choice:a|b|c``."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        if self.kind == "choice":
            return f"{self.name}=choice:{'|'.join(self.choices)}"
        return f"{self.name}={self.kind}:{_num(self.low)}:{_num(self.high)}"

    def suggest(self, trial):
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.kind in ("int", "logint"):
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.kind == "logint")
        return trial.suggest_float(self.name, self.low, self.high, log=self.kind == "log")

    def contains(self, value) -> bool:
        if self.kind == "choice":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind in ("int", "logint") and not float(value).is_integer():
            return False
        return self.low <= value <= self.high


def _num(v) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def space_names(method: str) -> list[str]:
    """Every name a space may use for ``method``."""
    return [s["name"] for s in METHODS[method].settings()] + list(STRUCTURAL)


def split_dim(text: str) -> tuple[str, str, str, list[str]]:
    """``NAME=KIND:ARGS`` read, unchecked: (name, kind, ARGS as typed, its values: a choice's
    ``A|B|C`` or the bounds ``LOW:HIGH``). The syntax's one reading: :func:`parse_dim` checks what it gives, the
    dashboard shows a study's recorded dimensions with it."""
    name, _, rest = text.partition("=")
    kind, _, args = rest.partition(":")
    kind = kind.strip()
    return name.strip().replace("-", "_"), kind, args, args.split("|" if kind == "choice" else ":")


def parse_dim(text: str, method: str, field: str | None = None) -> Dim:
    """``NAME=KIND:ARGS`` -> :class:`Dim`; a bad one raises one ConfigError naming it (``field``:
    how the message names the dimension, default ``--space 'TEXT'``; the dashboard names its row)."""
    field_name = field or f"--space {text!r}"
    check(isinstance(text, str) and "=" in text and ":" in text, field_name, text, "expected NAME=KIND:ARGS")
    name, kind, args, parts = split_dim(text)
    names = space_names(method)
    if name not in names:
        raise ConfigError(f"{field_name}: unknown setting {name!r} for {method} (settings: {', '.join(names)})")
    if kind not in KINDS:
        raise ConfigError(f"{field_name}: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    if kind == "choice":
        choices = tuple(c.strip() for c in parts)
        check(all(choices) and len(choices) >= 1, field_name, args, "choices are separated by '|' and not empty")
        check(len(set(choices)) == len(choices), field_name, args, "a choice is listed twice")
        return Dim(name, kind, choices=choices)
    check(len(parts) == 2, field_name, args, f"{kind} needs LOW:HIGH, two numbers such as 0.1:10")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise ConfigError(f"{field_name}: LOW:HIGH = {args!r} must be numbers") from None
    check(math.isfinite(low) and math.isfinite(high), field_name, args, "LOW and HIGH must be finite")
    check(low <= high, field_name, args, f"low {_num(low)} > high {_num(high)}")
    if kind in ("log", "logint"):
        check(low > 0, field_name, args, f"a log range needs low > 0 (got {_num(low)})")
    if kind in ("int", "logint"):
        check(low.is_integer() and high.is_integer(), field_name, args, f"{kind} needs integer bounds")
    return Dim(name, kind, low, high)


def convert(name: str, value):
    """A sampled value (choices are strings) -> the value the config takes."""
    if not isinstance(value, str):
        return value
    if name == "split":
        return None if value == "default" else tuple(s.strip() for s in value.split(",") if s.strip())
    if name == "hidden":
        return parse_widths(value, "hidden")
    if "," in value:  # a per-block value such as beta=choice:1|1,2,4
        return [_json(v) for v in value.split(",")]
    return _json(value)


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def apply_params(base: RunConfig, params: dict) -> RunConfig:
    """``base`` with the sampled ``params`` (method settings and structural ones) applied."""
    ch: dict = {}
    mp = {}
    for name, raw in params.items():
        v = convert(name, raw)
        if name in STRUCTURAL:
            ch[STRUCTURAL[name]] = v
        else:
            mp[name] = v
    if mp:
        ch["method_params"] = {**base.method_params, **mp}
    return base.replace(**ch) if ch else base


def parse_space(texts: list[str], base: RunConfig) -> list[Dim]:
    """Parse and check every dimension; each bound and choice is tried on ``base`` (the first
    problem raised: the command line's; :func:`space_problems` gives them all)."""
    check(bool(texts), "--space", texts, "give at least one NAME=KIND:ARGS")
    dims, problems = space_problems(texts, base)
    if problems:
        raise ConfigError(next(iter(problems.values())))
    seen = [d.name for d in dims]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    check(not dup, "--space", dup, "a setting appears twice")
    return dims


def space_problems(texts: list[str], base: RunConfig, fields: list[str] | None = None) -> tuple[list[Dim], dict]:
    """Every dimension parsed and tried on ``base`` on its own: (the good ones, {index: message}) —
    every wrong one at once. ``fields[i]`` names dimension i in its message (default
    ``--space 'TEXT'``); with ``fields``, a setting given twice is a problem of its later rows."""
    dims, problems, seen = [], {}, {}
    for i, text in enumerate(texts):
        field = fields[i] if fields else None
        try:
            d = parse_dim(text, base.method, field)
            _check_values(d, base, field)
        except ConfigError as e:
            problems[i] = str(e)
            continue
        if fields and d.name in seen:
            problems[i] = f"{field}: {d.name!r} is searched already by {fields[seen[d.name]]}; a setting appears once"
            continue
        seen[d.name] = i
        dims.append(d)
    return dims, problems


def _check_values(d: Dim, base: RunConfig, field: str | None = None) -> None:
    """ConfigError unless each bound and choice of ``d`` makes a valid config of ``base``."""
    values = list(d.choices) if d.kind == "choice" else [d.low, d.high]
    for v in values:
        v = int(v) if d.kind in ("int", "logint") else v
        try:
            _check_split(apply_params(base, {d.name: v}))
        except ConfigError as e:
            raise ConfigError(f"{field or f'--space {d.spec!r}'}: value {v!r} is not valid ({e})") from None


def _check_split(cfg: RunConfig) -> None:
    """Split names are otherwise checked when the network is built: check them here, before any trial
    (the architecture's layer names come from its torch-free table)."""
    if cfg.model.split is not None:
        validate_split(cfg.model, layer_names(cfg.model), cfg.model.split)


def preset_values(base: RunConfig, dims: list[Dim]) -> dict:
    """The base config's value of every dimension that contains it."""
    method = base.method_settings
    out = {}
    for d in dims:
        if d.name == "split":
            split = base.model.split
            if split is None:
                split = default_split(base.model, layer_names(base.model))
            v = "default" if split is None else ",".join(split)
            if d.kind == "choice" and v not in d.choices and base.model.split is None and "default" in d.choices:
                v = "default"
        elif d.name == "hidden":
            v = ",".join(map(str, base.model.hidden))
        elif d.name in ("loss", "batch_size"):
            v = getattr(base.train, d.name)
        else:
            v = getattr(method, d.name)
            if isinstance(v, tuple):
                v = ",".join(_num(b) for b in v)
        if d.kind == "choice":
            v = v if isinstance(v, str) else json.dumps(v)
        if d.contains(v):
            out[d.name] = v
    return out


def fmt_value(v) -> str:
    """A sampled value as the reports print it (floats to 4 significant digits)."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)
