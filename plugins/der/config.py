from dataclasses import dataclass
from typing import Literal

from clbench.config import bounded, setting


@dataclass(frozen=True)
class DERConfig:
    """Dark Experience Replay (Buzzega et al., NeurIPS 2020): a reservoir buffer of the stream's examples with the
    logits the model gave them when they were stored; the loss adds α·‖f(x') − z'‖² over a replayed batch (eq. 6).
    DER++ also replays labels: + β·CE(f(x''), y'') over a second batch (eq. 7)."""

    buffer_size: int = bounded(200, ge=1, help="the paper's smallest buffer (Table 2: 200, 500, 5120); recorded")
    alpha: float = bounded(0.3, ge=0, help="the logit-matching weight; the paper grid-searches it per benchmark")
    beta: float = bounded(0.0, ge=0, help="DER++'s label replay weight (DER: 0)")
    replay_batch_size: int = bounded(0, ge=0, help="0: the training batch size")
    stored_logits: Literal["all", "seen"] = setting("all", help=(
        "Class-incremental streams under the masked head (train.head=masked), where the model masks the logits of "
        "classes not seen yet while it trains: \"all\" stores every class's logit as the unmasked head computes it, "
        "\"seen\" the masked ones and matches the seen ones only. Neither is the paper's: its network has no mask, "
        "so its later classes' logits were trained down by every task's loss before they were stored, which the "
        "masked head's were not; the paper's form is train.head=full, under which this setting has no effect "
        "(docs/parity.md)"))
    logits_at: Literal["insertion", "task_end"] = setting("insertion", help=(
        "When an example's logits are stored: \"insertion\", as it is trained on (the paper's Algorithm 1), or "
        "\"task_end\", recomputed for the task's examples in the buffer when the task ends (Avalanche 0.6's DER "
        "stores them then)"))


@dataclass(frozen=True)
class DERPPConfig(DERConfig):
    beta: float = bounded(0.5, ge=0, help="DER++ (eq. 7); the paper grid-searches it per benchmark")
