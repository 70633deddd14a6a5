"""Registers LPS and the two report metrics of the partition methods (capacity used, share ratio)."""

from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.metrics import MetricInput
from clbench.specs import MethodSpec, MetricSpec

from .config import LPSConfig
from .method import LPS
from .presets import QUICK_PRESETS


def _report_value(key: str):
    def fn(inp: MetricInput) -> float | None:
        value = inp.report.get(key)
        return None if value is None else float(value)

    return fn


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("lps", LPS, LPSConfig,
                       "Learn-Prune-Share: ADMM pruning into disjoint partitions + a learned binary sharing mask",
                       footprint_kind="masked", requires=frozenset({"multi-head"}), presets=tuned("lps", QUICK_PRESETS),
                       scenarios=frozenset({"task-incremental"}))]


@hookimpl
def clbench_add_metrics() -> list[MetricSpec]:
    return [
        MetricSpec("Capacity", _report_value("capacity_used"), "down", needs="report",
                   description="share of the pruned layers' weights owned by some task after the last task"),
        MetricSpec("Share", _report_value("share_ratio"), "up", needs="report",
                   description="share of earlier tasks' weights a task reuses, mean over tasks 2..T (LPS β)"),
    ]
