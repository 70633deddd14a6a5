"""SM: a full-capacity model for each task, trained from the initial weights (LPS Table II's reference column).

"For reference purposes, we also include the accuracy attained when training a full-capacity (non-parsimonious)
single model separately for each task (SM)" (LPS §V-B). Before every task every trained weight goes back to the
cell's initial values; after it the task's weights are kept, and evaluating a task swaps them in (a task not yet
trained is scored by the initial model). An oracle: it needs the task identity at test time and T models' memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from clbench.method import Method
from clbench.model import CLModel


class SM(Method):
    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.initial = {n: p.detach().clone() for n, p in self._trained().items()}  # θ⁽⁰⁾ of every trained weight
        self.saved: list[dict[str, Tensor]] = []  # per finished task, in run order (on the host)

    def _trained(self) -> dict[str, nn.Parameter]:
        assert self.model is not None
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def _load(self, weights: dict[str, Tensor]) -> None:
        for n, p in self._trained().items():
            p.copy_(weights[n] if n in weights else self.initial[n])

    def before_task(self, task: str, index: int) -> None:
        self._load({})  # a separate model: every task starts from the initial weights
        super().before_task(task, index)

    def after_task(self, task: str, index: int) -> None:
        super().after_task(task, index)
        self.saved.append({n: p.detach().cpu().clone() for n, p in self._trained().items()})

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        """Task j with its own model; a task not trained yet with the initial one."""
        done = self.ctx.order[: len(self.saved)]
        now = {n: p.detach().clone() for n, p in self._trained().items()}
        self._load(self.saved[done.index(task)] if task in done else {})
        try:
            yield
        finally:
            self._load(now)

    def report(self) -> dict[str, Any]:
        return {"models": len(self.saved)}

    def state_dict(self) -> dict[str, Any]:
        return {"saved": self.saved}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.saved = list(state.get("saved", []))
