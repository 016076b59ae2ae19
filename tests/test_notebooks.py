"""The teaching notebooks are committed clean and use the engine.

These checks are static (fast). Executing the notebooks is a separate CI step:
``ADMM_SMALL=1 .venv/bin/python -m pytest -q --nbmake notebooks/``.
"""

import ast
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 5


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_valid_and_stripped(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: committed with outputs"
            assert cell.execution_count is None, f"{path.name}: committed with execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_code_parses_and_uses_small_mode(path):
    nb = nbformat.read(path, as_version=4)
    code = "\n\n".join(c.source for c in nb.cells if c.cell_type == "code")
    ast.parse(code)
    assert "admm_core.teaching import" in code or "from admm_core import teaching" in code, (
        f"{path.name}: must use admm_core.teaching (small mode)"
    )
    assert "admm_core" in code, f"{path.name}: must use the engine"
    assert "plotly" in code
