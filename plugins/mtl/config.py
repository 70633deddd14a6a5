from dataclasses import dataclass

from clbench_plugins._shared.lora.config import LoRAConfig


@dataclass(frozen=True)
class MTLConfig(LoRAConfig):
    """MTL (the upper bound of the N-LoRA/O-LoRA tables): one LoRA trained on all tasks jointly.

    At step i it trains on the union of tasks 1..i (as the core ``joint`` method does), so the last
    row of the accuracy matrix is multi-task training on every task and the earlier rows exist.
    """
