from __future__ import annotations

from clbench_plugins._shared.lora.presets import NLORA
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import NLoRAConfig
from .method import NLoRA


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("nlora", NLoRA, NLoRAConfig, "N-LoRA: new LoRA per task + l1 sparsity of the update",
                       footprint_kind="lowrank", requires=frozenset({"lora"}), composable=True, presets=tuned("nlora", NLORA),
                       tune={"lambda": (0.04, 4.0)})]
