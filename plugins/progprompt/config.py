from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clbench_plugins._shared.soft_prompt import PromptInit

from clbench.config import bounded, setting


@dataclass(frozen=True)
class ProgPromptConfig:
    """Progressive Prompts (Razdaibiedina et al., ICLR 2023): a new soft prompt per task in front of the frozen
    prompts of the tasks before it, the model frozen; a task is evaluated with its own prompt and those before it
    (the task's identity at test time)."""

    length: int = bounded(10, ge=1, help="prompt tokens per task: arazd/ProgressivePrompts README, --prefix_len 10")
    init: PromptInit = setting("vocab", help=(
        "vocab: embeddings of tokens drawn from the vocabulary (Lester et al. 2021, as the ProgPrompt code); "
        "uniform: U(-1, 1)"))
    reparam: Literal["none", "residual-mlp"] = setting("none", help=(
        "residual-mlp: the paper's residual reparameterisation, prompt + MLP(prompt) (a per-task two-layer MLP "
        "with a bottleneck and LayerNorm), folded into the prompt when the task ends; none: the plain prompt, the "
        "code's default (train_t5_cl.py --prefix_MLP None)"))
    bottleneck: int = bounded(800, ge=1, help="the MLP's bottleneck: train_t5_cl.py --bottleneck_size 800")
