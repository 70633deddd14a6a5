"""The ResNet-18 of the continual-learning image benchmarks (Seq-CIFAR-10/100, Seq-TinyImageNet), as Mammoth's
``backbone/ResNet18.py`` builds it (tag neurips2020; the DER paper's Table 2): a 3×3 stem convolution of ``width``
filters with batch norm and no max-pool, four stages of two basic blocks (``width`` × 1, 2, 4, 8 filters; stride 2
from the second stage on, a 1×1 convolution with batch norm on the shortcut where the shape changes), convolutions
without bias, global average pooling, then the head (one shared head, or one per task): 11.2 M weights at width 64
with a 10-way head. torch's default initialisation, as Mammoth's."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from clbench.config import bounded, setting
from clbench.errors import ConfigError
from clbench.model import HeadedModel, StreamInfo


@dataclass(frozen=True)
class ResNetConfig:
    width: int = bounded(64, ge=1, help="filters of the stem and the first stage (Mammoth's nf): 64 for ResNet-18")
    blocks: tuple[int, ...] = setting((2, 2, 2, 2), help="basic blocks per stage: (2, 2, 2, 2) is ResNet-18")
    channels_last: bool = setting(False, help=(
        "convolution weights in channels-last layout (NHWC): faster convolutions on a GPU under "
        "train.autocast=bfloat16 (tensor cores); the same numbers up to the kernels' summation order"))
    multi_head: bool | None = None

    def __post_init__(self) -> None:
        if not self.blocks or any(b < 1 for b in self.blocks):
            raise ConfigError(f"model.blocks={list(self.blocks)}: every stage needs at least one block")


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = _conv3x3(cout, cout), nn.BatchNorm2d(cout)
        self.shortcut = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Sequential()
        )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetBody(nn.Module):
    """Everything before the head: the features (N, width × 2^(stages−1)) of images (N, C, H, W)."""

    def __init__(self, in_channels: int, width: int, blocks: tuple[int, ...]) -> None:
        super().__init__()
        self.stem = nn.Sequential(_conv3x3(in_channels, width), nn.BatchNorm2d(width), nn.ReLU())
        stages, cin = [], width
        for k, n in enumerate(blocks):
            cout = width * 2**k
            stages += [BasicBlock(cin if i == 0 else cout, cout, 2 if k and i == 0 else 1) for i in range(n)]
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.out_features = cin

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1).flatten(1)


def build(config: ResNetConfig, info: StreamInfo) -> HeadedModel:
    if len(info.input_shape) != 3:
        raise ConfigError(f"model resnet18 takes images (C, H, W); stream {info.name!r} gives {info.input_shape}")
    body = ResNetBody(info.input_shape[0], config.width, tuple(config.blocks))
    if config.channels_last:  # a convolution with channels-last weights computes and returns channels-last
        body = body.to(memory_format=torch.channels_last)
    return HeadedModel(body, body.out_features, info)
