"""N-LoRA: IncLoRA + an l1 penalty that makes each task's update sparse (few parameter collisions)."""

from __future__ import annotations

from clbench_plugins._shared.lora.method import LoRAMethod, task_value
from torch import Tensor

from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.model import CLModel

from .config import NLoRAConfig


def l1(A: Tensor, B: Tensor, form: str) -> Tensor:
    """Code: ‖A·B‖₁ (r×r, PEFT layout A r×in, B out×r); paper: ‖B·A‖₁ = ‖ΔW‖₁ (out×in, scale left out)."""
    return (A @ B).abs().sum() if form == "code" else (B @ A).abs().sum()


class NLoRA(LoRAMethod):
    config: NLoRAConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if self.config.penalty == "code":
            odd = [n for n, (A, B) in self.adapters.current().items() if A.shape[1] != B.shape[0]]
            if odd:
                raise ConfigError(f"nlora.penalty=code takes ‖A·B‖₁ of the r×r product, which needs square "
                                  f"targets; {odd[0]!r} is not square — use nlora.penalty=paper")

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        c = self.config
        base = c.lambda_ if c.penalty == "code" else c.lambda_paper
        lam = task_value(base, c.lambda_per_task, batch.task)
        if lam <= 0:
            return {}
        return {"l1": lam * sum(l1(A, B, c.penalty) for A, B in self.adapters.current().values())}
