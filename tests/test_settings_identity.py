"""Every preset's config and every method's defaults are what they were before Block-ADMM was
split into parts (tests/fixtures/settings_before.json, written by main's code at the time with
tests/fixtures/make_settings_snapshot.py): a renamed setting, a changed default, a preset that
now resolves to other settings or a method record that lost an attribute fails here, by name."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def _now() -> dict:
    from fixtures.make_settings_snapshot import snapshot  # tests/ is on the path (pytest's rootdir conftest)

    # through JSON, as the snapshot was stored: tuples become lists, the keys strings
    return json.loads(json.dumps(snapshot(), sort_keys=True))


def _diff(before, now, path="") -> list[str]:
    if isinstance(before, dict) and isinstance(now, dict):
        out = []
        for k in sorted(set(before) | set(now)):
            if k not in now:
                out.append(f"{path}/{k}: gone (was {before[k]!r})"[:300])
            elif k not in before:
                out.append(f"{path}/{k}: new ({now[k]!r})"[:300])
            else:
                out += _diff(before[k], now[k], f"{path}/{k}")
        return out
    return [] if before == now else [f"{path}: {before!r} -> {now!r}"[:300]]


def test_presets_and_method_defaults_are_unchanged():
    before = json.loads((FIXTURES / "settings_before.json").read_text())
    now = _now()
    assert set(before["methods"]) <= set(now["methods"]), "a method is gone"
    now["methods"] = {k: v for k, v in now["methods"].items() if k in before["methods"]}  # a plugin may add one
    diffs = _diff(before, now)
    assert not diffs, "\n".join(diffs[:40])


def test_the_comparison_sees_a_changed_default():
    """The check above can fail: one changed default is reported by its path."""
    before = json.loads((FIXTURES / "settings_before.json").read_text())
    now = json.loads(json.dumps(before))
    now["methods"]["gotmare"]["defaults"]["dual_lr"] = 0.5
    now["presets"]["digits-mlp"]["methods"]["block-admm"]["settings_not_default"]["lr"] = 1.0
    was = before["methods"]["gotmare"]["defaults"]["dual_lr"]
    assert _diff(before, now) == [
        f"/methods/gotmare/defaults/dual_lr: {was!r} -> 0.5",
        "/presets/digits-mlp/methods/block-admm/settings_not_default/lr: 0.002 -> 1.0",
    ]
