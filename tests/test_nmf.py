"""NMF module: non-negativity, monotone M/S updates, batched NNLS and the exact M-step vs scipy, heatmaps, bad images."""

import numpy as np
import pytest
import torch
from helpers import cli_run

from admm_core import heatmaps as hm
from admm_core import nmf


def _problem(c=12, r=4, n=40, seed=0, noise=0.05):
    g = torch.Generator().manual_seed(seed)
    m_true = torch.rand(c, r, generator=g, dtype=torch.float64)
    s_true = torch.rand(r, n, generator=g, dtype=torch.float64) * (
        torch.rand(r, n, generator=g, dtype=torch.float64) > 0.5
    )
    z = (m_true @ s_true + noise * torch.rand(c, n, generator=g, dtype=torch.float64)).clamp(min=0)
    return z, g


def test_matrix_layout_round_trip():
    z = torch.rand(3, 5, 2, 4)
    mat = nmf.to_matrix(z)
    assert mat.shape == (5, 3 * 2 * 4)
    s = torch.rand(7, 3 * 2 * 4)
    back = nmf.from_matrix(s, 3, 2, 4)
    assert back.shape == (3, 7, 2, 4)
    assert torch.equal(nmf.to_matrix(back), s)


def test_m_and_s_never_negative_and_objective_non_increasing():
    z, g = _problem()
    r = 4
    m = torch.rand(z.shape[0], r, generator=g, dtype=torch.float64)
    s = torch.rand(r, z.shape[1], generator=g, dtype=torch.float64)
    objs = [nmf.objective(z, m, s)]
    for _ in range(30):
        ss, zs = nmf.gram_terms(z, s)
        m = nmf.update_m(m, ss, zs, steps=2)
        assert (m >= 0).all()
        objs.append(nmf.objective(z, m, s))
        s = nmf.update_s(m, z, s, steps=2)
        assert (s >= 0).all()
        objs.append(nmf.objective(z, m, s))
    diffs = np.diff(objs)
    assert (diffs <= 1e-10 * objs[0]).all(), diffs.max()
    assert objs[-1] < 0.2 * objs[0]


def test_batched_layout_matches_matrix_layout():
    """Per-sample (N, C, h·w) columns give the same M-step statistics and objective as the C × NHW matrix."""
    g = torch.Generator().manual_seed(1)
    z4 = torch.rand(3, 6, 2, 2, generator=g, dtype=torch.float64)
    s4 = torch.rand(3, 4, 2, 2, generator=g, dtype=torch.float64)
    m = torch.rand(6, 4, generator=g, dtype=torch.float64)
    zb, sb = z4.flatten(2), s4.flatten(2)
    zm, sm = nmf.to_matrix(z4), nmf.to_matrix(s4)
    for a, b in zip(nmf.gram_terms(zb, sb), nmf.gram_terms(zm, sm)):
        torch.testing.assert_close(a, b)
    assert nmf.objective(zb, m, sb) == pytest.approx(nmf.objective(zm, m, sm))


def test_s_step_with_coupling_is_monotone_and_non_negative():
    """S also feels the next block: ½‖Z − MS‖² + β/2‖t − W vec(S)‖², projected steps never increase it."""
    z, g = _problem(c=10, r=3, n=8)
    m = torch.rand(10, 3, generator=g, dtype=torch.float64)
    w = torch.randn(5, 3 * 8, generator=g, dtype=torch.float64)
    t = torch.randn(5, generator=g, dtype=torch.float64)
    beta = 0.7

    def total(s):
        return nmf.objective(z, m, s) + 0.5 * beta * float((t - w @ s.flatten()).pow(2).sum())

    def coupling(s):
        return (beta * (w.T @ (w @ s.flatten() - t))).view_as(s)

    lip = beta * float(torch.linalg.matrix_norm(w, 2)) ** 2
    s = torch.rand(3, 8, generator=g, dtype=torch.float64)
    prev = total(s)
    for _ in range(25):
        s = nmf.update_s(m, z, s, 1, coupling=coupling, coupling_lip=lip)
        assert (s >= 0).all()
        cur = total(s)
        assert cur <= prev + 1e-10
        prev = cur


@pytest.mark.parametrize("seed", range(5))
def test_batched_nnls_matches_scipy(seed):
    from scipy.optimize import nnls as scipy_nnls

    c, r, n = 15, 6, 25
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(c, r, generator=g, dtype=torch.float64) + 0.1 * torch.eye(c, r, dtype=torch.float64)
    z = torch.randn(c, n, generator=g, dtype=torch.float64)  # mixed signs: many active constraints
    s = nmf.nnls(m, z, tol=1e-10, max_iter=20000)
    ref = np.stack([scipy_nnls(m.numpy(), z[:, j].numpy())[0] for j in range(n)], axis=1)
    assert (s >= 0).all()
    np.testing.assert_allclose(s.numpy(), ref, atol=1e-6)
    # batched (N, C, n) layout gives the same columns
    sb = nmf.nnls(m, z.T.reshape(5, 5, c).transpose(1, 2), tol=1e-10, max_iter=20000)
    np.testing.assert_allclose(sb.transpose(1, 2).reshape(n, r).T.numpy(), ref, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_exact_m_step_matches_scipy_row_by_row(seed):
    """solve_m: each row of M is the NNLS fit of that row of Z on the rows of S (scipy, one row at a time)."""
    from scipy.optimize import nnls as scipy_nnls

    z, g = _problem(c=10, r=5, n=60, seed=seed)
    z = z - 0.3 * z.mean()  # some entries of Z negative: rows of M hit the constraint M ≥ 0
    s = torch.rand(5, 60, generator=g, dtype=torch.float64)
    m0 = torch.rand(10, 5, generator=g, dtype=torch.float64)
    ss, zs = nmf.gram_terms(z, s)
    m = nmf.solve_m(m0, ss, zs, tol=1e-12, max_iter=50000)
    ref = np.stack([scipy_nnls(s.T.numpy(), z[i].numpy())[0] for i in range(z.shape[0])])
    assert (m >= 0).all() and (ref == 0).any()  # the constraint is active somewhere
    np.testing.assert_allclose(m.numpy(), ref, atol=1e-6)
    # and no number of projected gradient steps from the same start does better
    assert nmf.objective(z, m, s) <= nmf.objective(z, nmf.update_m(m0, ss, zs, steps=200), s) + 1e-12


def test_nnls_float32_tolerance_and_project_shape():
    from scipy.optimize import nnls as scipy_nnls

    g = torch.Generator().manual_seed(3)
    m = torch.rand(16, 5, generator=g)
    z4 = torch.rand(4, 16, 3, 3, generator=g)
    s4 = nmf.project(m, z4, tol=1e-6, max_iter=5000)
    assert s4.shape == (4, 5, 3, 3) and (s4 >= 0).all()
    col = z4[2, :, 1, 2].double().numpy()
    ref = scipy_nnls(m.double().numpy(), col)[0]
    np.testing.assert_allclose(s4[2, :, 1, 2].numpy(), ref, atol=1e-3)


def test_projection_of_a_sample_does_not_depend_on_its_batch():
    """S of one image equals its row of a batched projection (heatmaps project one face, the
    SVMs thousands), at the loose tolerance DeepFacto uses and with an ill-conditioned M, where
    a stopping rule shared by the batch left rows 10-17% apart."""
    g = torch.Generator().manual_seed(7)
    base = torch.rand(32, 4, generator=g)
    m = torch.cat([base, base @ torch.rand(4, 4, generator=g) + 1e-3 * torch.rand(32, 4, generator=g)], 1)  # r = 8
    z = torch.rand(9, 32, 4, 4, generator=g) * torch.logspace(-2, 1, 9).view(9, 1, 1, 1)  # scales 0.01 .. 10
    for chunk in (9, 4):
        batched = nmf.project(m, z, tol=1e-3, max_iter=300, chunk=chunk)
        for i in range(len(z)):
            alone = nmf.project(m, z[i : i + 1], tol=1e-3, max_iter=300)
            torch.testing.assert_close(batched[i : i + 1], alone, atol=1e-6, rtol=1e-5)
    # and the loose projection is still a near-minimiser of each sample's own problem
    tight = nmf.project(m, z, tol=1e-5, max_iter=3000)
    err = lambda s: (z - torch.einsum("cr,nrhw->nchw", m, s)).flatten(1).norm(dim=1)
    assert (err(batched) <= err(tight) * 1.01 + 1e-6).all()


def test_a_nan_sample_projects_to_nan_and_leaves_the_others_alone():
    """A non-finite input is not turned into a plausible S = 0 (evaluation and heatmaps would
    show it as a blank face); the other samples of its batch get their usual S."""
    g = torch.Generator().manual_seed(3)
    m, z = torch.rand(16, 4, generator=g), torch.rand(3, 16, 4, 4, generator=g)
    bad = z.clone()
    bad[1, 0, 0, 0] = float("nan")
    s, clean = nmf.project(m, bad, tol=1e-4), nmf.project(m, z, tol=1e-4)
    assert torch.isnan(s[1]).any()
    torch.testing.assert_close(s[[0, 2]], clean[[0, 2]])
    zero = nmf.project(m, torch.zeros(1, 16, 4, 4))  # MᵀZ = 0: S = 0 exactly
    assert torch.equal(zero, torch.zeros_like(zero))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (the projection runs on z's device)")
def test_projection_runs_on_cuda_and_matches_the_cpu():
    g = torch.Generator().manual_seed(4)
    m = torch.rand(32, 8, generator=g)
    z = torch.rand(6, 32, 4, 4, generator=g)
    s_gpu = nmf.project(m.cuda(), z.cuda(), tol=1e-6, max_iter=5000)
    assert s_gpu.device.type == "cuda"
    np.testing.assert_allclose(s_gpu.cpu().numpy(), nmf.project(m, z, tol=1e-6, max_iter=5000).numpy(), atol=1e-4)


def test_init_basis_non_negative():
    z = torch.relu(torch.randn(8, 6, 10))
    m = nmf.init_basis(z, 4, torch.Generator().manual_seed(0))
    assert m.shape == (6, 4) and (m >= 0).all() and m.abs().sum() > 0


# --- heatmaps on a synthetic checkpoint (no data needed) -------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from torch import nn

    from admm_core.deepfacto.inference import save_inference
    from admm_core.faces.backbone import FaceBackbone
    from admm_core.spec.deepfacto import DeepFactoConfig

    run = tmp_path_factory.mktemp("deepfacto-run")
    torch.manual_seed(0)
    cfg = DeepFactoConfig(rank=5, image_size=32, emb_dim=8)
    bb = FaceBackbone(widths=(4, 4, 8, 8), out_channels=12, emb_dim=8).eval()
    m = torch.rand(12, 5)
    fc = nn.Linear(5 * 16, 8)
    save_inference(run / "checkpoint.pt", cfg, bb, fc, m, scale=np.full(5, 0.5), order=np.arange(5))
    return run


def _face(h=160, w=160, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_heatmap_shapes_and_ranges(tiny_run):
    img = _face()
    maps = hm.heatmaps(tiny_run, img)
    assert len(maps) == 5
    for h in maps:
        assert h.shape == (160, 160) and h.dtype == np.float32
        assert h.min() >= 0.0 and h.max() <= 1.0
    sel = hm.heatmaps(tiny_run, img, components=[4, 1], normalize="image")
    assert len(sel) == 2 and all(h.max() <= 1.0 for h in sel)
    # a 250×250 LFW original is cropped to the 160×160 face crop
    assert hm.heatmaps(tiny_run, _face(250, 250), components=[0])[0].shape == (160, 160)
    ov = hm.overlay(img, maps[0], alpha=0.4)
    assert ov.shape == (160, 160, 3) and ov.dtype == np.uint8
    with pytest.raises(ValueError, match="out of range"):
        hm.heatmaps(tiny_run, img, components=[5])


def test_heatmap_grid_and_cli(tiny_run, tmp_path):
    import cv2

    files = []
    for i in range(2):
        p = tmp_path / f"face{i}.jpg"
        cv2.imwrite(str(p), _face(seed=i))
        files.append(str(p))
    grid = hm.heatmap_grid(tiny_run, files, components=[0, 2])
    assert grid.shape == (22 + 2 * 160, 3 * 160, 3)
    out = tmp_path / "grid.png"
    rc, err = cli_run(
        ["heatmaps", "--run", str(tiny_run), "--image", *files, "--out", str(out), "--components", "0,1,2"]
    )
    assert rc == 0, err
    assert cv2.imread(str(out)).shape == (22 + 2 * 160, 4 * 160, 3)


def test_bad_image_file_gives_clear_error(tiny_run, tmp_path):
    bad = tmp_path / "not-a-face.jpg"
    bad.write_bytes(b"this is not a jpeg")
    with pytest.raises(hm.ImageError, match="not-a-face.jpg"):
        hm.heatmaps(tiny_run, bad)
    with pytest.raises(hm.ImageError, match="missing.png.*no such file"):
        hm.read_image(tmp_path / "missing.png")
    with pytest.raises(hm.ImageError, match="shape"):
        hm.read_image(np.zeros((3, 3)))
    rc, err = cli_run(["heatmaps", "--run", str(tiny_run), "--image", str(bad), "--out", str(tmp_path / "x.png")])
    assert rc == 2
    assert "not-a-face.jpg" in err and err.count("\n") == 1


def test_engine_stays_free_of_ui_imports():
    """In a fresh interpreter: pytest itself has imported streamlit for the app tests."""
    import subprocess
    import sys

    code = (
        "import sys, admm_core.deepfacto, admm_core.faces, admm_core.nmf; "
        "bad = [m for m in ('streamlit', 'matplotlib.pyplot', 'plotly') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    root = __import__("pathlib").Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
