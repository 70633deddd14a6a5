from __future__ import annotations

from clbench_plugins._shared.table1_presets import FULL_FT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import LwFConfig
from .method import LwF

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("lwf", LwF, LwFConfig, "learning without forgetting: distil the previous model (Li & Hoiem 2016)",
                       footprint_kind="dense", composable=True, presets=tuned("lwf", FULL_FT),
                       tune={"lambda": (0.1, 10.0)})]
