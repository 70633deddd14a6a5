"""SeqLoRA: one adapter, never reset, never merged; each task continues from the last."""

from __future__ import annotations

import torch
from clbench_plugins.lora.method import LoRAMethod

from clbench.footprints import LowRank, TaskFootprint

from .config import SeqLoRAConfig


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
