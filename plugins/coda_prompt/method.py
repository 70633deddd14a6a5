"""CODA-Prompt: attention-weighted prompt components as prefixes of a frozen ViT (:mod:`.config`).

Per block: K, A (pool, d) and P (pool, length, d). Task t trains components [t·n, (t+1)·n), n = pool / tasks, with
the earlier ones in the sum but detached; at test every component trained so far is used. Each task's new
components start as random normal vectors orthogonalised (classical Gram-Schmidt) against every earlier component
and each other, then normalised: the released code's ``gram_schmidt``; the first task's start orthogonal
(``nn.init.orthogonal_``), as there.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from clbench_plugins._shared.soft_prompt import PromptMethod, head_parameters
from torch import Tensor, nn

from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import Phase
from clbench.model import CLModel

from .config import CodaPromptConfig


def gram_schmidt(rows: Tensor, start: int, stop: int, generator: torch.Generator) -> Tensor:
    """``rows`` (pool, D) with rows [start, stop) redrawn N(0, 1), each minus its projections on every row before it
    (the earlier rows as they are, the new ones as orthogonalised), then made unit length."""
    out = rows.detach().clone()
    for k in range(start, stop):
        v = torch.randn(out.shape[1], generator=generator).to(out)
        w = out[:k]  # the released code subtracts v's projection on each earlier row in a loop: one product here
        out[k] = v - ((w @ v) / (w * w).sum(dim=1)) @ w
    out[start:stop] /= out[start:stop].norm(dim=1, keepdim=True)
    return out


def ortho_penalty(t: Tensor) -> Tensor:
    """mean((TTᵀ − I)²) of the rows of ``t`` (the paper's orthogonality regulariser)."""
    t = t.flatten(1)
    return ((t @ t.T - torch.eye(len(t), device=t.device, dtype=t.dtype)) ** 2).mean()


class CodaPrompt(PromptMethod):
    config: CodaPromptConfig
    capability = "prefix"

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        c, d = self.config, self.lm.embedding_dim
        tasks = len(self.ctx.order)
        if c.pool_size % tasks:
            raise ConfigError(f"pool_size={c.pool_size} is not a multiple of the stream's {tasks} tasks")
        if c.pool_size > d:
            raise ConfigError(f"pool_size={c.pool_size} components cannot be orthogonal in the model's {d} dimensions")
        if c.length % 2:
            raise ConfigError(f"length={c.length}: a component is half keys, half values (an even length)")
        for b in c.blocks:
            if not 0 <= b < self.lm.num_blocks:
                raise ConfigError(f"block {b} is not one of the model's {self.lm.num_blocks}")
        self.per_task = c.pool_size // tasks
        device = next(model.parameters()).device
        g = self.ctx.generator(0, 1)

        def orthogonal(*shape: int) -> nn.Parameter:
            t = torch.empty(shape[0], int(torch.tensor(shape[1:]).prod()))
            nn.init.orthogonal_(t, generator=g)
            return nn.Parameter(t.view(shape).to(device))

        n = len(c.blocks)
        self.K = nn.ParameterList(orthogonal(c.pool_size, d) for _ in range(n))
        self.A = nn.ParameterList(orthogonal(c.pool_size, d) for _ in range(n))
        self.P = nn.ParameterList(orthogonal(c.pool_size, c.length, d) for _ in range(n))
        self.task_index = 0
        self._ortho: Tensor | None = None

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        return [*self.K, *self.A, *self.P, *head_parameters(model)]

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self.task_index = index
        if index == 0:
            return
        start, stop = index * self.per_task, (index + 1) * self.per_task
        g = self.ctx.generator(index, 1)
        with torch.no_grad():
            for params in (self.K, self.A, self.P):
                for p in params:
                    p.copy_(gram_schmidt(p.flatten(1), start, stop, g).view_as(p))

    def _used(self, t: Tensor) -> Tensor:
        """The components up to the current task's; while training, the earlier tasks' detached."""
        start, stop = self.task_index * self.per_task, (self.task_index + 1) * self.per_task
        if not self.lm.training:
            return t[:stop]
        return torch.cat([t[:start].detach(), t[start:stop]])

    def prefix(self, images: Tensor) -> dict[int, Tensor]:
        q = self.lm.query_features(images)
        half = self.config.length // 2
        out, ortho = {}, []
        for i, b in enumerate(self.config.blocks):
            K, A, P = self._used(self.K[i]), self._used(self.A[i]), self._used(self.P[i])
            alpha = torch.einsum("bkd,kd->bk", F.normalize(q.unsqueeze(1) * A, dim=2), F.normalize(K, dim=1))
            prompt = torch.einsum("bk,kld->bld", alpha, P)  # (B, length, d)
            out[b] = torch.stack([prompt[:, :half], prompt[:, half:]], dim=1)
            if self.lm.training and self.config.ortho_mu:
                ortho += [ortho_penalty(K), ortho_penalty(A), ortho_penalty(P)]
        self._ortho = torch.stack(ortho).sum() if ortho else None
        return out

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        ortho, self._ortho = self._ortho, None
        return {} if ortho is None else {"ortho": self.config.ortho_mu * ortho}

    def report(self) -> dict[str, Any]:
        return {"protocol": "each input's prefix weighs every component trained so far by its query (task-agnostic)"}

    def state_dict(self) -> dict[str, Any]:
        return {name: [p.detach().cpu() for p in getattr(self, name)] for name in ("K", "A", "P")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for name in ("K", "A", "P"):
                for p, saved in zip(getattr(self, name), state.get(name, ()), strict=False):
                    p.copy_(saved)
