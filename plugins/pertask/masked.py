"""Per-task sparse fine-tuning: Table 5's protocol (Expander-EWC paper §6.2) as a method.

Before every task the masked weight matrices go back to the base model's values and a fresh mask is
drawn (expander or uniform, as :class:`~clbench_plugins._shared.masked.method.ExpanderEWC` draws it);
after the task its weights — the masked coordinates' values and its head — are kept, and evaluating a
task swaps them in. So a[i][j] is task j fine-tuned alone from the base (the base model for a task not
trained yet), and the last row of the accuracy matrix is Table 5's row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from clbench_plugins._shared.masked.method import ExpanderEWC
from torch import Tensor

from clbench.model import CLModel

from .config import PerTaskMaskConfig

# One task's weights: masked matrices as (flat indices, values), every other trained parameter in full.
TaskWeights = dict[str, tuple[Tensor, Tensor] | Tensor]


class PerTaskMasked(ExpanderEWC):
    config: PerTaskMaskConfig
    anchor_at_masks = False  # a task starts from the base weights, not from θ_ref

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.base = {n: p.detach().clone() for n, p in self.penalized().items()}  # θ⁽⁰⁾, heads included
        self.saved: list[TaskWeights] = []  # per finished task, in run order

    def before_task(self, task: str, index: int) -> None:
        self.load_weights({})  # every task starts from the base model
        super().before_task(task, index)

    def after_task(self, task: str, index: int) -> None:
        super().after_task(task, index)
        self.saved.append(self.task_weights())

    def task_weights(self) -> TaskWeights:
        out: TaskWeights = {}
        for n, p in self.penalized().items():
            if n in self.masks:
                idx = self.masks[n].flatten().nonzero().flatten()
                out[n] = (idx.cpu(), p.detach().flatten()[idx].cpu())
            elif not torch.equal(p, self.base[n]):  # a head this task trained
                out[n] = p.detach().cpu().clone()
        return out

    @torch.no_grad()
    def load_weights(self, weights: TaskWeights) -> None:
        """Base values everywhere, then ``weights`` on top."""
        for n, p in self.penalized().items():
            p.copy_(self.base[n])
            w = weights.get(n)
            if isinstance(w, tuple):
                p.view(-1)[w[0].to(p.device)] = w[1].to(p.device, p.dtype)
            elif w is not None:
                p.copy_(w)

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        """Task j is scored with its own weights; a task not trained yet with the base model."""
        done = self.ctx.order[: len(self.saved)]
        now = {n: p.detach().clone() for n, p in self.penalized().items()}
        self.load_weights(self.saved[done.index(task)] if task in done else {})
        try:
            yield
        finally:
            with torch.no_grad():
                for n, p in self.penalized().items():
                    p.copy_(now[n])

    def report(self) -> dict[str, Any]:
        return {**super().report(), "protocol": "per-task: each task from the base weights with its own mask"}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "saved": self.saved}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.saved = list(state.get("saved", []))
