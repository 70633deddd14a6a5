from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import JointConfig
from .method import Joint

# Quick learning rates (and strengths): chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {f"quick/{s}": {"train.lr": 0.025}
                 for s in ("permuted-digits", "permuted-digits-til", "split-digits", "split-digits-cil")}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("joint", Joint, JointConfig, "multi-task training on all tasks seen so far (an oracle: never ranked)",
                       footprint_kind="dense", tags=frozenset({"reference"}), presets=QUICK_PRESETS)]
