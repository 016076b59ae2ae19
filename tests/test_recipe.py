"""``recipe``: the presets' measured defaults, with the paper's Alg. 1 / Alg. 2 as printed one setting away."""

from __future__ import annotations

import pytest
import torch
from helpers import digits_cfg

from admm_core.methods import make_method
from admm_core.spec.methods import METHODS
from admm_core.spec.presets import PRESETS, preset_config


def built(cfg):
    """The engine's method object of ``cfg`` (what a run trains with)."""
    return make_method(cfg.method, cfg.method_settings)


def test_recipe_paper_puts_alg1_as_printed_in_place_of_a_presets_measured_settings():
    measured = preset_config("mnist-mlp-mse", "block-admm")
    m = built(measured)
    assert m.recipe == "measured" and m.z_schedule == "minibatch"  # the preset's measured recipe stands
    paper = built(measured.replace(method_params={**measured.method_params, "recipe": "paper"}))
    # the paper's Alg. 1 and §MNIST: persistent Z swept between Θ-passes, Adam on Z and Θ, U uniform, β = 1, k = 3
    assert (paper.z_schedule, paper.z_start, paper.theta_input, paper.dual_theta) == ("sweep", "previous", "new", "new")
    assert (paper.z_optimizer, paper.theta_optimizer, paper.u_init) == ("adam", "adam", "uniform")
    assert (paper.beta, paper.primal_steps, paper.dual_lr, paper.z_lr) == (1.0, 3, 1.0, 0.01)
    assert paper.lr == m.lr  # η, which the paper leaves open, stays the given one


def test_the_paper_recipe_is_what_runs():
    cfg = digits_cfg("block-admm", epochs=1, n=200, recipe="paper", z_schedule="minibatch", z_start="forward")
    from admm_core.network import build

    sess = build(cfg)
    assert sess.state.z_m is not None  # Adam moments of Z: the paper's Z-step
    assert all(float(u.abs().max()) > 0 for u in sess.state.u)  # U drawn from U(0, 1e-3), not zeros
    sess.method.run_epoch(sess.net, sess.state, sess.batch)
    assert sess.state.iteration == sess.method.iters_per_epoch  # the sweep schedule's dual steps


def test_gotmare_and_online_admm_have_their_paper_readings():
    g = make_method("gotmare", {"recipe": "paper"})
    assert g.u_init == "zero" and g.z_schedule == "sweep" and g.z_optimizer == "adam"
    o = make_method("online-admm", {"recipe": "paper", "dual": "additive", "z_lr": 0.5})
    assert (o.dual, o.z_optimizer, o.z_lr, o.primal_steps) == ("literal", "adam", 0.01, 1)


def test_a_bad_recipe_names_the_field():
    from admm_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"block-admm.recipe = 'alg1'"):
        make_method("block-admm", {"recipe": "alg1"})


@pytest.mark.parametrize("method", ["block-admm", "online-admm", "gotmare"])
def test_every_paper_setting_is_a_setting_of_the_method(method):
    names = {s["name"] for s in METHODS[method].settings()}
    assert set(METHODS[method].PAPER) <= names


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_presets_admm_defaults_build_and_the_paper_recipe_builds_beside_them(name):
    for method in ("block-admm", "online-admm"):
        cfg = preset_config(name, method)
        assert built(cfg).recipe == "measured"
        paper = built(cfg.replace(method_params={**cfg.method_params, "recipe": "paper"}))
        assert paper.recipe == "paper"


def test_the_two_recipes_differ_in_training_not_only_in_name():
    cfg = digits_cfg("block-admm", epochs=1, n=120)
    from admm_core.network import build

    a = build(cfg)
    b = build(cfg.replace(method_params={**cfg.method_params, "recipe": "paper"}))
    a.method.run_epoch(a.net, a.state, a.batch)
    b.method.run_epoch(b.net, b.state, b.batch)
    pa = torch.cat([p.flatten() for p in a.net.parameters()])
    pb = torch.cat([p.flatten() for p in b.net.parameters()])
    assert not torch.allclose(pa, pb)
