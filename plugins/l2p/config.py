from __future__ import annotations

from dataclasses import dataclass

from clbench_plugins._shared.soft_prompt import PromptInit

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class L2PConfig:
    """Learning to Prompt (Wang et al., CVPR 2022): a pool of prompts with learnable keys; each input's query (the
    frozen model's mean-pooled representation of it) picks the ``top_k`` keys nearest by cosine, their prompts go in
    front of the input, and a key loss pulls the chosen keys towards the query. Task-agnostic at test time."""

    pool_size: int = bounded(10, ge=1, help="M = 10 (L2P §5.1)")
    length: int = bounded(5, ge=1, help="L_p = 5 tokens a prompt (L2P §5.1)")
    top_k: int = bounded(5, ge=1, help="N = 5 prompts chosen an input (L2P §5.1)")
    key_lambda: float = bounded(0.1, ge=0, help=(
        "λ of the key loss Σ (1 − cos(q, k)) over the chosen keys: 0.1, l2p-pytorch's --pull_constraint_coeff"))
    init: PromptInit = setting("vocab", help=(
        "the prompts' start: vocab (embeddings of vocabulary tokens, a text model's scale) or uniform (U(-1, 1), "
        "l2p-pytorch's prompt_init for a ViT); the keys always start U(-1, 1) as there"))

    def __post_init__(self) -> None:
        if self.top_k > self.pool_size:
            raise ConfigError(f"top_k={self.top_k} is more than pool_size={self.pool_size}")
