"""DualPrompt: a shared G-prompt and per-task E-prompts, both prefix-tuning a frozen ViT (:mod:`.config`).

Departures of the released code this does not follow, named: ``batchwise_prompt`` (a test batch's E-prompt chosen by
a majority vote over the batch; on by default for CIFAR-100 there, it tells the model the task when a test batch
holds one task), and the PyTorch port's prefix reshape without a permute (dualprompt-pytorch issue 8; here each
E-prompt's key and value vectors are its own).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from clbench_plugins._shared.soft_prompt import PromptMethod, head_parameters, initial_prompt
from torch import Tensor, nn

from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import Phase
from clbench.model import CLModel

from .config import DualPromptConfig


class DualPrompt(PromptMethod):
    config: DualPromptConfig
    capability = "prefix"

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        c, d = self.config, self.lm.embedding_dim
        for b in (*c.g_blocks, *c.e_blocks):
            if not 0 <= b < self.lm.num_blocks:
                raise ConfigError(f"block {b} is not one of the model's {self.lm.num_blocks}")
        tasks = len(self.ctx.order)
        if tasks > c.pool_size:
            raise ConfigError(f"{tasks} tasks but pool_size={c.pool_size}: one E-prompt a task")
        # U(−1, 1), the released code's prompt_init and prompt_key_init
        self.g = nn.Parameter(initial_prompt(self.lm, (len(c.g_blocks), 2, c.g_length, d), "uniform",
                                             self.ctx.generator(0, 1)))
        self.e = nn.Parameter(initial_prompt(self.lm, (c.pool_size, len(c.e_blocks), 2, c.e_length, d), "uniform",
                                             self.ctx.generator(0, 2)))
        self.keys = nn.Parameter(initial_prompt(self.lm, (c.pool_size, d), "uniform", self.ctx.generator(0, 3)))
        self.task_index = 0
        self._key_loss: Tensor | None = None

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        return [self.g, self.e, self.keys, *head_parameters(model)]

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self.task_index = index
        if index and self.config.copy_previous:
            with torch.no_grad():
                self.e[index].copy_(self.e[index - 1])

    def chosen(self, query: Tensor) -> Tensor:
        """``(B,)`` the E-prompt of each input: the training task's while training, else the nearest key's."""
        if self.lm.training:
            sim = F.normalize(query, dim=-1) @ F.normalize(self.keys[self.task_index], dim=-1)
            self._key_loss = (1 - sim).mean()
            return torch.full((len(query),), self.task_index, dtype=torch.long, device=query.device)
        return (F.normalize(query, dim=-1) @ F.normalize(self.keys, dim=-1).T).argmax(dim=1)

    def prefix(self, images: Tensor) -> dict[int, Tensor]:
        c = self.config
        B = len(images)
        out = {b: self.g[i].unsqueeze(0).expand(B, -1, -1, -1) for i, b in enumerate(c.g_blocks)}
        e = self.e[self.chosen(self.lm.query_features(images))]  # (B, blocks, 2, L, d)
        out.update({b: e[:, i] for i, b in enumerate(c.e_blocks)})
        return out

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        loss, self._key_loss = self._key_loss, None
        if loss is None or self.config.key_lambda == 0:
            return {}
        return {"key": self.config.key_lambda * loss}

    def report(self) -> dict[str, Any]:
        return {"protocol": "the training task's E-prompt while it trains; at test, each input's nearest key"}

    def state_dict(self) -> dict[str, Any]:
        return {"g": self.g.detach().cpu(), "e": self.e.detach().cpu(), "keys": self.keys.detach().cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for name in ("g", "e", "keys"):
                if name in state:
                    getattr(self, name).copy_(state[name])
