"""A fully connected network with one shared head or one head per task."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from clbench.model import HeadedModel, StreamInfo


@dataclass(frozen=True)
class MLPConfig:
    hidden: tuple[int, ...] = (256, 256)
    dropout: float = 0.0
    multi_head: bool | None = None  # None: the stream's default (split-digits: per-task heads)
    bias: bool = True


def build(config: MLPConfig, info: StreamInfo) -> HeadedModel:
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(info.input_shape)
    for h in config.hidden:
        layers += [nn.Linear(width, h, bias=config.bias), nn.ReLU()]
        if config.dropout > 0:
            layers.append(nn.Dropout(config.dropout))
        width = h
    return HeadedModel(nn.Sequential(*layers), width, info)
