from __future__ import annotations

from clbench_plugins._shared.lora.presets import BASELINE
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import IncLoRAConfig
from .method import IncLoRA


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("inclora", IncLoRA, IncLoRAConfig, "a new LoRA per task, earlier ones frozen and merged",
                       footprint_kind="lowrank", requires=frozenset({"lora"}),
                       presets=tuned("inclora", BASELINE))]
