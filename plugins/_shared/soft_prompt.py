"""What the prompt methods (``progprompt``, ``l2p``, ``lfpt5`` on text; ``l2p``, ``dualprompt``, ``coda-prompt`` on
a ViT) share: the model they need, how a prompt starts, and the rest of a method that trains prompts in front of, or
prefixes inside, a frozen model.

A prompt method trains no weight of the model's encoder: its footprint is empty (``footprint_kind="none"``: OO,
AWOM, GSR and ACR are n/a), and everything it learns is in its own tensors and the model's head (an image model's
classifier; a text model scores label words and has none), saved with its state for resume.
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
SOFT_PROMPT = frozenset({"soft-prompt"})  # the model capability these methods require (plugins/hf, plugins/vit)
PREFIX = frozenset({"prefix"})  # attention prefixes (plugins/vit)


def prompt_model(model: CLModel, capability: str = "soft_prompt") -> Any:
    """The model, when it takes a soft prompt (``capability="soft_prompt"``) or attention prefixes (``"prefix"``).
    The contract of the ``soft-prompt`` capability (the ``encoder``, ``causal-lm``, ``t5`` and ``vit-b16`` plugins;
    the testing kit's tiny text model):

    * ``model.soft_prompt``: None, or a callable the model calls on every input it embeds, with what it embeds (a
      text model's ``(input_ids, attention_mask)``, a ViT's images), for the ``(B, P, d)`` vectors that go in front
      of the tokens' embeddings (None: no prompt);
    * ``model.embedding_dim``: d;
    * ``model.query_features(...)``, on the same arguments: ``(B, d)``, the frozen model's representation of the
      input without a prompt (the query prompt methods match their keys against);
    * a text model also gives ``model.vocabulary_ids()`` and ``model.token_embeddings(ids)``: the ids a prompt may
      start from (special tokens excluded) and their input embeddings (``init=vocab``).

    The ``prefix`` capability (``vit-b16``): ``model.prefix``, None or a callable from the images to ``{block:
    (B, 2, L, d)}`` key and value vectors prepended in that block's attention; ``model.num_blocks``; the query as
    above.
    """
    if not all(hasattr(model, name) for name in (capability, "query_features", "embedding_dim")):
        kind = "soft prompt" if capability == "soft_prompt" else "attention prefixes"
        plugins = "encoder, causal-lm, t5, vit-b16" if capability == "soft_prompt" else "vit-b16"
        raise ConfigError(f"{type(model).__name__} takes no {kind}: this method needs a model plugin that provides "
                          f"'{capability.replace('_', '-')}' ({plugins})")
    return model


def initial_prompt(model: Any, shape: tuple[int, ...], init: PromptInit, generator: torch.Generator) -> Tensor:
    """A float32 prompt of ``shape`` (its last dimension the model's embedding width), on the model's device.

    ``vocab``: the input embeddings of tokens drawn uniformly from the vocabulary (Lester et al. 2021's
    sampled-vocabulary start, which ProgPrompt's code follows): the prompt starts at the scale the model reads.
    ``uniform``: U(−1, 1), L2P's code (a ViT's patch-embedding scale)."""
    count = math.prod(shape[:-1])
    device = next(model.parameters()).device
    if init == "uniform":
        values = torch.rand(count, shape[-1], generator=generator) * 2 - 1
        return values.view(shape).to(device)
    if not hasattr(model, "vocabulary_ids"):
        raise ConfigError(f"init=vocab starts a prompt from a text model's vocabulary; {type(model).__name__} has "
                          "none: set init=uniform")
    pool = model.vocabulary_ids()
    ids = pool[torch.randint(len(pool), (count,), generator=generator)]
    return model.token_embeddings(ids.to(device)).detach().float().reshape(shape).clone()


def head_parameters(model: CLModel) -> list[nn.Parameter]:
    """The model's classifier heads (an image model's; a text model that scores label words has none): trained
    with the prompts, as the prompt papers' code trains its linear head."""
    return [p for n, p in model.named_parameters() if n.startswith("heads.")]


class PromptMethod(Method):
    """Trains tensors in front of a frozen model; the model's encoder never moves."""

    needs_logits = False  # the prompt methods' terms read their own tensors, never the logits
    capability = "soft_prompt"  # or "prefix": which callable of the model the method sets

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.lm = prompt_model(model, self.capability)
        setattr(self.lm, self.capability, getattr(self, self.capability))

    def soft_prompt(self, *inputs: Tensor) -> Tensor | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def prefix(self, images: Tensor) -> dict[int, Tensor] | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def footprint_parameters(self) -> dict[str, nn.Parameter]:
        return {}

    def footprint(self, task: str, index: int) -> TaskFootprint:
        return {}
