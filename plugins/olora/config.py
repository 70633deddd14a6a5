from dataclasses import dataclass
from typing import Literal

from clbench_plugins._shared.lora.config import LoRAConfig

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class OLoRAConfig(LoRAConfig):
    """O-LoRA (Wang et al., EMNLP 2023 Findings): a new LoRA per task + λ1·orthogonality + λ2·L2.

    ``penalty=code`` is what cmnfriend/O-LoRA src/uie_trainer_lora.py (training_step, l. 90–110) does
    and what the published tables came from: orth = Σ_layers Σ|A_prev·A_newᵀ| (entrywise L1, A_prev
    the previous tasks' A stacked, r_sum×in) and L2 = Σ ‖A_new‖_F + ‖B_new‖_F (not squared).
    ``penalty=paper`` is the written form: orth = Σ_layers Σ_{i<t} ‖A_i A_tᵀ‖_F² (squared entries) and
    L2 = Σ ‖A_new‖_F² + ‖B_new‖_F² — λ tuned for the code form does not carry over.
    """

    lambda1: float = bounded(0.5, ge=0, help="scripts/order_{1,2,3}.sh and scripts_llama/order_*.sh: lamda_1 0.5")
    lambda2: float = bounded(0.0, ge=0, help="same scripts: lamda_2 0 (long.sh sets it per task, see lambda2_per_task)")
    penalty: Literal["code", "paper"] = setting("code", help="the published numbers come from the code (issue 4)")
    lambda1_per_task: dict[str, float] = setting(default_factory=dict, help="scripts/long.sh: λ1 per task name")
    lambda2_per_task: dict[str, float] = setting(default_factory=dict, help="scripts/long.sh: λ2 per task name")

    def __post_init__(self) -> None:
        super().__post_init__()
        values = [self.lambda1, self.lambda2, *self.lambda1_per_task.values(), *self.lambda2_per_task.values()]
        if any(float(v) < 0 for v in values):
            raise ConfigError("olora.lambda1 / olora.lambda2 (and their per-task values) must be ≥ 0")
