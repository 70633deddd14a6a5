from __future__ import annotations

from clbench_plugins._shared.lora.presets import BASELINE
from clbench_plugins._shared.lora.sequential import SeqLoRA, SeqLoRAConfig
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("seqlora", SeqLoRA, SeqLoRAConfig, "one LoRA trained through the whole sequence",
                       footprint_kind="lowrank", requires=frozenset({"lora"}),
                       presets=tuned("seqlora", BASELINE))]
