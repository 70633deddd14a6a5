"""``--methods a+b``: one method made of several, each hook going to every part in order."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from clbench.data import Batch
from clbench.footprints import TaskFootprint
from clbench.method import CellContext, MaskPlan, Method, Phase

if TYPE_CHECKING:
    from clbench.model import CLModel


class CompositeMethod(Method):
    """``a+b``: every hook goes to every part in order; loss terms are merged with a ``part.`` prefix.

    The first part owns the structure (its footprint, parameters, phases, data); later parts add
    loss terms and gradient edits on the same model. Shared structure is found through ``ctx.stash``.
    """

    def __init__(self, parts: Sequence[tuple[str, Method]], ctx: CellContext) -> None:
        super().__init__(None, ctx)
        self.parts = list(parts)
        self.primary = self.parts[0][1]

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        for _, m in self.parts:
            m.setup(model)

    def mask_plan(self) -> MaskPlan | None:
        return self.primary.mask_plan()  # the first part owns the structure

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        seen: dict[int, nn.Parameter] = {}
        for _, m in self.parts:
            for p in m.parameters(model, phase):
                seen.setdefault(id(p), p)
        return list(seen.values())

    def sparse_coordinates(self, phase: Phase) -> list[tuple[nn.Parameter, Tensor]]:
        return self.primary.sparse_coordinates(phase)

    def train_tasks(self, index: int) -> list[str]:
        return self.primary.train_tasks(index)

    def phases(self, task: str, index: int) -> list[Phase]:
        return self.primary.phases(task, index)

    def before_task(self, task: str, index: int) -> None:
        for _, m in self.parts:
            m.before_task(task, index)

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        for _, m in self.parts:
            m.before_phase(phase, task, index)

    @property
    def needs_logits(self) -> bool:  # type: ignore[override]
        return any(m.needs_logits for _, m in self.parts)

    @property
    def value_only_terms(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset(f"{name}.{k}" for name, m in self.parts for k in m.value_only_terms)

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        terms: dict[str, Tensor] = {}
        for name, m in self.parts:
            for k, v in m.loss_terms(batch, logits).items():
                terms[f"{name}.{k}"] = v
        return terms

    def after_backward(self) -> None:
        for _, m in self.parts:
            m.after_backward()

    def after_step(self) -> None:
        for _, m in self.parts:
            m.after_step()

    def after_epoch(self, phase: Phase, epoch: int) -> None:
        for _, m in self.parts:
            m.after_epoch(phase, epoch)

    def after_task(self, task: str, index: int) -> None:
        for _, m in self.parts:
            m.after_task(task, index)

    def footprint(self, task: str, index: int) -> TaskFootprint:
        return self.primary.footprint(task, index)

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for _, m in self.parts:
                stack.enter_context(m.evaluating(task))
            yield

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, m in self.parts:
            out.update({f"{name}.{k}": v for k, v in m.report().items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {name: m.state_dict() for name, m in self.parts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, m in self.parts:
            m.load_state_dict(state.get(name, {}))
