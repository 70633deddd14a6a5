"""Replay: a reservoir buffer of past examples; one replayed batch per step.

Filled when a task ends (``fill="task_end"``), the buffer stores (task, example) references into the stream, not
copies of inputs, so it works for any modality (tensors or texts). Filled during training (``fill="during"``, the
DER paper's ER) it keeps copies of the batches' tensors in a :class:`Reservoir`.
"""

from __future__ import annotations

from typing import Any

import torch
from clbench_plugins._shared.reservoir import Reservoir
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
        self.copies: Reservoir | None = None
        if self.config.fill == "during":
            if self.ctx.stream is not None and self.ctx.stream.modality == "text":
                raise ConfigError("replay.fill=during keeps copies of the batches' inputs: it needs tensor inputs "
                                  f"(images, vectors), and stream {self.ctx.stream.name!r} holds texts")
            if self.ctx.dist.active:  # each rank trains on other batches: their buffers would part
                raise ConfigError("replay.fill=during cannot run data-parallel: each rank's reservoir would hold its "
                                  "own batches")
            self.copies = Reservoir(self.config.buffer_size)

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self._index = index
        self._generator = self.ctx.generator(index, 7777)  # the reservoir's admissions: one path after a resume

    def loss_terms(self, batch: Batch, logits: Tensor) -> dict[str, Tensor]:
        assert self.model is not None
        if self.copies is not None:
            terms = self._replay_copies(batch, logits) if len(self.copies) else {}
            self.copies.add(batch.x, batch.y, self._index, self._generator)
            return terms
        if len(self.buf_task) == 0:
            return {}
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
        return {"replay": self._weighed(total, k, batch, logits)}

    def _replay_copies(self, batch: Batch, logits: Tensor) -> dict[str, Tensor]:
        """The replay loss of up to ``replay_batch_size`` copies drawn without replacement (fill="during")."""
        assert self.model is not None and self.copies is not None and self.copies.x is not None
        pick = self.copies.draw(min(self.config.replay_batch_size or len(batch), len(self.copies)))
        total = logits.new_zeros(())
        for t in torch.unique(self.copies.task[pick]).tolist():
            rows = pick[self.copies.task[pick] == t]
            out = self.model(self.copies.x[rows].to(self.ctx.device), self.ctx.order[t])
            total = total + self.model.task_loss(out, self.copies.y[rows].to(self.ctx.device)) * (len(rows) / len(pick))
        return {"replay": self._weighed(total, len(pick), batch, logits)}

    def _weighed(self, replayed: Tensor, k: int, batch: Batch, logits: Tensor) -> Tensor:
        """The term added to the task loss L: weight·R (loss="separate"), or what makes L + term the mean loss over
        the batch's n examples and the k replayed ones together (loss="combined"): k/(n+k)·(R − L)."""
        if self.config.loss == "separate":
            return self.config.weight * replayed
        assert self.model is not None
        n = len(batch)
        return k / (n + k) * (replayed - self.model.task_loss(logits, batch.y))

    def after_task(self, task: str, index: int) -> None:
        """Reservoir-sample the finished task's examples into the buffer (stream order shuffled; fill="task_end")."""
        if self.copies is not None:
            return
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
        tasks = self.copies.task if self.copies is not None else self.buf_task
        return {"buffer_per_task": torch.bincount(tasks, minlength=len(self.ctx.order)).tolist()}

    def state_dict(self) -> dict[str, Any]:
        if self.copies is not None:
            return {"copies": self.copies.state_dict()}
        return {"task": self.buf_task, "index": self.buf_index, "seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.copies is not None:
            if "copies" in state:
                self.copies.load_state_dict(state["copies"])
            return
        self.buf_task = state.get("task", self.buf_task)
        self.buf_index = state.get("index", self.buf_index)
        self.seen = int(state.get("seen", 0))
