from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class DERConfig:
    """Dark Experience Replay (Buzzega et al., NeurIPS 2020): a reservoir buffer of the stream's examples with the
    logits the model gave them when they were stored; the loss adds α·‖f(x') − z'‖² over a replayed batch (eq. 6).
    DER++ also replays labels: + β·CE(f(x''), y'') over a second batch (eq. 7)."""

    buffer_size: int = bounded(200, ge=1)  # the paper's smallest buffer (Table 2: 200, 500, 5120); recorded
    alpha: float = bounded(0.3, ge=0)  # the logit-matching weight; the paper grid-searches it per benchmark
    beta: float = bounded(0.0, ge=0)  # DER++'s label replay weight (DER: 0)
    replay_batch_size: int = bounded(0, ge=0)  # 0: the training batch size


@dataclass(frozen=True)
class DERPPConfig(DERConfig):
    beta: float = bounded(0.5, ge=0)  # DER++ (eq. 7); the paper grid-searches it per benchmark
