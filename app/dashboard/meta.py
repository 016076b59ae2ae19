"""A run's name, tags and note: ``RUN/meta.json``, written by the dashboard, read everywhere.

The engine never reads it; a run without one has no name (its id, the directory name, is shown).
"""

from __future__ import annotations

import json
from pathlib import Path

from admm_core.errors import ConfigError
from admm_core.rundir import read_json_stamped, write_json

META = "meta.json"
MAX_NAME, MAX_TAGS, MAX_NOTE = 80, 20, 4000


def read_meta(run_dir: str | Path) -> dict:
    """{name, tags, note} (empty values when there is no meta.json or it is unreadable)."""
    try:
        m = read_json_stamped(Path(run_dir) / META, {}) or {}
    except (OSError, json.JSONDecodeError, ValueError):
        m = {}
    if not isinstance(m, dict):
        m = {}
    tags = m.get("tags") or []
    return {
        "name": str(m.get("name") or ""),
        "tags": [str(t) for t in tags] if isinstance(tags, list) else [],
        "note": str(m.get("note") or ""),
    }


def parse_tags(text: str) -> list[str]:
    """'baseline, deep ,baseline' -> ['baseline', 'deep'] (order kept, duplicates dropped)."""
    out: list[str] = []
    for t in str(text).replace(";", ",").split(","):
        t = t.strip()
        if t and t not in out:
            out.append(t)
    return out


def write_meta(run_dir: str | Path, name: str = "", tags: list[str] | str = (), note: str = "") -> dict:
    """Validate and write meta.json; raises ConfigError naming the field."""
    tags = parse_tags(tags) if isinstance(tags, str) else list(tags)
    name, note = str(name).strip(), str(note).strip()
    if len(name) > MAX_NAME:
        raise ConfigError(f"name = {name[:20]!r}…: at most {MAX_NAME} characters")
    if len(tags) > MAX_TAGS:
        raise ConfigError(f"tags = {', '.join(tags[:3])}, …: at most {MAX_TAGS} tags")
    if len(note) > MAX_NOTE:
        raise ConfigError(f"note: at most {MAX_NOTE} characters (got {len(note)})")
    meta = {"name": name, "tags": tags, "note": note}
    write_json(Path(run_dir) / META, meta)
    return meta


def matches(r: dict, text: str) -> bool:
    """Does run record ``r`` (with r['meta']) match a filter text (id, name, tag, note, method, data)?"""
    text = text.strip().lower()
    if not text:
        return True
    m = r.get("meta") or {}
    cfg = r.get("config") or {}
    hay = " ".join(
        [
            r["name"],
            m.get("name", ""),
            " ".join(m.get("tags", [])),
            m.get("note", ""),
            str(cfg.get("method", "")),
            str((cfg.get("data") or {}).get("name", "")),
            str(cfg.get("preset", "")),
        ]
    ).lower()
    return all(word in hay for word in text.split())
