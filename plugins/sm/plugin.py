from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .method import SM

TASK_ID = frozenset({"task-incremental"})
# Quick learning rates: chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {"quick/permuted-digits-til": {"train.lr": 0.05}, "quick/split-digits": {"train.lr": 0.0125}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("sm", SM, description="one full-capacity model per task, trained separately (LPS Table II's SM)",
                       footprint_kind="dense", tags=frozenset({"reference"}), scenarios=TASK_ID,
                       presets=QUICK_PRESETS)]
