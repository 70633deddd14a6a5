"""Metric math, exactly as defined in README.md (section "Metrics"), and a metric plugin's input (:class:`MetricInput`).

``a[i][j]`` is the score (percent) on task j after training task i, tasks in run order, T tasks.
Footprint metrics never hold more than one row-chunk of a dense ΔW in memory; OO and AWOM never form
ΔW = B·A at all (they reduce to r×r problems).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from clbench.config import MetricsConfig
from clbench.footprint_metrics import (
    CHUNK_ELEMENTS,
    DEFAULT_TOLERANCE,
    AcrForm,
    FootprintScan,
    abs_max,
    adapter_weight_overlap,
    collision_rate,
    generalized_sparsity_rate,
    last_adapter_norm,
    lowrank_only,
    mean_nuclear_norm,
    normalised_awom,
    normalised_overlap,
    nuclear_norm,
    nuclear_norms,
    orthogonal_overlap,
    scan,
    sparsity_ratio,
    spectral_norm,
    thresholds,
)
from clbench.footprints import TaskFootprint


@dataclass
class MetricInput:
    matrix: list[list[float]]
    footprints: list[TaskFootprint] | None = None
    report: dict[str, Any] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    tolerance: float = DEFAULT_TOLERANCE
    samples: int = 0  # GSR/ACR: 0 exact; N > 0 the sampled estimator at ≈N positions per matrix (see scan)
    cache: dict[str, Any] = field(default_factory=dict)  # shared by the metrics of one cell (one scan)
    # the metric forms of MetricsConfig (its comments say what each means)
    acr: AcrForm = MetricsConfig.acr
    awom: Literal["eq8", "transposed"] = MetricsConfig.awom
    delta_w: Literal["applied", "factors"] = MetricsConfig.delta_w
    device: str = MetricsConfig.device  # where AWOM's dense float64 linear algebra runs
    initial: list[float] | None = None  # the untrained model's score on every task (FWT's b_j); None: not recorded
    scenario: str | None = None  # the stream's test-time scenario (clbench.data.SCENARIOS); None: not recorded

    @classmethod
    def with_settings(cls, settings: MetricsConfig, **fields: Any) -> MetricInput:
        """The input of a cell whose metrics settings are ``settings``."""
        return cls(**fields, **{f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)})

    @property
    def factors(self) -> bool:
        return self.delta_w == "factors"

    def footprint_scan(self) -> FootprintScan | None:
        """The one streaming pass GSR and ACR share (computed on first use)."""
        if not self.footprints:
            return None
        key = f"scan:{self.tolerance}:{self.samples}:{self.acr}:{self.delta_w}"
        if key not in self.cache:
            self.cache[key] = scan(self.footprints, self.tolerance, self.samples, acr=self.acr, factors=self.factors)
        return self.cache[key]


# --------------------------------------------------------------------------- accuracy matrix
def average_accuracy(a: Sequence[Sequence[float]]) -> float:
    """AA = (1/T) Σ_j a[T][j]."""
    return sum(a[-1]) / len(a[-1])


def forgetting_rate(a: Sequence[Sequence[float]]) -> float | None:
    """F.Ra = (1/(T−1)) Σ_{j<T} (max_{k∈[j,T−1]} a[k][j] − a[T][j])  (Chaudhry et al.)."""
    T = len(a)
    if T < 2:
        return None
    return sum(max(a[k][j] for k in range(j, T - 1)) - a[T - 1][j] for j in range(T - 1)) / (T - 1)


def backward_transfer(a: Sequence[Sequence[float]]) -> float | None:
    """BWT = (1/(T−1)) Σ_{j<T} (a[T][j] − a[j][j])."""
    T = len(a)
    if T < 2:
        return None
    return sum(a[T - 1][j] - a[j][j] for j in range(T - 1)) / (T - 1)


def unseen_task_score(a: Sequence[Sequence[float]]) -> float | None:
    """Score on the last task after training tasks 1..T−1: a[T−1][T] (zero-shot on the unseen task)."""
    T = len(a)
    return None if T < 2 else a[T - 2][T - 1]


def learning_accuracy(a: Sequence[Sequence[float]]) -> float:
    """LA = (1/T) Σ_j a[j][j]: each task's score just after training it (plasticity; Riemer et al. 2019)."""
    return sum(a[j][j] for j in range(len(a))) / len(a)


def average_incremental_accuracy(a: Sequence[Sequence[float]]) -> float:
    """AIA = (1/T) Σ_i (1/i) Σ_{j≤i} a[i][j]: the mean, over the run, of the average score on the tasks seen so far."""
    T = len(a)
    return sum(sum(a[i][: i + 1]) / (i + 1) for i in range(T)) / T


def forward_transfer(
    a: Sequence[Sequence[float]], initial: Sequence[float | None] | None, scenario: str | None = None
) -> float | None:
    """FWT = (1/(T−1)) Σ_{j>1} (a[j−1][j] − b_j), b_j the untrained model's score on task j (Lopez-Paz & Ranzato
    2017); None without b (a result recorded before it was), with one task, or on a class-incremental stream: there
    a model that has not seen task j's labels cannot predict them (its logits are clbench.model.MASKED), so a[j−1][j] is 0 by
    construction and the number would be −mean(b_j) for every method, a property of the untrained model only."""
    T = len(a)
    if scenario == "class-incremental":
        return None
    if T < 2 or initial is None or len(initial) != T or any(initial[j] is None for j in range(1, T)):
        return None
    return sum(a[j - 1][j] - float(cast(float, initial[j])) for j in range(1, T)) / (T - 1)


__all__ = [  # the matrix metrics here, the footprint metrics from clbench.footprint_metrics
    "AcrForm",
    "CHUNK_ELEMENTS",
    "DEFAULT_TOLERANCE",
    "FootprintScan",
    "MetricInput",
    "abs_max",
    "adapter_weight_overlap",
    "average_accuracy",
    "average_incremental_accuracy",
    "backward_transfer",
    "collision_rate",
    "forgetting_rate",
    "forward_transfer",
    "generalized_sparsity_rate",
    "last_adapter_norm",
    "learning_accuracy",
    "lowrank_only",
    "mean_nuclear_norm",
    "normalised_awom",
    "normalised_overlap",
    "nuclear_norm",
    "nuclear_norms",
    "orthogonal_overlap",
    "scan",
    "sparsity_ratio",
    "spectral_norm",
    "thresholds",
    "unseen_task_score",
]
