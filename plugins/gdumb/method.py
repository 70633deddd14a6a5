"""GDumb: a greedy class-balanced memory, and a model retrained from its initial weights on that memory alone."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from clbench.data import Batch, Split, batches, mixed_batches
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


def class_key(index: int, label: int) -> int:
    """The memory's class of label ``label`` in task ``index``: the pair (task, label), as one integer.

    Keyed by the label alone, a domain-incremental stream (every task the same labels) would have its first task
    fill a balanced memory, after which no later example holds a class smaller than the largest: every one would be
    turned away (``memory_per_task [200, 0, 0, 0, 0]`` on permuted-digits). Each task's examples of a label are a
    distribution of their own there (another permutation, another domain), so they are a class of their own, and
    the memory stays balanced over every task's classes. On a class-incremental stream a label belongs to one task:
    the pair is the label. On a task-incremental one a label means its task's class."""
    return index * 100_000 + label


class GDumb(Method):
    """The stream's tasks train nothing directly. When a task begins, its examples are offered to the memory (in a
    random order, :func:`greedy_balanced`, a class being a (task, label) pair: :func:`class_key`) and the model goes
    back to its initial weights; the task's one phase, ``memory``, then trains ``epochs`` epochs on the memory alone
    through the harness's step (the step budget, clipping, divergence check and data parallelism apply, its steps
    are counted). On a task-incremental stream a batch holds one task's examples (one head a task); on a stream of
    one shared head every epoch shuffles the whole memory, so a batch mixes the tasks as the paper's does (but for
    texts, whose model reads a batch's task for its instruction).

    Avalanche's GDumbPlugin (0.6) keys a class by its label alone and keeps a reservoir sample of each class's
    examples: later tasks' examples join their label's reservoir in proportion to their count, which on a
    domain-incremental stream also keeps every task, in expectation rather than by construction."""

    needs_logits = False
    config: GDumbConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.initial = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.memory: list[tuple[int, int, int]] = []  # (class key, task index, example index)

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)  # (the footprint: from the model as the last task's retraining left it)
        assert self.model is not None
        data = self.ctx.data(task).train
        g = self.ctx.generator(index, 2020)
        for i in torch.randperm(len(data), generator=g).tolist():
            greedy_balanced(self.memory, (class_key(index, int(data.y[i])), index, i), self.config.memory_size, g)
        with torch.no_grad():  # retrained from scratch (fp32 masters follow the weights: Masters.of)
            for n, p in self.model.named_parameters():
                p.copy_(self.initial[n])

    def phases(self, task: str, index: int) -> list[Phase]:
        base = Phase.from_train(self.ctx.train, "memory", epochs=self.config.epochs)
        return [replace(base, batches=lambda epoch: self._memory_batches(index, epoch))]

    def _memory_batches(self, index: int, epoch: int) -> Iterator[Batch]:
        """One epoch's batches of the memory, shuffled by a generator of (task, epoch): the same on every rank and
        after a resume."""
        size = self.ctx.train.batch_size
        splits = self._memory_splits()
        assert self.model is not None
        # one shared head (and inputs that are no texts, whose model reads a batch's task for its instruction): the
        # whole memory shuffled together
        if self.ctx.stream.scenario != "task-incremental" and self.model.info.modality != "text":
            # a batch mixes tasks; it carries the newest task's name, which a shared head does not read
            yield from mixed_batches(list(splits.values()), size, self.ctx.order[index],
                                     self.ctx.generator(index, 2021, epoch))
            return
        pool = [b for t, split in splits.items()
                for b in batches(split, size, self.ctx.order[t], self.ctx.generator(index, 2021, epoch, t))]
        for i in torch.randperm(len(pool), generator=self.ctx.generator(index, 2022, epoch)).tolist():
            yield pool[i]

    def _memory_splits(self) -> dict[int, Split]:
        """The memory as one split a task (its examples' inputs and labels)."""
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
