from __future__ import annotations

from clbench_plugins._shared.lora.presets import OLORA
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import OLoRAConfig
from .method import OLoRA


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("olora", OLoRA, OLoRAConfig, "O-LoRA: new LoRA per task + orthogonality to earlier A's + L2",
                       footprint_kind="lowrank", requires=frozenset({"lora"}), composable=True, presets=tuned("olora", OLORA),
                       tune={"lambda1": (0.05, 5.0)})]
