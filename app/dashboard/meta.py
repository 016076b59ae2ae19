"""A run's name, tags and note: ``RUN/meta.json``, written by the dashboard, read everywhere.

The engine never reads it; a run without one has no name (its id, the directory name, is shown).
"""

from __future__ import annotations

from pathlib import Path

from admm_core.errors import ConfigError
from admm_core.rundir import read_json_stamped, write_json

META = "meta.json"
MAX_NAME, MAX_TAGS, MAX_NOTE = 80, 20, 4000


def read_meta(run_dir: str | Path) -> dict:
    """{name, tags, note} (empty values when there is no meta.json or it is unreadable)."""
    m = read_json_stamped(Path(run_dir) / META, {})  # {} when missing or unreadable
    m = m if isinstance(m, dict) else {}
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
    m, cfg = r.get("meta") or {}, r.get("config") or {}
    words = [r["name"], m.get("name", ""), *m.get("tags", []), m.get("note", "")]
    words += [str(cfg.get(k, "")) for k in ("method", "preset")] + [str((cfg.get("data") or {}).get("name", ""))]
    hay = " ".join(words).lower()
    return all(word in hay for word in text.split())
