from dataclasses import dataclass

from clbench_plugins._shared.lora.config import LoRAConfig
from clbench_plugins._shared.masked.config import ExpanderEWCConfig

from clbench.config import bounded, setting


@dataclass(frozen=True)
class PerTaskFTConfig:
    """PerTaskFT (N-LoRA Table 1, §4.2 (i) "trains a separate model for each task"): every task fine-tunes the whole
    model from the base weights with the cell's training settings; no settings of its own."""


@dataclass(frozen=True)
class PerTaskConfig(LoRAConfig):
    """PerTaskFT's LoRA form: a separate LoRA per task, each trained from the base model and evaluated with its own
    adapter (task identity at test time); ``pertaskft`` fine-tunes the whole model per task, Table 1's row."""


@dataclass(frozen=True)
class PerTaskMaskConfig(ExpanderEWCConfig):
    """Sparse fine-tuning per task (Expander-EWC paper §6.2, Table 5): every task starts from the base
    weights with a fresh mask and is evaluated with its own weights; no task sequence, so no EWC (λ = 0)
    and no overlap budget between the tasks' masks."""

    lambda_: float = bounded(0.0, ge=0, help="§6.2 compares masks alone: no penalty")
    overlap: float = bounded(1.0, ge=0, le=1, help="independent tasks: a mask need not avoid earlier ones")
    overlap_policy: str = setting("independent", help=(
        "each mask drawn on its own, never steered off earlier tasks' masks"))


@dataclass(frozen=True)
class PerTaskRandomConfig(PerTaskMaskConfig):
    """Table 5's "Random Mask" row: equally sparse uniform random masks."""

    construction: str = setting("uniform", help='§6.2 "random masking" at the same sparsity')
