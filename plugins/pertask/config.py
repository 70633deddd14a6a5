from dataclasses import dataclass

from clbench_plugins.lora.config import LoRAConfig


@dataclass(frozen=True)
class PerTaskConfig(LoRAConfig):
    """PerTaskFT with LoRA (the N-LoRA tables' PerTaskFT row): a separate LoRA per task, each trained
    from the base model and evaluated with its own adapter (task identity at test time)."""
