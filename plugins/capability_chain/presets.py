"""The capability chain's paper-expander presets (data:
:func:`clbench._core.provenance.settings_only`)."""

from __future__ import annotations

# paper-expander on Llama-3-8B; every value's source (paper 000_c99f0c2cb31873a5):
PAPER = {
    "orders": ["instruct-gsm8k", "instruct-reasoning", "instruct-mathinstr", "gsm8k-sql", "gsm8k-mathinstr",
               "gsm8k-arc", "gsm8k-reasoning", "chain4"],  # Tables 2, 3, 4, 6 (instruct orders need stream.judge)
    "model": "causal-lm-sft",  # supervised fine-tuning on each capability's (prompt, response) pairs (§5.3)
    "model.name_or_path": "meta-llama/Meta-Llama-3-8B",  # §5.2 "Meta's Llama-3-8B"
    "model.train_base": True,  # sparse adaptation moves pretrained weights (Algorithm 1)
    "model.dtype": "bfloat16",  # not stated; an 8B model with RMSProp state fits one H100 (§5 "single H100") only so
    "model.gradient_checkpointing": True,  # not stated; needed for memory on one H100 (same reason)
    "model.max_length": 1024,  # not stated; the longest SAMSum/GSM8K prompt+answer fits
    "train.epochs": 1,  # §5 "Most reported results are based on single-epoch fine-tuning"
    "train.optimizer": "rmsprop",  # §5 "RMSProp optimizer with default hyperparameters"
    "train.lr": 1e-6,  # §6 "use a learning rate of 1e-6" (LoTA and ours)
    "train.batch_size": 8,  # not stated; LoTA's (Panda et al. 2024) per-device batch
    # CPU threads of the cell: the end-of-cell scan (GSR, ACR over the dense footprints) and data loading run on the
    # host; a fixed count, as numbers may depend on it
    "train.threads": 8,
    # AWOM's float64 QR and eigensolves over the 226 matrices of an 8B model's dense footprints on the GPU: ~170
    # TFLOP a pair of tasks, ~45 min on two CPU cores (benchmarks/bench_awom_dense.py)
    "metrics.device": "cuda",
    # EWC's and Expander-EWC's float32 Fisher (28 GiB at 8B) and anchor in host memory, read a parameter at a time
    # (Expander-EWC's at the task's masks only): the same numbers; with train.fp32_masters=false SeqFT and EWC plan
    # within one 80 GiB GPU (tests/test_memory.py, docs/scale-out.md)
    "train.offload_state": True,
    # masks: 10 % density (§6) is each masked method's own paper-expander/capability-chain preset
}
# Full fine-tuning (SeqFT) keeps float32 masters and RMSProp's square average beside the bf16 weights: more than the
# paper's one 80 GiB H100 holds. There the float32 shards, gradients and state wait in host memory and are stepped
# there (train.shard=offload, as DeepSpeed ZeRO-Offload would). The masked methods (and LoTA's dense calibration)
# read whole weights and have no sharded form (docs/scale-out.md).
PAPER_ROWS = {"capability-chain": {"seqft": {"train.shard": "offload"}}}
# Table 1-4 and 6 methods: FFT (= seqft), LoRA (= seqlora), LoTA, LoTTO, ours and its ablations.
PAPER_METHODS = ("seqft", "seqlora", "lota", "lotto", "expander-ewc", "expander", "random-mask-ewc")
