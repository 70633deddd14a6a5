from dataclasses import dataclass
from typing import Literal

from clbench_plugins._shared.lora.config import LoRAConfig

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class NLoRAConfig(LoRAConfig):
    """N-LoRA (Is Parameter Collision Hindering Continual Learning in LLMs?, COLING 2025).

    A new LoRA per task, earlier ones frozen (merged), plus λ·l1. ``penalty=code`` is what
    PKU-YuanGroup/N-LoRA src/uie_trainer_lora.py (training_step, l. 90–104) does and what the tables
    came from: Σ_layers ‖A_w·B_w‖₁ of the PEFT weights A_w (r×in) and B_w (out×r), an r×r product that
    only exists for square targets (N-LoRA issue #2). ``penalty=paper`` is eq. 3: Σ_layers ‖ΔW‖₁ with
    ΔW = B_w·A_w (out×in) — about out·in/r² times more entries, so it takes its own λ (``lambda_paper``).
    """

    lambda_: float = bounded(0.4, ge=0, help="scripts/order_{1,2,3}.sh (T5-large): lamda_1 0.4")
    penalty: Literal["code", "paper"] = setting("code", help="the published numbers come from the code (issue 4)")
    lambda_paper: float = bounded(1e-3, ge=0, help=(
        "λ for penalty=paper; in neither the paper nor the code: the sweep 1e-4..1e-2 is in docs/lora-family.md"))
    lambda_per_task: dict[str, float] = setting(default_factory=dict, help="scripts/order_4.sh: λ1 per task name")

    def __post_init__(self) -> None:
        super().__post_init__()
        if min([self.lambda_, self.lambda_paper, *self.lambda_per_task.values()]) < 0:
            raise ConfigError("nlora.lambda / nlora.lambda_paper (and per-task values) must be ≥ 0")
