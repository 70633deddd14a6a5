"""Registers PackNet (magnitude pruning into disjoint per-task partitions)."""

from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import PackNetConfig
from .method import PackNet
from .presets import QUICK_PRESETS


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("packnet", PackNet, PackNetConfig,
                       "PackNet: prune to a per-task share, retrain, freeze; task-aware masked inference",
                       footprint_kind="masked", requires=frozenset({"multi-head"}), presets=tuned("packnet", QUICK_PRESETS),
                       scenarios=frozenset({"task-incremental"}))]
