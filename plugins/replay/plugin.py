from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ReplayConfig
from .method import Replay

# Quick learning rates (and strengths): chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {"quick/permuted-digits": {"train.lr": 0.025}, "quick/permuted-digits-til": {"train.lr": 0.05},
                 "quick/split-digits": {"train.lr": 0.0125}, "quick/split-digits-cil": {"train.lr": 0.05}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("replay", Replay, ReplayConfig, "experience replay from a reservoir buffer of past examples",
                       footprint_kind="dense", composable=True, presets=QUICK_PRESETS)]
