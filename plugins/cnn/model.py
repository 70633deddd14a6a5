"""A small convolutional network for small images (8×8 digits up to 32×32 CIFAR)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from clbench.config import bounded
from clbench.errors import ConfigError
from clbench.model import HeadedModel, StreamInfo


@dataclass(frozen=True)
class CNNConfig:
    channels: tuple[int, ...] = (16, 32)
    hidden: int = bounded(128, ge=1)
    multi_head: bool | None = None

    def __post_init__(self) -> None:  # `bounded` checks numbers, not the items of a tuple
        if any(c < 1 for c in self.channels):
            raise ConfigError(f"model.channels={list(self.channels)} is out of range: every count must be >= 1")


def build(config: CNNConfig, info: StreamInfo) -> HeadedModel:
    in_ch = info.input_shape[0]
    layers: list[nn.Module] = []
    for ch in config.channels:
        layers += [nn.Conv2d(in_ch, ch, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        in_ch = ch
    layers.append(nn.Flatten())
    with torch.no_grad():
        width = nn.Sequential(*layers)(torch.zeros(1, *info.input_shape)).shape[1]
    layers += [nn.Linear(width, config.hidden), nn.ReLU()]
    return HeadedModel(nn.Sequential(*layers), config.hidden, info)
