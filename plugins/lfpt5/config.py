from __future__ import annotations

from dataclasses import dataclass

from clbench_plugins._shared.soft_prompt import PromptInit

from clbench.config import bounded, setting


@dataclass(frozen=True)
class LFPT5Config:
    """LFPT5 (Qin & Joty, ICLR 2022), the form of its text-classification code (qcwthu/Lifelong-Fewshot-Language-
    Learning, Classification/): one soft prompt for every task, a frozen generative model trained through it as a
    task solver and as a generator of its own examples, pseudo samples of the earlier tasks before each new one, and
    a KL term holding their labels to the prompt the task started with. Task-agnostic at test time."""

    length: int = bounded(300, ge=1, help="prompt tokens: Classification.sh --prompt_number 300")
    init: PromptInit = setting("vocab", help=(
        "the prompt's start: vocab (embeddings of vocabulary tokens; the code also writes the first task's name and "
        "label words into its first rows) or uniform (U(-1, 1))"))
    lm_lambda: float = bounded(0.25, ge=0, help=(
        "weight of the LM loss of generating 'x __ans__ y' after the task's generation input: --lm_lambda 0.25"))
    kd_lambda: float = bounded(0.01, ge=0, lt=1, help=(
        "weight of the KL(previous prompt ‖ current prompt) label-consistency term on pseudo samples: --kd_lamda "
        "0.01 (the code mixes the losses as (1 − λ)·(task + λ_lm·LM) + λ·KL; here the task loss keeps weight 1)"))
    samples: int = bounded(64, ge=1, help=(
        "pseudo samples generated for each earlier task before a new one, before filtering (the code generates "
        "its test set's size × 1–12 of them; clbench's count, for a CPU)"))
    per_class: int = bounded(2, ge=1, help="pseudo samples kept per label of each earlier task: memnumforeveryclass 2")
    top_k: int = bounded(64, ge=1, help="sampling: model.py generate(do_sample=True, top_k=64)")
    repetition_penalty: float = bounded(2.5, gt=0, help="model.py generate(repetition_penalty=2.5)")
    max_new_tokens: int = bounded(64, ge=1, help="tokens a pseudo sample, at most (the code: max_length 128)")
