"""What the soft-prompt methods (``progprompt``, ``l2p``, ``lfpt5``) share: the model they need, how a prompt starts,
and the rest of a method that trains prompts in front of a frozen model.

A prompt method trains no weight of the model: its footprint is empty (``footprint_kind="none"``: OO, AWOM, GSR and
ACR are n/a), and everything it learns is in its own tensors, saved with its state for resume.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor, nn

from clbench.errors import ConfigError
from clbench.footprints import TaskFootprint
from clbench.method import Method
from clbench.model import CLModel

PromptInit = Literal["vocab", "uniform"]
SOFT_PROMPT = frozenset({"soft-prompt"})  # the model capability these methods require (plugins/hf)


def prompt_model(model: CLModel) -> Any:
    """The model, when it takes a soft prompt. The contract of the ``soft-prompt`` capability (the ``encoder``,
    ``causal-lm`` and ``t5`` plugins; the testing kit's tiny text model):

    * ``model.soft_prompt``: None, or a callable the model calls on every input it embeds, with its ``(input_ids,
      attention_mask)``, for the ``(B, P, d)`` vectors that go in front of the tokens' embeddings (None: no prompt);
    * ``model.embedding_dim``: d;
    * ``model.vocabulary_ids()`` and ``model.token_embeddings(ids)``: the ids a prompt may start from (special
      tokens excluded) and their input embeddings;
    * ``model.query_features(input_ids, attention_mask)``: ``(B, d)``, the frozen model's representation of the
      input without a prompt (L2P's query).
    """
    if not all(hasattr(model, name) for name in ("soft_prompt", "vocabulary_ids", "query_features")):
        raise ConfigError(f"{type(model).__name__} takes no soft prompt: prompt methods need a model plugin that "
                          "provides 'soft-prompt' (encoder, causal-lm, t5)")
    return model


def initial_prompt(model: Any, shape: tuple[int, ...], init: PromptInit, generator: torch.Generator) -> Tensor:
    """A float32 prompt of ``shape`` (its last dimension the model's embedding width), on the model's device.

    ``vocab``: the input embeddings of tokens drawn uniformly from the vocabulary (Lester et al. 2021's
    sampled-vocabulary start, which ProgPrompt's code follows): the prompt starts at the scale the model reads.
    ``uniform``: U(−1, 1), L2P's code (a ViT's patch-embedding scale)."""
    count = math.prod(shape[:-1])
    pool = model.vocabulary_ids()
    rows = model.token_embeddings(pool[:1])
    if init == "uniform":
        values = torch.rand(count, shape[-1], generator=generator) * 2 - 1
        return values.view(shape).to(rows.device)
    ids = pool[torch.randint(len(pool), (count,), generator=generator)]
    return model.token_embeddings(ids.to(rows.device)).detach().float().reshape(shape).clone()


class PromptMethod(Method):
    """Trains tensors in front of a frozen model; the model's weights never move."""

    needs_logits = False  # the prompt methods' terms read their own tensors, never the logits

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.lm = prompt_model(model)
        self.lm.soft_prompt = self.soft_prompt

    def soft_prompt(self, input_ids: Tensor, attention: Tensor) -> Tensor | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def footprint_parameters(self) -> dict[str, nn.Parameter]:
        return {}

    def footprint(self, task: str, index: int) -> TaskFootprint:
        return {}
