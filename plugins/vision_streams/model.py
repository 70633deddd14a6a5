"""The "default CIFAR10 architecture from Keras" the LPS paper uses for split CIFAR (§V-A, Table I).

As in the LPS code's CifarNet (neu-spiral/LPSforLifelong, models/cifarnet.py; docs/reference-code.md §3.2):
conv 3→32→32 (3×3, no padding), 2×2 max-pool, dropout, conv 32→64→64, max-pool, dropout, fc → 512 (ReLU,
dropout), then one head per task.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from clbench.config import bounded, setting
from clbench.model import HeadedModel, StreamInfo


@dataclass(frozen=True)
class CifarNetConfig:
    dropout_conv: float = bounded(0.25, ge=0, lt=1, help="Keras cifar10_cnn example / LPS CifarNet")
    dropout_fc: float = bounded(0.5, ge=0, lt=1)
    hidden: int = bounded(512, ge=1)
    bias: bool = setting(False, help="LPS CifarNet convs have no bias")
    multi_head: bool | None = None


def build(config: CifarNetConfig, info: StreamInfo) -> HeadedModel:
    c = info.input_shape[0]

    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, bias=config.bias), nn.ReLU(), nn.Conv2d(cout, cout, 3, bias=config.bias),
                nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(config.dropout_conv)]

    layers: list[nn.Module] = [*block(c, 32), *block(32, 64), nn.Flatten()]
    with torch.no_grad():
        width = nn.Sequential(*layers)(torch.zeros(1, *info.input_shape)).shape[1]
    layers += [nn.Linear(width, config.hidden), nn.ReLU(), nn.Dropout(config.dropout_fc)]
    return HeadedModel(nn.Sequential(*layers), config.hidden, info)
