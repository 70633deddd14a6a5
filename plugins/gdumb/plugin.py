from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import GDumbConfig
from .method import GDumb

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("gdumb", GDumb, GDumbConfig,
                       "greedy class-balanced memory, a model retrained on it from scratch (Prabhu 2020)",
                       footprint_kind="dense", presets=tuned("gdumb", {}))]
