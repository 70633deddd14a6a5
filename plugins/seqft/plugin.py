from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import SeqFTConfig
from .method import SeqFT

# Quick learning rates (and strengths): chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {f"quick/{s}": {"train.lr": 0.0125}
                 for s in ("permuted-digits", "permuted-digits-til", "split-digits", "split-digits-cil")}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("seqft", SeqFT, SeqFTConfig, "sequential fine-tuning of all weights (lower bound)",
                       footprint_kind="dense", presets=QUICK_PRESETS)]
