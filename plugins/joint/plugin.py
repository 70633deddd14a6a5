from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import JointConfig
from .method import Joint


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("joint", Joint, JointConfig, "multi-task training on all tasks seen so far (upper bound)",
                       footprint_kind="dense", tags=frozenset({"upper-bound"}))]
