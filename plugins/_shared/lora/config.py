from dataclasses import dataclass

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class LoRAConfig:
    """The adapter every LoRA-family method trains (shared by seqlora, inclora, olora, nlora, mtl, pertask).

    Defaults are the released O-LoRA / N-LoRA code (identical in both repositories).
    """

    rank: int = bounded(8, ge=1, help=(
        "cmnfriend/O-LoRA src/run_uie_lora.py `lora_dim` default 8; no script overrides it"))
    alpha: float = bounded(32.0, gt=0, help="same file, LoraConfig(lora_alpha=32): scaling alpha/rank = 4")
    dropout: float = bounded(0.1, ge=0, lt=1, help="same file, LoraConfig(lora_dropout=0.1)")
    lr_per_task: dict[str, float] = setting(default_factory=dict, help="scripts_llama/*.sh: lr per task name")
    epochs_per_task: dict[str, int] = setting(default_factory=dict, help="scripts_llama/*.sh, long.sh (MNLI 2)")

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ConfigError(f"rank={self.rank}: the LoRA rank must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout={self.dropout}: must be in [0, 1)")
        if any(v <= 0 for v in self.lr_per_task.values()) or any(v < 0 for v in self.epochs_per_task.values()):
            raise ConfigError(f"lr_per_task={self.lr_per_task} / epochs_per_task={self.epochs_per_task}: "
                              "learning rates must be > 0 and epochs ≥ 0")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank
