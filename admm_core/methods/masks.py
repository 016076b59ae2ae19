"""One dropout mask per (minibatch, block): the stochastic layers of a block hold still while the
passes of one minibatch (forward start, Z sweeps, Θ-steps, dual step) run through it."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from .zsweep import _modules_of

# Dropout, Dropout1d/2d/3d, AlphaDropout, FeatureAlphaDropout
_DROPOUT = nn.modules.dropout._DropoutNd


@contextmanager
def held_masks(blocks):
    """Within the ``with``, every train-mode forward of block t draws the same dropout masks.

    The Block-ADMM updates of one minibatch i evaluate block_t(Z_{t−1,i}) several times: the
    forward start Z_t = block_t(Z_{t−1}), the Z sweep's residuals r_t = Z_t − block_t(Z_{t−1}),
    the Θ-step's ∇_{Θ_t} P_t and the dual step U_t += r_t. With a fresh mask m per pass, block_t
    is a different function in each: the forward start's r_t = 0 becomes r_t = block_t(·; m) −
    block_t(·; m′) ≠ 0, a residual of pure mask noise that the Z-step, the Θ-step and the dual step
    then chase, so the targets never hold still. Here block_t is one function block_t(·; m_{t,i})
    for the whole of minibatch i, as a backprop step sees one mask per minibatch: on entry one seed
    is drawn per stochastic block (from the global generator, so runs stay reproducible by their
    seed and other minibatches and blocks get fresh masks), and each of its train-mode forwards runs
    inside ``torch.random.fork_rng`` with the CPU generator (and the CUDA generator of the input's
    device) seeded by it, so the held forwards leave the global generators where they were. Cost:
    one RNG save, seed and restore per train-mode forward of such a block (~40 µs on a CPU).

    A block with no dropout-family module (``nn.Dropout``, ``Dropout1d/2d/3d``, ``AlphaDropout``,
    ``FeatureAlphaDropout``) is left alone: no seed drawn, no hook, the same numbers as without
    this context. Eval-mode passes (dropout off) are not forked either. Not to be nested.
    """
    handles = []
    try:
        for block in blocks:
            drops = [m for m in _modules_of(block)[0] if isinstance(m, _DROPOUT)]
            if drops:
                seed = int(torch.randint(2**62, ()))
                handles += _hold(block, drops, seed)
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def rng_kept(device: torch.device):
    """Run a probe or a calibration pass without moving the random stream that training draws from.

    A diagnostic (e.g. the backprop cosine) runs the method's passes under :func:`held_masks`,
    which draws a seed per stochastic block from the global generator, and BatchNorm's calibration
    pass runs dropout live: without this, either would shift every later minibatch's masks, and a
    run's weights would depend on which diagnostics it computed. Inside, the CPU generator (and
    ``device``'s, on CUDA) is forked.
    """
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device] if cuda else [], device_type="cuda"):
        yield


def _hold(block: nn.Module, drops: list, seed: int) -> list:
    """Hooks that run each train-mode forward of ``block`` inside an RNG fork seeded by ``seed``."""
    forks = []

    def enter(module, args):
        if not any(m.training for m in drops):  # eval mode: dropout draws nothing
            forks.append(None)
            return
        device = next((a.device for a in args if torch.is_tensor(a)), torch.device("cpu"))
        cuda = device.type == "cuda"
        fork = torch.random.fork_rng(devices=[device] if cuda else [], device_type="cuda")
        fork.__enter__()
        forks.append(fork)
        torch.random.default_generator.manual_seed(seed)
        if cuda:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)

    def leave(module, args, output):
        fork = forks.pop()
        if fork is not None:
            fork.__exit__(None, None, None)

    return [block.register_forward_pre_hook(enter), block.register_forward_hook(leave, always_call=True)]
