from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ICaRLConfig
from .method import ICaRL

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("icarl", ICaRL, ICaRLConfig,
                       "herding exemplars, distillation, nearest-mean classifier (Rebuffi 2017)",
                       footprint_kind="dense", presets=tuned("icarl", {}), scenarios=frozenset({"class-incremental"}),
                       data_parallel=False)]
