"""ProgPrompt: the prompt in front of task k's input is [P_k; P_{k-1}; …; P_1], only P_k trains.

Each finished prompt is kept as the tensor it ended as (its MLP folded in) and never changes again. Evaluating task
j uses [P_j; …; P_1], its own prompt and those of the tasks before it, so it needs the task's identity; a task not
trained yet is evaluated without a prompt, as the frozen model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from clbench_plugins._shared.soft_prompt import PromptMethod, initial_prompt
from torch import Tensor, nn

from clbench.method import Phase
from clbench.model import CLModel

from .config import ProgPromptConfig


class ResidualMLP(nn.Module):
    """prompt + LayerNorm(W₂ ReLU(W₁ prompt)): the paper's residual reparameterisation of one task's prompt."""

    def __init__(self, dim: int, bottleneck: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, bottleneck), nn.ReLU(), nn.Linear(bottleneck, dim), nn.LayerNorm(dim))

    def forward(self, prompt: Tensor) -> Tensor:
        return prompt + self.mlp(prompt)


class ProgPrompt(PromptMethod):
    config: ProgPromptConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.frozen: list[Tensor] = []  # P_1, P_2, … of the finished tasks, as they ended
        self.prompt: nn.Parameter | None = None  # the task's P_k while it trains
        self.mlp: ResidualMLP | None = None
        self._use: int | None = None  # evaluation: how many finished prompts to put in front (None: training)

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        c = self.config
        start = initial_prompt(self.lm, (c.length, self.lm.embedding_dim), c.init, self.ctx.generator(index))
        self.prompt = nn.Parameter(start)
        if c.reparam == "residual-mlp":  # (its initial weights drawn from torch's RNG, seeded per task by the runner)
            self.mlp = ResidualMLP(self.lm.embedding_dim, c.bottleneck).to(start.device)

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        assert self.prompt is not None
        return [self.prompt, *(self.mlp.parameters() if self.mlp is not None else [])]

    def current(self) -> Tensor:
        assert self.prompt is not None
        return self.mlp(self.prompt) if self.mlp is not None else self.prompt

    def soft_prompt(self, input_ids: Tensor, attention: Tensor) -> Tensor | None:
        if self._use is None:  # training (or scoring) the current task: its prompt, then every finished one
            parts = [self.current(), *reversed(self.frozen)]
        else:
            parts = list(reversed(self.frozen[: self._use]))
        if not parts:
            return None
        return torch.cat(parts).unsqueeze(0).expand(input_ids.shape[0], -1, -1)

    def after_task(self, task: str, index: int) -> None:
        with torch.no_grad():
            self.frozen.append(self.current().detach().clone())
        self.prompt, self.mlp = None, None

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        """Task j with [P_j; …; P_1]; a task not trained yet without a prompt; inside a task (the memory plan), the
        task being trained as in training."""
        done = self.ctx.order[: len(self.frozen)]
        if self.prompt is not None and task == self.ctx.order[len(self.frozen)]:
            yield
            return
        self._use = done.index(task) + 1 if task in done else 0
        try:
            yield
        finally:
            self._use = None

    def report(self) -> dict[str, Any]:
        return {"protocol": "task identity at test time: task j is evaluated with the prompts of tasks 1..j"}

    def state_dict(self) -> dict[str, Any]:
        return {"frozen": [p.cpu() for p in self.frozen]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.frozen = [p.to(self.ctx.device) for p in state.get("frozen", [])]
