from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ModelSpec

from .model import CNNConfig, build


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [
        ModelSpec("cnn", build, CNNConfig, "small conv net (3×3 convs + max-pool), shared or per-task heads",
                  modalities=frozenset({"image"}), provides=frozenset({"multi-head"}))
    ]
