"""The models folder: networks of one's own (``.py`` files) offered in the Train page's network menu.

A file's top-level ``nn.Module`` subclasses and argument-free functions are found by reading its
source with :mod:`ast`: the server never runs a user's file nor imports torch. A menu entry is
``FILE.py:Name``, FILE inside the folder (``..``, an absolute path or a symlink out is refused). Cut
points come from ``admm cuts FILE.py:Name --data D --json`` in a child process, cached (as
:mod:`admm_core.spec.tv`'s tables are) by the file's SHA-256, Name and the data set.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from admm_core import child_env
from admm_core.errors import ConfigError
from admm_core.rundir import default_runs_dir, read_json_dict, write_text_atomic
from admm_core.spec.archs import OWN_MESSAGE, file_sha256, model_file_problem, split_model_spec
from admm_core.spec.datasets import cache_dir

CHILD_TIMEOUT_S = 300


def models_dir() -> Path:
    """``$ADMM_MODELS``, else ``models`` beside the default runs folder (``./models`` for ``./runs``)."""
    return Path(os.environ.get("ADMM_MODELS") or default_runs_dir().parent / "models").expanduser().resolve()


def is_entry(value) -> bool:
    """Whether a network menu value names a model file's network (built-in names have no ``.py:``)."""
    return isinstance(value, str) and ".py:" in value


def label(entry: str) -> str:
    """``my_net.py:Net`` -> ``my_net.py: Net`` (the menu's label)."""
    file, _, name = entry.rpartition(":")
    return f"{file}: {name}"


def _names(source: str) -> list[str]:
    """Top-level nn.Module classes and no-argument functions of ``source`` (raises SyntaxError)."""
    out = []
    for node in ast.parse(source).body:
        if getattr(node, "name", "_").startswith("_"):  # private helpers, imports, assignments
            continue
        if isinstance(node, ast.ClassDef) and any("Module" in ast.unparse(b) for b in node.bases):
            out.append(node.name)
        elif isinstance(node, ast.FunctionDef):
            a = node.args
            if not (a.posonlyargs or a.args or a.kwonlyargs or a.vararg or a.kwarg):
                out.append(node.name)
    return out


def _scan(folder: Path | None) -> tuple[list[str], list[str]]:
    """(menu entries ``FILE.py:Name``, why each file that does not parse offers nothing: the file,
    the line and Python's message) of the folder's ``.py`` files."""
    folder = Path(folder or models_dir())
    entries, bad = [], []
    for p in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        try:
            entries += [f"{p.name}:{n}" for n in _names(resolve(f"{p.name}:x", folder)[0].read_text())]
        except SyntaxError as e:
            bad.append(f"{p.name}: a syntax error at line {e.lineno} ({e.msg}); it offers no network until fixed")
        except (ConfigError, OSError, ValueError):
            continue
    return entries, bad


def unreadable(folder: Path | None = None) -> list[str]:
    return _scan(folder)[1]


def discover(folder: Path | None = None) -> list[str]:
    return _scan(folder)[0]


def resolve(entry: str, folder: Path | None = None) -> tuple[Path, str]:
    """(the file's real path, Name) of a menu entry, the file inside ``folder``; ConfigError otherwise."""
    base = Path(folder or models_dir()).resolve()
    file, name = split_model_spec(entry) or ("", "")
    bad = not name or "\x00" in file or Path(file).is_absolute() or ".." in Path(file).parts
    path = (base / file).resolve() if not bad else None
    if bad or base not in path.parents or path.suffix != ".py" or not path.is_file():
        raise ConfigError(f"model = {entry!r}: not a FILE.py:Name of a .py file inside the models folder {base}")
    return path, name


# the rows' fields (2: also_blocks, on_skip, skip arcs to the join): a cached older table is made again
TABLE_FORMAT = 2


def cache_file(path: Path, name: str, data: str) -> Path:
    return cache_dir() / "model-cuts" / f"{file_sha256(path)}_{name}_{data}_v{TABLE_FORMAT}.json"


_MEMO: dict[Path, list | str] = {}  # cache file -> rows, or the error message


def cut_table(entry: str, data: str, folder: Path | None = None) -> list[dict]:
    """The entry's cut points as ``admm cuts --json`` rows {name, also, out_shape, valid, why}, for
    the inputs of data set ``data``: cached, else from a child process; one ConfigError naming the
    file when it cannot be imported or traced."""
    path, name = resolve(entry, folder)
    cached = cache_file(path, name, data)
    if cached not in _MEMO:
        try:
            _MEMO[cached] = json.loads(cached.read_text())
        except (OSError, ValueError):
            _MEMO[cached] = _child(path, name, data, cached)
    rows = _MEMO[cached]
    if isinstance(rows, str):
        raise ConfigError(rows)
    return rows


def _child(path: Path, name: str, data: str, cached: Path) -> list | str:
    env = child_env(OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "admm_core", "cuts", f"{path}:{name}", "--data", data, "--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{path.name}: its cut points could not be computed ({e})"
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1].removeprefix("error: ")
        return f"{path.name}: {last}"
    try:
        rows = json.loads(p.stdout)
    except ValueError:
        return f"{path.name}: admm cuts printed no table"
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cached, json.dumps(rows), durable=False)
    except OSError:
        pass  # a read-only cache: kept in memory here, computed again by the next server
    return rows


def resume_problem(run_dir: Path) -> str | None:
    """Why a run of one's own network cannot be resumed here, or None: a run of the Python API (no
    ``source`` in model.json: nothing to rebuild it from), or one whose model file is gone or changed
    since (the worker would refuse it: said before it is launched)."""
    source = read_json_dict(Path(run_dir) / "model.json").get("source")
    if not isinstance(source, dict):
        return f"{Path(run_dir).name}: {OWN_MESSAGE}"
    why = model_file_problem(source)
    return None if why is None else f"{Path(run_dir).name}: {why}"


def entry_of_run(run_dir: Path, folder: Path | None = None) -> str | None:
    """The menu entry ``FILE.py:Name`` of a run of ``admm train --model`` whose file lies in the models
    folder (so Runs → Load into Train can show it in the form), else None."""
    source = read_json_dict(Path(run_dir) / "model.json").get("source")
    if not isinstance(source, dict):
        return None
    base = Path(folder or models_dir()).resolve()
    path = Path(str(source.get("file", ""))).resolve()
    entry = f"{path.name}:{source.get('name')}"
    try:
        return entry if path.parent == base and resolve(entry, base)[0] == path else None
    except ConfigError:
        return None


def canonical(rows: list[dict], split: list[str]) -> list[str]:
    """``split`` with every cut point under the name the menu and the graph give it: a point's other
    names (a row's ``also``: ``layer3.1``, the block whose output is ``layer3``'s, or its graph
    node) become its row's name; a point named twice is kept once; an unknown name stays, for the
    form to say why."""
    name_of = {x: r["name"] for r in rows for x in r.get("also", [])} | {r["name"]: r["name"] for r in rows}
    out = []
    for s in split:
        if (n := name_of.get(s, s)) not in out:
            out.append(n)
    return out


def menu_label(row: dict) -> str:
    """A cut point in the split menu: ``layer3 (= layer3.1)`` where it ends a block of another name."""
    return row["name"] + (f" (= {', '.join(row['also_blocks'])})" if row.get("also_blocks") else "")


def toggle_cut(rows: list[dict], split: list[str], name: str) -> tuple[list[str], str]:
    """A click on cut point ``name`` of the drawn graph: (``split`` with it added or removed, in
    forward order, "") for a valid cut; (``split`` unchanged, why not) for one that is not a cut."""
    row = next((r for r in rows if r["name"] == name), None)
    if row is None or not row["valid"]:
        return list(split), f"Not a cut point: {name} — {row['why'] if row else 'not in the traced graph'}."
    picked, names = set(split) ^ {name}, [r["name"] for r in rows]
    return [n for n in names if n in picked] + [s for s in split if s not in names], ""


GREY = "#A3A8B8"
CUT_STYLE = {  # state -> legend label, what hovering says, marker
    "picked": (
        "picked cut",
        "picked: click to remove this cut",
        {"symbol": "diamond", "size": 20, "color": "#FF4B4B", "line": {"width": 0}},
    ),
    "valid": (
        "can cut: click to pick",
        "one tensor crosses: click to cut here",
        {"symbol": "circle-open", "size": 16, "color": "#1C83E1"},
    ),
    "invalid": ("cannot cut: hover for why", "not a cut: ", {"symbol": "x-thin-open", "size": 12, "color": GREY}),
}


def cut_figure(rows: list[dict], split: list[str], input_shape=None):
    """The traced layers in forward order as a chain snaking over rows (as many layers to a row as
    their longest name leaves room for in a ~900-px form, at most 8), each with its output shape;
    the marker on a layer is the cut after it: picked, valid (clickable) or not (grey, why on hover).
    A dotted orange arc joins a skip's producer to where it joins the chain again (the rows'
    ``skip_to``): the value that crosses beside the chain's own and makes the cuts it jumps none;
    its hover names the layers on the skip's own path (a downsample, the rows' ``on_skip``). A layer
    that ends a block of another name too says so ("layer3 = layer3.1", the rows' ``also_blocks``).
    Each marker's customdata is its cut point's name."""
    import plotly.graph_objects as go

    shape = lambda s: "×".join(map(str, s)) if s else "?"
    nodes = [{"name": "input", "out_shape": input_shape}, *rows]
    title = lambda n: " = ".join([n["name"], *n.get("also_blocks", [])])  # layer3 = layer3.1: one point
    per_row = max(3, min(8, int(900 / (7.5 * max(len(title(n)) for n in nodes) + 12))))  # ~7.5 px a letter
    xy = [(c if r % 2 == 0 else per_row - 1 - c, -r) for r, c in (divmod(i, per_row) for i in range(len(nodes)))]
    fig = go.Figure(
        go.Scatter(
            x=[x for x, _ in xy],
            y=[y for _, y in xy],
            mode="lines+markers+text",
            hoverinfo="skip",
            showlegend=False,
            text=[f"<b>{n['name']}</b>{title(n)[len(n['name']) :]}<br>{shape(n['out_shape'])}" for n in nodes],
            textposition="bottom center",
            line={"color": GREY},  # the input a grey dot; a layer's clear, as large as its cut marker (the label below)
            marker={"size": [8] + [22] * len(rows), "color": [GREY] + ["rgba(0,0,0,0)"] * len(rows)},
        )
    )
    at = {n["name"]: xy[i] for i, n in enumerate(nodes)}
    on_skip = lambda a, b: [r["name"] for r in rows if r.get("on_skip") == [a, b]]
    arcs = [(r["name"], to) for r in nodes for to in r.get("skip_to", []) if r["name"] in at and to in at]
    for k, (a, b) in enumerate(arcs):  # a skip: the value jumps the cuts between; bowed up to clear the chain
        (x0, y0), (x1, y1) = at[a], at[b]
        # one above the other (the chain turns between them): bowed sideways, inside the axis, else
        # it would lie on the chain's own line; else up, under the axis top (0.25): drawn whole
        side = x0 + (0.4 if x0 < per_row - 1 else -0.4)
        mid = (side, (y0 + y1) / 2) if x0 == x1 else ((x0 + x1) / 2, max(y0, y1) + 0.2)
        fig.add_scatter(
            x=[x0, mid[0], x1],
            y=[y0, mid[1], y1],
            mode="lines",
            line={"shape": "spline", "color": "#FFA421", "dash": "dot", "width": 2},
            name="skip: why the cuts it jumps are none",
            legendgroup="skip",
            showlegend=k == 0,
            hovertext=f"skip from {a} to {b}" + (f" through {', '.join(via)}" if (via := on_skip(a, b)) else ""),
            hoverinfo="text",
        )
    side = lambda r: f" (a layer of the skip from {r['on_skip'][0]} to {r['on_skip'][1]})" if r.get("on_skip") else ""
    state = lambda r: "picked" if r["name"] in split else "valid" if r["valid"] else "invalid"
    for key, (label, says, marker) in CUT_STYLE.items():
        if mine := [(i, r) for i, r in enumerate(nodes) if i and state(r) == key]:  # the states drawn
            fig.add_scatter(
                x=[xy[i][0] for i, _ in mine],
                y=[xy[i][1] for i, _ in mine],
                mode="markers",
                name=label,
                marker={"line": {"width": 3}, **marker},
                customdata=[[r["name"]] for _, r in mine],
                hovertext=[f"after {title(r)} ({shape(r['out_shape'])}): {says}{r['why']}{side(r)}" for _, r in mine],
                hovertemplate="%{hovertext}<extra></extra>",
                unselected={"marker": {"opacity": 1}},
            )
    n_rows = -(-len(nodes) // per_row)
    fig.update_xaxes(visible=False, range=[-0.5, per_row - 0.5], fixedrange=True)
    fig.update_yaxes(visible=False, range=[-n_rows + 0.4, 0.25], fixedrange=True)
    legend = {"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"}
    margin = {"l": 0, "r": 0, "t": 30, "b": 0}
    return fig.update_layout(
        height=85 * n_rows + 45, margin=margin, dragmode=False, clickmode="event+select", legend=legend
    )
