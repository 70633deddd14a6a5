from __future__ import annotations

from clbench import hookimpl
from clbench.specs import StreamSpec

from .presets import ARRAYS, JSONL, PROMPTS
from .streams import ArraysStream, JsonlStream, OwnDataConfig, PromptsConfig, PromptsStream

# "own-data": not one of a profile's default streams (they need --data-dir), only run when named
TAGS = frozenset({"own-data"})


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [
        StreamSpec("arrays", ArraysStream, OwnDataConfig, "your vectors or images: --data-dir DIR with DIR/<task>/"
                   "train.npz and test.npz (x, y); an MLP unless --model", presets={"quick": dict(ARRAYS)}, tags=TAGS),
        StreamSpec("jsonl", JsonlStream, OwnDataConfig, "your text classification tasks: --data-dir DIR with "
                   "DIR/<task>/train.jsonl and test.jsonl ({sentence, label}); MiniLM unless --model",
                   presets={"quick": dict(JSONL)}, tags=TAGS),
        StreamSpec("prompts", PromptsStream, PromptsConfig, "your language-model tasks: --data-dir DIR with "
                   "DIR/<task>/train.jsonl and test.jsonl ({prompt, response}), scored by ROUGE-1 of greedy answers; "
                   "SmolLM2-135M unless --model", presets={"quick": dict(PROMPTS)}, tags=TAGS),
    ]
