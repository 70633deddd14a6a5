"""Presets of the LoRA-family methods: the quick profile, and the paper profiles from the scripts.

Keys are ``profile``, ``profile/stream`` or ``profile/stream/order`` (most specific wins). Sources:
O-LoRA = cmnfriend/O-LoRA ``scripts/`` (T5) and ``scripts_llama/``; N-LoRA = PKU-YuanGroup/N-LoRA
``scripts/`` and ``scripts_llama/``. Both use AdamW, constant lr, gradient clipping 1.0 (DeepSpeed
config) and an effective batch of GPUs × per-device batch × gradient accumulation.
"""

from __future__ import annotations

from typing import Any

# ------------------------------------------------------------------ quick (MiniLM encoder, CPU)
# AdamW and clipping 1.0 like the scripts, at a few times their lr 1e-3 because a quick task is a few steps, not
# thousands; on cl-quick each method's lr and λ come from `clbench tune` (plugins/_shared/tuned/quick.json,
# docs/tuning.md), laid over these by each plugin.
QUICK_TRAIN: dict[str, Any] = {"train.optimizer": "adamw", "train.lr": 5e-3, "train.grad_clip": 1.0}


# smol (SmolLM2-135M, causal LM, CPU): the scripts' AdamW and clipping; 3× their lr 1e-3 because a smol task
# is 8 steps (not swept: one smol cell takes minutes on a CPU).
SMOL_TRAIN: dict[str, Any] = {"train.optimizer": "adamw", "train.lr": 3e-3, "train.grad_clip": 1.0}

# ------------------------------------------------------------------ paper profiles
_ADAMW = {"train.optimizer": "adamw", "train.grad_clip": 1.0}
# cl-claims (MiniLM, CPU, issue 13): the scripts' values, unscaled — 100 steps a task is enough for lr 1e-3.
# Equal steps: N-LoRA scripts/order_{2,3}.sh (1 GPU × batch 32, 10 epochs, lr 1e-3) for every method.
_CLAIMS = {**_ADAMW, "train.lr": 1e-3, "train.epochs": 10, "train.batch_size": 32}
# O-LoRA scripts/order_{1,2,3}.sh: 8 GPUs × bs 8, lr 1e-3, 1 epoch, λ1 0.5, λ2 0.
_OLORA_T5 = {**_ADAMW, "train.lr": 1e-3, "train.epochs": 1, "train.batch_size": 64, "lambda1": 0.5, "lambda2": 0.0}
# O-LoRA scripts/long.sh (= N-LoRA order 6), λ per task: yelp 0 (first task), 0.5 for the next eight, 5 after.
_LONG_L1 = {"yelp": 0.0, **dict.fromkeys(["amazon", "MNLI", "CB", "COPA", "QQP", "RTE", "IMDB", "SST-2"], 0.5),
            **dict.fromkeys(["dbpedia", "agnews", "yahoo", "MultiRC", "BoolQA", "WiC"], 5.0)}
_LONG_L2 = {"yelp": 0.0, "amazon": 0.0, "MNLI": 0.0, "CB": 0.0, "COPA": 0.1, "QQP": 0.1, "RTE": 0.3, "IMDB": 0.0,
            "SST-2": 0.1, "dbpedia": 0.0, "agnews": 0.0, "yahoo": 0.1, "MultiRC": 0.0, "BoolQA": 0.1, "WiC": 0.3}
# O-LoRA scripts_llama/order_{1,2,3}.sh: 8 GPUs × bs 1 × GA 8, lr 1e-3 on the first task, 1e-4 after; on one GPU
# the same global batch in micro-batches of 1, as each of the script's GPUs ran.
_OLORA_LLAMA = {**_ADAMW, "train.lr": 1e-4, "train.epochs": 1, "train.batch_size": 64, "train.grad_accum": 64,
                "lambda1": 0.5, "lambda2": 0.0}
# The paper profiles' T5 runs of O-LoRA's scripts: 8 GPUs × 8, on one GPU micro-batches of 8 (cl-claims-scripts,
# on MiniLM, keeps one batch of 64: its committed results were made so).
_OLORA_T5_GPU = {**_OLORA_T5, "train.grad_accum": 8}
_FIRST = {"1": "dbpedia", "2": "dbpedia", "3": "yahoo"}  # first task of standard orders 1–3 (paper appendix)

OLORA: dict[str, dict[str, Any]] = {
    "quick": QUICK_TRAIN,
    "smol": SMOL_TRAIN,
    "cl-claims": {**_CLAIMS, "lambda1": 0.5, "lambda2": 0.0},  # λ1, λ2 of scripts/order_{1,2,3}.sh
    "cl-claims-scripts": {**_OLORA_T5},
    "paper-t5/standard": _OLORA_T5_GPU,
    # No O-LoRA script for long orders 4 and 5: the standard-order values (λ1 0.5, λ2 0), MNLI 2 epochs as long.sh.
    "paper-t5/long": {**_OLORA_T5_GPU, "epochs_per_task": {"MNLI": 2}},
    "paper-t5/long/6": {"lambda1_per_task": _LONG_L1, "lambda2_per_task": _LONG_L2},
    "paper-llama/standard": _OLORA_LLAMA,
    **{f"paper-llama/standard/{o}": {"lr_per_task": {t: 1e-3}} for o, t in _FIRST.items()},
}

# N-LoRA scripts/order_{1..6}.sh (T5-large, 1 GPU, 10 epochs): batch, lr and λ1 per order.
# One batch of 32/48 × 512 tokens through fp32 T5-large keeps ~111 GiB of activations at 48 (the memory plan,
# tests/test_memory.py): gradient checkpointing keeps the scripts' micro-batch (and its numbers: the recomputation
# replays dropout's RNG) in ~10 GiB.
_NLORA_T5 = {**_ADAMW, "train.epochs": 10, "train.lr": 1e-3, "train.batch_size": 32, "train.grad_accum": 1,
             "model.gradient_checkpointing": True}
_ORDER4_L = {**dict.fromkeys(["MNLI", "CB", "COPA", "QQP", "BoolQA", "amazon", "agnews", "MultiRC"], 0.4),
             **dict.fromkeys(["WiC", "RTE", "IMDB", "yelp", "SST-2", "dbpedia", "yahoo"], 1.2)}
NLORA: dict[str, dict[str, Any]] = {
    "quick": QUICK_TRAIN,
    # SmolLM2 uses grouped-query attention: v_proj is 576→192, so the code's r×r ‖A·B‖₁ does not exist there.
    "smol": {**SMOL_TRAIN, "penalty": "paper"},
    "cl-claims": {**_CLAIMS, "lambda": 0.4},  # λ1 of scripts/order_{1,2,3}.sh
    "cl-claims-scripts": {**_CLAIMS, "lambda": 0.4},
    "paper-t5/standard": {**_NLORA_T5, "lambda": 0.4},
    "paper-t5/standard/1": {"train.batch_size": 48},
    "paper-t5/long": _NLORA_T5,
    "paper-t5/long/4": {"train.lr": 5e-4, "lambda": 0.4, "lambda_per_task": _ORDER4_L},
    "paper-t5/long/5": {"train.lr": 8e-4, "lambda": 0.55},
    "paper-t5/long/6": {"train.lr": 1e-3, "lambda": 1.8},
    # scripts_llama/order_{1,2,3}.sh: 1 GPU × bs 6/4 × GA 8 (order 3: 4 GPUs × 1 × 8); lr and epochs per task.
    "paper-llama/standard": {**_ADAMW, "train.epochs": 1},
    "paper-llama/standard/1": {"train.batch_size": 48, "train.grad_accum": 8, "train.lr": 1e-4, "lambda": 0.46,
                               "lr_per_task": {"dbpedia": 1e-3},
                               "epochs_per_task": {"dbpedia": 1, "amazon": 10, "yahoo": 1, "agnews": 1}},
    "paper-llama/standard/2": {"train.batch_size": 32, "train.grad_accum": 8, "train.lr": 5e-5, "lambda": 0.38,
                               "lr_per_task": {"dbpedia": 1e-4},
                               "epochs_per_task": {"dbpedia": 1, "amazon": 5, "yahoo": 1, "agnews": 1}},
    "paper-llama/standard/3": {"train.batch_size": 32, "train.grad_accum": 32, "train.lr": 1e-4, "lambda": 0.4,
                               "epochs_per_task": {"yahoo": 5, "amazon": 10, "agnews": 1, "dbpedia": 1}},
}

# The baselines (SeqLoRA, IncLoRA, MTL, PerTask) in the paper profiles: O-LoRA's training settings
# (the O-LoRA repository ran its baselines with the same scripts).
BASELINE: dict[str, dict[str, Any]] = {
    "quick": QUICK_TRAIN,
    "smol": SMOL_TRAIN,
    "cl-claims": _CLAIMS,
    "cl-claims-scripts": {k: v for k, v in _OLORA_T5.items() if not k.startswith("lambda")},
    "paper-t5/standard": {k: v for k, v in _OLORA_T5_GPU.items() if not k.startswith("lambda")},
    "paper-t5/long": {k: v for k, v in _OLORA_T5_GPU.items() if not k.startswith("lambda")},
    "paper-llama/standard": {k: v for k, v in _OLORA_LLAMA.items() if not k.startswith("lambda")},
}
