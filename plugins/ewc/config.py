from dataclasses import dataclass

from clbench.config import bounded


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
        "1: the exact per-example empirical Fisher; larger batches are faster but biased low"))
    decay: float = bounded(1.0, ge=0, le=1, help="γ of online EWC: F ← γ·F + F_k")
