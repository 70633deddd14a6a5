from __future__ import annotations

from clbench_plugins.lora.presets import BASELINE

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import PerTaskConfig
from .method import PerTask


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("pertask", PerTask, PerTaskConfig, "a separate LoRA per task, each evaluated with its own adapter",
                       footprint_kind="lowrank", requires=frozenset({"lora"}), presets=BASELINE,
                       tags=frozenset({"upper-bound"}))]
