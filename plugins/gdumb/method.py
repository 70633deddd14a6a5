"""GDumb: a greedy class-balanced memory, and a model retrained from its initial weights on that memory alone."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from clbench.data import Batch, Split, batches
from clbench.method import Method, Phase
from clbench.model import CLModel

from .config import GDumbConfig


def greedy_balanced(memory: list[tuple[int, int, int]], offer: tuple[int, int, int], size: int,
                    generator: torch.Generator) -> None:
    """GDumb's sampler (Algorithm 1) on ``memory``, a list of (class, task, example index): an example joins while
    there is room; when full, one whose class holds fewer than the largest class does replaces a random example of
    that largest class; else it is left out."""
    if len(memory) < size:
        memory.append(offer)
        return
    counts: dict[int, int] = {}
    for c, _, _ in memory:
        counts[c] = counts.get(c, 0) + 1
    largest = max(counts.values())
    if counts.get(offer[0], 0) >= largest:
        return
    biggest = sorted(c for c, n in counts.items() if n == largest)[0]
    slots = [i for i, (c, _, _) in enumerate(memory) if c == biggest]
    memory[slots[int(torch.randint(len(slots), (1,), generator=generator))]] = offer


class GDumb(Method):
    """The stream's tasks train nothing (no phase); after each task its examples are offered to the memory, the model
    goes back to its initial weights and trains ``epochs`` epochs on the memory, and is then evaluated. The memory
    keys a class by (task, label): the label's meaning in a task-incremental stream is its task's."""

    needs_logits = False
    config: GDumbConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.initial = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.memory: list[tuple[int, int, int]] = []  # (class key, task index, example index)

    def phases(self, task: str, index: int) -> list[Phase]:
        return []  # GDumb learns from its memory only

    def after_task(self, task: str, index: int) -> None:
        data = self.ctx.data(task).train
        g = self.ctx.generator(index, 2020)
        shared = self.ctx.stream.scenario != "task-incremental"  # one label space: a label is a class everywhere
        for i in torch.randperm(len(data), generator=g).tolist():
            label = int(data.y[i])
            key = label if shared else index * 100_000 + label
            greedy_balanced(self.memory, (key, index, i), self.config.memory_size, g)
        self._retrain(index)

    def _retrain(self, index: int) -> None:
        assert self.model is not None
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.copy_(self.initial[n])
        params = [p for p in self.model.parameters() if p.requires_grad]
        opt = Phase.from_train(self.ctx.train, "memory").torch_optimizer(params, self.ctx.train.fused)
        splits = self._memory_splits()
        self.model.train()
        for epoch in range(self.config.epochs):
            pool = [b for t, split in splits.items()
                    for b in batches(split, self.ctx.train.batch_size, self.ctx.order[t],
                                     self.ctx.generator(index, 2021, epoch, t))]
            for i in torch.randperm(len(pool), generator=self.ctx.generator(index, 2022, epoch)).tolist():
                batch: Batch = pool[i].to(self.ctx.device)
                opt.zero_grad(set_to_none=True)
                self.model.task_loss(self.model(batch.x, batch.task), batch.y).backward()
                opt.step()

    def _memory_splits(self) -> dict[int, Split]:
        """The memory as one split a task (its examples' inputs and labels), for batching per task's head."""
        out: dict[int, Split] = {}
        for t in sorted({t for _, t, _ in self.memory}):
            rows = torch.tensor(sorted(i for _, u, i in self.memory if u == t))
            out[t] = self.ctx.data(self.ctx.order[t]).train.subset(rows)
        return out

    def report(self) -> dict[str, Any]:
        return {"memory_size": self.config.memory_size, "memory_per_task":
                [sum(1 for _, t, _ in self.memory if t == i) for i in range(len(self.ctx.order))]}

    def state_dict(self) -> dict[str, Any]:
        return {"memory": torch.tensor(self.memory, dtype=torch.long).reshape(-1, 3)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        memory: Tensor | None = state.get("memory")
        self.memory = [tuple(row) for row in memory.tolist()] if memory is not None else []  # type: ignore[misc]


