from dataclasses import dataclass
from typing import Literal

from clbench_plugins.lora.config import LoRAConfig

from clbench.config import setting


@dataclass(frozen=True)
class SeqLoRAConfig(LoRAConfig):
    """SeqLoRA (the N-LoRA/O-LoRA baseline): one LoRA trained through the whole sequence, no regulariser.

    ``footprint``: ``snapshot`` reports the adapter as it is after task i — N-LoRA §4.1 defines OO,
    AWOM, GSR and ACR on "A_i and ΔW_i = A_iB_i, both after training on the i-th task" — while
    ``increment`` reports what task i changed, ΔW_i − ΔW_{i−1} (rank ≤ 2r).
    """

    footprint: Literal["snapshot", "increment"] = setting("snapshot", help="N-LoRA paper §4.1 (metric definitions)")
