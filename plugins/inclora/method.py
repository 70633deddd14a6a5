"""IncLoRA: a fresh adapter per task; the finished one is merged into the frozen base weights."""

from __future__ import annotations

from clbench_plugins._shared.lora.method import LoRAMethod

from .config import IncLoRAConfig


class IncLoRA(LoRAMethod):
    config: IncLoRAConfig
