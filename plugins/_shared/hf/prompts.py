"""The CL-benchmark prompt and the exact-match normalisation of O-LoRA / N-LoRA.

Prompt (O-LoRA ``src/uie_dataset_lora.py`` and ``src/uie_collator.py``)::

    "Task:" + group + "\\n" + "Dataset:" + dataset + "\\n" + instruction
    + "Option: " + ", ".join(labels) + " \\n" + sentence + "\\nAnswer:"

COPA has no instruction (its sentences hold the A/B choices): ``"Task:COPA\\nDataset:COPA\\n" + sentence
+ "\\nAnswer:"``. The target is the label word. Exact match (``src/compute_metrics.py``; docs/reference-code.md
§1.8): lower-case, drop ASCII punctuation, collapse whitespace, compare strings.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from clbench.data import TaskInfo

_PUNCT = str.maketrans("", "", string.punctuation)


def format_prompt(task: TaskInfo, sentence: str, options: bool = True, header: bool = True) -> str:
    """The source text for one example of ``task`` (``options``/``header`` off only shorten it)."""
    head = f"Task:{task.group or task.name}\nDataset:{task.name}\n" if header else ""
    if not task.instruction:  # COPA: the choices are inside the sentence
        return f"{head}{sentence}\nAnswer:"
    opts = f"Option: {', '.join(task.labels)} \n" if options else ""
    return f"{head}{task.instruction}{opts}{sentence}\nAnswer:"


def format_prompts(task: TaskInfo, sentences: Sequence[str], options: bool = True, header: bool = True) -> list[str]:
    return [format_prompt(task, s, options, header) for s in sentences]


def normalize_answer(text: str) -> str:
    """O-LoRA's EM normalisation: lower-case, strip ASCII punctuation, collapse whitespace."""
    return " ".join(text.lower().translate(_PUNCT).split())


def match_label(prediction: str, labels: Sequence[str]) -> int:
    """Index of the label that ``prediction`` exactly matches after normalisation, else -1 (wrong)."""
    norm = normalize_answer(prediction)
    for i, label in enumerate(labels):
        if normalize_answer(label) == norm:
            return i
    return -1
