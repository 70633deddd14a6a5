from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class ReplayConfig:
    """Experience replay with a reservoir buffer (Vitter's algorithm R; Chaudhry et al. 2019, "On Tiny
    Episodic Memories in Continual Learning": a small buffer of past examples, a replay batch per step)."""

    buffer_size: int = bounded(200, ge=1)
    replay_batch_size: int = bounded(0, ge=0, help="0: the training batch size")
    weight: float = bounded(1.0, ge=0, help="weight of the replay loss next to the current task's")
