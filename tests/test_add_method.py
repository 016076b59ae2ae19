"""Adding a method with Z state takes one module and one registry call (docs/extending.md).

The module below is written to a temporary directory, imported, and registered with one
``register_method`` call; nothing else in the project is edited. It then trains through the
ordinary run loop (``network.train``) on digits, its memory estimate comes from its own
declaration and equals the Z bytes the run measured, and the dashboard's live charts show
the per-block metrics it declares.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("sklearn")  # digits

TOY = textwrap.dedent(
    '''
    """A toy penalty method: per-sample Z_t (no duals), one Z-update and one Θ-step per minibatch."""

    from dataclasses import dataclass, field

    import torch

    from admm_core.methods.base import MethodState, tensor_bytes
    from admm_core.methods.zsweep import minibatches, reverse_z_sweep, theta_step
    from admm_core.spec.methods.base import MethodBase, setting


    @dataclass
    class ToyState(MethodState):
        z: list  # Z_t of every training row
        opt: torch.optim.Optimizer
        gen: torch.Generator
        iteration: int = 0
        residuals: list = field(default_factory=list)


    @dataclass(frozen=True)
    class ToyPenalty(MethodBase):
        name = "toy-penalty"
        summary = "toy: quadratic penalty between blocks, Z per sample, no duals"
        live_metrics = ("residuals", "z_norms")  # what the dashboard charts live

        lr: float = setting(3e-3, "η: Θ step size (Adam)")
        z_lr: float = setting(0.1, "ζ: Z step size")
        beta: float = setting(1.0, "β: penalty weight")

        @torch.no_grad()
        def init_state(self, net, batch, gen):
            z = [t.clone() for t in net.forward_all(batch.x)]
            return ToyState(z=z, opt=torch.optim.Adam(net.parameters(), lr=self.lr), gen=gen)

        def run_epoch(self, net, state, batch, progress=None):
            b = self.beta
            for idx in minibatches(batch.n, batch.batch_size, state.gen):
                x, y = batch.inputs(idx), batch.y[idx]
                penalty = [lambda r: 0.5 * b * r.pow(2).sum()] * net.T
                new = reverse_z_sweep(
                    net.blocks, x, [z[idx] for z in state.z], lambda z: batch.loss(z, y), penalty,
                    lambda t, z, g: z - self.z_lr * g,
                )
                for t, z in enumerate(new):
                    state.z[t][idx] = z
                net.train()
                theta_step(net, state.opt, [x, *new[:-1]], lambda t, out: 0.5 * b * (new[t] - out).pow(2).sum() / len(idx))
            with torch.no_grad():
                net.eval()
                ins = [batch.x, *state.z[:-1]]
                state.residuals = [float((z - blk(i)).pow(2).mean().sqrt()) for z, blk, i in zip(state.z, net.blocks, ins)]
            state.iteration += 1
            return {}

        def diagnostics(self, net, state, batch):
            z_norms = [float(z.pow(2).sum(1).mean().sqrt()) for z in state.z]
            return {"residuals": state.residuals, "z_norms": z_norms, "iteration": state.iteration}

        def state_bytes(self, state):
            return tensor_bytes(state.z)

        def estimate_state_bytes(self, s):
            return s.n * sum(s.block_out) * 4  # Z only, float32
    '''
)


@pytest.fixture
def toy(tmp_path):
    from admm_core.spec.methods import METHODS, register_method

    path = tmp_path / "toy_method.py"
    path.write_text(TOY)
    spec = importlib.util.spec_from_file_location("toy_method", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["toy_method"] = mod
    spec.loader.exec_module(mod)
    register_method(mod.ToyPenalty)  # the one registry line
    yield mod.ToyPenalty
    METHODS.pop("toy-penalty", None)
    sys.modules.pop("toy_method", None)


def test_a_method_in_one_module_plus_one_registry_call_trains_estimates_and_charts(toy, tmp_path):
    from admm_core.network import train
    from admm_core.rundir import read_metrics
    from admm_core.spec.presets import preset_config
    from admm_core.spec.resources import estimate_memory, preflight
    from app.dashboard import charts as C

    cfg = preset_config("digits-mlp", "toy-penalty").replace(train__epochs=2, train__device="cpu")
    est = preflight(cfg)  # the memory check and per-block validation know the new method
    train(cfg, tmp_path / "run")
    ms = read_metrics(tmp_path / "run")
    assert [m["epoch"] for m in ms] == [0, 1, 2]
    assert ms[-1]["test_accuracy"] > 0.4  # it learns (10 classes: chance is 0.1; measured 0.63)
    # the estimate is the method's own declaration, and it is right: the bytes of Z the run held
    assert est["state_bytes"] == estimate_memory(cfg)["state_bytes"] == ms[-1]["state_bytes"] > 0
    # the live charts are those it declares, drawn from its logged metrics
    spec = C.live_spec(method="toy-penalty")
    assert list(spec) == ["accuracy", "loss", "seconds", "residuals", "z_norms"]
    from helpers import live_traces

    assert len(live_traces(spec["z_norms"], ms)) == 3 and len(live_traces(spec["residuals"], ms)) == 3  # T = 3


def test_a_method_registered_after_import_is_in_the_form_s_menu(toy):
    """The Train form's method menu and its settings are read from the registry when drawn."""
    from app.dashboard import form as F

    method = next(f for f in F.FIELDS if f.path == "method")
    assert "toy-penalty" in F.choices(method)
    form = F.default_form(method="toy-penalty")
    assert {k for k in form if k.startswith(F.MP)} == {"mp.lr", "mp.z_lr", "mp.beta"}
    cfg, errors = F.read_config(form)
    assert errors == {} and cfg.method == "toy-penalty"


def test_register_method_refuses_a_taken_name():
    from dataclasses import dataclass

    from admm_core.methods.block_admm import BlockADMM
    from admm_core.spec.config import ConfigError
    from admm_core.spec.methods import METHODS, register_method
    from admm_core.spec.methods.block_admm import BlockADMMSettings

    @dataclass(frozen=True)
    class Impostor(BlockADMMSettings):
        name = "block-admm"

    with pytest.raises(ConfigError, match="already registered"):
        register_method(Impostor)
    with pytest.raises(ConfigError, match="has no name"):  # the engine holds the record, it is not one
        register_method(BlockADMM)
    assert register_method(BlockADMMSettings) is BlockADMMSettings and METHODS["block-admm"] is BlockADMMSettings


def test_charts_read_the_declarations_without_torch():
    """The dashboard server never imports torch: the live charts read ``live_metrics`` from the registry."""
    import subprocess

    code = (
        "import sys; from app.dashboard import charts as C; "
        "assert 'dual_norms' not in C.live_spec(method='gotmare'); assert list(C.live_spec(method='sgd')) == "
        "['accuracy', 'loss', 'seconds']; print('torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False", out.stderr
