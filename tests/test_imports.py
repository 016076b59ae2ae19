"""The package's import graph has no cycles, and every module imports on its own.

The graph is static (ast): every ``import`` statement counts, at module level or inside a
function, so a cycle hidden behind a late import still fails here. Imports under
``if TYPE_CHECKING:`` never run and are left out.
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


def test_the_graph_sees_late_imports():
    """The checker itself: a function-level import is an edge, a cycle through it is found."""
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert "admm_core.errors" in import_graph()["admm_core.config"]
    assert "admm_core.deepfacto" in import_graph()["admm_core.cli"]  # imported inside a function


def test_package_has_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_errors_is_a_leaf():
    assert import_graph()["admm_core.errors"] == set()


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
