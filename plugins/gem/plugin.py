from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import AGEMConfig, GEMConfig
from .method import AGEM, GEM

# paper-lps (LPS Table II's GEM column): GEM's own permuted-MNIST memory (256 a task) and margin (0.5). quick: a
# memory of 32 a task (not tuned: a budget), since every past task's memory is a forward and backward a step, and
# 256 a task on a quick stream's ~1,000-image tasks made a step cost ~70 training batches. Quick learning rates
# and margins: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).
GEM_PRESETS = {"paper-lps/permuted-mnist": {"memory_per_task": 256, "margin": 0.5}, "quick": {"memory_per_task": 32}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("gem", GEM, GEMConfig, "gradient episodic memory: QP projection per past task (Lopez-Paz 2017)",
                   footprint_kind="dense", presets=tuned("gem", GEM_PRESETS), tune={"margin": (0.05, 2.0)}),
        MethodSpec("agem", AGEM, AGEMConfig, "averaged GEM: one projection against a memory batch (Chaudhry 2019)",
                   footprint_kind="dense", presets=tuned("agem", {})),
    ]
