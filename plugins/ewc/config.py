from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class EWCConfig:
    """Elastic Weight Consolidation (Kirkpatrick et al., PNAS 2017).

    The penalty is (λ/2)·Σ F·(θ − θ*)² with F the diagonal empirical Fisher, accumulated over tasks
    (F ← F + F_k) and θ* the weights after the previous task — the single-anchor form of
    Schwarz et al. 2018 ("online EWC", with γ = 1), which keeps memory O(parameters).
    """

    lambda_: float = bounded(100.0, ge=0, help=(
        "the paper tunes λ per benchmark; the quick presets come from `clbench tune` (docs/tuning.md)"))
    fisher_samples: int = bounded(256, ge=0, help="examples of the finished task used to estimate F (0: all)")
    fisher_batch_size: int = bounded(1, ge=1, help=(
        "1: the exact per-example empirical Fisher (vectorised over examples); larger batches are biased low"))
    fisher_weight: Literal["none", "probability"] = setting("none", help=(
        "how each example's squared gradient counts in F: \"none\", equally (the empirical Fisher); "
        "\"probability\", times the model's probability of the example's label (Mammoth's ewc_on, models/ewc_on.py "
        "at the DER paper's code, neurips2020: exp_cond_prob). Needs fisher_batch_size=1"))
    decay: float = bounded(1.0, ge=0, le=1, help="γ of online EWC: F ← γ·F + F_k")

    # added after results were committed: at this value left out of a cell's identity (clbench.cell.identity)
    IDENTITY_SINCE: ClassVar[dict[str, Any]] = {"fisher_weight": "none"}

    def __post_init__(self) -> None:
        if self.fisher_weight != "none" and self.fisher_batch_size != 1:
            raise ConfigError(f"fisher_weight={self.fisher_weight!r} weighs each example's squared gradient: it needs "
                             f"fisher_batch_size=1, not {self.fisher_batch_size}")
