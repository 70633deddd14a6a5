"""PerTaskFT: every task fine-tunes the whole model from the base weights, and evaluating a task swaps its own
weights in. The N-LoRA paper's Table 1 row "PerTaskFT" ("trains a separate model for each task", §4.2 (i)): a
reference that needs the task's identity at test time, not a continual learner.

The model holds the base weights before the first task and the last task's weights after each one; every finished
task's weights are kept in host memory (a model's worth a task) and loaded for that task's evaluation only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from clbench.method import Method
from clbench.model import CLModel

Weights = dict[str, Tensor]


class PerTaskFT(Method):
    needs_logits = False  # no loss terms

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.base: Weights = _host(self._trained())  # θ⁽⁰⁾
        self.saved: list[Weights] = []  # per finished task, in run order
        self._between_tasks = True  # the model holds the base or the last task's weights (not a task's middle)

    def _trained(self) -> dict[str, nn.Parameter]:
        assert self.model is not None
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def _load(self, weights: Weights) -> None:
        for n, p in self._trained().items():
            p.copy_(weights[n])

    def before_task(self, task: str, index: int) -> None:
        self._load(self.base)  # every task starts from the base model
        self._between_tasks = False
        super().before_task(task, index)

    def after_task(self, task: str, index: int) -> None:
        self.saved.append(_host(self._trained()))
        self._between_tasks = True

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        """Task j is scored with its own weights; a task not trained yet with the base model."""
        done = self.ctx.order[: len(self.saved)]
        # between tasks the weights to put back are kept already; inside a task (the memory plan) a copy
        now = None if self._between_tasks else _host(self._trained())
        self._load(self.saved[done.index(task)] if task in done else self.base)
        try:
            yield
        finally:
            self._load(now if now is not None else self.saved[-1] if self.saved else self.base)

    def report(self) -> dict[str, Any]:
        return {"protocol": "per-task: each task fine-tuned from the base weights, evaluated with its own"}

    def state_dict(self) -> dict[str, Any]:
        return {"saved": self.saved}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.saved = list(state.get("saved", []))


def _host(params: dict[str, nn.Parameter]) -> Weights:
    return {n: p.detach().to("cpu", copy=True) for n, p in params.items()}
