from __future__ import annotations

from clbench_plugins._shared.lora.presets import BASELINE

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import MTLConfig
from .method import MTL


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("mtl", MTL, MTLConfig, "one LoRA trained on all tasks seen so far (multi-task oracle: never ranked)",
                       footprint_kind="lowrank", requires=frozenset({"lora"}), presets=BASELINE,
                       tags=frozenset({"reference"}))]
