"""Small pieces several test files share (imported as ``helpers``: pytest puts tests/ on the path)."""

from __future__ import annotations

import contextlib
import io

import torch

from admm_core import cli, runs
from admm_core.blocks import BlockNet
from admm_core.models import mlp_layers


def cli_run(argv) -> tuple[int, str]:
    """cli.main in-process: (exit code, stderr); signal handlers left as they are."""
    err = io.StringIO()
    saved = runs.install_stop_handlers
    runs.install_stop_handlers = lambda: lambda: False
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = cli.main(argv)
    finally:
        runs.install_stop_handlers = saved
    return rc, err.getvalue()


def tiny_mlp(n: int, d: int = 7, hidden=(6, 5), classes: int = 4, seed: int = 0):
    """A float64 MLP split after every layer (T = 3) and n random samples: (net, x, y)."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    net = BlockNet(mlp_layers(d, hidden, classes), ("fc1", "fc2")).double()
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=g)
    return net, x, y


def mlp_weights(net) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Copies of (W_t, b_t) of tiny_mlp's three Linear layers: fc1 = (Flatten, Linear, ReLU),
    fc2 = (Linear, ReLU), fc3 = (Linear,)."""
    lin = [net.blocks[0][0][1], net.blocks[1][0][0], net.blocks[2][0][0]]
    return [(l.weight.detach().clone(), l.bias.detach().clone()) for l in lin]
