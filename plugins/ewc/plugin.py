from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import EWCConfig
from .method import EWC

# Quick learning rates (and strengths): chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {"quick/permuted-digits": {"train.lr": 0.05, "lambda": 10.0},
                 "quick/permuted-digits-til": {"train.lr": 0.025, "lambda": 100.0},  # 0.05/100's doubled run diverged
                 "quick/split-digits": {"train.lr": 0.0125, "lambda": 1000.0},
                 "quick/split-digits-cil": {"train.lr": 0.0125, "lambda": 10.0}}  # 0.0125/100's doubled run diverged


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("ewc", EWC, EWCConfig, "elastic weight consolidation, diagonal Fisher (Kirkpatrick 2017)",
                       footprint_kind="dense", composable=True,
                       presets=QUICK_PRESETS)]
