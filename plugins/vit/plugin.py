"""Registers the ``vit-b16`` model (:mod:`.model`)."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ModelSpec

from .model import ViTConfig, build


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [
        ModelSpec("vit-b16", build, ViTConfig, "a pretrained ViT-B/16 (timm's checkpoints, model.weights), frozen by "
                  "default, one shared head (or one per task); prompt tokens and attention prefixes for the prompt "
                  "methods (L2P, DualPrompt, CODA-Prompt)", modalities=frozenset({"image"}),
                  provides=frozenset({"multi-head", "soft-prompt", "prefix"}))
    ]
