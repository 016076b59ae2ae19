"""The batched Newton solver of LinearSVC's problem (admm_core/deepfacto/svm.py) against liblinear,
against its own optimality condition, and inside the attribute evaluation."""

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sklearn.svm import LinearSVC

from admm_core.deepfacto import attributes as df
from admm_core.deepfacto.svm import predict, squared_hinge_svms
from admm_core.spec.deepfacto import DeepFactoConfig


def objective(x, y, c, w, b):
    """LinearSVC's primal, written out: ½(‖w‖² + b²) + C Σ max(0, 1 − y(xᵀw + b))² (liblinear penalises b)."""
    xi = np.maximum(0.0, 1 - y * (x @ w + b))
    return 0.5 * (w @ w + b * b) + c * (xi**2).sum()


def liblinear(x, labels, c):
    clf = LinearSVC(C=c, dual=True, tol=1e-10, max_iter=200_000).fit(x, labels)
    return clf.coef_[0], clf.intercept_[0], clf


def problem(seed, n=400, d=30, k=4):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d)  # correlated features
    labels = ((x @ rng.normal(size=(d, k)) + 2 * rng.normal(size=(n, k))) > 0.3).astype(np.uint8)
    return x, labels


def test_newton_reaches_liblinears_minimiser_for_every_column():
    x, labels = problem(0)
    cs = np.array([1e-3, 1e-2, 1e-1, 1.0])  # one C per column: each problem its own
    w, b = squared_hinge_svms(torch.tensor(x), torch.tensor(2.0 * labels - 1), torch.tensor(cs))
    w, b = w.numpy(), b.numpy()
    pred = predict(torch.tensor(x), torch.tensor(w), torch.tensor(b)).numpy()
    for k, c in enumerate(cs):
        w_ref, b_ref, clf = liblinear(x, labels[:, k], c)
        y = 2.0 * labels[:, k] - 1
        f_ref = objective(x, y, c, w_ref, b_ref)
        assert objective(x, y, c, w[:, k], b[k]) <= f_ref * (1 + 1e-9)
        scale = np.abs(np.r_[w_ref, b_ref]).max()
        assert np.abs(np.r_[w[:, k], b[k]] - np.r_[w_ref, b_ref]).max() <= 1e-4 * scale, c
        assert np.array_equal(pred[:, k], clf.predict(x) == 1)


def test_newton_solution_is_stationary_and_columns_do_not_interact():
    """∇f = 0 at the answer (autograd of the objective written out, not the solver's own gradient),
    and a column solved alone gives the same weights as in a batch with others."""
    x, labels = problem(1, n=300, d=12, k=3)
    y = torch.tensor(2.0 * labels - 1)
    cs = torch.tensor([0.05, 0.5, 5.0], dtype=torch.float64)
    w, b = squared_hinge_svms(torch.tensor(x), y, cs, tol=1e-10)
    for k in range(3):
        wk = torch.cat([w[:, k], b[k : k + 1]]).requires_grad_()
        xt = torch.cat([torch.tensor(x), torch.ones(len(x), 1, dtype=torch.float64)], 1)
        f = 0.5 * wk @ wk + cs[k] * torch.relu(1 - y[:, k] * (xt @ wk)).pow(2).sum()
        (g,) = torch.autograd.grad(f, wk)
        f0_grad = 2 * cs[k] * (xt.T @ y[:, k]).norm()  # ‖∇f(0)‖
        assert g.norm() <= 1e-8 * f0_grad
        w1, b1 = squared_hinge_svms(torch.tensor(x), y[:, k : k + 1], cs[k : k + 1], tol=1e-10)
        assert torch.allclose(w1[:, 0], w[:, k], atol=1e-9) and torch.allclose(b1[0], b[k], atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(4, 60),
    d=st.integers(1, 8),
    log_c=st.floats(-4, 2),
)
@example(seed=0, n=8, d=8, log_c=1.0)  # separable, large C: 1e-6 of ‖∇f(0)‖ left f 8e-8 above liblinear's
def test_newton_is_never_worse_than_liblinear_fuzz(seed, n, d, log_c):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 10)
    labels = (rng.random(n) > rng.uniform(0.1, 0.9)).astype(np.uint8)
    if labels.min() == labels.max():
        labels[0] = 1 - labels[0]  # LinearSVC needs both classes
    c = 10.0**log_c
    y = 2.0 * labels - 1
    w_ref, b_ref, _ = liblinear(x, labels, c)
    f_ref = objective(x, y, c, w_ref, b_ref)
    # both to a tight tolerance: never worse; at the default one (‖∇f‖ ≤ 1e-6 ‖∇f(0)‖) within 1e-5
    for tol, slack in ((1e-10, 1e-9), (1e-6, 1e-5)):
        w, b = squared_hinge_svms(torch.tensor(x), torch.tensor(y[:, None]), torch.tensor([c]), tol=tol)
        assert objective(x, y, c, w[:, 0].numpy(), float(b[0])) <= f_ref * (1 + slack) + 1e-12, tol


def test_cross_validated_attribute_svms_agree_across_solvers():
    """attribute_svms_cv gives the same accuracy and C with either solver, a one-class attribute included."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(260, 40))
    a = np.stack([x[:, 0] + 0.8 * rng.normal(size=260) > 0, x[:, 1] + x[:, 2] > 0.5, np.ones(260, bool)], 1)
    a = a.astype(np.uint8)
    groups = np.repeat(np.arange(25), 4)
    args = (x[:160], a[:160], x[160:], a[160:], groups, (1e-3, 1e-1, 10.0))
    acc_l, c_l = df.attribute_svms_cv(*args, n_jobs=1)
    acc_n, c_n = df.attribute_svms_cv(*args, solver="newton")
    assert np.array_equal(acc_n, acc_l) and np.array_equal(c_n, c_l)
    assert acc_n[2] == 1.0


def test_newton_stops_between_chunks():
    from admm_core.loop import StopRun

    rng = np.random.default_rng(0)
    x_tr, x_te = rng.normal(size=(40, 5)), rng.normal(size=(30, 5))
    a_tr, a_te = (rng.random((40, 40)) > 0.5).astype(np.uint8), (rng.random((30, 40)) > 0.5).astype(np.uint8)
    asked = []
    with pytest.raises(StopRun):
        df.attribute_svms_cv(
            x_tr, a_tr, x_te, a_te, np.arange(30) // 3, [0.01, 0.1], solver="newton",
            should_stop=lambda: asked.append(1) or len(asked) > 1,
        )  # fmt: skip
    assert len(asked) == 2  # 80 SVMs in chunks of 64: the second chunk was refused


def test_the_solver_is_part_of_the_svm_cache_key(monkeypatch, tmp_path):
    from types import SimpleNamespace

    monkeypatch.setattr(df, "_SVM_MEMO", {})
    monkeypatch.setenv("ADMM_CACHE", str(tmp_path))
    rng = np.random.default_rng(0)
    faces = SimpleNamespace(
        attributes=(rng.random((100, 2)) > 0.5).astype(np.uint8),
        identity=np.repeat(np.arange(25), 4),
        attribute_names=["a", "b"],
    )
    tr, te = np.arange(60), np.arange(60, 100)
    raw = {1: (rng.normal(size=(60, 7)), rng.normal(size=(40, 7)))}
    s = (torch.rand(60, 3, 4), torch.rand(40, 3, 4))
    z = (torch.rand(60, 5, 4), torch.rand(40, 5, 4))
    out = {}
    for solver in ("liblinear", "newton"):
        cfg = DeepFactoConfig(svm_grid=1, svm_c=(0.01, 0.1), svm_solver=solver)
        out[solver] = df.attribute_evaluation(cfg, faces, tr, te, s, z, raw, log=lambda m: None)
    assert len(list(tmp_path.glob("svm-*-newton.npz"))) == 3 and len(list(tmp_path.glob("svm-*-sklearn*.npz"))) == 3
    assert out["newton"] == out["liblinear"]  # same problem, same answers on this data


def test_svm_solver_is_validated():
    from admm_core.spec.config import ConfigError

    with pytest.raises(ConfigError, match="deepfacto.svm_solver.*'lbfgs'"):
        DeepFactoConfig(svm_solver="lbfgs")


def test_a_run_saved_before_the_solver_field_reads_back_as_liblinear(tmp_path):
    """Runs saved before ``svm_solver`` existed were fitted by liblinear: reading their config (evaluate,
    resume, inference, the dashboard's Load into Train) keeps that, whatever today's default is."""
    import json

    from admm_core.spec.deepfacto import read_run_config
    from app.dashboard import form as F

    old = {k: v for k, v in DeepFactoConfig().to_dict().items() if k != "svm_solver"}
    (tmp_path / "config.json").write_text(json.dumps({"deepfacto": old}))
    assert read_run_config(tmp_path).svm_solver == "liblinear"
    assert F.deepfacto_form(old)["df.svm_solver"] == "liblinear"
    new = DeepFactoConfig(svm_solver="newton").to_dict()
    (tmp_path / "config.json").write_text(json.dumps({"deepfacto": new}))
    assert read_run_config(tmp_path).svm_solver == "newton"  # a saved value wins
    assert F.deepfacto_form(new)["df.svm_solver"] == "newton"
