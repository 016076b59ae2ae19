"""Each part of Block-ADMM (admm_core.methods.block_admm) against its equation written by hand:
the Z-step rule, the dual rule, the penalty rule and the schedule's k. The schedules' full
iteration is checked against Alg. 1 written out in tests/test_block_admm_oracle.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from admm_core.methods.block_admm import DualRule, PenaltyRule, ZStepRule, gradient_step, primal_passes
from admm_core.methods.zsweep import adam_z_step
from admm_core.spec.methods import make_settings


def rec(name="block-admm", **kw):
    return make_settings(name, kw)


def test_z_step_plain_is_z_minus_zeta_g():
    z, g = torch.randn(4, 3), torch.randn(4, 3)
    step = gradient_step([0.5, 0.25], None, 1)
    torch.testing.assert_close(step(1, z, g), z - 0.25 * g)
    torch.testing.assert_close(step(0, z, g), z - 0.5 * g)


def test_z_step_adam_is_adams_step_with_the_given_moments():
    z, g = torch.randn(4, 3), torch.randn(4, 3)
    m, v = torch.zeros(4, 3), torch.zeros(4, 3)
    out = gradient_step([0.1], lambda t: (m, v), 1)(0, z, g)
    # Adam's first step (bias-corrected): m̂ = g, v̂ = g², so Z moves by ζ·g/(|g| + ε) ≈ ζ·sign(g)
    torch.testing.assert_close(out, z - 0.1 * torch.sign(g), atol=1e-5, rtol=0)
    m2, v2 = torch.zeros(4, 3), torch.zeros(4, 3)
    torch.testing.assert_close(out, adam_z_step(z, g, m2, v2, 1, 0.1))
    assert m.abs().sum() > 0 and v.abs().sum() > 0  # the moments were updated in place


def test_z_step_rule_reads_its_settings():
    r = ZStepRule(rec(z_step="fixed", z_optimizer="adam", z_norm="signal", z_schedule="minibatch"))
    assert (r.kind, r.adam, r.norm, r.signal_norm) == ("fixed", True, "signal", True)
    assert not ZStepRule(rec()).signal_norm


def test_dual_rule_step_is_u_plus_alpha_r_from_dual_start():
    rule = DualRule(rec(dual_lr=0.5, dual_start=2))
    u, r = torch.ones(3, 2), torch.randn(3, 2)
    rule.add_(u, r, epoch=1)  # before dual_start: U held
    torch.testing.assert_close(u, torch.ones(3, 2))
    rule.add_(u, r, epoch=2)
    torch.testing.assert_close(u, 1 + 0.5 * r)
    u = torch.zeros(5, 2)
    rule.add_rows(u, torch.tensor([1, 3]), torch.ones(2, 2), epoch=2)
    torch.testing.assert_close(u.sum(1), torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0]))


def test_dual_rule_reset_every_k_epochs():
    rule = DualRule(rec(dual_reset=2))
    for epoch, zeroed in ((0, False), (1, False), (2, True), (3, False), (4, True)):
        state = SimpleNamespace(epoch=epoch, u=[torch.ones(2, 2)])
        rule.begin_epoch(state)
        assert bool((state.u[0] == 0).all()) == zeroed, epoch


def test_dual_rule_off_for_gotmare():
    rule = DualRule(rec("gotmare"))
    u = torch.zeros(2, 2)
    rule.add_(u, torch.ones(2, 2), epoch=5)
    assert not rule.used and bool((u == 0).all())
    assert rule.state_tensors(SimpleNamespace(u=[u])) == []
    assert DualRule(rec()).used


def test_penalty_growth_keeps_lambda_and_zeta_beta():
    rule = PenaltyRule(rec(beta_growth=2.0, z_step="fixed"))
    u = torch.full((2,), 3.0)
    state = SimpleNamespace(beta=[1.0, 4.0], z_lr=[0.1, 0.2], u=[u.clone(), u.clone()])
    rule.after_epoch(state)
    assert state.beta == [2.0, 8.0]
    assert state.z_lr == pytest.approx([0.05, 0.1])  # ζβ unchanged
    for b, ut in zip(state.beta, state.u):  # λ = βU unchanged
        torch.testing.assert_close(b * ut, (b / 2) * u)


def test_penalty_adaptive_rule():
    rule = PenaltyRule(rec(adaptive_rho=True, rho_c=0.5, beta_max=3.0, rho_bound_decay=0.9, z_step="scaled"))
    # ‖h‖ = 5 > η = 1: ρ ← cρ, so β ← β/c capped at β_max; U ← (β_old/β_new) U; a scaled ζ untouched
    state = SimpleNamespace(
        beta=[1.0, 2.0], z_lr=[0.1, 0.1], u=[torch.ones(2), torch.ones(2)], residuals=[3.0, 4.0], rho_bound=1.0
    )
    rule.after_dual(state)
    assert state.beta == [2.0, 3.0]
    torch.testing.assert_close(state.u[0], torch.full((2,), 0.5))
    torch.testing.assert_close(state.u[1], torch.full((2,), 2.0 / 3.0))
    assert state.z_lr == [0.1, 0.1] and state.rho_bound == pytest.approx(0.9)
    # ‖h‖ ≤ η: β unchanged, η still decays
    state.residuals, state.rho_bound = [0.1, 0.1], 1.0
    rule.after_dual(state)
    assert state.beta == [2.0, 3.0] and state.rho_bound == pytest.approx(0.9)


def test_primal_passes_grow_to_the_cap():
    s = rec(primal_steps=1, primal_growth=2, primal_steps_max=3)
    assert [primal_passes(s, k) for k in range(8)] == [1, 1, 2, 2, 3, 3, 3, 3]
    assert [primal_passes(rec(primal_steps=2), k) for k in (0, 10)] == [2, 2]
