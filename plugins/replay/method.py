"""Replay: a reservoir buffer of (task, example) references into the stream; one replayed batch per step.

The buffer stores indices, not copies of inputs, so it works for any modality (tensors or texts).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import Method
from clbench.model import CLModel

from .config import ReplayConfig


class Replay(Method):
    config: ReplayConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if self.config.buffer_size < 1:
            raise ConfigError(f"replay.buffer_size={self.config.buffer_size} must be at least 1")
        self.buf_task = torch.empty(0, dtype=torch.long)  # index into ctx.order
        self.buf_index = torch.empty(0, dtype=torch.long)
        self.seen = 0

    def loss_terms(self, batch: Batch, logits: Tensor) -> dict[str, Tensor]:
        if len(self.buf_task) == 0:
            return {}
        assert self.model is not None
        k = self.config.replay_batch_size or len(batch)
        dist = self.ctx.dist
        if dist.active:  # the ranks share one RNG state: each replays its own slice of one draw for all of them
            pick = torch.randint(len(self.buf_task), (k * dist.world_size,))[dist.rank * k : (dist.rank + 1) * k]
        else:
            pick = torch.randint(len(self.buf_task), (k,))
        total = logits.new_zeros(())
        for t in torch.unique(self.buf_task[pick]).tolist():
            rows = self.buf_index[pick][self.buf_task[pick] == t]
            name = self.ctx.order[t]
            sub = self.ctx.data(name).train.subset(rows)
            replay = Batch(sub.x, sub.y, name).to(self.ctx.device)
            out = self.model(replay.x, name)
            total = total + self.model.task_loss(out, replay.y) * (len(rows) / k)
        return {"replay": self.config.weight * total}

    def after_task(self, task: str, index: int) -> None:
        """Reservoir-sample the finished task's examples into the buffer (stream order shuffled)."""
        n = len(self.ctx.data(task).train)
        g = self.ctx.generator(index, 7777)
        tasks, idx = self.buf_task.tolist(), self.buf_index.tolist()
        for i in torch.randperm(n, generator=g).tolist():
            self.seen += 1
            if len(tasks) < self.config.buffer_size:
                tasks.append(index)
                idx.append(i)
            else:
                j = int(torch.randint(self.seen, (1,), generator=g))
                if j < self.config.buffer_size:
                    tasks[j], idx[j] = index, i
        self.buf_task = torch.tensor(tasks, dtype=torch.long)
        self.buf_index = torch.tensor(idx, dtype=torch.long)

    def report(self) -> dict[str, Any]:
        return {"buffer_per_task": torch.bincount(self.buf_task, minlength=len(self.ctx.order)).tolist()}

    def state_dict(self) -> dict[str, Any]:
        return {"task": self.buf_task, "index": self.buf_index, "seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buf_task = state.get("task", self.buf_task)
        self.buf_index = state.get("index", self.buf_index)
        self.seen = int(state.get("seen", 0))
