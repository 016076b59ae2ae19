"""The Runs page's download of a whole run: the zip its button serves holds the
run's files, the checkpoint is a download of its own, and no path outside the runs root is ever
zipped — not a run that is a link to a folder elsewhere, not a link inside a run, not a name with
``..`` — whatever name reaches the page.

The bytes are the page's own: ``st.download_button`` (and a column's) is wrapped to keep the ``data``
each button was given (a callable, run on the click), and the test calls it as the click would."""

from __future__ import annotations

import io
import shutil
import zipfile

import pytest
import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.testing.v1 import AppTest
from test_app import APP, TIMEOUT, no_exceptions, runs_sel

from app.dashboard import archive as AR


@pytest.fixture
def served(monkeypatch):
    """{button key: data} of every download button drawn, the latest draw's."""
    got: dict = {}
    real, real_st = DeltaGenerator.download_button, st.download_button

    def keep(self, label, data, *args, **kw):  # a column's button (d[0].download_button)
        got[kw.get("key")] = (label, data, kw.get("disabled", False))
        return real(self, label, data, *args, **kw)

    def keep_st(label, data, *args, **kw):  # st.download_button: bound to the main area at import
        got[kw.get("key")] = (label, data, kw.get("disabled", False))
        return real_st(label, data, *args, **kw)

    monkeypatch.setattr(DeltaGenerator, "download_button", keep)
    monkeypatch.setattr(st, "download_button", keep_st)
    return got


@pytest.fixture
def layout(finished_run, tmp_path, monkeypatch):
    """runs/ with a real run (r1, plus a link inside it to a secret file and one to a folder outside)
    and a run that is itself a link to a run directory outside the runs root."""
    root, outside = tmp_path / "runs", tmp_path / "outside"
    shutil.copytree(finished_run, root / "r1")
    shutil.copytree(finished_run, outside / "elsewhere")
    (outside / "secret.txt").write_text("not yours")
    (outside / "elsewhere" / "secret.txt").write_text("not yours")
    (root / "r1" / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "r1" / "leakdir").symlink_to(outside, target_is_directory=True)
    (root / "r1" / "tb").mkdir(exist_ok=True)
    (root / "r1" / "tb" / "events.out.tfevents.1.host").write_bytes(b"\x00events")
    (root / "r1" / "status.json.123-456.tmp").write_text("{half")  # a write in progress
    (root / "linked").symlink_to(outside / "elsewhere", target_is_directory=True)
    monkeypatch.setenv("ADMM_RUNS", str(root))
    monkeypatch.delenv("ADMM_RUNS_ROOT", raising=False)
    return root, outside


def _runs_page(name: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=TIMEOUT).run()
    at.switch_page("views/runs.py").run()
    if name:
        runs_sel(at).set_value(name).run()
    no_exceptions(at)
    return at


def _names(data: bytes) -> set[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.testzip() is None  # every member reads back with its CRC
        return set(z.namelist())


def test_the_whole_run_zip_holds_its_files_and_the_checkpoint_is_its_own(layout, served):
    root, _ = layout
    _runs_page("r1")
    label, data, disabled = served["runs_dl_zip"]
    assert label == "Whole run (.zip)" and not disabled
    names = _names(data())  # what the click serves
    expected = {
        f"r1/{p.relative_to(root / 'r1').as_posix()}"
        for p in (root / "r1").rglob("*")
        if p.is_file() and not p.is_symlink() and p.suffix not in (".pt", ".tmp") and "leakdir" not in p.parts
    }
    for f in ("config.json", "metrics.jsonl", "status.json", "summary.json", "tb/events.out.tfevents.1.host"):
        assert f"r1/{f}" in names, sorted(names)
    assert names == expected, (sorted(names), sorted(expected))
    assert not any("leak" in n or "secret" in n or n.endswith((".pt", ".tmp")) for n in names), sorted(names)
    with zipfile.ZipFile(io.BytesIO(data())) as z:  # the bytes are the files' own
        assert z.read("r1/config.json") == (root / "r1" / "config.json").read_bytes()
        assert z.read("r1/metrics.jsonl") == (root / "r1" / "metrics.jsonl").read_bytes()
    label, ckpt, disabled = served["runs_dl_ckpt"]
    assert (root / "r1" / "checkpoint.pt").is_file() and label.startswith("checkpoint.pt (") and not disabled
    assert ckpt() == (root / "r1" / "checkpoint.pt").read_bytes()


def test_a_run_without_a_checkpoint_offers_none(layout, served):
    root, _ = layout
    (root / "r1" / "checkpoint.pt").unlink()
    _runs_page("r1")
    label, _, disabled = served["runs_dl_ckpt"]
    assert label == "checkpoint.pt (none)" and disabled


def test_nothing_outside_the_runs_root_is_zipped(layout, served):
    root, outside = layout
    # a run directory that is a link to a folder outside: listed, but its buttons serve nothing
    at = _runs_page()
    assert "linked" in runs_sel(at).options
    runs_sel(at).set_value("linked").run()
    no_exceptions(at)
    for key in ("runs_dl_zip", "runs_dl_ckpt"):
        label, data, disabled = served[key]
        assert disabled and data() == b"", (key, label)
    # the names a page could pass, straight to the archive: each refused, nothing read
    for name in ("linked", "..", "../outside/elsewhere", str(outside / "elsewhere"), "r1/../../outside", ""):
        with pytest.raises(PermissionError):
            AR.run_zip(root, name)
        with pytest.raises(PermissionError):
            AR.checkpoint_bytes(root, name)
    # a runs root outside the allowed one (a sidebar value that slipped through) is refused too
    with pytest.raises(PermissionError):
        AR.run_zip(outside, "elsewhere")
    # and ?run= in a link naming a path outside never reaches a download button
    served.clear()
    at = AppTest.from_file(str(APP / "main.py"), default_timeout=TIMEOUT)
    at.query_params["run"] = "../outside/elsewhere"
    at.run()
    at.switch_page("views/runs.py").run()
    no_exceptions(at)
    assert "runs_dl_zip" not in served
