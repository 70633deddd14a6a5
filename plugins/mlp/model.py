"""A fully connected network with one shared head or one head per task."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from clbench.config import bounded, setting
from clbench.errors import ConfigError
from clbench.model import HeadedModel, StreamInfo


@dataclass(frozen=True)
class MLPConfig:
    hidden: tuple[int, ...] = setting((256, 256), help="widths of the hidden layers; () = a linear model")
    dropout: float = bounded(0.0, ge=0, lt=1)
    multi_head: bool | None = setting(None, help="None: the stream's default (split-digits: per-task heads)")
    bias: bool = True

    def __post_init__(self) -> None:  # `bounded` checks numbers, not the items of a tuple
        if any(h < 1 for h in self.hidden):
            raise ConfigError(f"model.hidden={list(self.hidden)} is out of range: every width must be >= 1")


def build(config: MLPConfig, info: StreamInfo) -> HeadedModel:
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(info.input_shape)
    for h in config.hidden:
        layers += [nn.Linear(width, h, bias=config.bias), nn.ReLU()]
        if config.dropout > 0:
            layers.append(nn.Dropout(config.dropout))
        width = h
    return HeadedModel(nn.Sequential(*layers), width, info)
