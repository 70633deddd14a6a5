from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ERACEConfig
from .method import ERACE

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("er-ace", ERACE, ERACEConfig, "experience replay, asymmetric cross-entropy (Caccia 2022)",
                       footprint_kind="dense", presets=tuned("er-ace", {}), data_parallel=False)]
