from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .method import SM

TASK_ID = frozenset({"task-incremental"})
# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("sm", SM, description="one full-capacity model per task, trained separately (LPS Table II's SM)",
                       footprint_kind="dense", tags=frozenset({"reference"}), scenarios=TASK_ID,
                       presets=tuned("sm", {}))]
