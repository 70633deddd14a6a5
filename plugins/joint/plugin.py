from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import JointConfig
from .method import Joint

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("joint", Joint, JointConfig, "multi-task training on all tasks seen so far (an oracle: never ranked)",
                       footprint_kind="dense", tags=frozenset({"reference"}), presets=tuned("joint", {}))]
