from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ModelSpec

from .model import MLPConfig, build


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [
        ModelSpec("mlp", build, MLPConfig, "fully connected ReLU network, shared or per-task heads",
                  modalities=frozenset({"vector", "image"}), provides=frozenset({"multi-head"}))
    ]
