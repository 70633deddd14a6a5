from dataclasses import dataclass

from clbench_plugins._shared.lora.config import LoRAConfig


@dataclass(frozen=True)
class IncLoRAConfig(LoRAConfig):
    """IncLoRA (O-LoRA/N-LoRA baseline): a new LoRA per task, earlier ones frozen (merged into W)."""
