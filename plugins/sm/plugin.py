from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .method import SM

TASK_ID = frozenset({"task-incremental"})


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("sm", SM, description="one full-capacity model per task, trained separately (LPS Table II's SM)",
                       footprint_kind="dense", tags=frozenset({"reference"}), scenarios=TASK_ID)]
