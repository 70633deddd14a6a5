"""ER-ACE: experience replay with the asymmetric cross-entropy on the incoming batch."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from clbench_plugins._shared.reservoir import Reservoir
from torch import Tensor

from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import Method
from clbench.model import MASKED, CLModel

from .config import ERACEConfig


def asymmetric_ce(logits: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy over the classes present in the batch alone (the others' logits masked): ACE's L_ce(x, y; c_in)."""
    present = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
    present[y.unique()] = True
    return F.cross_entropy(logits.masked_fill(~present, MASKED), y)


class ERACE(Method):
    """The runner's task loss is the full cross-entropy; the ``ace`` term replaces it by the asymmetric one (it adds
    ACE − CE), and ``replay`` adds the full cross-entropy of a replayed batch. Tensor inputs."""

    config: ERACEConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if self.ctx.stream is not None and self.ctx.stream.modality == "text":
            raise ConfigError("er-ace stores the inputs of past examples: it needs tensor inputs")
        self.buffer = Reservoir(self.config.buffer_size)
        self._generator: torch.Generator | None = None
        self._index = 0

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self._generator = self.ctx.generator(index, 3131)
        self._index = index

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        assert self.model is not None and logits is not None and self._generator is not None
        terms = {"ace": asymmetric_ce(logits, batch.y) - self.model.task_loss(logits, batch.y)}
        if len(self.buffer):
            assert self.buffer.x is not None
            pick = self.buffer.draw(self.config.replay_batch_size or len(batch))
            total = logits.new_zeros(())
            for t in torch.unique(self.buffer.task[pick]).tolist():
                rows = pick[self.buffer.task[pick] == t]
                out = self.model(self.buffer.x[rows].to(self.ctx.device), self.ctx.order[t])
                total = total + F.cross_entropy(out, self.buffer.y[rows].to(self.ctx.device)) * (len(rows) / len(pick))
            terms["replay"] = total
        self.buffer.add(batch.x, batch.y, self._index, self._generator)
        return terms

    def report(self) -> dict[str, Any]:
        return {"buffer_size": self.config.buffer_size}

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])
