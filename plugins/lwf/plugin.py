from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import LwFConfig
from .method import LwF


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("lwf", LwF, LwFConfig, "learning without forgetting: distil the previous model (Li & Hoiem 2016)",
                       footprint_kind="dense", composable=True)]
