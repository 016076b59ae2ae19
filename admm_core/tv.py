"""torchvision's architectures as chains of named layers: the torch half of the ``tv-*`` records
(:mod:`admm_core.spec.tv`, which lists them and reads their tables without torch).

Each network is ``torchvision.models.<name>(weights=None, num_classes=n_out)`` (torchvision's own
random initialisation; nothing is downloaded), cut into its top-level children in the order its
``forward`` runs them, the rule of :mod:`admm_core.own` (a flatten before the classifier, as
torchvision's forward does, is put in front of that child):

- ResNet-18/34: ``conv1, bn1, relu, maxpool, layer1 … layer4, avgpool, fc``. The ``-cifar``
  records take the usual CIFAR stem: ``conv1`` a 3×3 stride-1 convolution and no ``maxpool``
  (torchvision's 7×7 stride-2 conv and max-pool shrink a 32×32 image to 8×8 before ``layer1``).
- VGG-11 with BatchNorm: ``features`` cut at its five max-pools into ``stage1 … stage5``
  (``features[0:4], [4:8], [8:15], [15:22], [22:29]``), then ``avgpool``, ``classifier``.
- MobileNetV2: ``features[0]`` = ``stem``, the seven inverted-residual rows of the paper's table
  (torchvision's ``inverted_residual_setting``) = ``stage1 … stage7`` (``features[1], [2:4], [4:7],
  [7:11], [11:14], [14:17], [17]``), ``features[18]`` = ``head_conv`` (1×1 to 1280), and
  ``classifier`` = the global average pool and flatten torchvision's forward applies as functions,
  then its ``classifier`` (dropout + Linear).

Deviation: inputs with C ≠ 3 channels (MNIST) get a first convolution with C input channels, the
same shape otherwise and torchvision's initialisation for it (Kaiming-normal, fan-out).

``python -m admm_core.tv REQUESTS`` prints the layer tables of the requests (a JSON list of
[record, input shape, classes]) as JSON, computed on torch's meta device (no memory, no weights
drawn): the dashboard's server, which never imports torch, reads them that way (and caches them).
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict

import torch
import torchvision
from torch import nn

from .errors import ConfigError
from .rundir import write_text_atomic
from .spec.archs import needs_image
from .spec.config import ModelConfig
from .spec.tv import TV_RECORDS, cache_file


class _Flatten(nn.Module):
    """A child that torchvision's forward feeds with its predecessor's output flattened to (N, −1)."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.flatten, self.layer = nn.Flatten(), layer

    def forward(self, x):
        return self.layer(self.flatten(x))


VGG_STAGES = ((0, 4), (4, 8), (8, 15), (15, 22), (22, 29))  # vgg11_bn's features, cut after each max-pool
MOBILENET_STAGES = ((1, 2), (2, 4), (4, 7), (7, 11), (11, 14), (14, 17), (17, 18))  # rows n = 1, 2, 3, 4, 3, 3, 1


def _first_conv(old: nn.Conv2d, c_in: int, kernel: int | None = None, stride: int | None = None) -> nn.Conv2d:
    """``old`` with ``c_in`` input channels (and another kernel / stride: the CIFAR stem), initialised as
    torchvision initialises these nets' convolutions (Kaiming-normal, fan-out, ReLU gain)."""
    k = kernel or old.kernel_size[0]
    conv = nn.Conv2d(
        c_in, old.out_channels, k, stride=stride or old.stride[0], padding=k // 2, bias=old.bias is not None
    )
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv


def tv_model(record: str, in_shape: tuple[int, ...], n_out: int) -> nn.Module:
    """torchvision's network of ``record`` for ``in_shape`` inputs and ``n_out`` classes (random init,
    ``weights=None``); the CIFAR stem and a C ≠ 3 first convolution as the module docstring says."""
    needs_image(record, in_shape)
    name, stem = TV_RECORDS[record].torchvision, TV_RECORDS[record].stem
    model = getattr(torchvision.models, name)(weights=None, num_classes=n_out)
    c = in_shape[0]
    if name.startswith("resnet"):
        if stem == "cifar":
            model.conv1 = _first_conv(model.conv1, c, kernel=3, stride=1)
            model.maxpool = nn.Identity()  # dropped from the chain (tv_layers)
        elif c != 3:
            model.conv1 = _first_conv(model.conv1, c)
    elif c != 3:
        first = model.features[0] if name.startswith("vgg") else model.features[0][0]
        conv = _first_conv(first, c)
        if name.startswith("vgg"):
            model.features[0] = conv
        else:
            model.features[0][0] = conv
    return model


def tv_layers(record: str, model: nn.Module) -> OrderedDict[str, nn.Module]:
    """``model`` (:func:`tv_model`'s) as the record's named layers; they compose to ``model(x)``."""
    name = TV_RECORDS[record].torchvision
    if name.startswith("resnet"):
        layers = OrderedDict(model.named_children())
        if TV_RECORDS[record].stem == "cifar":
            del layers["maxpool"]
        layers["fc"] = _Flatten(model.fc)  # torchvision: torch.flatten(x, 1) before fc
        return layers
    f = model.features
    if name.startswith("vgg"):
        layers = OrderedDict((f"stage{i + 1}", f[a:b]) for i, (a, b) in enumerate(VGG_STAGES))
        layers["avgpool"] = model.avgpool
        layers["classifier"] = _Flatten(model.classifier)
        return layers
    layers = OrderedDict(stem=f[0])
    layers.update((f"stage{i + 1}", f[a:b]) for i, (a, b) in enumerate(MOBILENET_STAGES))
    layers["head_conv"] = f[18]
    # torchvision's forward: adaptive_avg_pool2d(x, (1, 1)) and flatten as functions, then the classifier
    layers["classifier"] = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), model.classifier)
    return layers


def build(in_shape: tuple[int, ...], cfg: ModelConfig, n_out: int) -> OrderedDict[str, nn.Module]:
    """The ``tv-*`` records' builder (``cfg.arch`` names the record)."""
    return tv_layers(cfg.arch, tv_model(cfg.arch, tuple(in_shape), n_out))


def meta_table(record: str, in_shape: tuple[int, ...], n_out: int) -> list[tuple[str, tuple[int, ...], int]]:
    """[(layer name, output shape per sample, parameters)] of the record's layers, built and run on
    torch's meta device (shapes only: no memory, no compute); a ConfigError if the input is too small."""
    with torch.device("meta"):
        layers = build(in_shape, ModelConfig(record), n_out)
        x = torch.empty(2, *in_shape)
        out = []
        for name, layer in layers.items():
            try:
                x = layer.train()(x)
            except RuntimeError as e:
                raise ConfigError(
                    f"model.arch = {record!r}: inputs {tuple(in_shape)} are too small for {TV_RECORDS[record].label} "
                    f"(at layer {name}: {str(e).splitlines()[0]})"
                ) from None
            out.append((name, tuple(x.shape[1:]), sum(p.numel() for p in layer.parameters())))
    return out


def main(argv: list[str]) -> int:
    """Print {"tables": [...], "errors": [...]} for the requests in ``argv[0]`` (one of each per request),
    each table also written to its cache file (:func:`admm_core.spec.tv.cache_file`)."""
    torch.set_num_threads(1)
    tables, errors = [], []
    for record, shape, n_out in json.loads(argv[0]):
        try:
            rows = [[n, list(s), p] for n, s, p in meta_table(record, tuple(shape), int(n_out))]
            tables.append(rows)
            errors.append(None)
        except ConfigError as e:
            tables.append(None)
            errors.append(str(e))
            continue
        path = cache_file(record, tuple(shape), int(n_out))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(rows), durable=False)  # a reader sees the whole file or none
        except OSError:
            pass  # a read-only cache: the asking process keeps the table in memory, the next computes it again
    print(json.dumps({"tables": tables, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
