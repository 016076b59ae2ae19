"""The benchmark driver: per-method epochs reach each run; the accuracy-vs-time plot reads run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admm_core import bench

ROOT = Path(__file__).resolve().parents[1]


def _plot_module():
    from admm_core import plots

    return plots


def test_epochs_for_sets_each_methods_length(tmp_path, capsys):
    out = tmp_path / "b"
    rc = bench.main(
        ["--preset", "digits-mlp", "--methods", "adam,bcd", "--epochs", "1", "--epochs-for", "bcd=2", "--out", str(out)]
    )
    assert rc == 0
    epochs = {m: json.loads((out / f"digits-mlp-{m}" / "summary.json").read_text())["epochs"] for m in ("adam", "bcd")}
    assert epochs == {"adam": 1, "bcd": 2}
    table = (out / "digits-mlp.md").read_text()
    assert "| adam | 1 |" in table and "| bcd | 2 |" in table


@pytest.mark.parametrize("bad", ["bcd", "bcd=0", "bcd=x"])
def test_epochs_for_rejects_malformed_items(bad, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--preset", "digits-mlp", "--methods", "adam", "--epochs-for", bad, "--out", str(tmp_path)])
    assert "--epochs-for" in capsys.readouterr().err


def test_plot_reads_runs_and_writes_png(tmp_path):
    plot_bench = _plot_module()
    for method, accs in {"adam": [0.1, 0.9, 0.95], "bcd": [0.1, 0.5]}.items():
        run = tmp_path / method
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"method": method}))
        rows = [{"epoch": e, "wall_time_s": 1.5 * e, "test_accuracy": a} for e, a in enumerate(accs)]
        (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "notes").mkdir()  # a folder without metrics is ignored
    curves = plot_bench.load_curves(tmp_path)
    assert curves == {"adam": [(1.5, 0.9), (3.0, 0.95)], "bcd": [(1.5, 0.5)]}  # epoch 0 dropped (log axis)
    png = plot_bench.plot(curves, tmp_path / "out" / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_plot_cli_names_a_missing_folder(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _plot_module().main([str(tmp_path / "nope")])
    assert "folder" in capsys.readouterr().err
