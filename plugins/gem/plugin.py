from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import AGEMConfig, GEMConfig
from .method import AGEM, GEM

# paper-lps (LPS Table II's GEM column): GEM's own permuted-MNIST memory (256 a task) and margin (0.5)
GEM_PRESETS = {"paper-lps/permuted-mnist": {"memory_per_task": 256, "margin": 0.5}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("gem", GEM, GEMConfig, "gradient episodic memory: QP projection per past task (Lopez-Paz 2017)",
                   footprint_kind="dense", presets=GEM_PRESETS),
        MethodSpec("agem", AGEM, AGEMConfig, "averaged GEM: one projection against a memory batch (Chaudhry 2019)",
                   footprint_kind="dense"),
    ]
