"""Benchmark tables into the docs: a command writes its own table, nobody retypes it.

A docs page holds any number of generated sections, each between two markers::

    <!-- generated:NAME -->
    ... replaced wholesale every time the command runs ...
    <!-- /generated:NAME -->

:func:`write_section` replaces the section NAME (or appends it when the page lacks it) and
leaves the hand-written text around it alone. The section records the command that wrote
it and when, so every number in the docs can be traced to a command.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
import subprocess
import sys
from pathlib import Path

from .errors import check


def command_line(argv: list[str] | None = None, prog: str = "python -m admm_core") -> str:
    """The command as a user would type it again (``sys.argv`` by default)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join([prog, *map(shlex.quote, args)])


def add_collect_parser(sub, help: str):
    """The ``collect`` subcommand of a device-call script (experiments/): the folder a call
    brought back, the page and section to write, and the call itself, quoted in the docs."""
    c = sub.add_parser("collect", help=help)
    c.add_argument("--from", dest="src", required=True, help="the files a device call brought back")
    c.add_argument("--markdown", required=True)
    c.add_argument("--section", required=True)
    c.add_argument("--call", required=True, help="the device command that made them (quoted in the docs)")
    return c


def code_version() -> str:
    """``git describe`` of the working tree the package runs from ("unknown" outside git)."""
    try:
        r = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return r.stdout.strip() or "unknown"


def write_section(
    path: str | Path, name: str, body: str, command: str | None = None, version: str | None = None
) -> Path:
    """Put ``body`` (markdown) into section ``name`` of the page at ``path`` (created if missing).

    ``version``: the code the numbers came from; take :func:`code_version` when the command
    starts (the tree may change during a long benchmark). Default: the version now.
    """
    check(bool(re.fullmatch(r"[A-Za-z0-9_.:-]+", name)), "section", name, "use letters, digits, '-', '_', '.', ':'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    how = f"by `{command}` " if command else ""
    made_by = f"*Written {how}on {stamp}, code {version or code_version()}.*\n\n"
    block = f"{start}\n{made_by}{body.strip()}\n{end}"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + block + "\n"
    path.write_text(text)
    return path
