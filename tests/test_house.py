"""One class per method, settings held, not inherited; Block-ADMM a package of small parts.

- no class in admm_core has two bases (one exception class, named below, with its reason);
- gotmare's record is Block-ADMM's with the dual part off, not a subclass of it, and its settings
  and declarations are what they were (tests/fixtures/settings_before.json);
- no function in admm_core/methods/block_admm/ is over 60 lines and no class over 250.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from admm_core.errors import ConfigError

PKG = Path(__file__).resolve().parents[1] / "admm_core"
FIXTURES = Path(__file__).parent / "fixtures"

# DeviceError is caught as the project's ConfigError and as a RuntimeError (a device that fails at
# run time); neither base carries behaviour of its own
TWO_BASES_ALLOWED = {"admm_core/errors.py:DeviceError"}


def two_base_classes(source: str, where: str) -> list[str]:
    """``where:Class (bases)`` of every class defined in ``source`` with two or more bases."""
    return [
        f"{where}:{node.name} ({', '.join(ast.unparse(b) for b in node.bases)})"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and len(node.bases) > 1
    ]


def too_long(source: str, where: str, function_lines: int, class_lines: int) -> list[str]:
    """Every function over ``function_lines`` and class over ``class_lines`` lines (docstring
    included) in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        limit = {ast.ClassDef: class_lines, ast.FunctionDef: function_lines, ast.AsyncFunctionDef: function_lines}
        if type(node) in limit and node.end_lineno - node.lineno + 1 > limit[type(node)]:
            out.append(f"{where}:{node.name}: {node.end_lineno - node.lineno + 1} lines")
    return out


def test_no_class_in_admm_core_has_two_bases():
    """A method is its record plus one engine class that holds it: no class joins two of them."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        where = path.relative_to(PKG.parent).as_posix()
        found += two_base_classes(path.read_text(), where)
    assert {f.split(" ")[0] for f in found} == TWO_BASES_ALLOWED, found


def test_the_two_base_check_sees_one():
    src = "class A:\n    pass\n\n\nclass B(A, dict):\n    def f(self):\n        return 1\n"
    assert two_base_classes(src, "m.py") == ["m.py:B (A, dict)"]


def test_block_admms_package_has_no_function_over_60_lines_and_no_class_over_250():
    long = []
    for path in sorted((PKG / "methods" / "block_admm").glob("*.py")):
        long += too_long(path.read_text(), path.name, 60, 250)
    assert not long, long


def test_the_size_check_sees_a_long_function_and_class():
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    src = f"def f():\n{body}\n\ndef g():\n    return 1\n"  # f: 61 lines
    assert too_long(src, "m.py", 60, 250) == ["m.py:f: 61 lines"]
    cls = "class C:\n" + "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(84))
    assert too_long(cls, "m.py", 60, 250) == ["m.py:C: 252 lines"]


def test_gotmare_is_block_admms_record_with_the_dual_part_off_not_a_subclass():
    """The same settings (name, default, help and rule, in order) and the same checks as Block-ADMM's
    record, its own declarations, the dual part off; a record with one base, MethodBase."""
    from admm_core.methods import implementation, make_method
    from admm_core.methods.block_admm import BlockADMM
    from admm_core.spec.methods import METHODS, make_settings
    from admm_core.spec.methods.base import MethodBase
    from admm_core.spec.methods.block_admm import BlockADMMSettings, GotmareSettings

    assert METHODS["gotmare"] is GotmareSettings and GotmareSettings.__bases__ == (MethodBase,)
    assert not issubclass(GotmareSettings, BlockADMMSettings)

    def described(cls):
        return [(f.name, f.default, dict(f.metadata)) for f in dataclasses.fields(cls)]

    assert described(GotmareSettings) == described(BlockADMMSettings)
    assert GotmareSettings.__post_init__ is BlockADMMSettings.__post_init__  # the same checks
    assert GotmareSettings.implementation == BlockADMMSettings.implementation
    assert implementation("gotmare") is BlockADMM
    differ = {
        k
        for k in ("name", "summary", "uses_duals", "live_metrics", "not_applicable", "PAPER", "kind", "multi_process")
        if getattr(GotmareSettings, k) != getattr(BlockADMMSettings, k)
    }
    assert differ == {"name", "summary", "uses_duals", "live_metrics", "not_applicable", "PAPER"}
    assert BlockADMMSettings.uses_duals and not GotmareSettings.uses_duals
    assert GotmareSettings.PAPER == {**BlockADMMSettings.PAPER, "u_init": "zero"}

    g, b = make_settings("gotmare"), make_settings("block-admm")
    assert dataclasses.asdict(g) == dataclasses.asdict(b) and g != b  # the same values, another method
    assert pickle.loads(pickle.dumps(g)) == g and repr(g).startswith("GotmareSettings(")
    assert not make_method("gotmare").dual.used and make_method("block-admm").dual.used
    with pytest.raises(ConfigError, match=r"gotmare\.u_init = 'uniform': this method has no duals"):
        make_settings("gotmare", {"u_init": "uniform"})
    assert make_settings("block-admm", {"u_init": "uniform"}).u_init == "uniform"
    assert make_settings("gotmare", {"recipe": "paper"}).u_init == "zero"
    with pytest.raises(ConfigError, match=r"gotmare\.z_sweeps"):  # Block-ADMM's checks, under gotmare's name
        make_settings("gotmare", {"z_schedule": "sweep", "z_sweeps": 2})


def test_gotmares_defaults_and_declarations_are_what_they_were():
    """As JSON, gotmare's defaults, settings and declarations equal the snapshot written before the
    record stopped being a subclass (tests/test_settings_identity.py compares every method)."""
    from fixtures.make_settings_snapshot import snapshot  # tests/ is on the path (pytest's rootdir conftest)

    before = json.loads((FIXTURES / "settings_before.json").read_text())["methods"]["gotmare"]
    now = json.loads(json.dumps(snapshot(), sort_keys=True))["methods"]["gotmare"]
    assert now == before
    assert before["attrs"]["uses_duals"] is False and "dual_lr" in before["defaults"]


def test_a_variant_refuses_what_it_cannot_copy():
    """A variant declares only attributes its record has, and copies no method that calls super()
    (whose class would be the record, not the variant)."""
    from admm_core.spec.methods.base import MethodBase, setting, variant

    @dataclasses.dataclass(frozen=True)
    class Rec(MethodBase):
        name = "rec"
        lr: float = setting(1.0, "η")

    v = variant(Rec, "Var", "Rec named var.", name="var")
    assert v.__bases__ == (MethodBase,) and v(lr=2.0).lr == 2.0 and v.name == "var" and Rec.name == "rec"
    with pytest.raises(ConfigError, match=r"var\.lr = -1"):
        v(lr=-1.0)
    with pytest.raises(TypeError, match="no attribute nmae"):
        variant(Rec, "Var", "", nmae="var")

    @dataclasses.dataclass(frozen=True)
    class Sup(MethodBase):
        name = "sup"

        def __post_init__(self):
            super().__post_init__()

    with pytest.raises(TypeError, match="__post_init__ calls super"):
        variant(Sup, "Var", "", name="var")
