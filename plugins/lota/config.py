"""LoTA and LoTTO (Panda et al. 2024, "Lottery Ticket Adaptation"), the sparse baselines of the
Expander-EWC paper (Tables 1-2: "Expander masks with 10% sparsity are applied for LoTA and our method",
i.e. LoTA trains 10 % of each matrix)."""

from __future__ import annotations

from dataclasses import dataclass

from clbench_plugins._shared.masked.config import MaskedTrainingConfig

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class LoTAConfig(MaskedTrainingConfig):
    """Calibrate a mask from the task vector of a short dense run, reset, train only the mask."""

    density: float = bounded(0.1, gt=0, le=1, help=(
        "Expander-EWC paper §6: the same 10 % as its expander masks (LoTA paper default: 90 % sparsity)"))
    lambda_: float = bounded(0.0, ge=0, help=(
        'LoTA has no EWC term; setting λ > 0 gives "LoTA + damped EWC" from the shared code'))
    calibration_epochs: int = bounded(1, ge=1, help=(
        "LoTA: a short dense fine-tuning run gives the task vector; no fixed length published"))
    disjoint: bool = setting(False, help="LoTTO: exclude coordinates of earlier tasks' masks (LoTA §\"LoTTO\")")
    reset: bool = setting(True, help=(
        "LoTA: after calibration, restore the weights and train the sparse mask from the start"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calibration_epochs < 1:
            raise ConfigError(f"calibration_epochs={self.calibration_epochs} must be ≥ 1")


@dataclass(frozen=True)
class LoTTOConfig(LoTAConfig):
    disjoint: bool = setting(True, help="LoTTO: masks of different tasks never share a coordinate")
