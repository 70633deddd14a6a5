from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ICaRLConfig
from .method import ICaRL

# Quick learning rates (and strengths): chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {"quick/split-digits-cil": {"train.lr": 0.05}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("icarl", ICaRL, ICaRLConfig,
                       "herding exemplars, distillation, nearest-mean classifier (Rebuffi 2017)",
                       footprint_kind="dense", presets=QUICK_PRESETS, scenarios=frozenset({"class-incremental"}))]
