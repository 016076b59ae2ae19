"""Engine behaviour on the bundled digits set: every method learns, state sizes, validation,
round-trips, resume."""

import copy
import json
import subprocess
import sys

import pytest
import torch
from helpers import cli_call, cli_proc, digits_cfg

from admm_core.blocks import build_blocknet
from admm_core.methods import make_method
from admm_core.network import build, train
from admm_core.rundir import read_json, read_metrics
from admm_core.spec.config import ConfigError, DataConfig, ModelConfig, RunConfig, TrainConfig
from admm_core.spec.methods import names_for
from admm_core.spec.presets import PRESETS, preset_config

NETWORK_METHODS = names_for("network")  # deepfacto runs with its own task

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("method", sorted(NETWORK_METHODS))
def test_every_method_lowers_training_loss(method, tmp_path):
    summary = train(digits_cfg(method, epochs=3), tmp_path)
    ms = read_metrics(tmp_path)
    assert [m["epoch"] for m in ms] == [0, 1, 2, 3]
    assert ms[-1]["train_loss"] < 0.8 * ms[0]["train_loss"], (method, ms[0]["train_loss"], ms[-1]["train_loss"])
    assert summary["test_accuracy"] > ms[0]["test_accuracy"] + 0.2


# The adaptive penalty (Prop. 1: β cap, scaled Z step, growing primal passes) is tested in
# tests/test_online.py::test_adaptive_penalty_is_capped_and_ends_near_the_fixed_run_with_lower_violation.


def test_residuals_shrink_over_iterations_from_a_perturbed_start():
    """Start from Z, U far from consistent: the ADMM iterations pull Z_t back onto block_t(Z_{t−1})."""
    sess = build(digits_cfg(iters_per_epoch=5, primal_steps=1))
    for z in sess.state.z:
        z.add_(torch.randn(z.shape, generator=torch.Generator().manual_seed(0)).to(z.device))
    m = sess.method
    m.dual_step(sess.net, sess.state, sess.batch)
    first = sum(sess.state.residuals)
    for _ in range(3):
        m.run_epoch(sess.net, sess.state, sess.batch)
    assert sum(sess.state.residuals) < 0.3 * first


def test_online_state_does_not_grow_with_n():
    sizes = {}
    for method in ("online-admm", "block-admm"):
        for n in (300, 1200):
            cfg = digits_cfg(method, epochs=1).replace(data__train_limit=n)
            sess = build(cfg)
            sess.method.run_epoch(sess.net, sess.state, sess.batch)
            sizes[method, n] = sess.method.state_bytes(sess.state)
    assert sizes["online-admm", 300] == sizes["online-admm", 1200] > 0
    assert sizes["block-admm", 1200] == 4 * sizes["block-admm", 300]
    assert sizes["block-admm", 1200] > 10 * sizes["online-admm", 1200]


def test_online_literal_dual_only_grows_and_additive_is_default():
    sess = build(digits_cfg("online-admm", dual="literal"))
    us = []
    for _ in range(2):
        sess.method.run_epoch(sess.net, sess.state, sess.batch)
        us.append(list(sess.state.u))
    assert all(b > a > 0 for a, b in zip(*us))  # u sums norms: monotone
    assert make_method("online-admm").dual == "additive"
    d = build(digits_cfg("online-admm", dual="damped", dual_decay=0.5))
    d.method.run_epoch(d.net, d.state, d.batch)
    # damped u is bounded by max‖r‖/(1 − δ); with per-minibatch ‖r‖ ≪ 10 this is far below the literal sum
    assert max(d.state.u) < min(us[0])


# --- validation ---------------------------------------------------------------------------


def test_split_past_last_layer_is_rejected_with_its_name():
    with pytest.raises(ConfigError, match="fc9"):
        build_blocknet(ModelConfig("mlp", (8, 8), split=("fc1", "fc9")), (4,), 3)
    with pytest.raises(ConfigError, match="last layer"):
        build_blocknet(ModelConfig("mlp", (8, 8), split=("fc3",)), (4,), 3)
    with pytest.raises(ConfigError, match="order"):
        build_blocknet(ModelConfig("mlp", (8, 8), split=("fc2", "fc1")), (4,), 3)
    with pytest.raises(ConfigError, match="conv5_x"):
        build_blocknet(ModelConfig("resnet18", split=("conv5_x",)), (3, 32, 32), 10)


def test_resnet18_splits_at_named_stages():
    net = build_blocknet(ModelConfig("resnet18", split=("stem", "conv3_x")), (3, 32, 32), 10)
    assert net.T == 3 and net.block_layers == [["stem"], ["conv2_x", "conv3_x"], ["conv4_x", "conv5_x", "head"]]
    net.eval()
    zs = net.forward_all(torch.randn(2, 3, 32, 32))
    assert [tuple(z.shape) for z in zs] == [(2, 64, 32, 32), (2, 128, 16, 16), (2, 10)]


def test_mlp_default_split_is_one_block_per_layer():
    net = build_blocknet(ModelConfig("mlp", (16,) * 9), (64,), 10)
    assert net.T == 10


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(method_params={"beta": -1.0}), "beta"),
        (dict(method_params={"beta": [1.0, 0.0]}), "beta"),
        (dict(method_params={"z_lr": "fast"}), "z_lr"),
        (dict(method_params={"nonsense": 1}), "nonsense"),
        (dict(method_params={"z_optimizer": "lbfgs"}), "z_optimizer"),
        (dict(method="newton"), "method"),
    ],
)
def test_bad_method_settings_name_the_field(change, field):
    with pytest.raises(ConfigError, match=field):
        RunConfig(**change)


def test_bad_train_and_data_values_name_the_field():
    with pytest.raises(ConfigError, match=r"train\.epochs = 0"):
        TrainConfig(epochs=0)
    with pytest.raises(ConfigError, match=r"train\.loss = 'hinge'"):
        TrainConfig(loss="hinge")
    with pytest.raises(ConfigError, match=r"data\.name = 'imagenet'"):
        DataConfig("imagenet")


def test_per_block_beta_length_is_checked_against_t():
    cfg = digits_cfg(beta=[1.0, 2.0])  # 3 blocks
    with pytest.raises(ConfigError, match="one per block"):
        build(cfg)


# --- round-trips and resume --------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("method", sorted(NETWORK_METHODS))
def test_config_json_round_trip(preset, method):
    cfg = preset_config(preset, method)
    again = RunConfig.from_json(cfg.to_json())
    assert again == cfg and again.to_json() == cfg.to_json()


def test_config_from_json_rejects_garbage():
    with pytest.raises(ConfigError, match="JSON"):
        RunConfig.from_json("{not json")
    with pytest.raises(ConfigError, match="unknown keys"):
        RunConfig.from_json(json.dumps({"train": {"epochz": 3}}))


@pytest.mark.parametrize("method", ["block-admm", "online-admm", "adam"])
def test_resumed_run_matches_uninterrupted(method, tmp_path):
    cfg = digits_cfg(method, epochs=4).replace(train__checkpoint_every=1)
    full = train(cfg, tmp_path / "full")
    # "kill" after 2 epochs: train a copy with epochs=2, then resume it with epochs=4
    part_dir = tmp_path / "part"
    train(cfg.replace(train__epochs=2), part_dir)
    (part_dir / "config.json").write_text(cfg.to_json())
    resumed = train(cfg, part_dir, resume=True)
    a, b = read_metrics(tmp_path / "full"), read_metrics(part_dir)
    assert [m["epoch"] for m in b] == [0, 1, 2, 3, 4]
    for ma, mb in zip(a, b):
        assert ma["test_accuracy"] == mb["test_accuracy"]
        assert ma["train_loss"] == mb["train_loss"]
        assert ma["residuals"] == mb["residuals"]
    assert resumed["test_accuracy"] == full["test_accuracy"]
    wa = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)["net"]
    wb = torch.load(part_dir / "checkpoint.pt", weights_only=False)["net"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_run_directory_contract(tmp_path):
    train(digits_cfg(epochs=2), tmp_path)
    summary = read_json(tmp_path / "summary.json")
    for key in ("method", "preset", "epochs", "test_accuracy", "best_test_accuracy", "wall_time_s", "state_bytes"):
        assert key in summary
    assert 0 <= summary["test_accuracy"] <= 1 and summary["epochs"] == 2
    for m in read_metrics(tmp_path):
        for key in (
            "epoch",
            "train_loss",
            "test_accuracy",
            "residuals",
            "wall_time_s",
            "dual_norms",
            "betas",
            "state_bytes",
        ):
            assert key in m
        assert len(m["residuals"]) == 3
    assert read_json(tmp_path / "status.json")["state"] == "finished"
    assert RunConfig.from_json((tmp_path / "config.json").read_text()) == digits_cfg(epochs=2)


def test_cli_train_and_bad_split(tmp_path):
    out = tmp_path / "run"
    argv = ["train", "--preset", "digits-mlp", "--method", "block-admm", "--epochs", "1", "--out", str(out)]
    rc, stdout, err = cli_call([*argv, "--quiet", "--beta", "1,1,2"])
    assert rc == 0, err
    assert json.loads(stdout)["epochs"] == 1
    assert read_metrics(out)[-1]["betas"] == [1.0, 1.0, 2.0]
    rc, _, err = cli_call(["train", "--preset", "digits-mlp", "--split", "fc1,fc7", "--out", str(tmp_path / "bad")])
    assert rc == 2
    assert "fc7" in err and "Traceback" not in err
    r = cli_proc("presets")  # `python -m admm_core` itself, in a fresh interpreter
    assert r.returncode == 0 and all(p in r.stdout for p in PRESETS)


def test_engine_does_not_import_ui_libraries():
    code = (
        "import sys, admm_core.cli, admm_core.network, admm_core.loop, admm_core.methods; "
        "bad = [m for m in ('streamlit', 'plotly', 'matplotlib') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name", sorted(NETWORK_METHODS))
def test_every_method_follows_the_protocol_and_its_state_round_trips(name):
    """Method/State protocols hold; a state restored from its own state_dict gives it back."""
    from admm_core.methods.base import Method, State

    sess = build(digits_cfg(name, epochs=1).replace(data__train_limit=120, data__test_limit=50))
    assert isinstance(sess.method, Method) and isinstance(sess.state, State)
    saved = copy.deepcopy(sess.state.state_dict())
    sess.method.run_epoch(sess.net, sess.state, sess.batch)  # the state moves on
    sess.state.load_state_dict(copy.deepcopy(saved))
    again = sess.state.state_dict()
    assert saved.keys() == again.keys()
    for k in saved:
        _assert_same(saved[k], again[k], k)


def _assert_same(a, b, where):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), where


def test_every_record_names_the_engine_class_that_runs_it():
    """A record (spec, no torch) and the engine's class of it: the engine holds the record (not a
    subclass of it), so its settings, checks and declarations are exactly the record's; make_method
    builds it around the record's settings; DeepFacto, a record of another kind of run, has no
    network class; gotmare is Block-ADMM's engine around its own record (the dual rule off)."""
    import dataclasses

    from admm_core.methods import implementation, make_method
    from admm_core.methods.base import Engine
    from admm_core.methods.block_admm import BlockADMM
    from admm_core.spec.methods import METHODS, make_settings
    from admm_core.spec.methods.base import MethodBase

    for name, record in METHODS.items():
        if record.kind != "network":
            with pytest.raises(ConfigError, match="their own task"):
                implementation(name)
            assert not hasattr(record, "run_epoch")
            continue
        impl = implementation(name)
        assert issubclass(impl, Engine) and not issubclass(impl, record) and issubclass(record, MethodBase)
        assert not hasattr(record, "run_epoch") and callable(impl.run_epoch)
        settings = make_settings(name, {})
        method = make_method(name, settings)
        assert type(method) is impl and method.settings is settings and method.name == name
        fields = dataclasses.fields(settings)
        assert fields and all(getattr(method, f.name) == getattr(settings, f.name) for f in fields)
        assert method.live_metrics == record.live_metrics
    assert implementation("gotmare") is BlockADMM
    gotmare = make_method("gotmare")
    assert not gotmare.dual.used and make_method("block-admm").dual.used


def test_no_class_has_two_bases_that_both_carry_behaviour():
    """One class per method, its settings held: no class in admm_core derives from two of the
    project's classes that each define methods (a record and an engine, say)."""
    import importlib
    import inspect
    import pkgutil

    import admm_core

    def own_methods(cls) -> set:
        if cls.__module__ == "builtins" or not cls.__module__.startswith("admm_core"):
            return set()
        made = {
            "__init__",
            "__repr__",
            "__eq__",
            "__hash__",
            "__setattr__",
            "__delattr__",
            "__getstate__",
            "__setstate__",
        }
        return {k for k, v in vars(cls).items() if inspect.isfunction(v) and k not in made}

    seen, both = 0, []
    for info in pkgutil.walk_packages(admm_core.__path__, "admm_core."):
        if info.name.startswith(("admm_core.distributed.", "admm_core.sweep.")) or info.name.endswith("__main__"):
            continue
        try:
            mod = importlib.import_module(info.name)
        except ImportError:  # an optional dependency
            continue
        for cls in vars(mod).values():
            if inspect.isclass(cls) and cls.__module__ == mod.__name__:
                seen += 1
                carrying = [b.__name__ for b in cls.__bases__ if own_methods(b)]
                if len(carrying) > 1:
                    both.append(f"{mod.__name__}.{cls.__name__}{tuple(carrying)}")
    assert seen > 50 and not both, both
