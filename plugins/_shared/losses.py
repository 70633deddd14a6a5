"""Loss pieces more than one built-in method uses."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def distillation(new_logits: Tensor, old_logits: Tensor, temperature: float) -> Tensor:
    """Hinton's KD: KL(softmax(old/T) ‖ softmax(new/T))·T², averaged over the batch (LwF's term, DGR's soft
    targets)."""
    t = temperature
    return F.kl_div(F.log_softmax(new_logits / t, -1), F.log_softmax(old_logits / t, -1),
                    log_target=True, reduction="batchmean") * t * t
