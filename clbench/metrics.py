"""Metric math, exactly as defined in DESIGN.md, and the code that runs metric plugins on a cell.

``a[i][j]`` is the score (percent) on task j after training task i, tasks in run order, T tasks.
Footprint metrics never hold more than one row-chunk of a dense ΔW in memory; OO and AWOM never form
ΔW = B·A at all (they reduce to r×r problems).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from clbench.footprints import LowRank, TaskFootprint
from clbench.specs import MetricSpec

DEFAULT_TOLERANCE = 1e-3  # relative "non-zero" threshold: |x| > τ·max|ΔW| (the paper gives none)
CHUNK_ELEMENTS = 1 << 22  # ~16 MB of float32 per dense chunk


@dataclass
class MetricInput:
    matrix: list[list[float]]
    footprints: list[TaskFootprint] | None = None
    report: dict[str, Any] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    tolerance: float = DEFAULT_TOLERANCE


def compute_metrics(specs: Iterable[MetricSpec], inp: MetricInput) -> tuple[dict[str, float | None], dict[str, str]]:
    """Run every metric; one that raises is recorded as an error (and n/a), never as a number."""
    values: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    for spec in specs:
        try:
            value = spec.fn(inp)
        except Exception as exc:
            values[spec.name], errors[spec.name] = None, f"{type(exc).__name__}: {exc}"
            continue
        if value is not None and not math.isfinite(float(value)):
            values[spec.name] = None
            errors[spec.name] = f"not finite: {value}"
        else:
            values[spec.name] = None if value is None else float(value)
    return values, errors


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


# --------------------------------------------------------------------------- footprints
def _rows_per_chunk(shape: Sequence[int]) -> int:
    cols = math.prod(shape[1:]) if len(shape) > 1 else 1
    return max(1, CHUNK_ELEMENTS // max(cols, 1))


def _layer_names(footprints: Sequence[TaskFootprint]) -> list[str]:
    return sorted({n for task in footprints for n in task})


def _shape_of(footprints: Sequence[TaskFootprint], name: str) -> tuple[int, ...]:
    return next(tuple(t[name].shape) for t in footprints if name in t)


def abs_max(fp: Any) -> float:
    if isinstance(fp, LowRank):
        chunk = _rows_per_chunk(fp.shape)
        return max((float(r.abs().max()) for r in fp.rows(chunk)), default=0.0)
    return max((float(r.abs().max()) for r in fp.rows(_rows_per_chunk(fp.shape)) if r.numel()), default=0.0)


def collision_rate(footprints: Sequence[TaskFootprint], tolerance: float = DEFAULT_TOLERANCE) -> float | None:
    """ACR = (2/(T(T−1))) Σ_{i<j} CR_ij, CR_ij = fraction of positions where ΔW_i and ΔW_j are both non-zero.

    Positions are pooled over all layers. Computed in one pass per chunk with the identity
    Σ_{i<j} [nz_i ∧ nz_j] = c(c−1)/2 where c counts the tasks non-zero at a position, so the cost is
    linear, not quadratic, in the number of tasks.
    """
    T = len(footprints)
    if T < 2:
        return None
    names = _layer_names(footprints)
    if not names:
        return None
    pairs_total, positions = 0.0, 0
    for name in names:
        shape = _shape_of(footprints, name)
        chunk = _rows_per_chunk(shape)
        present = [t[name] for t in footprints if name in t]
        thresholds = [tolerance * abs_max(fp) for fp in present]
        iters = [fp.rows(chunk) for fp in present]
        for _ in range(0, shape[0], chunk):
            count = None
            for it, thr in zip(iters, thresholds, strict=True):
                r = next(it)
                nz = (r.abs() > thr).to(torch.int32) if thr > 0 else torch.zeros(r.shape, dtype=torch.int32)
                count = nz if count is None else count + nz
            assert count is not None
            pairs_total += float((count * (count - 1)).sum()) / 2
        positions += math.prod(shape)
    return pairs_total / (positions * T * (T - 1) / 2)


def sparsity_ratio(fp: Any) -> float | None:
    """S*(ΔW) = (mn)^{-1/2}·‖ΔW‖₁/‖ΔW‖₂ (N-LoRA eq. 9 with p=2, q=1); None when ΔW = 0."""
    chunk = _rows_per_chunk(fp.shape)
    l1 = 0.0
    l2sq = 0.0
    for r in fp.rows(chunk):
        l1 += float(r.abs().sum(dtype=torch.float64))
        l2sq += float((r.double() ** 2).sum())
    if l2sq == 0.0:
        return None
    return l1 / math.sqrt(l2sq) / math.sqrt(math.prod(fp.shape))


def generalized_sparsity_rate(footprints: Sequence[TaskFootprint]) -> float | None:
    """GSR: mean of S*(ΔW) over tasks and layers (layers a task left unchanged are skipped)."""
    values = [v for task in footprints for fp in task.values() if (v := sparsity_ratio(fp)) is not None]
    return sum(values) / len(values) if values else None


def _lowrank_only(footprints: Sequence[TaskFootprint] | None) -> bool:
    return bool(footprints) and all(isinstance(fp, LowRank) for t in footprints for fp in t.values())


def orthogonal_overlap(footprints: Sequence[TaskFootprint] | None) -> float | None:
    """OO = Σ_{i<T} ‖A_i A_Tᵀ‖_F² summed over layers (A in PEFT layout, r × in)."""
    if not _lowrank_only(footprints) or len(footprints) < 2:  # type: ignore[arg-type]
        return None
    assert footprints is not None
    last = footprints[-1]
    total = 0.0
    for name, fp in last.items():
        At = fp.A.double()
        for prev in footprints[:-1]:
            if name in prev:
                total += float(((prev[name].A.double() @ At.T) ** 2).sum())
    return total


def _spectral_lowrank(a: LowRank, b: LowRank) -> float:
    """‖ΔW_aᵀ ΔW_b‖₂ for ΔW = s·B·A without forming ΔW: with A_aᵀ = Q_a R_a and A_bᵀ = Q_b R_b,
    ΔW_aᵀΔW_b = Q_a (s_a s_b R_a B_aᵀ B_b R_bᵀ) Q_bᵀ, whose spectral norm is that of the r×r core."""
    Ra = torch.linalg.qr(a.A.double().T, mode="reduced").R
    Rb = torch.linalg.qr(b.A.double().T, mode="reduced").R
    core = (a.scale * b.scale) * (Ra @ (a.B.double().T @ b.B.double()) @ Rb.T)
    return float(torch.linalg.matrix_norm(core, ord=2))


def adapter_weight_overlap(footprints: Sequence[TaskFootprint] | None) -> float | None:
    """AWOM = Σ_{i<T} ‖ΔW_Tᵀ ΔW_i‖₂ summed over layers (low-rank: r×r cores; otherwise dense)."""
    if not footprints or len(footprints) < 2:
        return None
    last = footprints[-1]
    total = 0.0
    for name, fp in last.items():
        for prev in footprints[:-1]:
            if name not in prev:
                continue
            other = prev[name]
            if isinstance(fp, LowRank) and isinstance(other, LowRank):
                total += _spectral_lowrank(fp, other)
            else:
                wt = fp.dense().double().reshape(fp.shape[0], -1)
                wi = other.dense().double().reshape(other.shape[0], -1)
                total += float(torch.linalg.matrix_norm(wt.T @ wi, ord=2))
    return total
