"""The base of every LoRA-family method: where the adapter lives and what happens to it between tasks.

A subclass picks two things — whether each task starts a fresh adapter, and whether a finished
adapter is merged into the base weights — and may add loss terms. The adapter itself is shared
through ``ctx.stash`` (see :mod:`.adapters`), so ``olora+nlora`` penalise one adapter.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from clbench.footprints import TaskFootprint
from clbench.method import Method, Phase
from clbench.model import CLModel

from .adapters import Adapters, adapters_for
from .config import LoRAConfig


def task_value(default: float, per_task: dict[str, float], task: str) -> float:
    """A per-task override (the scripts' λ per task for the 15-task orders) or the default."""
    return float(per_task.get(task, default))


class LoRAMethod(Method):
    """A LoRA on the model's ``lora_targets``; only the live adapter trains."""

    needs_logits = False  # the LoRA family's terms read the adapters, never the logits
    fresh_per_task = True  # a new adapter for every task (False: one adapter through the sequence)
    merge_finished = True  # fold a finished task's adapter into W (False: keep it live / per task)

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        c = self.config
        self.adapters: Adapters = adapters_for(self.ctx, model, LoRAConfig(c.rank, c.alpha, c.dropout))

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        return self.adapters.parameters()

    def phases(self, task: str, index: int) -> list[Phase]:
        """The cell's training settings, with the scripts' per-task learning rate / epochs where given."""
        c = self.config
        lr = c.lr_per_task.get(task, self.ctx.train.lr)
        epochs = c.epochs_per_task.get(task, self.ctx.train.epochs)
        return [Phase.from_train(self.ctx.train, lr=float(lr), epochs=int(epochs))]

    def before_task(self, task: str, index: int) -> None:
        self.adapters.start_task(index, fresh=self.fresh_per_task or index == 0)

    def after_task(self, task: str, index: int) -> None:
        self.adapters.finish_task(index, merge=self.merge_finished)

    def footprint(self, task: str, index: int) -> TaskFootprint:
        return self.adapters.footprint(index)

    def report(self) -> dict[str, Any]:
        """Per merge into a low-precision base: the realised update's relative error and the layers kept unmerged
        (see :mod:`.adapters`); nothing for fp32 bases."""
        merges = self.adapters.merges
        return {"merges": list(merges)} if merges else {}

    def state_dict(self) -> dict[str, Any]:
        return {"adapters": self.adapters.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "adapters" in state:
            self.adapters.load_state_dict(state["adapters"])
