"""Synaptic Intelligence: a per-weight importance from the path integral of the loss along training."""

from __future__ import annotations

from typing import Any

import torch
from clbench_plugins._shared.params import shared_trainable
from torch import Tensor, nn

from clbench.data import Batch
from clbench.method import Method, Phase
from clbench.model import CLModel

from .config import SIConfig


class SI(Method):
    """Zenke et al. 2017. The surrogate loss's value is a loss term; its gradient, 2c·Ω ⊙ (θ − θ̃), is added in
    :meth:`after_backward`, after the task loss's gradient g has been read for the path integral (the path integral
    follows the task loss alone: Zenke et al.'s "unregularised" gradient)."""

    needs_logits = False
    value_only_terms = frozenset({"si"})  # its gradient is added in after_backward, after the path integral reads g
    config: SIConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.omega: dict[str, Tensor] = {}  # Ω: the importance accumulated over finished tasks (eq. 5)
        self.anchor: dict[str, Tensor] = {}  # θ̃: the weights at the end of the previous task
        self._path: dict[str, Tensor] = {}  # ω of the task going on: Σ over steps of −g ⊙ Δθ
        self._start: dict[str, Tensor] = {}  # the weights where the task started (Δ of eq. 5)
        self._grad: dict[str, Tensor] = {}  # this step's task-loss gradient
        self._prev: dict[str, Tensor] = {}  # this step's weights before the optimizer moved them
        self._params: dict[str, nn.Parameter] | None = None

    def penalized(self) -> dict[str, nn.Parameter]:
        """The trainable parameters outside per-task heads (as EWC's), found once per phase."""
        if self._params is None:
            assert self.model is not None
            self._params = shared_trainable(self.model)
        return self._params

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self._params = None
        self._start = {n: p.detach().clone() for n, p in self.penalized().items()}
        self._path = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in self.penalized().items()}

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        super().before_phase(phase, task, index)
        self._params = None

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        if not self.omega:
            return {}
        with torch.no_grad():
            params = self.penalized()
            value = sum((self.omega[n] * (params[n] - self.anchor[n]) ** 2).sum() for n in self.omega)
        return {"si": self.config.c * value}

    @torch.no_grad()
    def after_backward(self) -> None:
        params = self.penalized()
        self._grad = {n: p.grad.detach().float().clone() for n, p in params.items() if p.grad is not None}
        self._prev = {n: p.detach().float().clone() for n, p in params.items()}
        for n in self.omega:  # the surrogate's gradient 2c·Ω ⊙ (θ − θ̃), after the path integral's g was read
            p = params[n]
            g = (2 * self.config.c) * self.omega[n] * (p.detach().float() - self.anchor[n])
            p.grad = g.to(p.dtype) if p.grad is None else p.grad.add_(g.to(p.grad.dtype))

    @torch.no_grad()
    def after_step(self) -> None:
        for n, p in self.penalized().items():  # ω += −g ⊙ Δθ (eq. 3, one step of the path integral)
            if n in self._grad:
                self._path[n] -= self._grad[n] * (p.detach().float() - self._prev[n])

    @torch.no_grad()
    def after_task(self, task: str, index: int) -> None:
        for n, p in self.penalized().items():  # eq. 5: Ω += ω / (Δ² + ξ), Δ the task's total change
            delta = p.detach().float() - self._start[n].float()
            add = self._path[n] / (delta ** 2 + self.config.xi)
            self.omega[n] = self.omega[n] + add if n in self.omega else add
        self.anchor = {n: p.detach().float().clone() for n, p in self.penalized().items()}
        self._path, self._grad, self._prev = {}, {}, {}

    def report(self) -> dict[str, Any]:
        if not self.omega:
            return {}
        total = sum(float(o.sum()) for o in self.omega.values())
        return {"omega_mean": total / sum(o.numel() for o in self.omega.values())}

    def state_dict(self) -> dict[str, Any]:
        return {"omega": dict(self.omega), "anchor": dict(self.anchor)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        dev = self.ctx.device
        self.omega = {n: t.to(dev) for n, t in state.get("omega", {}).items()}
        self.anchor = {n: t.to(dev) for n, t in state.get("anchor", {}).items()}
