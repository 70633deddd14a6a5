from dataclasses import dataclass
from typing import Literal

from clbench.config import bounded, setting


@dataclass(frozen=True)
class ReplayConfig:
    """Experience replay with a reservoir buffer (Vitter's algorithm R; Chaudhry et al. 2019, "On Tiny
    Episodic Memories in Continual Learning": a small buffer of past examples, a replay batch per step)."""

    buffer_size: int = bounded(200, ge=1)
    replay_batch_size: int = bounded(0, ge=0, help="0: the training batch size")
    weight: float = bounded(1.0, ge=0, help=(
        "weight of the replay loss next to the current task's (loss=separate; loss=combined has none)"))
    fill: Literal["task_end", "during"] = setting("task_end", help=(
        "When examples enter the reservoir: \"task_end\", a finished task's examples (in shuffled order) when it ends, "
        "kept as references (any modality); \"during\", each trained batch after its replay is drawn, from the first "
        "batch of the first task, kept as copies of its tensors (the DER paper's ER, Mammoth models/er.py; Chaudhry "
        "et al. 2019's reservoir ER), drawn without replacement"))
    loss: Literal["separate", "combined"] = setting("separate", help=(
        "\"separate\": the task loss plus weight × the replayed batch's mean loss; \"combined\": one mean loss over "
        "the batch and the replayed examples together (Mammoth's ER concatenates them), i.e. each example weighs the "
        "same whichever batch it came from"))
