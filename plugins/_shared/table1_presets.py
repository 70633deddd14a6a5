"""Presets of the N-LoRA paper's Table 1 rows outside the LoRA family, in the paper profiles: full fine-tuning
(SeqFT, Replay, EWC, LwF, PerTaskFT) and the prompt methods (ProgPrompt, L2P, LFPT5).

Neither the paper nor the released N-LoRA/O-LoRA code configures these rows (Table 1 quotes their numbers from the
O-LoRA paper; docs/reference-code.md). The protocol (docs/prompt-family.md): the O-LoRA scripts' training settings
(AdamW, clipping 1.0, global batch 64, one epoch: :data:`BASELINE`) for every row, with two exceptions, each named:

* the learning rate of full fine-tuning, which the LoRA scripts' 1e-3 is not: T5 with AdamW 1e-4 (the lower end of
  "1e-4 and 3e-4 work well" in the transformers T5 documentation's training tips), LLaMA-7B 2e-5 (Stanford Alpaca's
  full fine-tuning of LLaMA-7B);
* a prompt method's own script where it has one (ProgPrompt: arazd/ProgressivePrompts README, T5-large; LFPT5:
  qcwthu/Lifelong-Fewshot-Language-Learning, Classification.sh).
"""

from __future__ import annotations

from typing import Any

from clbench_plugins._shared.lora.presets import BASELINE, QUICK_TRAIN, SMOL_TRAIN

# (model.train_base: the text models keep their weights frozen unless a method trains them)
_T5_FT = {**BASELINE["paper-t5/standard"], "train.lr": 1e-4, "model.train_base": True}
# 7B full fine-tuning keeps float32 masters (at lr 2e-5 most bf16 updates would round away: docs/scale-out.md), so
# with AdamW's moments it needs more than 80 GiB (docs/prompt-family.md has the plans); per-weight method state
# (EWC's Fisher and anchor) waits on the host and activations are recomputed.
_LLAMA_FT = {**BASELINE["paper-llama/standard"], "train.lr": 2e-5, "train.offload_state": True,
             "model.gradient_checkpointing": True, "model.train_base": True}
FULL_FT: dict[str, dict[str, Any]] = {
    "paper-t5/standard": _T5_FT,
    "paper-t5/long": _T5_FT,
    "paper-llama/standard": _LLAMA_FT,
}
# PerTaskFT in the quick profile's cl-quick: MiniLM trained whole (its lr from `clbench tune`, laid over this)
QUICK_FULL_FT = {**QUICK_TRAIN, "model.train_base": True}

# ProgPrompt's T5-large script (arazd/ProgressivePrompts README): AdamW at lr 0.3, batch 8, 10 epochs, the prompt
# alone trained. L2P on text has no released configuration: the O-LoRA scripts' batch and epoch, at the prompt-tuning
# lr of ProgPrompt's T5 script (L2P's own Adam lr 0.03 at batch 16 is for a ViT's prompts). No source configures
# either on LLaMA-7B: the same values.
_PROGPROMPT_PAPER = {"train.optimizer": "adamw", "train.lr": 0.3, "train.epochs": 10, "train.batch_size": 8,
                     "train.grad_accum": 1}
_L2P_T5 = {**BASELINE["paper-t5/standard"], "train.lr": 0.3}
_L2P_LLAMA = {**BASELINE["paper-llama/standard"], "train.lr": 0.3}
# LFPT5's classification script (qcwthu/Lifelong-Fewshot-Language-Learning Classification.sh) trains 421 epochs of
# 16 examples a class at batch 8 with Adafactor at lr 0.5; here the O-LoRA scripts' batch and epoch with AdamW at
# that lr. On T5-large activations are recomputed: 300 prompt tokens before 512 and the pseudo batch's three more
# forwards would not fit one 80 GiB card (benchmarks/bench_paper_memory.py). On smol 20 prompt tokens: its 300 would
# quadruple a CPU step's tokens.
_LFPT5_T5 = {**BASELINE["paper-t5/standard"], "train.lr": 0.5, "model.gradient_checkpointing": True}
_LFPT5_LLAMA = {**BASELINE["paper-llama/standard"], "train.lr": 0.5}
PROMPT: dict[str, dict[str, dict[str, Any]]] = {
    "progprompt": {"quick": QUICK_TRAIN, "smol": SMOL_TRAIN, "paper-t5": _PROGPROMPT_PAPER,
                   "paper-llama": _PROGPROMPT_PAPER},
    "l2p": {"quick": QUICK_TRAIN, "smol": SMOL_TRAIN, "paper-t5/standard": _L2P_T5, "paper-t5/long": _L2P_T5,
            "paper-llama/standard": _L2P_LLAMA},
    "lfpt5": {"smol": {**SMOL_TRAIN, "length": 20}, "paper-t5/standard": _LFPT5_T5, "paper-t5/long": _LFPT5_T5,
              "paper-llama/standard": _LFPT5_LLAMA},
}
