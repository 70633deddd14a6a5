"""Registers the ``capability-chain`` stream, the ``causal-lm-sft`` model and the ``paper-expander`` settings."""

from __future__ import annotations

from clbench_plugins._shared.hf.config import GenerativeConfig

from clbench import hookimpl
from clbench.specs import ModelSpec, ProfileSpec, StreamSpec

from .model import build_sft
from .presets import PAPER, PAPER_METHODS, PAPER_ROWS
from .streams import CapabilityConfig, build


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [StreamSpec("capability-chain", build, CapabilityConfig,
                       "the Expander-EWC paper's capabilities (UltraFeedback, reasoning, GSM8K, MathInstruct, SQL, "
                       "SAMSum, safety); lm-eval / ROUGE-1 / refusal rate / judge; hub or stream.data_dir",
                       presets={"paper-expander": PAPER}, tags=frozenset({"text", "requires-data", "gpu"}))]


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [ModelSpec("causal-lm-sft", build_sft, GenerativeConfig,
                      "decoder-only LM fine-tuned on (prompt, response) pairs (capability-chain); default SmolLM2-135M",
                      modalities=frozenset({"text"}), provides=frozenset({"lora"}))]



@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [ProfileSpec("paper-expander", "the Expander-EWC paper: Llama-3-8B capability chains (Tables 2-4, 6; "
                        "instruct orders need stream.judge) and RoBERTa-base GLUE at 99 % sparsity (Table 5); GPU",
                        methods=PAPER_METHODS, streams=("capability-chain", "glue-sparse"), requires_gpu=True,
                        rows=PAPER_ROWS)]
