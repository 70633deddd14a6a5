from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ICaRLConfig
from .method import ICaRL


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("icarl", ICaRL, ICaRLConfig,
                       "herding exemplars, distillation, nearest-mean classifier (Rebuffi 2017)",
                       footprint_kind="dense", scenarios=frozenset({"class-incremental"}))]
