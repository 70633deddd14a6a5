from __future__ import annotations

from clbench_plugins.lora.presets import BASELINE, quick_tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import SeqLoRAConfig
from .method import SeqLoRA


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("seqlora", SeqLoRA, SeqLoRAConfig, "one LoRA trained through the whole sequence",
                       footprint_kind="lowrank", requires=frozenset({"lora"}),
                       presets={**BASELINE, **quick_tuned("seqlora")})]
