"""The package's import graph has no cycles and no import running back up, and every module imports
on its own.

The graph is static (ast): every ``import`` statement counts, at module level or inside a
function, so a cycle hidden behind a late import still fails here. Imports under
``if TYPE_CHECKING:`` never run and are left out.

Layers, from the bottom (a module imports only its own layer and those below):

    0  admm_core (the package: its version), admm_core.errors
    1  admm_core.spec.*: the records, configs, presets, preflight; the standard library only
    2  the run-file readers: rundir, status, spawn, docs, compare (what differs between runs),
       runs (a folder's runs as rows; stop and delete)
    3  the engine: models, data, methods, network, loop, checkpoint, faces, deepfacto, sweep, ...
    4  the faces of the engine: cli.*, every __main__, the benchmark and profiling tools
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "admm_core"


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _runtime_nodes(tree):
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.If)
                and getattr(child.test, "id", getattr(child.test, "attr", "")) == "TYPE_CHECKING"
            ):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def _targets(name: str, path: Path) -> set[str]:
    """Package modules that importing ``name`` runs (a submodule runs its parent packages first)."""
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            bases = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            bases = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for b in bases:
            while b:  # a.b.c imports a.b and a first
                if b in MODULES and b != name:
                    found.add(b)
                b = b.rpartition(".")[0]
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {n: _targets(n, p) for n, p in MODULES.items()}
    for n in graph:  # a module does not import its own parent package "back"
        graph[n] = {t for t in graph[n] if not n.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_late_imports(tmp_path):
    """The checker itself: a function-level import is an edge, a cycle through it is found."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert "admm_core.errors" in import_graph()["admm_core.spec.config"]
    late = tmp_path / "late.py"
    late.write_text("def f():\n    from .spec import config\n    from .methods import base\n")
    assert {"admm_core.spec.config", "admm_core.methods.base"} <= _targets("admm_core.late", late)


def test_package_has_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_errors_is_a_leaf():
    assert import_graph()["admm_core.errors"] == set()


READERS = {
    "admm_core.rundir",
    "admm_core.status",
    "admm_core.spawn",
    "admm_core.docs",
    "admm_core.compare",
    "admm_core.runs",
}
TOOLS = {"admm_core.bench", "admm_core.speed", "admm_core.plots", "admm_core.teaching"}


def layer(name: str) -> int:
    if name in ("admm_core", "admm_core.errors"):
        return 0
    if name == "admm_core.spec" or name.startswith("admm_core.spec."):
        return 1
    if name in READERS:
        return 2
    if name in TOOLS or name.endswith(".__main__") or name == "admm_core.cli" or name.startswith("admm_core.cli."):
        return 4
    return 3


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{n} -> {t}" for n, ts in graph.items() for t in ts if layer(t) > layer(n))


def test_the_checker_sees_an_upward_import():
    assert upward({"admm_core.spec.resources": {"admm_core.distributed"}, "admm_core.network": {"admm_core.spec"}}) == [
        "admm_core.spec.resources -> admm_core.distributed"
    ]
    assert layer("admm_core.deepfacto.__main__") == 4 and layer("admm_core.spec.methods.base") == 1


def test_no_import_runs_back_up():
    """The spec never imports the engine, the readers neither, and no library module imports the
    command line (a ``__main__`` inside a library package that imports ``cli`` runs back up)."""
    found = upward(import_graph())
    assert not found, "imports running back up: " + "; ".join(found)


def test_the_spec_layer_imports_the_standard_library_only():
    """What the dashboard's server imports: no torch, numpy or any other third-party package."""
    bad = []
    for name, path in MODULES.items():
        if layer(name) > 1:
            continue
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                tops = [(node.module or "").split(".")[0]]
            else:
                continue
            bad += [f"{name}: {t}" for t in tops if t not in sys.stdlib_module_names and t != "admm_core"]
    assert not bad, bad


def test_every_module_imports_alone_in_a_fresh_interpreter():
    """One interpreter; before each module, every admm_core module is dropped from sys.modules,
    so each import runs the package from scratch (torch stays loaded: it costs seconds)."""
    code = (
        "import importlib, sys, traceback\n"
        f"names = {sorted(MODULES)!r}\n"
        "bad = []\n"
        "for n in names:\n"
        "    for m in [m for m in sys.modules if m == 'admm_core' or m.startswith('admm_core.')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(n)\n"
        "    except Exception:\n"
        "        bad.append(n + ': ' + traceback.format_exc(limit=3))\n"
        "print('\\n'.join(bad)); sys.exit(len(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_the_package_version_is_pyprojects():
    import tomllib

    import admm_core

    with open(PKG.parent / "pyproject.toml", "rb") as f:
        assert admm_core.__version__ == tomllib.load(f)["project"]["version"]


def test_no_function_over_100_lines():
    """A function longer than a screenful hides its steps: none in the engine or the dashboard is
    over 100 lines, docstring included."""
    long = []
    app = {
        f"app.{'.'.join(p.relative_to(PKG.parent / 'app').with_suffix('').parts)}": p
        for p in sorted((PKG.parent / "app").rglob("*.py"))
    }
    for name, path in {**MODULES, **app}.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 100:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert len(app) > 20 and not long, long
