from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import GDumbConfig
from .method import GDumb

# Quick learning rates (and strengths): chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {"quick/permuted-digits": {"train.lr": 0.05}, "quick/permuted-digits-til": {"train.lr": 0.05},
                 "quick/split-digits": {"train.lr": 0.0125}, "quick/split-digits-cil": {"train.lr": 0.025}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("gdumb", GDumb, GDumbConfig,
                       "greedy class-balanced memory, a model retrained on it from scratch (Prabhu 2020)",
                       footprint_kind="dense", presets=QUICK_PRESETS)]
