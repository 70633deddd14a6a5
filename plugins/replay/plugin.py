from __future__ import annotations

from clbench_plugins._shared.table1_presets import FULL_FT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ReplayConfig
from .method import Replay

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("replay", Replay, ReplayConfig, "experience replay from a reservoir buffer of past examples",
                       footprint_kind="dense", composable=True, presets=tuned("replay", FULL_FT))]
