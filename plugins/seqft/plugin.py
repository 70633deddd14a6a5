from __future__ import annotations

from clbench_plugins._shared.table1_presets import FULL_FT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import SeqFTConfig
from .method import SeqFT

# Quick learning rates and strengths: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("seqft", SeqFT, SeqFTConfig, "sequential fine-tuning of all weights (lower bound)",
                       footprint_kind="dense", presets=tuned("seqft", FULL_FT), static_step=True)]
