"""GEM and A-GEM: gradient projection against an episodic memory of the finished tasks.

The memory holds indices into each finished task's training split (the first ``memory_per_task`` of a shuffle), not
copies: any modality. The projection acts on the gradient of every trainable parameter, flattened (per-task heads
included: a past task's memory gradient touches its own head, as in GEM's code).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from scipy.optimize import nnls
from torch import Tensor, nn

from clbench.data import Batch
from clbench.method import Method, Phase
from clbench.model import CLModel

from .config import AGEMConfig, GEMConfig


def project_gem(g: np.ndarray, memory: np.ndarray, margin: float, ridge: float = 1e-3) -> np.ndarray:
    """The gradient GEM steps with: ``g`` if no row of ``memory`` (one past task's gradient each) has a negative dot
    product with it, else ``memoryᵀ v + g`` with v the dual QP's solution (eq. 11 of the paper, as its code solves
    it: min ½ vᵀ(M Mᵀ + ridge·I)v + (M g)ᵀ v subject to v ≥ margin). The ridge is the released code's (project2cone2's
    ``eps``, 1e-3; Avalanche's GEMPlugin adds the same): without it, nearly collinear memory gradients leave M Mᵀ
    (nearly) singular and v unbounded along its null direction. With v = margin + u that is the non-negative least
    squares min_{u ≥ 0} ‖A u − b‖², A = [Mᵀ; √ridge·I] and b = −[g + margin·Mᵀ1; √ridge·margin·1] (so that AᵀA is the
    ridged Gram matrix and Aᵀb the linear term), solved by scipy's NNLS (Lawson-Hanson, active set)."""
    if (memory @ g >= 0).all():
        return g
    t = memory.shape[0]
    root = np.sqrt(ridge)
    a = np.concatenate([memory.T, root * np.eye(t)])
    b = -np.concatenate([g + margin * memory.sum(axis=0), np.full(t, root * margin)])
    u, _ = nnls(a, b)
    return memory.T @ (u + margin) + g


def project_agem(g: Tensor, ref: Tensor) -> Tensor:
    """A-GEM's eq. 11: g if ⟨g, g_ref⟩ ≥ 0, else g − (⟨g, g_ref⟩ / ⟨g_ref, g_ref⟩) g_ref."""
    dot = torch.dot(g, ref)
    if dot >= 0:
        return g
    return g - (dot / torch.dot(ref, ref).clamp_min(1e-12)) * ref


class _Episodic(Method):
    """The memory (task index → example indices of its training split) and the gradient bookkeeping both share."""

    config: GEMConfig | AGEMConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.memory: dict[int, Tensor] = {}
        self._params: list[nn.Parameter] | None = None

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        super().before_phase(phase, task, index)
        self._params = None

    def trained(self) -> list[nn.Parameter]:
        if self._params is None:
            assert self.model is not None
            self._params = [p for p in self.model.parameters() if p.requires_grad]
        return self._params

    def flat_grad(self) -> Tensor:
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float()
                          for p in self.trained()])

    def set_grad(self, flat: Tensor) -> None:
        at = 0
        for p in self.trained():
            n = p.numel()
            p.grad = flat[at:at + n].view_as(p).to(p.dtype).clone()
            at += n

    def memory_grad(self, picks: dict[int, Tensor]) -> Tensor:
        """The gradient of the mean task loss over the memory examples ``picks`` (task index → their indices)."""
        assert self.model is not None
        for p in self.trained():
            p.grad = None
        total = sum(len(rows) for rows in picks.values())
        for t, rows in picks.items():
            name = self.ctx.order[t]
            sub = self.ctx.data(name).train.subset(rows)
            batch = Batch(sub.x, sub.y, name).to(self.ctx.device)
            loss = self.model.task_loss(self.model(batch.x, name), batch.y) * (len(rows) / total)
            loss.backward()
        return self.flat_grad()

    def after_backward(self) -> None:
        if self.memory:
            self.set_grad(self.project(self.flat_grad()))

    def project(self, g: Tensor) -> Tensor:
        """The gradient to step with instead of ``g`` (the batch's flattened gradient)."""
        raise NotImplementedError

    def after_task(self, task: str, index: int) -> None:
        n = len(self.ctx.data(task).train)
        order = torch.randperm(n, generator=self.ctx.generator(index, 4242))
        self.memory[index] = order[: self.config.memory_per_task].sort().values

    def report(self) -> dict[str, Any]:
        return {"memory_per_task": {self.ctx.order[t]: len(rows) for t, rows in self.memory.items()}}

    def state_dict(self) -> dict[str, Any]:
        return {"memory": {str(t): rows for t, rows in self.memory.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memory = {int(t): rows for t, rows in state.get("memory", {}).items()}


class GEM(_Episodic):
    """Lopez-Paz & Ranzato 2017: one constraint per finished task, on its whole memory's gradient."""

    needs_logits = False
    config: GEMConfig

    def project(self, g: Tensor) -> Tensor:
        rows = torch.stack([self.memory_grad({t: idx}) for t, idx in sorted(self.memory.items())])
        projected = project_gem(g.double().cpu().numpy(), rows.double().cpu().numpy(), self.config.margin,
                                self.config.ridge)
        return torch.from_numpy(projected).to(g.device, g.dtype)


class AGEM(_Episodic):
    """Chaudhry et al. 2019: one constraint, the gradient of a random memory batch over every finished task."""

    needs_logits = False
    config: AGEMConfig

    def project(self, g: Tensor) -> Tensor:
        tasks = torch.cat([torch.full((len(r),), t) for t, r in sorted(self.memory.items())])
        rows = torch.cat([r for _, r in sorted(self.memory.items())])
        pick = torch.randperm(len(rows))[: self.config.sample_size]  # the step's own RNG stream (seeded per task)
        picks = {int(t): rows[pick][tasks[pick] == t] for t in torch.unique(tasks[pick]).tolist()}
        return project_agem(g, self.memory_grad(picks))
