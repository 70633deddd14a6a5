from __future__ import annotations

from clbench_plugins._shared.table1_presets import FULL_FT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import EWCConfig
from .method import EWC

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("ewc", EWC, EWCConfig, "elastic weight consolidation, diagonal Fisher (Kirkpatrick 2017)",
                       footprint_kind="dense", composable=True,
                       presets=tuned("ewc", FULL_FT), tune={"lambda": (1.0, 1e4)})]
