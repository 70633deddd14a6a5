from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class LwFConfig:
    """Learning without Forgetting (Li & Hoiem, ECCV 2016 / TPAMI 2017).

    Defaults from the paper: temperature T = 2 and loss balance λ_o = 1 for the distillation term
    on the outputs of the previous model on the new task's inputs.
    """

    lambda_: float = bounded(1.0, ge=0)
    temperature: float = bounded(2.0, gt=0, help="logits are divided by it")
