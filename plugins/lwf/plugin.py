from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import LwFConfig
from .method import LwF

# Quick learning rates (and strengths): chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {"quick/permuted-digits": {"train.lr": 0.0125, "lambda": 1.0},
                 "quick/permuted-digits-til": {"train.lr": 0.025, "lambda": 1.0},
                 "quick/split-digits": {"train.lr": 0.0125, "lambda": 0.3},
                 "quick/split-digits-cil": {"train.lr": 0.025, "lambda": 3.0}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("lwf", LwF, LwFConfig, "learning without forgetting: distil the previous model (Li & Hoiem 2016)",
                       footprint_kind="dense", composable=True, presets=QUICK_PRESETS)]
