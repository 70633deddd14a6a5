from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import SeqFTConfig
from .method import SeqFT


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("seqft", SeqFT, SeqFTConfig, "sequential fine-tuning of all weights (lower bound)",
                       footprint_kind="dense")]
