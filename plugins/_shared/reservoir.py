"""Code built-in plugins share (not a plugin: nothing here registers); a reservoir of past examples."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class Reservoir:
    """Up to ``size`` examples, each kept with probability size/seen: inputs, labels, task index and (for DER) the
    logits the model gave it when it was stored. Tensors on the host; ``draw`` returns a random sample."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.seen = 0
        self.x: Tensor | None = None
        self.y = torch.empty(0, dtype=torch.long)
        self.task = torch.empty(0, dtype=torch.long)
        self.logits: Tensor | None = None

    def __len__(self) -> int:
        return len(self.y)

    def add(self, x: Tensor, y: Tensor, task: int, generator: torch.Generator, logits: Tensor | None = None) -> None:
        """Offer every example of a batch: the first ``size`` are kept, then each replaces a random slot with
        probability size/seen."""
        x, y = x.detach().cpu(), y.detach().cpu()
        logits = logits.detach().float().cpu() if logits is not None else None
        for i in range(len(y)):
            self.seen += 1
            if len(self) < self.size:
                slot = len(self)
                self._grow(x[i], logits[i] if logits is not None else None)
            else:
                slot = int(torch.randint(self.seen, (1,), generator=generator))
                if slot >= self.size:
                    continue
            assert self.x is not None
            self.x[slot], self.y[slot], self.task[slot] = x[i], y[i], task
            if logits is not None and self.logits is not None:
                self.logits[slot] = logits[i]

    def _grow(self, x: Tensor, logits: Tensor | None) -> None:
        self.x = x.unsqueeze(0).clone() if self.x is None else torch.cat([self.x, x.unsqueeze(0)])
        self.y = torch.cat([self.y, torch.zeros(1, dtype=torch.long)])
        self.task = torch.cat([self.task, torch.zeros(1, dtype=torch.long)])
        if logits is not None:
            self.logits = logits.unsqueeze(0).clone() if self.logits is None else torch.cat(
                [self.logits, logits.unsqueeze(0)])

    def draw(self, k: int) -> Tensor:
        """k random slots (with replacement when the buffer holds fewer), from torch's global generator: the cell's,
        seeded per task (the runner's seed_torch)."""
        return torch.randint(len(self), (k,)) if k > len(self) else torch.randperm(len(self))[:k]

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "x": self.x, "y": self.y, "task": self.task, "logits": self.logits}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = int(state.get("seen", 0))
        self.x, self.y, self.task, self.logits = state.get("x"), state["y"], state["task"], state.get("logits")
