"""O-LoRA: IncLoRA + an orthogonality penalty between the new A and the previous tasks' A's + L2."""

from __future__ import annotations

from clbench_plugins._shared.lora.method import LoRAMethod, task_value
from torch import Tensor

from clbench.data import Batch

from .config import OLoRAConfig


def orthogonality(previous: Tensor, new: Tensor, form: str) -> Tensor:
    """Code: Σ|A_prev A_newᵀ| (entrywise L1 of the r_sum×r product); paper: Σ (A_prev A_newᵀ)²."""
    product = previous @ new.T
    return product.abs().sum() if form == "code" else (product**2).sum()


def l2(weights: list[Tensor], form: str) -> Tensor:
    """Code: Σ‖W‖_F (torch.norm, not squared); paper: Σ‖W‖_F²."""
    return sum((w.norm() if form == "code" else (w**2).sum()) for w in weights)  # type: ignore[return-value]


class OLoRA(LoRAMethod):
    config: OLoRAConfig

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        c = self.config
        lam1 = task_value(c.lambda1, c.lambda1_per_task, batch.task)
        lam2 = task_value(c.lambda2, c.lambda2_per_task, batch.task)
        terms: dict[str, Tensor] = {}
        current = self.adapters.current()
        previous = self.adapters.previous_A()
        if lam1 > 0 and previous:
            terms["orth"] = lam1 * sum(orthogonality(previous[n], A, c.penalty) for n, (A, _) in current.items())
        if lam2 > 0:
            terms["l2"] = lam2 * l2([w for pair in current.values() for w in pair], c.penalty)
        return terms
