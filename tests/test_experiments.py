"""The device-call scripts in experiments/: what they measure there and what they write into the
docs here (run on the CPU, on made-up inputs; the GPU rows need a lent machine)."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

import pytest
import torch

from admm_core import nmf

ROOT = Path(__file__).resolve().parents[1]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# DeepFacto settings small enough for a CPU test run (a 1-epoch backbone, one warm-up iteration)
TINY = ("image_size=32", "backbone_epochs=1", "warmup_epochs=1", "admm_images=24", "eval_images=10")
TINY += ("batch_size=16", "svm_c=0.01")


def tiny_faces():
    """48 made-up 64 px faces of 8 people (each person one 4 × 4 colour pattern), 40 random attributes."""
    import numpy as np

    from admm_core.faces.lfw import FaceSet

    rng = np.random.default_rng(0)
    ident = np.repeat(np.arange(8), 6)
    imgs = np.repeat(np.repeat(rng.integers(0, 256, (8, 4, 4, 3)), 8, 1), 8, 2)[ident].astype(np.uint8)
    return FaceSet(
        [f"p{k}/{i}.jpg" for i, k in enumerate(ident)], ident, [f"p{i}" for i in range(8)],
        (rng.random((48, 40)) < 0.3).astype(np.uint8), [f"a{k}" for k in range(40)], imgs, Path("."),
    )  # fmt: skip


def test_projection_speed_times_the_trainers_projection_and_documents_it(tmp_path):
    ps = load("projection_speed")
    g = torch.Generator().manual_seed(0)
    m = torch.rand(12, 5, generator=g)
    z = (m @ torch.rand(6, 5, 9, generator=g) + 0.1 * torch.rand(6, 12, 9, generator=g)).reshape(6, 12, 3, 3)
    torch.save({"m": m, "z": z.half(), "nnls_tol": 1e-4, "nnls_max_iter": 200}, tmp_path / ps.PACK)
    assert ps.main(["run", "--data", str(tmp_path), "--out", str(tmp_path / "out"), "--n", "20"]) == 0
    info = json.loads((tmp_path / "out" / "projection.json").read_text())
    zf = z.half().float().flatten(2)
    s = nmf.nnls(m, zf, tol=1e-4, max_iter=200)
    assert abs(info["reconstruction_error_cpu"] - float((zf - m @ s).norm() / zf.norm())) < 1e-6
    assert info["rows"][0]["chunk"] == 256 and info["rows"][0]["total_s"] > 0
    page = tmp_path / "page.md"
    ps.collect(tmp_path / "out", page, "proj", "the call")
    text = page.read_text()
    assert "<!-- generated:proj -->" in text and "Device call: `the call`" in text
    assert f"{info['reconstruction_error_cpu']:.4f}" in text


def test_gpu_deep_collect_writes_the_returned_table_and_curves(tmp_path):
    gd = load("gpu_deep")
    src = tmp_path / "out"
    run = tmp_path / "work" / "runs" / "block-admm"
    run.mkdir(parents=True)
    rows = [{"epoch": e, "test_accuracy": a, "residuals": [3.0 - e, 0.5]} for e, a in enumerate((0.1, 0.3, 0.25))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    src.mkdir()
    with tarfile.open(src / "runs.tar.gz", "w:gz") as tf:
        tf.add(tmp_path / "work" / "runs", arcname="runs")
    (src / "table.md").write_text("Machine: somewhere\n\n| method |\n|---|\n| block-admm |\n")
    page = tmp_path / "page.md"
    body = gd.collect(src, page, "gpu-x", "bash scripts/gpu_deep.sh $OUT", note="a note")
    assert "| block-admm | 30.0, 25.0 | 1.00, 0.50 |" in body  # epochs 1, 2; last epoch's residuals
    assert "probe" not in body  # no probe in this call
    assert "Machine: somewhere" in page.read_text() and "a note" in page.read_text()


def test_m_step_alternation_reports_the_error_of_the_factors_it_returns():
    """deepfacto_m_step.alternation: each round's error is ‖F − MS‖/‖F‖ of that round's factors
    (checked on the last one), S is the projection P_M(F), and both M-steps lower the error from the start."""
    ms = load("deepfacto_m_step")
    g = torch.Generator().manual_seed(0)
    f = torch.rand(8, 10, 4, generator=g).matmul(torch.rand(8, 4, 12, generator=g))  # (N, C=10, n=12), rank ≤ 4
    start = nmf.init_basis(f, 4, torch.Generator().manual_seed(0))
    s0 = nmf.nnls(start, f, tol=1e-4, max_iter=20)
    e0 = float((f - start @ s0).norm() / f.norm())
    for update in ("gradient:5", "exact"):
        out = ms.alternation(f, 4, update, rounds=6, tol=1e-4, max_iter=500)
        m, s = out["m"], out["s"]
        assert len(out["errors"]) == 6 and (m >= 0).all() and (s >= 0).all()
        assert abs(out["errors"][-1] - float((f - m @ s).norm() / f.norm())) < 1e-6
        torch.testing.assert_close(s, nmf.nnls(m, f, tol=1e-4, max_iter=500))
        assert out["errors"][-1] < e0


def test_widened_backbone_keeps_the_trained_stages_and_only_replaces_the_expansion_and_head():
    """deepfacto_wide_backbone.widen: stem and stages are the base's (same stage outputs, same
    weights), the expansion has C' outputs, and block 1 then ends in C' non-negative channels."""
    from admm_core.faces.backbone import FaceBackbone

    wb = load("deepfacto_wide_backbone")
    torch.manual_seed(1)
    base = FaceBackbone(widths=(4, 8, 8, 8), out_channels=16).eval()
    wide = wb.widen(base, 40, seed=0).eval()
    assert wide.arch["out_channels"] == 40 and wide.expand[0].weight.shape == (40, 8, 1, 1)
    assert wide.head.in_features == 40
    for k, v in base.state_dict().items():
        if not k.startswith(("expand.", "head.")):
            torch.testing.assert_close(wide.state_dict()[k], v, rtol=0, atol=0)
    images = torch.randint(0, 256, (3, 32, 32, 3), dtype=torch.uint8).numpy()
    torch.testing.assert_close(wb.stage_outputs(wide, images), wb.stage_outputs(base, images))
    with torch.no_grad():
        z = wide.features(torch.rand(2, 3, 32, 32))
    assert z.shape == (2, 40, 4, 4) and (z >= 0).all()


def test_deepfacto_gpu_trains_from_a_face_pack_and_the_svms_are_fitted_here(tmp_path, monkeypatch):
    """The device call reads LFW from a pack, sends back one tar per rank and one backbone, no SVMs;
    `collect` rebuilds run folders that `evaluate` finishes (here with the same faces)."""
    import numpy as np

    from admm_core.deepfacto import run as run_mod
    from admm_core.faces.lfw import pack_faces
    from admm_core.faces.lfw import unpack_faces as unpack
    from admm_core.rundir import read_json

    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "cache"))
    dg = load("deepfacto_gpu")
    fs = tiny_faces()
    part = fs.first(20)  # as load_lfwa(limit=20): the first faces, people renumbered
    assert part.files == fs.files[:20] and part.people == ["p0", "p1", "p2", "p3"]
    assert np.array_equal(part.identity, fs.identity[:20])
    pack_faces(fs, tmp_path / "lfw.npz")
    out, runs = tmp_path / "out", tmp_path / "runs"
    sets = (*TINY, "finetune_epochs=1", "device=cpu")
    argv = ["run", "--pack", str(tmp_path / "lfw.npz"), "--out", str(out), "--runs", str(runs), "--ranks", "4"]
    assert dg.main(argv + [x for s in sets for x in ("--set", s)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["backbone.pt", "info.json", "r4.tar"]
    assert run_mod.load_lfwa.__module__ == "admm_core.faces.lfw"  # the device-only patches are undone
    trained = read_json(runs / "r4" / "summary.json")
    assert trained["status"] == "finished" and "mean_attribute_accuracy" not in trained  # SVMs deferred
    assert dg.main(["collect", "--from", str(out), "--out", str(tmp_path / "bench")]) == 0
    d = tmp_path / "bench" / "r4"
    assert {"backbone.pt", "checkpoint.pt", "config.json", "summary.json"} <= {p.name for p in d.iterdir()}
    monkeypatch.setattr(run_mod, "load_lfwa", lambda *a, **k: fs)  # "here": the same faces
    s = run_mod.evaluate_run(d, log=lambda m: None)
    assert 0 < s["mean_attribute_accuracy"] <= 1 and s["evaluated_on"]
    assert s["test_accuracy"] == trained["test_accuracy"]  # training's figures kept
    assert len(read_json(d / "attributes.json")) == 40
    from admm_core.deepfacto.commands import section_text

    text = section_text([d], [read_json(d / "summary.json")], "TABLE")
    assert "Attribute SVMs and the eval s column: `deepfacto evaluate` on " + s["evaluated_on"] in text
    settings = next(ln for ln in text.splitlines() if ln.startswith("Settings that differ"))
    assert '"image_size": 32' in settings and '"device"' not in settings  # the device has its own line
    # --svm: the SVMs there, by the batched Newton solver; `evaluate` here with liblinear agrees
    out2, runs2 = tmp_path / "out2", tmp_path / "runs2"
    argv2 = ["run", "--pack", str(tmp_path / "lfw.npz"), "--out", str(out2), "--runs", str(runs2), "--ranks", "4"]
    monkeypatch.undo()  # the device call reads the pack again, not the "here" faces
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path / "cache"))
    assert dg.main(argv2 + [x for s in sets for x in ("--set", s)] + ["--svm"]) == 0
    there = read_json(runs2 / "r4" / "summary.json")
    assert 0 < there["mean_attribute_accuracy"] <= 1
    assert json.loads((runs2 / "r4" / "config.json").read_text())["deepfacto"]["svm_solver"] == "newton"
    assert dg.main(["collect", "--from", str(out2), "--out", str(tmp_path / "bench2")]) == 0
    monkeypatch.setattr(run_mod, "load_lfwa", lambda *a, **k: unpack(tmp_path / "lfw.npz"))  # the pack's faces
    again = run_mod.evaluate_run(tmp_path / "bench2" / "r4", {"svm_solver": "liblinear"}, log=lambda m: None)
    assert again["mean_attribute_accuracy"] == there["mean_attribute_accuracy"]


def test_the_next_device_call_script_trains_and_evaluates_each_rank_there(tmp_path):
    """experiments/deepfacto_gpu_next.sh, run on the CPU with tiny sizes (EXTRA overrides the sizes, not
    the variant's backbone): one tar per rank with the SVMs fitted there, its log, the settings."""
    import os
    import subprocess
    import sys

    from admm_core.faces.lfw import pack_faces

    fs = tiny_faces()
    pack_faces(fs, tmp_path / "lfw.npz")
    out = tmp_path / "out"
    out.mkdir()
    tiny = " ".join(f"--set {v}" for v in TINY)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # python3 = this interpreter
        "PACK": str(tmp_path / "lfw.npz"),
        "OUT": str(out),
        "RANKS": "4",
        "EXTRA": tiny,
        "ADMM_CACHE": str(tmp_path / "cache"),
    }
    script = ROOT / "experiments" / "deepfacto_gpu_next.sh"
    done = subprocess.run(["bash", str(script), "w48"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["backbone.pt", "info.json", "log.txt", "r4.tar"]
    info = json.loads((out / "info.json").read_text())
    assert info["sets"]["backbone_width"] == 48 and info["sets"]["warmup_epochs"] == 1  # EXTRA comes last
    assert info["ranks"]["4"]["status"] == "finished" and "r = 4: finished" in (out / "log.txt").read_text()
    with tarfile.open(out / "r4.tar") as tf:
        summary = json.load(tf.extractfile("summary.json"))
        cfg = json.load(tf.extractfile("config.json"))["deepfacto"]
    assert 0 < summary["mean_attribute_accuracy"] <= 1 and cfg["svm_solver"] == "newton" and cfg["m_steps"] == 20
    bad = subprocess.run(["bash", str(script), "w99"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown variant: w99" in bad.stderr


def test_svm_solver_bench_compares_the_solvers_and_writes_its_table(tmp_path, monkeypatch):
    """experiments/svm_solver_bench.py on made-up features: both solvers, their agreement, the section."""
    import numpy as np

    sb = load("svm_solver_bench")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 12))
    a = (x[:, :1] @ np.ones((1, 40)) + rng.normal(size=(160, 40)) > 0).astype(np.uint8)
    monkeypatch.setattr(sb, "features", lambda *args: (x[:100], a[:100], x[100:], a[100:], np.arange(60) // 3))
    monkeypatch.setenv("ADMM_JOBS", "1")
    page = tmp_path / "page.md"
    assert sb.main(["--markdown", str(page), "--section", "s", "--device", "cpu"]) == 0
    text = page.read_text()
    assert "100 training and 60 test faces, 12 features, 120 SVMs" in text
    newton = next(ln for ln in text.splitlines() if ln.startswith("| newton |"))
    assert newton.rstrip(" |").split(" | ")[4:7] == ["1.00000", "1.000", "0.00 points"]  # as liblinear
    assert "| liblinear |" in text and "<!-- /generated:s -->" in text


@pytest.fixture(scope="module")
def gpu_pack(tmp_path_factory):
    """gpu_deep.py's device pack of 2 CIFAR-10 images per class (and Fashion-MNIST), made once for
    the tests below: reading the JPEG tars and gzipping the IDX files is most of their time."""
    from admm_core.spec.datasets import candidate_roots

    if not any((r / "cifar10-jpeg" / "test.tar").exists() for r in candidate_roots(None)):
        pytest.skip("CIFAR-10 JPEG tars (../shared/data/cifar10-jpeg) absent")
    pack = tmp_path_factory.mktemp("gpu") / "pack"
    info = load("gpu_deep").main(["pack", "--out", str(pack), "--per-class", "2"])
    assert info == 0 and (pack / "FashionMNIST" / "raw").is_dir()
    return pack


def test_gpu_deep_run_gives_every_cifar_method_the_same_epochs_on_the_cpu(tmp_path, gpu_pack):
    """The device call end to end on a tiny CIFAR-10 pack, on the CPU: every method's epoch is timed
    first, the four methods then train the same number of epochs (within the budget), and the
    table, plot and archive come back."""
    gd, pack = load("gpu_deep"), gpu_pack
    out = tmp_path / "out"
    args = ["run", "--data", str(pack), "--out", str(out), "--workdir", str(tmp_path / "work"), "--device", "cpu"]
    args += ["--jobs", "sgd,block-admm,online-admm,gotmare", "--width", "2", "--epochs", "2", "--train-limit", "40"]
    # generous budget and slack: on a loaded CI machine a 40-image epoch's time (and a job's setup)
    # varies far more than on the GPU; slack 6 and 300 s once stopped block-admm after 5 s (CI), and
    # 1,200 s left room for 1 epoch only (CI). Each job's deadline is its own equal-epochs share, so a
    # large budget does not let a hung job hold the suite
    args += ["--test-limit", "20", "--probe-n", "16", "--budget-s", "6000", "--epoch-slack", "30"]
    assert gd.main(args) == 0
    log = (out / "log.txt").read_text()
    assert "equal epochs: 2 for sgd, block-admm, online-admm, gotmare" in log
    table = (out / "table.md").read_text()
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| ") and "method" not in line]
    assert sorted(r[1].strip() for r in rows) == ["block-admm", "gotmare", "online-admm", "sgd"]
    assert {r[2].strip() for r in rows} == {"2"} and all(r[-2].strip() == "finished" for r in rows)
    assert (out / "runs.tar.gz").exists() and (out / "curves.png").exists()


def test_every_deep_ablation_row_is_a_valid_run_and_reuse_compares_settings_not_spelling():
    """Each row's settings pass the method's validation, rows of a study are different runs, and a
    finished run counts as the row only if its training is the same (a default written out is)."""
    from admm_core.spec.config import RunConfig

    abl = load("deep_ablation")
    for study, spec in abl.STUDIES.items():
        configs = {}
        for name in spec["rows"]:
            args, _ = abl.row_config(study, name, Path("out"))
            configs[name] = abl.wanted_config(args)
            assert configs[name].method_settings  # made (and checked) with the config: ConfigError otherwise
        names = list(configs)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                assert not abl.same_run(configs[a], configs[b]), (study, a, b)
    want = abl.wanted_config(abl.row_config("resnet-cpu", "block", Path("out"))[0])
    d = want.to_dict()
    default_power_every = want.method_settings.power_every
    spelled = {**d, "method_params": {**d["method_params"], "power_every": default_power_every}}
    assert "power_every" not in d["method_params"]
    assert abl.same_run(RunConfig.from_dict(spelled), want)
    other = {**d, "method_params": {**d["method_params"], "dual_lr": 0.5}}
    assert not abl.same_run(RunConfig.from_dict(other), want)


def test_a_seed_study_borrows_only_rows_that_are_its_own_configuration_at_another_seed():
    """A group's row borrowed from another study (``(study, row)``) must be the same training as the
    group's own rows but for the seed, and every seed of a group must differ: else its mean mixes runs."""
    import dataclasses

    abl = load("deep_ablation")
    borrowed = 0
    for study, spec in abl.STUDIES.items():
        for label, names in spec.get("groups", {}).items():
            configs = [abl.wanted_config(abl.row_config(study, n, Path("out"))[0]) for n in names]
            seeds = [c.train.seed for c in configs]
            assert len(set(seeds)) == len(seeds), (study, label, seeds)
            unseeded = [dataclasses.replace(c, train=dataclasses.replace(c.train, seed=0)) for c in configs]
            assert all(abl.same_run(u, unseeded[0]) for u in unseeded), (study, label)
            borrowed += sum(isinstance(n, tuple) for n in names)
    assert borrowed  # the small proxy's seed study takes seed 0 from the screen


def test_a_probe_only_gpu_deep_call_times_each_speed_option_and_still_packs_its_results(tmp_path, gpu_pack):
    """`--jobs probe`: every option of block-admm and sgd is timed (a warm-up and a timed epoch each),
    the fastest is chosen, and the call ends with its archive although no run was trained."""
    gd, pack, out = load("gpu_deep"), gpu_pack, tmp_path / "out"
    args = ["run", "--data", str(pack), "--out", str(out), "--workdir", str(tmp_path / "work"), "--device", "cpu"]
    args += ["--jobs", "probe", "--width", "2", "--train-limit", "40", "--test-limit", "20", "--probe-n", "16"]
    assert gd.main([*args, "--budget-s", "120"]) == 0
    info = json.loads((out / "probe.json").read_text())
    for method in ("block-admm", "sgd"):
        times = info["timings"][method]
        assert info["chosen"][method] == min(times, key=lambda k: times[k]["epoch_s"])
        assert all(t["epoch_s"] > 0 and t["warmup_s"] > 0 for t in times.values())
    assert (out / "runs.tar.gz").exists()


def test_first_paint_decode_reads_a_dumped_tabs_console_and_messages(tmp_path, monkeypatch):
    """``first_paint.py --decode`` turns a dump's base64 websocket messages back into Streamlit's
    ForwardMsgs: what showed the blank tab's cause (a pushed fragment run naming another page hash
    than the full run before it, then the frontend's "Bad delta path" error)."""
    import base64

    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    monkeypatch.syspath_prepend(str(ROOT / "experiments"))  # its sibling thousand_runs
    fp = load("first_paint")
    start = ForwardMsg()
    start.new_session.page_script_hash = "df30ea3b" + "0" * 24
    start.metadata.run.script_run_id = "566ae9-run"
    start.metadata.run.fragment_ids.append("1b8ce504ddbc")
    block = ForwardMsg()
    block.delta.add_block.flex_container.SetInParent()
    block.delta.fragment_id = "1b8ce504ddbc"
    block.metadata.delta_path.extend([0, 6])
    done = ForwardMsg()
    done.script_finished = ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
    raw = [base64.b64encode(m.SerializeToString()).decode() for m in (start, block, done)]
    dump = tmp_path / "tab.json"
    dump.write_text(
        json.dumps(
            {"ws": [[2441, 1], [2442, 1], [2446, 1]], "raw": raw, "console": ["pageerror: Bad delta path\nat x"]}
        )
    )
    assert fp.decode(str(dump)).splitlines() == [
        "console: pageerror: Bad delta path",
        "2441 new_session page=df30ea3b run=566ae9 fragments=['1b8ce504ddbc']",
        "2442 delta add_block:flex_container path=[0, 6] fragment=1b8ce504 ''",
        "2446 script_finished FINISHED_FRAGMENT_RUN_SUCCESSFULLY",
    ]


def test_first_paint_main_thread_profile_counts_self_time_per_kind_and_the_idle_rest(monkeypatch):
    """``first_paint.py --trace``: a hand-built trace of one tab. The page's main thread (its first
    navigation to a served page; about:blank and an iframe's navigation ignored) runs a task of 100 ms
    holding a module's evaluation (50 ms, inside it 20 ms of layout) and a style pass (10 ms); then a
    60-ms task of which 30 ms fall before the paint. Another thread's work and events after the
    paint are not counted."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments"))
    fp = load("first_paint")
    main, other = {"pid": 7, "tid": 1}, {"pid": 7, "tid": 2}

    def x(name, ts_ms, dur_ms, where=main, **data):
        return {**where, "ph": "X", "name": name, "ts": 1_000_000 + ts_ms * 1000, "dur": dur_ms * 1000} | (
            {"args": {"data": data}} if data else {}
        )

    def nav(ts_ms, url, main_frame=True):
        data = {"isLoadingMainFrame": main_frame, "documentLoaderURL": url}
        return {**main, "ph": "R", "name": "navigationStart", "ts": 1_000_000 + ts_ms * 1000, "args": {"data": data}}

    events = [
        {**main, "ph": "M", "name": "thread_name", "args": {"name": "CrRendererMain"}},
        nav(-50, ""),  # about:blank
        nav(0, "http://127.0.0.1:8501/"),
        nav(150, "http://127.0.0.1:8501/component/x/index.html", main_frame=False),
        x("RunTask", 100, 100),
        x("v8.evaluateModule", 110, 50, url="http://127.0.0.1:8501/static/js/react-dom.abc.js?v=1"),
        x("Layout", 120, 20),
        x("UpdateLayoutTree", 170, 10),
        x("RunTask", 300, 60),
        x("RunTask", 120, 500, where=other),
        x("Paint", 400, 5),
    ]
    got = fp.main_thread_profile({"traceEvents": events}, until_ms=330)
    assert got == {
        "idle": 200.0,  # 330 ms less the 100-ms task and the 30 ms of the second before the paint
        "other: RunTask": 70.0,  # 40 ms of the first task's own, 30 of the second
        "script: react-dom.abc.js": 30.0,
        "layout": 20.0,
        "style": 10.0,
    }
    assert sum(got.values()) == 330
    assert fp.main_thread_profile({"traceEvents": events[:2]}, until_ms=330) == {}  # no page load traced
