"""Settings: the one way to declare one, its help and its rules, and the one check of them.

A setting is a dataclass field made by :func:`setting`: its default, a one-line ``help`` (the
CLI's ``--help`` and ``admm methods``, the dashboard's tooltips), how the dashboard shows it, and the
rules :func:`check_fields` applies, read from the field's metadata:

    label="ζ — Z-step size"   its name on screen (the paper's symbol first where it has one; the
                       code name is in the help); default: the name in words ("Chunk size")
    when={"z_step": "scaled"}  it applies only while these other settings of the record have
                       these values (a value, a tuple of values, or a test of the value): the form
                       shows it then only

    choices=(…)        the value is one of them
    min=, max=         bounds (ints: ``min`` defaults to 1, and no int exceeds :data:`MAX_INT`;
                       floats: > 0 unless ``positive=False``, then ≥ 0)
    per_block=True     a number or one number per block, each > 0 (kept as a tuple)
    none=True          None is allowed too (``type=int`` then says what else it is)

The rule follows the default's type (bool, int, float; or ``type``); the checks no rule can say
(a registry's names, a constraint between fields) are the class's ``__post_init__``'s, after
:func:`check_fields`; a field whose check is all its own says ``check=False``. One message shape:
``field = value: must be a positive integer``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..errors import ConfigError, check

__all__ = ["MAX_INT", "applies", "setting", "check_fields", "described", "parse_sets", "parse_widths", "parse_numbers"]

# the largest integer a browser's number holds exactly (2**53 - 1): above it a link's or a typed
# value is not the value the page shows, so no int setting goes past it
MAX_INT = 2**53 - 1


def setting(default, help: str, **rules):
    """A settings field: its default, its one-line help and its rules (module docstring)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("a setting's default must be immutable (a tuple, not a list)")
    return field(default=default, metadata={"help": help, **rules})


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _allowed(kind: type, m) -> tuple[Callable[[Any], bool], str]:
    """(test, what it allows) of a number setting's rules: ints ``min`` (default 1) to ``max``;
    floats > 0 (``positive=False``: ≥ 0; ``min``: ≥ min) up to ``max``."""
    hi = m.get("max")
    if kind is int:
        lo = m.get("min", 1)
        what = (
            f"an integer from {lo} to {hi}"
            if hi is not None
            else ("a positive integer" if lo == 1 else f"an integer ≥ {lo}")
        )
        top = MAX_INT if hi is None else hi
        return (lambda v: _is_int(v) and lo <= v <= top), what
    strict, lo = ("min" not in m and m.get("positive", True)), m.get("min", 0)
    what = f"a number {'>' if strict else '≥'} {lo:g}" + (f" and ≤ {hi:g}" if hi is not None else "")
    return (lambda v: _is_number(v) and (v > lo if strict else v >= lo) and (hi is None or v <= hi)), what


def check_fields(obj, prefix: str) -> None:
    """Check every field of the settings dataclass ``obj`` by its rules (ConfigError naming
    ``prefix.field`` and the value); numbers are stored as the default's type (an int given
    for a float becomes a float, a per-block list a tuple)."""
    for f in dataclasses.fields(obj):
        m = f.metadata
        if m.get("check") is False:
            continue
        name, v = f"{prefix}.{f.name}", getattr(obj, f.name)
        kind = m.get("type", type(f.default))
        if v is None and m.get("none"):
            continue
        orr = " or null" if m.get("none") else ""
        if m.get("per_block") and isinstance(v, (list, tuple)):
            for b in v:
                check(_is_number(b) and b > 0, name, list(v), "every value must be > 0")
            object.__setattr__(obj, f.name, tuple(float(b) for b in v))
        elif m.get("choices") is not None:
            check(v in m["choices"], name, v, f"choose from {list(m['choices'])}")
        elif kind is bool:
            check(isinstance(v, bool), name, v, "must be true or false")
        elif kind in (int, float):
            ok, what = _allowed(kind, m)
            if kind is int and _is_int(v) and v > MAX_INT:
                what += f" no larger than {MAX_INT:,}"
            check(ok(v), name, v, f"must be {what}{orr}")
            if kind is float:
                object.__setattr__(obj, f.name, float(v))


def described(cls) -> list[dict]:
    """[{name, label, default, help, type, choices, when}] of a settings dataclass, for menus and ``--help``."""
    return [
        {
            "name": f.name,
            "label": f.metadata.get("label") or f.name.replace("_", " ").capitalize(),
            "default": f.default,
            "help": f.metadata.get("help", ""),
            "type": type(f.default).__name__,
            "choices": f.metadata.get("choices"),
            "when": f.metadata.get("when") or {},
        }
        for f in dataclasses.fields(cls)
    ]


def applies(when: dict, values: dict) -> bool:
    """Whether a setting with this ``when`` applies while the other settings hold ``values``."""
    for name, cond in (when or {}).items():
        v = values.get(name)
        if callable(cond):
            try:
                ok = bool(cond(v))
            except (TypeError, ValueError):
                ok = False
        else:
            ok = v in (cond if isinstance(cond, tuple) else (cond,))
        if not ok:
            return False
    return True


def parse_sets(flags) -> dict:
    """``NAME=VALUE`` strings (the CLI's ``--set``, the DeepFacto form's box) -> {name: value}.

    VALUE is read as JSON where it parses (numbers, lists, true/false, null), else kept as a
    string; a dash in NAME becomes an underscore. The one parser behind every ``--set``.
    """
    out = {}
    for kv in flags or []:
        if not isinstance(kv, str) or "=" not in kv:
            raise ConfigError(f"--set {kv!r}: expected NAME=VALUE")
        k, v = kv.split("=", 1)
        name = k.strip().replace("-", "_")
        check(bool(name), "--set", kv, "the setting name is empty")
        try:
            out[name] = json.loads(v)
        except json.JSONDecodeError:
            out[name] = v
    return out


def parse_widths(text: str, name: str = "model.hidden", min_value: int = 1) -> tuple[int, ...]:
    """'128, 128' -> (128, 128) (commas or semicolons between): the one parser of integer lists
    typed as text (the CLI's ``--hidden``, the form's widths, a sweep's ``hidden=choice:…``).
    ConfigError naming ``name`` and the text otherwise: an empty text, or an empty entry
    ('128,,128' is not 128-128), is an error, not a shorter list."""
    example = "e.g. 128,128" if min_value == 1 else "e.g. 0,1,2"
    parts = [p.strip() for p in str(text).replace(";", ",").split(",")]
    if parts == [""]:
        raise ConfigError(f"{name} = {text!r}: empty; write at least one number, {example}")
    if "" in parts[:-1]:
        raise ConfigError(
            f"{name} = {text!r}: an empty entry between commas; write numbers separated by commas, {example}"
        )
    parts = [p for p in parts if p]  # one trailing comma ('128,') is harmless
    try:
        vals = tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"{name} = {text!r}: write whole numbers separated by commas, {example}") from None
    if any(v < min_value for v in vals):
        raise ConfigError(
            f"{name} = {text!r}: "
            + ("widths must be positive integers" if min_value == 1 else f"each must be ≥ {min_value}")
        )
    return vals


def parse_numbers(text: str, name: str):
    """'5e-4' -> 0.0005; '1, 0.5' -> [1.0, 0.5] (one value per block): the one parser of numbers typed
    as text (the CLI's ``--beta``, the form's float settings). ConfigError naming ``name`` otherwise."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"{name} = {text!r}: not a number (write a number, or numbers separated by commas)") from None
    if not vals:
        raise ConfigError(f"{name} = {text!r}: give a number")
    return vals[0] if len(vals) == 1 else vals
