from __future__ import annotations

from dataclasses import dataclass

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class DualPromptConfig:
    """DualPrompt (Wang et al., ECCV 2022): a G(eneral)-prompt every task shares, as attention prefixes in the first
    blocks, and one E(xpert)-prompt per task, with a key, as prefixes in the next blocks. Training uses the task's own
    E-prompt (the task is known while it trains) and pulls its key towards the inputs' queries; at test each input
    takes the E-prompt of its nearest key (cosine, top-1), task-agnostic. The defaults are the released code's
    Split CIFAR-100 settings (dualprompt-pytorch, configs/cifar100_dualprompt.py: g 5 tokens in blocks 0-1, e 5
    tokens in blocks 2-4, pool 10, λ 1); its ImageNet-R settings take e_length=20."""

    g_length: int = bounded(5, ge=0, help="key and value vectors of the G-prompt in each of its blocks (0: none)")
    g_blocks: tuple[int, ...] = setting((0, 1), help="the blocks the G-prompt enters")
    e_length: int = bounded(5, ge=1, help="key and value vectors of an E-prompt in each of its blocks")
    e_blocks: tuple[int, ...] = setting((2, 3, 4), help="the blocks the E-prompts enter")
    pool_size: int = bounded(10, ge=1, help="E-prompts (one a task: at least the stream's tasks)")
    key_lambda: float = bounded(1.0, ge=0, help="λ of the key loss 1 − cos(q, k_task), a mean over the batch")
    copy_previous: bool = setting(True, help=(
        "a task's E-prompt starts as the previous task's (the released code's shared_prompt_pool); its key does not"))

    def __post_init__(self) -> None:
        if set(self.g_blocks) & set(self.e_blocks):
            raise ConfigError(f"g_blocks {list(self.g_blocks)} and e_blocks {list(self.e_blocks)} overlap")
