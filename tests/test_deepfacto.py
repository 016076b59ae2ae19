"""DeepFacto: LFWA loader and split, triplet pieces, the Block-ADMM trainer, an end-to-end smoke run."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as hs

from admm_core.deepfacto.attributes import attribute_svms, majority_baseline
from admm_core.deepfacto.trainer import DeepFactoTrainer
from admm_core.faces import lfw as faces_mod
from admm_core.faces import tensors
from admm_core.faces.backbone import FaceBackbone, identity_batches, triplet_loss
from admm_core.faces.lfw import identity_split
from admm_core.spec.deepfacto import DeepFactoConfig

DATA = Path(os.environ.get("ADMM_DATA", "")) / "lfw"
HAVE_LFW = (DATA / "lfw-deepfunneled-160").is_dir() and (DATA / "lfwa_att_40.csv").is_file()
needs_lfw = pytest.mark.skipif(
    not HAVE_LFW, reason=f"LFW/LFWA not found under {DATA} (set ADMM_DATA to the folder holding lfw/)"
)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


# --- loader ---------------------------------------------------------------------------------


@needs_lfw
def test_lfwa_loader_finds_all_labelled_images_and_40_attributes():
    fs = faces_mod.load_lfwa(size=None)
    assert fs.n == 13143
    assert fs.attributes.shape == (13143, 40) and len(fs.attribute_names) == 40
    assert set(np.unique(fs.attributes)) <= {0, 1}
    assert fs.attribute_names[0] == "5_o_Clock_Shadow" and "Male" in fs.attribute_names
    tr, te = fs.split(seed=0)
    assert len(tr) + len(te) == 13143
    assert not set(fs.identity[tr]) & set(fs.identity[te])  # identity-disjoint
    tr2, te2 = fs.split(seed=0)
    assert np.array_equal(te, te2)  # fixed seed -> same split
    assert not np.array_equal(te, fs.split(seed=1)[1])


@needs_lfw
def test_lfwa_images_are_face_crops_resized(tmp_path):
    fs = faces_mod.load_lfwa(size=48, limit=12)
    assert fs.images.shape == (12, 48, 48, 3) and fs.images.dtype == np.uint8
    again = faces_mod.load_lfwa(size=48, limit=12)  # from the cache
    assert np.array_equal(fs.images, again.images)


def test_loader_reads_a_user_lfw_folder_with_250px_originals(tmp_path):
    import cv2

    root = tmp_path / "mylfw"
    rows = ["image," + ",".join(f"a{k}" for k in range(40))]
    for person in ("Ann_A", "Bob_B", "Cid_C"):
        (root / person).mkdir(parents=True)
        for j in (1, 2):
            img = np.zeros((250, 250, 3), np.uint8)
            img[48:208, 48:208] = 200  # the face crop region
            cv2.imwrite(str(root / person / f"{person}_{j:04d}.jpg"), img)
            rows.append(f"{person}/{person}_{j:04d}.jpg," + ",".join(str((j + k) % 2) for k in range(40)))
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join(rows) + "\n")
    fs = faces_mod.load_lfwa(image_dir=root, labels=labels, size=32, cache=False)
    assert fs.n == 6 and fs.images.shape == (6, 32, 32, 3)
    assert fs.images.min() > 150  # only the crop (no black border) survives
    assert len(fs.people) == 3


def test_missing_lfw_gives_one_line_error(tmp_path):
    from admm_core.data import DataError

    with pytest.raises(DataError, match="lfwa.*not found.*looked in"):
        faces_mod.load_lfwa(root=tmp_path)


def test_bad_face_file_names_the_file(tmp_path):
    bad = tmp_path / "Person_0001.jpg"
    bad.write_text("nope")
    with pytest.raises(ValueError, match="Person_0001.jpg"):
        faces_mod.read_face(bad, 32)


def test_identity_split_is_deterministic_and_sized():
    people = [f"p{i:03d}" for i in range(100)]
    a, b = identity_split(people, 0, 0.2), identity_split(list(reversed(sorted(people))), 0, 0.2)
    assert len(a) == 20
    assert {people[i] for i in a} == {sorted(people, reverse=True)[i] for i in b}  # by name, not by list order


# --- triplet pieces ------------------------------------------------------------------------------


def test_triplet_loss_zero_when_separated_and_positive_when_not():
    y = torch.tensor([0, 0, 1, 1])
    good = torch.tensor([[1.0, 0], [1.0, 0.01], [-1.0, 0], [-1.0, 0.01]])
    assert float(triplet_loss(good, y, 0.2)) == 0.0
    bad = torch.tensor([[1.0, 0], [-1.0, 0], [1.0, 0.01], [-1.0, 0.01]])
    assert float(triplet_loss(bad, y, 0.2)) > 1.0


def test_identity_batches_cover_every_sample_once():
    ident = np.array([0] * 9 + [1] * 2 + [2] + [3] * 5)
    bs = identity_batches(ident, np.random.default_rng(0), k=4, batch_size=6)
    allpos = np.concatenate(bs)
    assert sorted(allpos.tolist()) == list(range(len(ident)))


def test_attribute_svms_and_majority():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    a = np.stack([(x[:, 0] > 0), np.zeros(200, bool), (x[:, 1] > 1)], 1).astype(np.uint8)
    acc = attribute_svms(x[:150], a[:150], x[150:], a[150:])
    assert acc.shape == (3,) and acc[0] > 0.9 and acc[1] == 1.0
    maj = majority_baseline(a[:150], a[150:])
    assert maj[1] == 1.0 and 0.3 < maj[0] < 0.7
    # the SVMs run in parallel processes: same numbers as one process, in attribute order
    assert np.array_equal(
        attribute_svms(x[:150], a[:150], x[150:], a[150:], n_jobs=2),
        attribute_svms(x[:150], a[:150], x[150:], a[150:], n_jobs=1),
    )


def test_svm_c_cross_validation_over_test_people():
    """attribute_svms_cv against a hand-written reference: each half of the test people is scored
    with the C that is best on the other half."""
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    from admm_core.deepfacto.attributes import attribute_svms_cv, identity_holdout

    rng = np.random.default_rng(1)
    x = rng.normal(size=(260, 40))
    a = np.stack([x[:, 0] + 0.8 * rng.normal(size=260) > 0, x[:, 1] + x[:, 2] > 0.5, np.ones(260, bool)], 1).astype(
        np.uint8
    )
    x_tr, a_tr, x_te, a_te = x[:160], a[:160], x[160:], a[160:]
    groups = np.repeat(np.arange(25), 4)  # 25 test people, 4 images each
    fold = identity_holdout(groups, 0.5, seed=0)
    assert fold.sum() in (48, 52) and not set(groups[fold]) & set(groups[~fold])  # whole people on each side
    cs = (1e-3, 1e-1, 10.0)
    acc, chosen = attribute_svms_cv(x_tr, a_tr, x_te, a_te, groups, cs, seed=0)
    sc = StandardScaler().fit(x_tr)
    sc.scale_ = np.maximum(sc.scale_, 1e-2 * np.median(sc.scale_))
    for k in range(2):
        hit = [
            LinearSVC(C=c, max_iter=3000, random_state=0)
            .fit(sc.transform(x_tr), a_tr[:, k])
            .predict(sc.transform(x_te))
            == a_te[:, k]
            for c in cs
        ]
        c1, c2 = int(np.argmax([h[~fold].mean() for h in hit])), int(np.argmax([h[fold].mean() for h in hit]))
        assert tuple(chosen[k]) == (cs[c1], cs[c2])
        assert acc[k] == pytest.approx((hit[c1][fold].sum() + hit[c2][~fold].sum()) / len(a_te))
    assert tuple(chosen[2]) == (1e-3, 1e-3) and acc[2] == 1.0  # one class only: every C ties, the smallest wins
    # one candidate: the plain SVMs
    acc1, chosen1 = attribute_svms_cv(x_tr, a_tr, x_te, a_te, groups, [0.1])
    assert np.array_equal(acc1, attribute_svms(x_tr, a_tr, x_te, a_te, c=0.1)) and (chosen1 == 0.1).all()


def test_runs_sharing_a_backbone_fit_its_svms_once(monkeypatch, tmp_path):
    """attribute_evaluation reuses SVM results for identical inputs (the raw-backbone features of
    runs that share a backbone), in the same process and from the cache folder in a later one, and
    refits when anything in them differs or the cached file is unreadable."""
    from types import SimpleNamespace

    from admm_core.deepfacto import attributes as df

    calls = []
    real = df.attribute_svms_cv
    monkeypatch.setattr(df, "attribute_svms_cv", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    monkeypatch.setattr(df, "_SVM_MEMO", {})
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path))
    rng = np.random.default_rng(0)
    n_tr, n_te = 60, 40
    faces = SimpleNamespace(
        attributes=(rng.random((n_tr + n_te, 2)) > 0.5).astype(np.uint8),
        identity=np.repeat(np.arange(25), 4),
        attribute_names=["a", "b"],
    )
    tr, te = np.arange(n_tr), np.arange(n_tr, n_tr + n_te)
    cfg = DeepFactoConfig(svm_grid=1, svm_c=(0.01, 0.1))
    raw = {1: (rng.normal(size=(n_tr, 7)), rng.normal(size=(n_te, 7)))}

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        s = (torch.rand(n_tr, 3, 4, generator=g), torch.rand(n_te, 3, 4, generator=g))
        z = (torch.rand(n_tr, 5, 4, generator=g), torch.rand(n_te, 5, 4, generator=g))
        return df.attribute_evaluation(cfg, faces, tr, te, s, z, raw, log=lambda m: None)

    rows_a, sum_a = run(0)
    assert len(calls) == 3  # S, raw, fine-tuned (g = 1: the global columns are the same fits)
    rows_b, sum_b = run(1)  # another run on the same backbone: new S and Z, same raw features
    assert len(calls) == 5 and 7 not in {c[1] for c in calls[3:]}
    assert sum_b["raw_backbone_attribute_accuracy"] == sum_a["raw_backbone_attribute_accuracy"]
    assert [r["raw_backbone"] for r in rows_b] == [r["raw_backbone"] for r in rows_a]
    monkeypatch.setattr(df, "_SVM_MEMO", {})  # a later process: the cache folder answers
    rows_c, sum_c = run(0)
    assert len(calls) == 5 and sum_c == sum_a and rows_c == rows_a
    files = sorted(tmp_path.glob(f"svm-*-p{df.SVM_PROTOCOL}-{cfg.svm_solver}.npz"))
    assert len(files) == 5 and not list(tmp_path.glob("*.tmp*"))
    for i, f in enumerate(files):  # unreadable, cut short (an interrupted copy) or empty: fitted again
        good = f.read_bytes()
        f.write_bytes([b"not an npz", good[: len(good) // 2], b""][i % 3])
    monkeypatch.setattr(df, "_SVM_MEMO", {})
    assert run(0) == (rows_a, sum_a) and len(calls) == 8
    raw[1] = (raw[1][0] + 1e-3, raw[1][1])  # any change in the inputs: fitted again
    run(1)
    assert len(calls) == 11 and calls[-1][1] == 5 and 7 in {c[1] for c in calls[-3:]}


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_stop_ends_an_svm_set_between_svms(monkeypatch, n_jobs):
    """should_stop is asked before each SVM is handed out: a stop raises StopRun after a few
    SVMs instead of after all of them (in-process and with worker processes)."""
    from admm_core.deepfacto import attributes as df
    from admm_core.loop import StopRun

    rng = np.random.default_rng(0)
    x_tr, x_te = rng.normal(size=(40, 5)), rng.normal(size=(30, 5))
    a_tr, a_te = (rng.random((40, 40)) > 0.5).astype(np.uint8), (rng.random((30, 40)) > 0.5).astype(np.uint8)
    asked = []

    def should_stop():
        asked.append(1)
        return len(asked) > 3

    fitted = []
    real = df._one_svm
    monkeypatch.setattr(df, "_one_svm", lambda *a: fitted.append(1) or real(*a))
    with pytest.raises(StopRun):
        df.attribute_svms_cv(
            x_tr, a_tr, x_te, a_te, np.arange(30) // 3, [0.01, 0.1], n_jobs=n_jobs, should_stop=should_stop
        )
    assert len(asked) == 4  # 80 SVMs in the set; the fourth question stopped it
    if n_jobs == 1:  # in-process: exactly the three handed out before the stop ran
        assert len(fitted) == 3
    # without a stop the same call fits the whole set
    acc, _ = df.attribute_svms_cv(
        x_tr, a_tr, x_te, a_te, np.arange(30) // 3, [0.01, 0.1], n_jobs=1, should_stop=lambda: False
    )
    assert acc.shape == (40,)


def test_pooled_grid_matches_hand_windows():
    """3 × 3 pooling of an 8 × 8 map: windows rows/cols [0,3), [2,6), [5,8), flattened channel-major."""
    from admm_core.deepfacto.attributes import pooled

    s = torch.rand(2, 3, 64)
    got = pooled(s, 3)
    m = s.reshape(2, 3, 8, 8).numpy()
    win = [(0, 3), (2, 6), (5, 8)]
    want = np.stack(
        [[m[b, k, r0:r1, c0:c1].mean() for k in range(3) for r0, r1 in win for c0, c1 in win] for b in range(2)]
    )
    assert got.shape == (2, 27) and np.allclose(got, want, atol=1e-6)
    assert np.allclose(pooled(s, 1), s.mean(2).numpy())


# --- the Block-ADMM trainer on synthetic faces -----------------------------------------------


def test_pooled_features_match_pooling_each_grid_separately():
    """One chunked forward pass pooled on several grids = the full maps pooled grid by grid."""
    from admm_core.deepfacto.attributes import pooled, pooled_features
    from admm_core.faces.verification import embed_all
    from admm_core.spec.faces import backbone_widths

    torch.manual_seed(0)
    net = FaceBackbone(widths=backbone_widths(8)).eval()
    imgs = np.random.default_rng(0).integers(0, 256, size=(7, 64, 64, 3), dtype=np.uint8)
    a, b = np.array([0, 2, 3, 6]), np.array([1, 5])
    with torch.no_grad():
        got = pooled_features(net, imgs, (a, b), {3, 1}, torch.device("cpu"))
        full = [
            embed_all(lambda x: net.features(x).flatten(2), imgs, idx, torch.device("cpu"), chunk=3) for idx in (a, b)
        ]
    assert sorted(got) == [1, 3]
    for g in (1, 3):
        for mine, ref in zip(got[g], full):
            np.testing.assert_allclose(mine, pooled(ref, g), rtol=1e-5, atol=1e-6)


def test_trainer_iterations_keep_factors_non_negative_and_finite():
    torch.manual_seed(0)
    cfg = DeepFactoConfig(rank=3, image_size=32, emb_dim=8, batch_size=8, s_steps=2, m_steps=2)
    bb = FaceBackbone(widths=(8, 8, 16, 16), out_channels=8, emb_dim=8).eval()
    images = np.random.default_rng(0).integers(0, 256, (16, 32, 32, 3), dtype=np.uint8)
    ident = np.repeat(np.arange(4), 4)
    tr = DeepFactoTrainer(cfg, bb, images, ident, torch.device("cpu"), torch.Generator().manual_seed(0))
    w0 = [p.clone() for p in bb.parameters()]
    d1 = tr.iterate(finetune=False)
    assert all(torch.equal(a, b) for a, b in zip(w0, bb.parameters()))  # frozen while warming up
    d2 = tr.iterate(finetune=True)
    assert any(not torch.equal(a, b) for a, b in zip(w0, bb.parameters()))  # fine-tuned afterwards
    for d in (d1, d2):
        assert len(d["residuals"]) == 3 and all(np.isfinite(d["residuals"]))
        assert 0 <= d["s_sparsity"] <= 1 and np.isfinite(d["nmf_residual"])
    assert (tr.state.m >= 0).all() and (tr.state.s >= 0).all()
    s, z = tr.scores(images[:5])
    assert s.shape == (5, 3, 16) and (s >= 0).all() and z.shape == (5, 8, 16)


def _tiny_trainer(s_mode: str, n_people=4, per=4, **kw):
    torch.manual_seed(0)
    cfg = DeepFactoConfig(
        rank=3,
        image_size=32,
        emb_dim=8,
        batch_size=8,
        s_steps=2,
        m_steps=2,
        s_mode=s_mode,
        eval_images=n_people * per,
        **kw,
    )
    bb = FaceBackbone(widths=(8, 8, 16, 16), out_channels=8, emb_dim=8).eval()
    images = np.random.default_rng(0).integers(0, 256, (n_people * per, 32, 32, 3), dtype=np.uint8)
    ident = np.repeat(np.arange(n_people), per)
    return DeepFactoTrainer(cfg, bb, images, ident, torch.device("cpu"), torch.Generator().manual_seed(0)), images


def test_block2_trains_on_the_s_that_inference_reproduces():
    """s_mode "projection": after warm-up and fine-tune iterations the S of the training state (what
    block 2's last Θ-step used) equals the test-time projection recomputed from the images, and the
    reported mismatch says so; the paper's free S ("admm") differs from it by far more."""
    from admm_core import nmf

    mism = {}
    for mode in ("projection", "admm"):
        tr, images = _tiny_trainer(mode)
        for ft in (False, False, True):
            d = tr.iterate(finetune=ft)
        s_test, f = tr.scores(images)  # inference: features from the images, then S = P_M(block_1(x))
        ref = nmf.nnls(tr.state.m, f, tol=1e-9, max_iter=20000)  # a tight projection, by hand
        mism[mode] = float((tr.state.s - s_test).norm() / s_test.norm())
        assert d["s_mismatch"] == pytest.approx(mism[mode], rel=1e-3, abs=1e-7)
        if mode == "projection":
            assert mism[mode] < 1e-6
            assert float((tr.state.s - ref).norm() / ref.norm()) < 0.02  # a real projection, to the tolerance
            ms = nmf.reconstruct(tr.state.m, s_test)
            assert d["reconstruction_error"] == pytest.approx(float((f - ms).norm() / f.norm()), rel=1e-4)
    assert mism["admm"] > 100 * max(mism["projection"], 1e-4)


def test_projection_warmup_fits_m_to_the_frozen_features():
    """While the backbone is frozen, s_mode "projection" is alternating NMF of block_1(X): Z_1 = block_1(X),
    U_1 = V = 0, and the reconstruction error does not grow from one iteration to the next."""
    tr, _ = _tiny_trainer("projection")
    errs = [tr.iterate(finetune=False)["reconstruction_error"] for _ in range(4)]
    st = tr.state
    assert torch.equal(st.z1, st.f) and not st.u1.any() and not st.v.any()
    assert all(b <= a * (1 + 1e-3) for a, b in zip(errs, errs[1:])), errs


def test_exact_m_update_solves_the_warmup_m_step():
    """m_update "exact": the warm-up M-step is the NNLS fit of F = block_1(X) on the S it starts from
    (scipy, one row of M at a time), and it fits F better than m_steps gradient steps do."""
    from scipy.optimize import nnls as scipy_nnls

    from admm_core import nmf

    errs = {}
    for m_update in ("exact", "gradient"):
        tr, _ = _tiny_trainer("projection", m_update=m_update)
        st = tr.state
        f, s0 = nmf.to_matrix(st.f.unflatten(2, tr.hw)).double(), nmf.to_matrix(st.s.unflatten(2, tr.hw)).double()
        tr.iterate(finetune=False)
        m = tr.state.m.double()
        errs[m_update] = nmf.objective(f, m, s0)
        if m_update == "exact":
            ref = np.stack([scipy_nnls(s0.T.numpy(), f[i].numpy())[0] for i in range(f.shape[0])])
            np.testing.assert_allclose(m.numpy(), ref, rtol=1e-3, atol=1e-4 * ref.max())
    assert errs["exact"] < errs["gradient"]


def test_admm_dual_v_settles_at_its_fixed_point_instead_of_growing():
    """s_mode "admm", backbone frozen: after the Z_1-step, V ← V + Z_1 − MS is the contraction
    V_new = β/(γ+β)·(V + F − U_1 − MS) (F = block_1(X)), whose fixed point is (β/γ)(F − MS − U_1)."""
    from admm_core import nmf

    tr, _ = _tiny_trainer("admm")
    tr.cfg = tr.cfg.replace(gamma=2.0, beta=1.0)
    g, b = tr.cfg.gamma, tr.cfg.beta
    norms = []
    for _ in range(12):
        st = tr.state
        v_old, f, u1 = st.v.clone(), st.f.clone(), st.u1.clone()
        tr.iterate(finetune=False)
        ms = nmf.reconstruct(tr.state.m, tr.state.s)
        torch.testing.assert_close(tr.state.v, b / (g + b) * (v_old + f - u1 - ms), rtol=1e-4, atol=1e-5)
        norms.append(float(tr.state.v.norm()))
    fixed = b / g * (tr.state.f - ms - tr.state.u1)
    assert float((tr.state.v - fixed).norm() / fixed.norm()) < 0.1 and norms[-1] < 2 * norms[4]


def test_the_deepfacto_commands_are_the_cli_s():
    """`python -m admm_core deepfacto` is the spelling (the library package has no ``__main__`` of its
    own that would import the command line back: ``admm_core.deepfacto`` is not runnable)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, "-m", "admm_core", "deepfacto"], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "usage: admm deepfacto" in r.stderr
    assert not (root / "admm_core" / "deepfacto" / "__main__.py").exists()


def test_config_validation_names_field():
    from admm_core.spec.config import ConfigError

    with pytest.raises(ConfigError, match="deepfacto.rank"):
        DeepFactoConfig(rank=0)
    with pytest.raises(ConfigError, match="unknown keys"):
        DeepFactoConfig.from_dict({"rnak": 4})


# --- end to end on a small LFW subset --------------------------------------------------------------


@needs_lfw
def test_smoke_run_through_the_cli(tmp_path):
    from admm_core.cli import main
    from admm_core.heatmaps import heatmaps
    from admm_core.rundir import read_json, read_metrics

    run = tmp_path / "run"
    sets = [
        "data_limit=160",
        "image_size=32",
        "backbone_epochs=1",
        "finetune_epochs=1",
        "admm_images=48",
        "eval_images=30",
        "svm_train_limit=80",
        "batch_size=32",
    ]
    argv = ["train", "--preset", "lfwa-deepfacto", "--rank", "4", "--epochs", "2", "--out", str(run), "--device", "cpu"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["preset"] == "lfwa-deepfacto" and cfg["deepfacto"]["rank"] == 4
    assert read_json(run / "status.json")["state"] == "finished"
    ms = read_metrics(run)
    assert [m["epoch"] for m in ms] == [0, 1, 2]  # --epochs 2: two iterations in all (the last one fine-tunes)
    assert [m.get("phase") for m in ms[1:]] == ["warmup", "finetune"]
    for m in ms:
        assert {
            "epoch",
            "train_loss",
            "test_accuracy",
            "residuals",
            "wall_time_s",
            "nmf_residual",
            "s_sparsity",
        } <= set(m)
    summ = read_json(run / "summary.json")
    assert 0 <= summ["mean_attribute_accuracy"] <= 1 and summ["rank"] == 4
    # verification on all test faces (3,000 + 3,000 pairs); block 2 trained on the S inference gives
    assert summ["verification_pairs"] == 6000 and 0 <= summ["test_accuracy"] <= 1
    assert summ["s_mode"] == "projection" and summ["s_mismatch"] < 1e-5
    assert 0 < summ["reconstruction_error"] < 1 and all(
        "s_mismatch" in m and "reconstruction_error" in m for m in ms[1:]
    )
    assert len(read_json(run / "attributes.json")) == 40
    img = DATA / "lfw-deepfunneled-160" / "Aaron_Eckhart" / "Aaron_Eckhart_0001.jpg"
    maps = heatmaps(run, str(img))
    assert len(maps) == 4 and maps[0].shape == (160, 160)
    from admm_core.deepfacto.inference import load_inference_model

    model = load_inference_model(run)
    faces_small = faces_mod.load_lfwa(size=32, limit=160)
    e = model.embed(model.scores(faces_small.images[:5]))
    assert e.shape == (5, DeepFactoConfig().emb_dim) and np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)

    # `evaluate` rebuilds the same features from the run's files: the same accuracies
    def df_main(argv):  # `admm deepfacto ...`
        return main(["deepfacto", *argv])

    assert summ["svm_c"] == list(DeepFactoConfig().svm_c) and all(
        set(r["svm_c"]) >= {"deepfacto", "raw_backbone"} for r in read_json(run / "attributes.json")
    )
    assert df_main(["evaluate", "--run", str(run)]) == 0
    again = read_json(run / "summary.json")
    for k in (
        "mean_attribute_accuracy",
        "raw_backbone_attribute_accuracy",
        "mean_attribute_accuracy_global",
        "finetuned_backbone_attribute_accuracy",
    ):
        assert again[k] == pytest.approx(summ[k], abs=1e-9), k
    assert df_main(["evaluate", "--run", str(run), "--set", "svm_c=0.05"]) == 0
    assert read_json(run / "summary.json")["svm_c"] == [0.05] and all(
        r["svm_c"]["deepfacto"] == [0.05, 0.05] for r in read_json(run / "attributes.json")
    )
    assert json.loads((run / "config.json").read_text())["deepfacto"]["svm_c"] == [0.05]
    assert df_main(["evaluate", "--run", str(run), "--set", "rank=8"]) == 2  # training fields need a new run
    assert df_main(["evaluate", "--run", str(tmp_path / "nope")]) == 2
    # the bench table of finished runs under --out (this run: `run` matches r*) names where it ran
    from admm_core.device import machine

    assert read_json(run / "status.json")["machine"] == machine("cpu")
    page = tmp_path / "page.md"
    assert df_main(["bench", "--ranks", "", "--out", str(tmp_path), "--markdown", str(page), "--section", "t"]) == 0
    text = page.read_text()
    assert f"Device: cpu ({machine('cpu')})." in text and "<!-- /generated:t -->" in text
    assert "\n| 4 | projection |" in text


@needs_lfw
def test_stopped_run_resumes_to_the_same_result(tmp_path):
    """A run stopped after iteration 1 and resumed through the CLI ends where an unbroken run ends."""
    from admm_core.cli import main
    from admm_core.deepfacto.run import train_deepfacto
    from admm_core.rundir import read_json, read_metrics
    from admm_core.spec.config import ConfigError
    from admm_core.spec.deepfacto import STATE_FILE, DeepFactoConfig

    cfg = DeepFactoConfig(
        rank=4,
        data_limit=160,
        image_size=32,
        backbone_epochs=1,
        warmup_epochs=2,
        finetune_epochs=1,
        admm_images=48,
        eval_images=30,
        svm_train_limit=80,
        batch_size=32,
        device="cpu",
    )
    whole = train_deepfacto(cfg, tmp_path / "whole", log=lambda m: None)
    part = tmp_path / "part"
    stopped = train_deepfacto(cfg, part, should_stop=lambda: len(read_metrics(part)) >= 2, log=lambda m: None)
    assert stopped["status"] == "stopped" and (part / STATE_FILE).is_file()
    assert [m["epoch"] for m in read_metrics(part)] == [0, 1]
    with pytest.raises(ConfigError, match="rank"):
        train_deepfacto(cfg.replace(rank=5), part, resume=True, log=lambda m: None)
    # a resume may move the end of the warm-up, but not re-label an iteration already done (1, frozen)
    with pytest.raises(ConfigError, match="warmup_epochs"):
        train_deepfacto(cfg.replace(warmup_epochs=0), part, resume=True, log=lambda m: None)
    # as if saved before the renames (train_limit, warmup_iters, …): config.json and state.pt resume all the same
    from admm_core.spec.deepfacto import RENAMED

    def old_names(d: dict) -> dict:
        return {next((o for o, n in RENAMED.items() if n == k), k): v for k, v in d.items()}

    saved = read_json(part / "config.json")
    (part / "config.json").write_text(json.dumps({**saved, "deepfacto": old_names(saved["deepfacto"])}))
    state = torch.load(part / STATE_FILE, weights_only=True)
    torch.save({**state, "config": old_names(state["config"])}, part / STATE_FILE)
    assert "warmup_iters" in read_json(part / "config.json")["deepfacto"]
    assert main(["train", "--resume", str(part)]) == 0
    done = read_json(part / "summary.json")
    assert done["status"] == "finished" and not (part / STATE_FILE).exists()
    a, b = read_metrics(tmp_path / "whole"), read_metrics(part)
    assert [m["epoch"] for m in b] == [0, 1, 2, 3]
    for ma, mb in zip(a, b):
        assert mb["residuals"] == pytest.approx(ma["residuals"], rel=1e-4, abs=1e-6)
        assert mb["nmf_residual"] == pytest.approx(ma["nmf_residual"], rel=1e-4)
    assert done["mean_attribute_accuracy"] == pytest.approx(whole["mean_attribute_accuracy"], abs=1e-9)


def test_resumed_to_keeps_the_phase_of_every_iteration_done():
    """Resume lengths, by hand: the warm-up takes the change while it lasts, the fine-tune after."""
    from admm_core.spec.config import ConfigError
    from admm_core.spec.deepfacto import DeepFactoConfig

    cfg = DeepFactoConfig(warmup_epochs=12, finetune_epochs=1)
    assert cfg.resumed_to(13, 5) is cfg
    assert (cfg.resumed_to(20, 5).warmup_epochs, cfg.resumed_to(20, 5).finetune_epochs) == (19, 1)
    assert cfg.resumed_to(6, 5).warmup_epochs == 5  # shorter: the 5 done stay warm-up, then one fine-tune
    assert (cfg.resumed_to(20, 13).warmup_epochs, cfg.resumed_to(20, 13).finetune_epochs) == (12, 8)
    with pytest.raises(ConfigError, match=r"epochs = 4: the run has done 5"):
        cfg.resumed_to(4, 5)
    three = DeepFactoConfig(warmup_epochs=12, finetune_epochs=3)
    with pytest.raises(ConfigError, match=r"Resume to epoch = 7: must be at least 8"):
        three.resumed_to(7, 5, field_name="Resume to epoch")
    assert three.resumed_to(14, 14).finetune_epochs == 2  # stopped in the fine-tune: end the loop there


@settings(max_examples=300, deadline=None)
@given(w=hs.integers(0, 20), f=hs.integers(0, 5), done=hs.integers(0, 25), target=hs.integers(0, 40))
def test_resumed_to_fuzz(w, f, done, target):
    """Any accepted length runs to ``target`` iterations and gives every done iteration its phase."""
    from admm_core.spec.config import ConfigError
    from admm_core.spec.deepfacto import DeepFactoConfig

    assume(done <= w + f)
    cfg = DeepFactoConfig(warmup_epochs=w, finetune_epochs=f)
    try:
        new = cfg.resumed_to(target, done)
    except ConfigError:
        assert target != cfg.epochs and (target < max(done, 1) or (done <= w and target - f < done))
        return
    assert new.epochs == target and new.epochs >= done
    assert all((i > w) == (i > new.warmup_epochs) for i in range(1, done + 1))


def test_run_stopped_during_its_evaluation_resumes_to_the_end(tmp_path, monkeypatch):
    """Stopped after its last iteration (in the SVMs): the resume skips the loop, evaluates, and
    ends as the unbroken run; it starts from the run's own backbone.pt."""
    from admm_core.deepfacto import run as run_mod
    from admm_core.deepfacto.run import train_deepfacto
    from admm_core.rundir import read_json, read_metrics
    from admm_core.spec.deepfacto import STATE_FILE, DeepFactoConfig

    cfg = DeepFactoConfig(
        rank=4, data_limit=160, image_size=32, backbone_epochs=1, warmup_epochs=1, finetune_epochs=1,
        admm_images=48, eval_images=30, svm_train_limit=80, batch_size=32, device="cpu",
    )  # fmt: skip
    whole = train_deepfacto(cfg, tmp_path / "whole", log=lambda m: None)
    part = tmp_path / "part"

    def stop_in_evaluation():  # the Stop button (SIGTERM) pressed once the evaluation has begun
        return read_json(part / "status.json", {}).get("phase") == "attribute evaluation"

    assert train_deepfacto(cfg, part, log=lambda m: None, should_stop=stop_in_evaluation)["status"] == "stopped"
    assert read_json(part / "status.json")["state"] == "stopped" and (part / STATE_FILE).is_file()
    assert not (part / "attributes.json").exists()  # it stopped there, not after the SVMs
    called = []
    monkeypatch.setattr(run_mod, "get_backbone", lambda *a, **k: called.append(1) or real_get(*a, **k))
    real_get = __import__("admm_core.deepfacto.backbone", fromlist=["get_backbone"]).get_backbone
    done = train_deepfacto(cfg, part, resume=True, log=lambda m: None)
    assert done["status"] == "finished" and not called  # the run's backbone.pt, not the cache
    assert done["backbone"] == whole["backbone"] and "part" not in done["backbone"]  # where it came from
    assert [m["epoch"] for m in read_metrics(part)] == [0, 1, 2]
    assert done["mean_attribute_accuracy"] == pytest.approx(whole["mean_attribute_accuracy"], abs=1e-9)
    assert done["test_accuracy"] == pytest.approx(whole["test_accuracy"], abs=1e-9)


def _synthetic_faces(n_people=6, per=6, size=32, seed=0, noise=20.0):
    from admm_core.faces.lfw import FaceSet

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(n_people, 4, 4, 3))
    ident = np.repeat(np.arange(n_people), per)
    imgs = np.repeat(np.repeat(base, size // 4, 1), size // 4, 2)[ident]
    imgs = np.clip(imgs + rng.normal(0, noise, imgs.shape), 0, 255).astype(np.uint8)
    attrs = (rng.random((len(ident), 40)) < 0.3).astype(np.uint8)
    return FaceSet(
        files=[f"p{k}/{i}.jpg" for i, k in enumerate(ident)],
        identity=ident,
        people=[f"p{i}" for i in range(n_people)],
        attributes=attrs,
        attribute_names=[f"a{k}" for k in range(40)],
        images=imgs,
        image_dir=Path("."),
    )


def test_backbone_training_pulls_same_person_together():
    """train_backbone on synthetic 'people' (a colour pattern each, heavy noise): the loss falls for
    triplet-only and triplet + identity softmax; with the softmax the same-person / other-person
    distance ratio drops well below an untrained net's (≈ 0.8–0.9 here), and below triplet-only's."""
    from admm_core.faces.backbone import train_backbone
    from admm_core.faces.verification import embed_all

    fs = _synthetic_faces(noise=90.0)
    imgs, ident = fs.images, fs.identity
    same = torch.from_numpy(ident[:, None] == ident[None, :])
    off = ~torch.eye(len(ident), dtype=torch.bool)

    def ratio(net):
        d = torch.cdist(*[embed_all(net, imgs, np.arange(len(ident)), torch.device("cpu"))] * 2)
        return float(d[same & off].mean() / d[~same].mean())

    ratios = {}
    for w in (0.0, 1.0):
        net, hist = train_backbone(
            fs, np.arange(len(ident)), epochs=6, lr=3e-3, batch_size=12, id_weight=w, log=lambda m: None
        )
        assert hist[-1]["loss"] < hist[0]["loss"]
        ratios[w] = ratio(net)
    assert ratios[1.0] < 0.5 and ratios[1.0] < ratios[0.0]


def test_backbone_width_reaches_the_network_and_the_cache_name(tmp_path):
    from admm_core.deepfacto.backbone import backbone_cache_path
    from admm_core.faces.backbone import load_backbone, save_backbone, train_backbone
    from admm_core.spec.faces import backbone_widths

    fs = _synthetic_faces()
    net, _ = train_backbone(fs, np.arange(fs.n), epochs=1, batch_size=12, widths=backbone_widths(8), log=lambda m: None)
    assert net.arch["widths"] == [8, 16, 32, 32] and net.stages[-1][-1].conv2.out_channels == 32
    save_backbone(tmp_path / "b.pt", net, {"epochs": 1})
    back, meta = load_backbone(tmp_path / "b.pt")  # the file carries its widths
    back.eval()
    x = tensors.to_tensor(fs.images[:4])
    assert back.arch == net.arch and meta["epochs"] == 1 and torch.allclose(back(x), net(x), atol=1e-6)
    # the cache name follows every backbone setting and the training images (not only the width)
    names = ["a/a_0001.jpg", "b/b_0001.jpg"]
    base = backbone_cache_path(DeepFactoConfig(), names)
    assert "-w16-" in base.name and "-w32-" in backbone_cache_path(DeepFactoConfig(backbone_width=32), names).name
    assert base == backbone_cache_path(DeepFactoConfig(rank=256, warmup_epochs=3), names[::-1])  # not DeepFacto's own
    for change in ({"backbone_lr": 1e-3}, {"margin": 0.3}, {"batch_size": 64}, {"seed": 1}, {"backbone_epochs": 5}):
        assert backbone_cache_path(DeepFactoConfig(**change), names) != base, change
    assert backbone_cache_path(DeepFactoConfig(), names[:1]) != base  # another split or data folder
    # pixels: another LFW variant has the same names; the same images in another order are the same set
    px = np.random.default_rng(0).integers(0, 256, (len(names), 4, 4, 3), dtype=np.uint8)
    with_px = backbone_cache_path(DeepFactoConfig(), names, px)
    assert with_px != base and with_px == backbone_cache_path(DeepFactoConfig(), names[::-1], px[::-1])
    assert backbone_cache_path(DeepFactoConfig(), names, 255 - px) != with_px


def test_backbone_study_pack_round_trip(tmp_path):
    """The face pack that carries LFW to a GPU machine: labels exact, pixels within JPEG-95 error."""
    import cv2

    from admm_core.faces.lfw import pack_faces, unpack_faces

    fs = _synthetic_faces(noise=0.0)
    # smooth images (JPEG drops pixel noise and sharp colour edges; real 64 px faces: mean error 2.0 / 255)
    fs.images = np.stack(
        [cv2.resize(np.ascontiguousarray(im[::8, ::8]), (32, 32), interpolation=cv2.INTER_LINEAR) for im in fs.images]
    )
    pack_faces(fs, tmp_path / "p.npz")
    back = unpack_faces(tmp_path / "p.npz")
    assert back.files == fs.files and back.people == fs.people and back.attribute_names == fs.attribute_names
    assert np.array_equal(back.identity, fs.identity) and np.array_equal(back.attributes, fs.attributes)
    assert back.images.shape == fs.images.shape and back.images.dtype == np.uint8
    err = np.abs(back.images.astype(int) - fs.images.astype(int)).mean()
    assert err < 4, err
    assert np.abs(back.images.astype(int) - fs.images[::-1].astype(int)).mean() > 10 * max(
        err, 1
    )  # order kept, not a mix-up
