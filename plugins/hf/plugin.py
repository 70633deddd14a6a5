"""Hugging Face text models: ``encoder`` (MiniLM by default), ``causal-lm`` (SmolLM2 by default), ``t5``."""

from __future__ import annotations

from clbench_plugins._shared.hf.config import EncoderConfig, GenerativeConfig
from clbench_plugins._shared.hf.model import build_causal_lm, build_encoder, build_t5

from clbench import hookimpl
from clbench.specs import ModelSpec

_TEXT = frozenset({"text"})
# LoRA targets, model.soft_prompt and, for the generative models, model.sample (plugins/_shared/hf/model.py)
_PROVIDES = frozenset({"lora", "soft-prompt"})
_GENERATIVE = _PROVIDES | {"generation"}


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [
        ModelSpec("encoder", build_encoder, EncoderConfig,
                  "sentence encoder scoring prompt vs label-word embeddings (default all-MiniLM-L6-v2, offline)",
                  modalities=_TEXT, provides=_PROVIDES),
        ModelSpec("causal-lm", build_causal_lm, GenerativeConfig,
                  "decoder-only LM, label log-likelihoods / generation + EM (default SmolLM2-135M-Instruct)",
                  modalities=_TEXT, provides=_GENERATIVE),
        ModelSpec("t5", build_t5, GenerativeConfig,
                  "encoder-decoder LM, label log-likelihoods / generation + EM (default google-t5/t5-large)",
                  modalities=_TEXT, provides=_GENERATIVE),
    ]
