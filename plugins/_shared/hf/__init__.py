"""Hugging Face text models (loading, freezing, LoRA targets, prompts, label scoring and generation): ``hf``
registers ``encoder``, ``causal-lm`` and ``t5`` on them, ``glue`` its ``glue-encoder`` and ``capability_chain`` its
``causal-lm-sft``. It registers nothing itself."""
