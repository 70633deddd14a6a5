"""SeqLoRA: one adapter, never reset, never merged; each task continues from the last (``seqlora``, and ``mtl``'s
base)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from clbench.config import setting
from clbench.footprints import LowRank, TaskFootprint

from .config import LoRAConfig
from .method import LoRAMethod


@dataclass(frozen=True)
class SeqLoRAConfig(LoRAConfig):
    """SeqLoRA (the N-LoRA/O-LoRA baseline): one LoRA trained through the whole sequence, no regulariser.

    ``footprint``: ``snapshot`` reports the adapter as it is after task i — N-LoRA §4.1 defines OO,
    AWOM, GSR and ACR on "A_i and ΔW_i = A_iB_i, both after training on the i-th task" — while
    ``increment`` reports what task i changed, ΔW_i − ΔW_{i−1} (rank ≤ 2r).
    """

    footprint: Literal["snapshot", "increment"] = setting("snapshot", help="N-LoRA paper §4.1 (metric definitions)")


class SeqLoRA(LoRAMethod):
    config: SeqLoRAConfig
    fresh_per_task = False
    merge_finished = False

    def footprint(self, task: str, index: int) -> TaskFootprint:
        now = self.adapters.footprint(index)
        if self.config.footprint == "snapshot" or index == 0:
            return now
        before = self.adapters.footprint(index - 1)
        return {n: LowRank(torch.cat([fp.A, before[n].A]), torch.cat([fp.B, -before[n].B], dim=1), fp.scale)
                for n, fp in now.items()}
