"""PerTask: one independent adapter per task; evaluation of a task swaps its own adapter in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from clbench_plugins._shared.lora.method import LoRAMethod

from .config import PerTaskConfig


class PerTask(LoRAMethod):
    config: PerTaskConfig
    merge_finished = False

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        """Task j is scored with its own adapter; a task not trained yet with the bare base model."""
        done = self.ctx.order[: len(self.adapters.history)]
        factors = self.adapters.history[done.index(task)] if task in done else None
        with self.adapters.using(factors):
            yield
