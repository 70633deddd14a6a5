from dataclasses import dataclass
from typing import Literal

from clbench.config import setting


@dataclass(frozen=True)
class JointConfig:
    """Multi-task upper bound."""

    schedule: Literal["cumulative", "final"] = setting("cumulative", help=(
        "\"cumulative\": after each task, train on the union of the tasks so far, from the previous weights (every row "
        "of the matrix an upper bound); \"final\": train nothing until the last task, then the union of every task "
        "once from the untrained weights (the DER paper's JOINT, Mammoth models/joint.py, which re-creates the "
        "network: the rows before the last are the untrained model's)"))
