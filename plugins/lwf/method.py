"""LwF: distil the previous model's outputs (every earlier task's head) on the current inputs."""

from __future__ import annotations

import copy

import torch
from clbench_plugins._shared.losses import distillation
from torch import Tensor

from clbench.data import Batch
from clbench.method import Method
from clbench.model import CLModel

from .config import LwFConfig


class LwF(Method):
    config: LwFConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.teacher: CLModel | None = None
        self.old_tasks: list[str] = []

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        assert self.model is not None
        self.old_tasks = list(self.ctx.order[:index])
        if index > 0:
            # The model as it is now (after task index−1, or as resumed from its checkpoint).
            self.teacher = copy.deepcopy(self.model).eval().requires_grad_(False)

    def loss_terms(self, batch: Batch, logits: Tensor) -> dict[str, Tensor]:
        if self.teacher is None:
            return {}
        assert self.model is not None
        heads = self.old_tasks if self.model.info.multi_head else [batch.task]
        total = logits.new_zeros(())
        for old in heads:
            with torch.no_grad():
                target = self.teacher(batch.x, old)
            current = logits if old == batch.task else self.model(batch.x, old)
            total = total + distillation(current, target, self.config.temperature)
        return {"lwf": self.config.lambda_ * total}

    def after_task(self, task: str, index: int) -> None:
        self.teacher = None  # free the copy; the next task takes a fresh one
