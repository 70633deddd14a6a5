"""MTL: one adapter trained on the union of the tasks seen so far (step T = all tasks jointly)."""

from __future__ import annotations

from clbench_plugins._shared.lora.sequential import SeqLoRA

from clbench.footprints import TaskFootprint

from .config import MTLConfig


class MTL(SeqLoRA):
    config: MTLConfig  # type: ignore[assignment]

    def train_tasks(self, index: int) -> list[str]:
        return list(self.ctx.order[: index + 1])

    def footprint(self, task: str, index: int) -> TaskFootprint:
        return self.adapters.footprint(index)  # the adapter after step i, as SeqLoRA's default snapshot
