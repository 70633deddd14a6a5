"""DER and DER++: replay of the logits (and, for DER++, the labels) of a reservoir of past examples."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from clbench_plugins._shared.reservoir import Reservoir
from torch import Tensor

from clbench.data import Batch, shown_labels
from clbench.errors import ConfigError
from clbench.method import Method
from clbench.model import MASKED, CLModel

from .config import DERConfig


class DER(Method):
    """Buzzega et al. 2020. Examples enter the buffer as they are trained on, with their logits then: on a
    class-incremental stream under the masked head every class's (``stored_logits="all"``, the default), or the seen
    classes' only (a logit masked for a class not seen yet, :data:`~clbench.model.MASKED`, is left out of the match);
    under the full head (``train.head="full"``) the logits are unmasked as they are computed. One replayed batch
    gives α·MSE of the logits (the classes seen now); DER++ adds β·CE of the labels of a second one. Tensor inputs
    (images, vectors)."""

    config: DERConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if self.ctx.stream is not None and self.ctx.stream.modality == "text":
            raise ConfigError("der/derpp store the inputs of past examples: they need tensor inputs (images, vectors), "
                              f"and stream {self.ctx.stream.name!r} holds texts")
        self.buffer = Reservoir(self.config.buffer_size)
        # every task's logits padded to the widest head (MASKED beyond a head's labels): one tensor of them
        self.width = max((t.num_classes for t in self.ctx.stream.tasks), default=0) if self.ctx.stream else 0
        self._generator: torch.Generator | None = None

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self._generator = self.ctx.generator(index, 3131)  # the buffer's admissions: the same path after a resume
        self._index = index
        stream = self.ctx.stream
        # the labels the model shows now: the seen ones under a masked class-incremental head, else None (every one)
        self._labels = shown_labels(stream, self.ctx.order[:index + 1], self.ctx.train.head) if stream else None

    @contextlib.contextmanager
    def _every_label(self) -> Iterator[None]:
        """The model with no label masked, then back to the labels seen so far."""
        assert self.model is not None
        self.model.see_labels(None)
        try:
            yield
        finally:
            self.model.see_labels(self._labels)

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        assert self.model is not None and logits is not None
        terms: dict[str, Tensor] = {}
        k = self.config.replay_batch_size or len(batch)
        if len(self.buffer) and self.config.alpha > 0:
            pick = self.buffer.draw(k)
            out, stored = self._replay(pick), self.buffer.logits[pick].to(logits.device)  # type: ignore[index]
            kept = (stored != MASKED) & (out.detach() != MASKED)  # the logits both had: unmasked then and now
            terms["der"] = self.config.alpha * ((out - stored) ** 2 * kept).sum() / kept.sum().clamp_min(1)
        if len(self.buffer) and self.config.beta > 0:
            pick = self.buffer.draw(k)
            terms["der++"] = self.config.beta * F.cross_entropy(self._replay(pick), self.buffer.y[pick].to(logits.device))
        assert self._generator is not None
        stored = logits.detach()
        # a second forward without the mask, in training mode as the batch's own (batch norm's running statistics
        # see the batch twice)
        if self._labels is not None and self.config.stored_logits == "all":
            with torch.no_grad(), self._every_label():
                stored = self.model(batch.x, batch.task)
        self.buffer.add(batch.x, batch.y, self._index, self._generator,
                        F.pad(stored, (0, self.width - stored.shape[1]), value=MASKED))
        return terms

    def after_task(self, task: str, index: int) -> None:
        if self.config.logits_at != "task_end" or self.buffer.logits is None:
            return
        assert self.model is not None and self.buffer.x is not None
        slots = torch.nonzero(self.buffer.task == index).flatten()
        was = self.model.training
        self.model.eval()
        every = self._every_label() if self._labels is not None and self.config.stored_logits == "all" \
            else contextlib.nullcontext()
        with torch.no_grad(), every:
            for rows in slots.split(self.ctx.train.eval_batch_size):
                out = self.model(self.buffer.x[rows].to(self.ctx.device), task).float().cpu()
                self.buffer.logits[rows] = F.pad(out, (0, self.width - out.shape[1]), value=MASKED)
        self.model.train(was)

    def _replay(self, pick: Tensor) -> Tensor:
        """The model's logits for the buffer slots ``pick`` (each through its own task's head)."""
        assert self.model is not None and self.buffer.x is not None
        out = []
        for t in torch.unique(self.buffer.task[pick]).tolist():
            rows = pick[self.buffer.task[pick] == t]
            out.append((rows, self.model(self.buffer.x[rows].to(self.ctx.device), self.ctx.order[t])))
        width = self.width
        logits = torch.full((len(pick), width), MASKED, device=self.ctx.device)
        place = {int(slot): i for i, slot in enumerate(pick.tolist())}
        for rows, o in out:
            at = torch.tensor([place[int(r)] for r in rows.tolist()], device=self.ctx.device)
            logits = logits.index_copy(0, at, F.pad(o, (0, width - o.shape[1]), value=MASKED))
        return logits

    def report(self) -> dict[str, Any]:
        return {"buffer_size": self.config.buffer_size, "buffer_per_task":
                torch.bincount(self.buffer.task, minlength=len(self.ctx.order)).tolist()}

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])
