"""The Sweeps page's "Study storage" field, confined like the runs folder (no Streamlit here).

A SQLite URL names a file the page would create: it must lie inside the allowed runs root
(:func:`admm_core.runs.allowed_root`), after ``..`` and symlinks are resolved. A server URL
(PostgreSQL, MySQL) creates no local file and is passed on.
"""

from __future__ import annotations

from pathlib import Path

from admm_core.errors import ConfigError
from admm_core.runs import allowed_root

SERVER_SCHEMES = ("postgresql", "mysql")  # with or without a driver: postgresql+psycopg2://


def confine_storage_url(url: str, base: Path | None = None) -> str:
    """``url`` itself when it may be used; ConfigError naming the field and value otherwise."""
    url = str(url).strip()
    base = (base or allowed_root()).resolve()
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
    if scheme in SERVER_SCHEMES:
        return url
    if scheme != "sqlite" or not url.startswith("sqlite:///"):
        raise ConfigError(
            f"study storage = {url!r}: use sqlite:///<file inside {base}> or a postgresql:// / mysql:// server URL"
        )
    raw = url[len("sqlite:///") :].split("?", 1)[0]
    if not raw or raw.startswith(":memory:") or "\x00" in raw:
        raise ConfigError(f"study storage = {url!r}: not a file")
    path = Path("/" + raw if url.startswith("sqlite:////") else raw).expanduser().resolve()
    if base not in path.parents:
        raise ConfigError(
            f"study storage = {url!r}: {path} is outside the allowed runs root {base} "
            "(set ADMM_RUNS_ROOT to allow another folder)"
        )
    return url
