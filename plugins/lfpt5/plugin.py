from __future__ import annotations

from clbench_plugins._shared.soft_prompt import SOFT_PROMPT
from clbench_plugins._shared.table1_presets import PROMPT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import LFPT5Config
from .method import LFPT5


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("lfpt5", LFPT5, LFPT5Config,
                       "LFPT5: one soft prompt trained as task solver and data generator; pseudo samples of earlier "
                       "tasks and a KL term keep them (task-agnostic)", footprint_kind="none",
                       requires=SOFT_PROMPT | {"generation"}, presets=tuned("lfpt5", PROMPT["lfpt5"]))]
