"""The zoo: public model definitions written by others, as rows of experiments/zoo.py.

Each model is written here in the structure of its public source (the same child names, the
same forward; the docstring names the source), not re-shaped for the workbench: the zoo asks
what Block-ADMM does to a network as its author wrote it. torchvision's models are taken from
torchvision itself (random init, ``num_classes=10``).

A row (:class:`ZooRow`) is declarative: the model's factory, its data set and sizes, and
``cuts``, the cut points Block-ADMM splits it at. ``cuts`` are torch.fx cut points (module
paths such as ``"layer2.0"``, one tensor crossing each): today's ``own.train`` accepts only
top-level children of a chain, so the rows whose cuts are nested, or whose forward is not a
chain of children, are recorded as blocked (with the API's ConfigError) until it accepts them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# --- (1) PyTorch examples, MNIST -----------------------------------------------------------------


class Net(nn.Module):
    """pytorch/examples, ``mnist/main.py``'s ``Net`` (as printed there).

    Its output is ``log_softmax``: the zoo trains it with loss "ce" unchanged, because
    cross-entropy applies log_softmax again, and log_softmax is invariant on log-probabilities
    (log_softmax(log_softmax(x)) == log_softmax(x): their exponentials already sum to 1), so CE on
    this output equals CE on the logits; nothing is wrapped."""

    def __init__(self):
        super(Net, self).__init__()  # noqa: UP008 - as printed in the source
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


# --- (2) LeNet-5 with batch norm -----------------------------------------------------------------


class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al. 1998) in the modern form of the common PyTorch tutorials (e.g.
    Paperspace's "Writing LeNet5 from Scratch in PyTorch"): ``layer1``/``layer2`` each
    conv-BN-ReLU-max-pool, then ``fc`` 400→120, ``relu``, ``fc1`` 120→84, ``relu1``, ``fc2``.
    Two changes, said here: conv1 pads by 2 so that MNIST's 28×28 gives the 5×5×16 = 400 features
    (the tutorial resizes MNIST to 32×32 instead), and a ``dropout`` (p = 0.1) after ``relu1``.
    The forward flattens with ``reshape`` between ``layer2`` and ``fc``, as the tutorial does."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.layer1 = nn.Sequential(
            nn.Conv2d(1, 6, kernel_size=5, stride=1, padding=2),
            nn.BatchNorm2d(6),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.layer2 = nn.Sequential(
            nn.Conv2d(6, 16, kernel_size=5, stride=1, padding=0),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.fc = nn.Linear(400, 120)
        self.relu = nn.ReLU()
        self.fc1 = nn.Linear(120, 84)
        self.relu1 = nn.ReLU()
        self.dropout = nn.Dropout(0.1)
        self.fc2 = nn.Linear(84, num_classes)

    def forward(self, x):
        out = self.layer1(x)
        out = self.layer2(out)
        out = out.reshape(out.size(0), -1)
        out = self.fc(out)
        out = self.relu(out)
        out = self.fc1(out)
        out = self.relu1(out)
        out = self.dropout(out)
        out = self.fc2(out)
        return out


# --- (3)–(6) torchvision -------------------------------------------------------------------------


def resnet18_cifar() -> nn.Module:
    """torchvision.models.resnet18(num_classes=10) with the usual CIFAR stem (conv1 3×3 stride 1,
    no max-pool), as docs/your-own-network.md gives it."""
    import torchvision

    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


def mobilenet_v2() -> nn.Module:
    """torchvision.models.mobilenet_v2(num_classes=10), unchanged (32×32 inputs: 1×1 at the end)."""
    import torchvision

    return torchvision.models.mobilenet_v2(num_classes=10)


def vgg11_bn() -> nn.Module:
    """torchvision.models.vgg11_bn(num_classes=10), unchanged: on 32×32 inputs its adaptive
    average pool repeats the 1×1 map to 7×7, so the classifier keeps its 25088→4096 first layer
    (128.8 M parameters in all; dropout 0.5 twice in the classifier)."""
    import torchvision

    return torchvision.models.vgg11_bn(num_classes=10)


def vit_tiny() -> nn.Module:
    """A small torchvision.models.VisionTransformer for 32×32 inputs: patch 4 (64 tokens and a
    class token), 4 encoder layers of 4 heads, width 64, MLP 128."""
    from torchvision.models import VisionTransformer

    return VisionTransformer(
        image_size=32, patch_size=4, num_layers=4, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10
    )


# --- (7) PyTorch quickstart ----------------------------------------------------------------------


class NeuralNetwork(nn.Module):
    """The PyTorch "Quickstart" tutorial's ``NeuralNetwork`` (Fashion-MNIST), as printed there."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, 10),
        )

    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits


# --- the rows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooRow:
    """One model of the zoo: how to build it, what it trains on, where it is cut."""

    name: str
    source: str  # where the definition comes from (the docs table prints it)
    factory: Callable[[], nn.Module]
    data: str  # a registered data set of admm_core.spec.datasets
    input_shape: tuple[int, ...]
    train_limit: int
    test_limit: int
    batch_size: int
    epochs: int
    cuts: tuple[str, ...]  # torch.fx cut points: module paths, a block ends after each
    optional: bool = False  # heavy on a CPU: run last, and only when asked for by name or --all


MNIST_SIZES = {"data": "mnist", "input_shape": (1, 28, 28), "train_limit": 6000, "test_limit": 2000, "epochs": 2}
FMNIST_SIZES = {**MNIST_SIZES, "data": "fashion-mnist"}
CIFAR_SIZES = {"data": "cifar10", "input_shape": (3, 32, 32), "train_limit": 5000, "test_limit": 1000, "epochs": 2}

ROWS: tuple[ZooRow, ...] = (
    ZooRow(
        "mnist-net",
        "pytorch/examples `mnist/main.py` `Net`",
        Net,
        batch_size=64,
        cuts=("conv2", "fc1"),
        **MNIST_SIZES,
    ),
    ZooRow(
        "lenet5-bn",
        "LeNet-5 as in the PyTorch tutorials (Paperspace), + BatchNorm, dropout 0.1",
        LeNet5,
        batch_size=64,
        cuts=("layer1", "layer2"),
        **MNIST_SIZES,
    ),
    ZooRow(
        "quickstart-mlp",
        'PyTorch tutorials, "Quickstart" `NeuralNetwork`',
        NeuralNetwork,
        batch_size=64,
        cuts=("linear_relu_stack.1", "linear_relu_stack.3"),
        **FMNIST_SIZES,
    ),
    ZooRow(
        "resnet18",
        "`torchvision.models.resnet18(num_classes=10)`, CIFAR stem",
        resnet18_cifar,
        batch_size=128,
        cuts=("layer2.0", "layer3.1"),
        **CIFAR_SIZES,
    ),
    ZooRow(
        "mobilenet_v2",
        "`torchvision.models.mobilenet_v2(num_classes=10)`",
        mobilenet_v2,
        batch_size=128,
        cuts=("features.6", "features.13"),
        **CIFAR_SIZES,
    ),
    ZooRow(
        "vit-tiny",
        "`torchvision.models.VisionTransformer` (32 px, patch 4, 4 layers, 4 heads, width 64, MLP 128)",
        vit_tiny,
        batch_size=128,
        cuts=("encoder.layers.encoder_layer_1",),
        **CIFAR_SIZES,
    ),
    ZooRow(
        "vgg11_bn",
        "`torchvision.models.vgg11_bn(num_classes=10)`",
        vgg11_bn,
        batch_size=128,
        cuts=("features",),
        optional=True,
        **CIFAR_SIZES,
    ),
)

BY_NAME = {r.name: r for r in ROWS}


def train_own(row: ZooRow, model, method: str, seed: int, settings: dict | None, out, epochs: int | None = None):
    """``model`` trained through the API as the zoo trains a row: the row's cuts, data, batch size and
    epochs (or ``epochs``), cross-entropy, the method's defaults with ``settings`` on top."""
    from admm_core import own

    return own.train(
        model,
        split_after=list(row.cuts),
        data=row.data,
        method=method,
        settings=dict(settings or {}),
        epochs=row.epochs if epochs is None else epochs,
        batch_size=row.batch_size,
        loss="ce",
        seed=seed,
        train_limit=row.train_limit,
        test_limit=row.test_limit,
        tensorboard=False,
        out=out,
    )
