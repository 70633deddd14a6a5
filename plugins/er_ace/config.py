from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class ERACEConfig:
    """ER-ACE (Caccia et al., ICLR 2022, "New Insights on Reducing Abrupt Representation Change in Online Continual
    Learning"): experience replay whose incoming batch's cross-entropy is asymmetric — over the classes present in
    that batch only (eq. 4, ACE) — while the replayed batch's is over every class seen."""

    buffer_size: int = bounded(200, ge=1, help="a reservoir of the stream's examples; recorded")
    replay_batch_size: int = bounded(0, ge=0, help="0: the training batch size")
