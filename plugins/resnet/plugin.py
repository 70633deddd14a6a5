"""Registers the ``resnet18`` model (:mod:`.model`)."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ModelSpec

from .model import ResNetConfig, build


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [
        ModelSpec("resnet18", build, ResNetConfig, "ResNet-18 of the CIFAR/TinyImageNet benchmarks (Mammoth's: 3×3 "
                  "stem, no max-pool, width 64), shared or per-task heads", modalities=frozenset({"image"}),
                  provides=frozenset({"multi-head"}))
    ]
