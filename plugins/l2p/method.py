"""L2P: one pool of prompts shared by every task, chosen per input by its query, whichever task it came from.

For an input x with query q = the frozen model's representation of x without a prompt (a text model's mean-pooled
last hidden states, a ViT's class token; eval mode, so the query of an input is the same in training and in test),
the ``top_k`` keys of highest cos(q, k_i) choose their prompts, which go in front of x in the order of the keys'
similarity. The loss adds λ · Σ_chosen (1 − cos(q, k_i)) (the paper's surrogate loss), averaged over the batch; only
it moves the keys. On a ViT the head reads the mean of the prompt tokens' outputs and trains with the prompts.

One implementation for text and images: the model gives the query and takes the prompt (the ``soft-prompt``
capability, :func:`clbench_plugins._shared.soft_prompt.prompt_model`). Not implemented: the released code's
``batchwise_prompt`` (each test batch's prompts chosen by a majority vote over the batch, which tells the model the
task when a test batch holds one task: Mammoth's help says so).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from clbench_plugins._shared.soft_prompt import PromptMethod, head_parameters, initial_prompt
from torch import Tensor, nn

from clbench.data import Batch
from clbench.method import Phase
from clbench.model import CLModel

from .config import L2PConfig


class L2P(PromptMethod):
    config: L2PConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        c = self.config
        dim = self.lm.embedding_dim
        start = initial_prompt(self.lm, (c.pool_size, c.length, dim), c.init, self.ctx.generator(0, 1))
        self.prompts = nn.Parameter(start)
        self.keys = nn.Parameter(initial_prompt(self.lm, (c.pool_size, dim), "uniform", self.ctx.generator(0, 2)))
        self._key_loss: Tensor | None = None

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        return [self.prompts, self.keys, *head_parameters(model)]

    def select(self, query: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, top_k)`` indices of the chosen prompts (most similar first) and their cosine similarities."""
        sim = F.normalize(query, dim=-1) @ F.normalize(self.keys, dim=-1).T
        chosen = sim.topk(self.config.top_k, dim=1)
        return chosen.indices, chosen.values

    def soft_prompt(self, *inputs: Tensor) -> Tensor:
        index, sim = self.select(self.lm.query_features(*inputs))
        if self.lm.training:
            self._key_loss = (1 - sim).sum(dim=1).mean()
        return self.prompts[index].flatten(1, 2)  # (B, top_k · length, d)

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        loss, self._key_loss = self._key_loss, None
        if loss is None or self.config.key_lambda == 0:
            return {}
        return {"key": self.config.key_lambda * loss}

    def report(self) -> dict[str, Any]:
        return {"protocol": "task-agnostic: the prompts are chosen by each input's query, never by its task"}

    def state_dict(self) -> dict[str, Any]:
        return {"prompts": self.prompts.detach().cpu(), "keys": self.keys.detach().cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            if "prompts" in state:
                self.prompts.copy_(state["prompts"])
                self.keys.copy_(state["keys"])
