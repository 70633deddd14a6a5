"""The footprint metrics, exactly as defined in README.md (section "Metrics"): GSR, ACR (one streaming scan of
the footprints, exact or sampled), OO, AWOM and their normalised forms, nuclear norms.

Dense footprints are never held in memory beyond one row-chunk of ΔW; OO and AWOM never form ΔW = B·A for
low-rank footprints (they reduce to r×r problems). :mod:`clbench.metrics` re-exports the public names."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import scipy.linalg
import torch

from clbench.config import MetricsConfig
from clbench.footprints import LowRank, Masked, TaskFootprint

DEFAULT_TOLERANCE = MetricsConfig.tolerance  # relative "non-zero" threshold: |x| > τ·max|ΔW|
AcrForm = Literal["layer", "task", "absolute"]
CHUNK_ELEMENTS = 1 << 22  # ~16 MB of float32 per dense chunk


def _rows_per_chunk(shape: Sequence[int]) -> int:
    cols = math.prod(shape[1:]) if len(shape) > 1 else 1
    return max(1, CHUNK_ELEMENTS // max(cols, 1))


def _layer_names(footprints: Sequence[TaskFootprint]) -> list[str]:
    return sorted({n for task in footprints for n in task})


def _shape_of(footprints: Sequence[TaskFootprint], name: str) -> tuple[int, ...]:
    return next(tuple(t[name].shape) for t in footprints if name in t)


def _factor_norms(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """‖B_a‖ of every row of B and ‖A_b‖ of every column of A: |(B·A)_ab| ≤ ‖B_a‖·‖A_b‖ (Cauchy–Schwarz)."""
    return B.norm(dim=1), (A * A).sum(dim=0).sqrt()  # A.norm(dim=0) reduces across rows ~20× slower at r × 4096


def _lowrank_abs_max(fp: LowRank) -> float:
    """max|ΔW| of ΔW = s·B·A, exactly, visiting few entries. |ΔW_ab| ≤ ‖s·B_a‖·‖A_b‖ (Cauchy–Schwarz):
    a first guess ``best`` from the rows of the largest norms and the columns of the largest norms, then
    only rows a with ‖s·B_a‖·max‖A‖ > best and columns b with max‖s·B‖·‖A_b‖ > best can hold a larger
    entry, and that block is evaluated (in row chunks, so memory stays bounded if the bound prunes little)."""
    A = fp.A.float()
    B = fp.B.float() * fp.scale
    if not A.numel() or not B.numel():
        return 0.0
    row_norms, col_norms = _factor_norms(A, B)
    k = 16
    top_rows = row_norms.topk(min(k, row_norms.numel())).indices
    top_cols = col_norms.topk(min(k, col_norms.numel())).indices
    best = max(float((B[top_rows] @ A).abs().max()), float((B @ A[:, top_cols]).abs().max()))
    rows = (row_norms * col_norms.max() > best).nonzero().squeeze(1)
    cols = (col_norms * row_norms.max() > best).nonzero().squeeze(1)
    if rows.numel() and cols.numel():
        A_cols = A[:, cols]
        chunk = _rows_per_chunk((rows.numel(), cols.numel()))
        for s in range(0, rows.numel(), chunk):
            best = max(best, float((B[rows[s : s + chunk]] @ A_cols).abs().max()))
    return best


def abs_max(fp: Any) -> float:
    if isinstance(fp, LowRank):
        return _lowrank_abs_max(fp)
    return max((float(r.abs().max()) for r in fp.rows(_rows_per_chunk(fp.shape)) if r.numel()), default=0.0)


def _frobenius_sq(fp: LowRank) -> float:
    """‖s·B·A‖_F² = s²·tr((AAᵀ)(BᵀB)), an r×r computation."""
    A, B = fp.A.double(), fp.B.double()
    return float(fp.scale**2 * ((A @ A.T) * (B.T @ B)).sum())


@dataclass
class FootprintScan:
    """What GSR and ACR need, gathered in one pass over every ΔW (or one sample of positions)."""

    sparsity: list[float]  # S*(ΔW) per (task, layer) with ΔW ≠ 0
    pairs: float  # Σ over positions of the number of task pairs both non-zero there
    positions: int  # positions pooled over layers
    tasks: int
    samples: int = 0  # 0: exact; otherwise positions sampled per layer

    def collision_rate(self) -> float | None:
        if self.tasks < 2 or not self.positions:
            return None
        return self.pairs / (self.positions * self.tasks * (self.tasks - 1) / 2)

    def sparsity_rate(self) -> float | None:
        return sum(self.sparsity) / len(self.sparsity) if self.sparsity else None


def thresholds(
    footprints: Sequence[TaskFootprint], tolerance: float, acr: AcrForm = "layer", factors: bool = False
) -> list[dict[str, float]]:
    """ACR's "non-zero" threshold of every task and layer: |x| > threshold, x an entry of the applied ΔW.

    ``layer``: τ·max|ΔW_t| of that layer; ``task``: τ·max|ΔW_t| over all the task's layers, so a layer the
    task shrank as a whole counts as zero; ``absolute``: τ on ΔW as ``factors`` defines it (B·A without α/r
    when true: on the applied α/r·B·A that is τ·α/r). N-LoRA eq. 11 names none of them: τ = 0 is its literal
    form (every entry not exactly 0)."""
    if acr == "absolute":
        return [
            {n: tolerance * (fp.scale if factors and isinstance(fp, LowRank) else 1.0) for n, fp in t.items()}
            for t in footprints
        ]
    if acr not in ("layer", "task"):
        raise ValueError(f"acr={acr!r}: choose layer, task or absolute")
    # a mask is its own support: its layers need no threshold and are not a pass over their values
    maxima = [{n: 0.0 if isinstance(fp, Masked) else abs_max(fp) for n, fp in t.items()} for t in footprints]
    if acr == "task":
        maxima = [dict.fromkeys(m, max(m.values(), default=0.0)) for m in maxima]
    return [{n: tolerance * v for n, v in m.items()} for m in maxima]


def scan(
    footprints: Sequence[TaskFootprint],
    tolerance: float = DEFAULT_TOLERANCE,
    samples: int = 0,
    seed: int = 0,
    acr: AcrForm = "layer",
    factors: bool = False,
) -> FootprintScan:
    """One streaming pass: per layer, ‖ΔW_t‖₁ and ‖ΔW_t‖₂ of every task and the per-position count c of
    tasks non-zero there (|x| > the :func:`thresholds` of ``acr``; a :class:`Masked` footprint is non-zero on
    its mask, whatever its values); Σ_{i<j}[nz_i ∧ nz_j] = c(c−1)/2, so the pass is linear in T.

    ``samples > 0`` is the *sampled estimator*, for low-rank footprints only: at ``samples`` positions
    per layer drawn uniformly (the same for every task) ΔW is evaluated exactly (r multiply-adds each);
    ‖ΔW‖₁ and the collision fraction are then unbiased estimates, ‖ΔW‖₂ and the threshold stay exact.
    """
    out = FootprintScan([], 0.0, 0, len(footprints), samples)
    g = torch.Generator().manual_seed(seed)
    cuts = thresholds(footprints, tolerance, acr, factors)
    for name in _layer_names(footprints):
        present = [t[name] for t in footprints if name in t]
        shape = _shape_of(footprints, name)
        layer_cuts = [c[name] for c in cuts if name in c]
        if samples:
            l1, l2sq, pairs = _scan_sampled(present, shape, layer_cuts, samples, g)
        else:
            l1, l2sq, pairs = _scan_exact(present, shape, layer_cuts)
        size = math.prod(shape)
        out.sparsity += [a / math.sqrt(b) / math.sqrt(size) for a, b in zip(l1, l2sq, strict=True) if b > 0]
        out.pairs += pairs
        out.positions += size
    return out


def _scan_exact(
    present: list[Any], shape: tuple[int, ...], thresholds: list[float]
) -> tuple[list[float], list[float], float]:
    if all(isinstance(fp, LowRank) for fp in present):
        return _scan_lowrank(present, shape, thresholds)
    chunk = _rows_per_chunk(shape)
    l1 = [0.0] * len(present)
    l2sq = [0.0] * len(present)
    iters = [fp.rows(chunk) for fp in present]
    supports = [fp.mask.reshape(shape[0], -1).split(chunk) if isinstance(fp, Masked) else None for fp in present]
    pairs = 0.0
    for i in range(-(-shape[0] // chunk)):
        count: torch.Tensor | None = None
        for k, (it, thr) in enumerate(zip(iters, thresholds, strict=True)):
            r = next(it)
            l2sq[k] += float((r.double() ** 2).sum())
            a = r.abs()
            l1[k] += float(a.sum(dtype=torch.float64))
            support = supports[k]
            nz = support[i].reshape(a.shape) if support is not None else a > thr
            count = nz.to(torch.int16) if count is None else count.add_(nz)
        assert count is not None
        pairs += float((count.int() * (count.int() - 1)).sum(dtype=torch.float64)) / 2
    return l1, l2sq, pairs


SCAN_ROWS = 256  # rows of a low-rank ΔW evaluated at once: 4 MB of float32 at 4096 columns, cache-friendly


def _scan_lowrank(
    present: list[LowRank], shape: tuple[int, ...], thresholds: list[float]
) -> tuple[list[float], list[float], float]:
    """The exact pass for low-rank footprints: each row block of s·B·A is evaluated into one reused
    buffer (no allocation per block), its |·| summed and thresholded; nothing larger is ever held."""
    rows = max(1, min(SCAN_ROWS, _rows_per_chunk(shape)))
    As = [fp.A.float() for fp in present]
    Bs = [fp.B.float() * fp.scale for fp in present]
    l1 = [0.0] * len(present)
    l2sq = [_frobenius_sq(fp) for fp in present]
    buf = torch.empty(rows, shape[1])
    nz = torch.empty(rows, shape[1], dtype=torch.bool)
    count = torch.empty(rows, shape[1], dtype=torch.int16)
    pairs = 0.0
    for s in range(0, shape[0], rows):
        n = min(rows, shape[0] - s)
        b, z, c = buf[:n], nz[:n], count[:n]
        c.zero_()
        for k in range(len(present)):
            torch.mm(Bs[k][s : s + n], As[k], out=b)
            b.abs_()
            l1[k] += float(b.sum(dtype=torch.float64))
            torch.gt(b, thresholds[k], out=z)
            c.add_(z)
        ci = c.int()
        pairs += float((ci * (ci - 1)).sum(dtype=torch.float64)) / 2
    return l1, l2sq, pairs


def _scan_sampled(
    present: list[Any], shape: tuple[int, ...], thresholds: list[float], samples: int, g: torch.Generator
) -> tuple[list[float], list[float], float]:
    """ΔW on a random grid of ≈√N rows × √N columns, drawn without replacement: every position is in the
    grid with the same probability, and the grid is one small matmul per task (s·B[rows] @ A[:, cols])
    instead of N scattered r-length dot products. The collision count over the grid is unbiased. For
    ‖ΔW‖₁ a grid alone is ~7× noisier than N independent positions (rows and columns of large norm
    come in whole), so it is a ratio estimator against the known Σ_ab ‖s·B_a‖·‖A_b‖, which takes the
    row/column norm effects out: its spread matches N independent positions, its bias is O(1/N).
    N ≥ the matrix size gives the whole matrix, i.e. the exact values."""
    if not all(isinstance(fp, LowRank) for fp in present):
        raise ValueError("the sampled estimator needs low-rank footprints; use samples=0 (exact)")
    n_rows = min(shape[0], math.isqrt(samples - 1) + 1)
    n_cols = min(shape[1], -(-samples // n_rows))
    rows = torch.randperm(shape[0], generator=g)[:n_rows]
    cols = torch.randperm(shape[1], generator=g)[:n_cols]
    l1, l2sq = [], []
    count = torch.zeros(n_rows, n_cols, dtype=torch.int32)
    for fp, thr in zip(present, thresholds, strict=True):
        A, B = fp.A.float(), fp.B.float() * fp.scale
        values = (B[rows] @ A[:, cols]).abs_()
        row_norms, col_norms = (n.double() for n in _factor_norms(A, B))
        grid_bound = float(row_norms[rows].sum() * col_norms[cols].sum())
        full_bound = float(row_norms.sum() * col_norms.sum())
        l1.append(float(values.sum(dtype=torch.float64)) * full_bound / grid_bound if grid_bound > 0 else 0.0)
        l2sq.append(_frobenius_sq(fp))
        count += values > thr
    pairs = float((count * (count - 1)).sum(dtype=torch.float64)) / 2 * math.prod(shape) / (n_rows * n_cols)
    return l1, l2sq, pairs


def collision_rate(
    footprints: Sequence[TaskFootprint],
    tolerance: float = DEFAULT_TOLERANCE,
    samples: int = 0,
    acr: AcrForm = "layer",
    factors: bool = False,
) -> float | None:
    """ACR = (2/(T(T−1))) Σ_{i<j} CR_ij, CR_ij = fraction of positions where ΔW_i and ΔW_j are both non-zero.

    Positions are pooled over all layers; see :func:`scan` for how it streams and what ``samples`` does,
    :func:`thresholds` for ``acr`` and ``factors``.
    """
    if len(footprints) < 2 or not _layer_names(footprints):
        return None
    return scan(footprints, tolerance, samples, acr=acr, factors=factors).collision_rate()


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


def generalized_sparsity_rate(footprints: Sequence[TaskFootprint], samples: int = 0) -> float | None:
    """GSR: mean of S*(ΔW) over tasks and layers (layers a task left unchanged are skipped)."""
    return scan(footprints, samples=samples).sparsity_rate()


def lowrank_only(footprints: Sequence[TaskFootprint] | None) -> bool:
    if not footprints:
        return False
    return all(isinstance(fp, LowRank) for t in footprints for fp in t.values())


def _as_lowrank(footprints: Sequence[TaskFootprint]) -> Sequence[dict[str, LowRank]]:
    """``footprints`` typed as what :func:`lowrank_only` checked them to be (no copy, no check)."""
    return cast("Sequence[dict[str, LowRank]]", footprints)


def orthogonal_overlap(footprints: Sequence[TaskFootprint] | None) -> float | None:
    """OO = Σ_{i<T} ‖A_i A_Tᵀ‖_F² summed over layers (A in PEFT layout, r × in)."""
    if footprints is None or not lowrank_only(footprints) or len(footprints) < 2:
        return None
    lowrank = _as_lowrank(footprints)
    last = lowrank[-1]
    total = 0.0
    for name, fp in last.items():
        At = fp.A.double()
        for prev in lowrank[:-1]:
            if name in prev:
                total += float(((prev[name].A.double() @ At.T) ** 2).sum())
    return total


def normalised_overlap(footprints: Sequence[TaskFootprint] | None) -> float | None:
    """OO / Σ_{i<T} Σ_layers ‖A_i‖_F² ‖A_T‖_F², in [0, 1] (‖XYᵀ‖_F ≤ ‖X‖_F ‖Y‖_F): OO without the adapters'
    size, which otherwise rewards an adapter that barely moved."""
    oo = orthogonal_overlap(footprints)
    if oo is None:
        return None
    assert footprints is not None  # orthogonal_overlap is None without low-rank footprints
    lowrank = _as_lowrank(footprints)
    last = lowrank[-1]
    denom = sum(
        float((prev[name].A.double() ** 2).sum() * (fp.A.double() ** 2).sum())
        for name, fp in last.items()
        for prev in lowrank[:-1]
        if name in prev
    )
    return oo / denom if denom > 0 else None


def last_adapter_norm(footprints: Sequence[TaskFootprint] | None) -> float | None:
    """‖A_T‖_F over all layers (√Σ_layers ‖A_T‖_F²), printed beside OO: an orthogonality penalty can be
    met by shrinking the new adapter towards zero (cmnfriend/O-LoRA issue #39), which this shows."""
    if footprints is None or not lowrank_only(footprints):
        return None
    return math.sqrt(sum(float((fp.A.double() ** 2).sum()) for fp in _as_lowrank(footprints)[-1].values()))


def _r_factor(fp: LowRank) -> torch.Tensor:
    return torch.linalg.qr(fp.A.double().T, mode="reduced").R


def _r_factor_b(fp: LowRank) -> torch.Tensor:
    return torch.linalg.qr(fp.B.double(), mode="reduced").R


def _scale(fp: LowRank, factors: bool) -> float:
    return 1.0 if factors else fp.scale


def _spectral_lowrank(
    a: LowRank,
    b: LowRank,
    ra: torch.Tensor | None = None,
    rb: torch.Tensor | None = None,
    eq8: bool = True,
    factors: bool = False,
) -> float:
    """AWOM's term for ΔW = s·B·A (PEFT layout) without forming ΔW; the spectral norm of an r×r core.

    eq8: ‖ΔW_a ΔW_bᵀ‖₂ = ‖s_a s_b B_a (A_a A_bᵀ) B_bᵀ‖₂; with B = Q R, = ‖s_a s_b R_a (A_a A_bᵀ) R_bᵀ‖₂.
    transposed: ‖ΔW_aᵀ ΔW_b‖₂ = ‖s_a s_b A_aᵀ (B_aᵀ B_b) A_b‖₂; with Aᵀ = Q R, = ‖s_a s_b R_a (B_aᵀ B_b) R_bᵀ‖₂.
    ``ra``/``rb``: those R factors when already computed."""
    r_of = _r_factor_b if eq8 else _r_factor
    Ra = r_of(a) if ra is None else ra
    Rb = r_of(b) if rb is None else rb
    inner = a.A.double() @ b.A.double().T if eq8 else a.B.double().T @ b.B.double()
    core = (_scale(a, factors) * _scale(b, factors)) * (Ra @ inner @ Rb.T)
    return float(torch.linalg.matrix_norm(core, ord=2))


def adapter_weight_overlap(
    footprints: Sequence[TaskFootprint] | None, awom: str = "eq8", factors: bool = False, device: str = "cpu"
) -> float | None:
    """AWOM = Σ_{i<T} ‖ΔW_Tᵀ ΔW_i‖₂ of N-LoRA eq. 8, summed over layers (low-rank: r×r cores; otherwise dense).

    Eq. 8 writes ΔW = A·B with A ∈ R^{d×r} the input-side factor (as in eqs. 1 and 7), so its ΔW is PEFT's
    transposed and its ΔW_Tᵀ ΔW_i is ΔW_T ΔW_iᵀ here (out × out: it sums over the input index). ``awom=
    "transposed"`` is the other product, ΔW_Tᵀ ΔW_i in PEFT's layout (in × in). ``factors``: LoRA ΔW without α/r.
    ``device``: where the dense products run (``metrics.device``; the low-rank ones are r×r, on the CPU).
    """
    if awom not in ("eq8", "transposed"):
        raise ValueError(f"awom={awom!r}: choose eq8 or transposed")
    if not footprints or len(footprints) < 2:
        return None
    eq8 = awom == "eq8"
    last = footprints[-1]
    total = 0.0
    for name, fp in last.items():
        r_last = (_r_factor_b(fp) if eq8 else _r_factor(fp)) if isinstance(fp, LowRank) else None
        dense_prev = []
        for prev in footprints[:-1]:
            if name not in prev:
                continue
            other = prev[name]
            if isinstance(fp, LowRank) and isinstance(other, LowRank):
                total += _spectral_lowrank(fp, other, r_last, eq8=eq8, factors=factors)
            else:
                dense_prev.append(_dense_2d(other, factors, eq8))
        if dense_prev:
            last_2d = _dense_2d(fp, factors, eq8)
            total += sum(
                _spectral_dense(last_2d, dense_prev)
                if device == "cpu"
                else _spectral_dense_torch(last_2d, dense_prev, device)
            )
    return total


def spectral_norm(fp: Any, factors: bool = False) -> float:
    """‖ΔW‖₂ of one footprint: for a LoRA ΔW = s·B·A with B = Q R, s·‖R A‖₂ (r × in); otherwise from the dense ΔW
    (a full SVD up to 256 on its short side, above it ARPACK's largest singular value)."""
    if isinstance(fp, LowRank):
        return _scale(fp, factors) * float(torch.linalg.matrix_norm(_r_factor_b(fp) @ fp.A.double(), ord=2))
    d = fp.dense().double().reshape(fp.shape[0], -1)
    if min(d.shape) <= 256:
        return float(torch.linalg.matrix_norm(d, ord=2))
    import numpy as np
    import scipy.sparse.linalg

    # Lanczos (ARPACK) to machine precision from a fixed start: ~5× faster than a full SVD at 2000 × 2000
    start = np.full(min(d.shape), 1 / math.sqrt(min(d.shape)))
    return float(scipy.sparse.linalg.svds(d.numpy(), k=1, return_singular_vectors=False, v0=start, tol=0)[0])


def normalised_awom(
    footprints: Sequence[TaskFootprint] | None, awom: float | None, factors: bool = False
) -> float | None:
    """AWOM / Σ_{i<T} Σ_layers ‖ΔW_T‖₂ ‖ΔW_i‖₂, in [0, 1] (‖XY‖₂ ≤ ‖X‖₂ ‖Y‖₂, either orientation): ``awom`` (the
    cell's AWOM) without the updates' size."""
    if awom is None or not footprints or len(footprints) < 2:
        return None
    norms = [{name: spectral_norm(fp, factors) for name, fp in task.items()} for task in footprints]
    denom = sum(norms[-1][name] * prev[name] for name in norms[-1] for prev in norms[:-1] if name in prev)
    return awom / denom if denom > 0 else None


def _dense_2d(fp: Any, factors: bool, eq8: bool) -> torch.Tensor:
    """ΔW as an out × rest float64 matrix (its transpose for eq. 8, so that ‖Lᵀ P‖ is ‖ΔW_T ΔW_iᵀ‖)."""
    d = fp.dense().double().reshape(fp.shape[0], -1)
    if factors and isinstance(fp, LowRank):
        d = d / fp.scale
    return d.T if eq8 else d


def _spectral_dense(last: torch.Tensor, prevs: list[torch.Tensor]) -> list[float]:
    """‖Lᵀ P_i‖₂ for every i (L = ΔW_T, P_i = ΔW_i, or both transposed), exactly: ‖Lᵀ P_i‖₂ = √λmax of the Gram
    Y_i Y_iᵀ, Y_i = Lᵀ P_i, or Y_i = R P_i where Lᵀ is tall (Lᵀ = Q R, thin QR: R has k = Lᵀ's column count rows,
    a smaller Gram). In float64: the Gram squares the condition number, and in float32 the eigensolver failed
    to converge on a seqft cell of the quick profile (LinAlgError).

    Only λmax is computed (LAPACK ``?syevx`` by bisection, scipy's ``subset_by_index``, to machine precision):
    ~2× faster than every eigenvalue (``torch.linalg.eigvalsh``) at 256 × 256, and the Gram's eigensolve was
    most of a 10-task dense cell's metrics time (benchmarks/bench_overhead.py). The products run in numpy, one
    pair at a time: ``y @ y.T`` is a symmetric rank-k update there (half a GEMM's work), and the transposed
    footprints need no stacked copy (together 15 → 11 ms of a 10-task seqft cell, the same values)."""
    Lt = last.T
    left = (torch.linalg.qr(Lt, mode="reduced").R if Lt.shape[0] > Lt.shape[1] else Lt).numpy()
    top = left.shape[0] - 1
    norms = []
    for prev in prevs:
        y = left @ prev.numpy()
        lam = scipy.linalg.eigh(
            y @ y.T, eigvals_only=True, subset_by_index=[top, top], driver="evx", check_finite=False, overwrite_a=True
        )[0]
        norms.append(math.sqrt(max(float(lam), 0.0)))
    return norms


def _spectral_dense_torch(last: torch.Tensor, prevs: list[torch.Tensor], device: str) -> list[float]:
    """:func:`_spectral_dense` in torch on ``device`` (a GPU: float64 units where LAPACK on a few CPU threads takes
    minutes a matrix at 8B scale); every eigenvalue of the Gram (cuSOLVER has no bisection for one), the largest kept.
    Each matrix is moved to the device as it is used, then dropped."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"metrics.device={device}: no CUDA device here; recompute with --set metrics.device=cpu "
            "(the values agree to ~1e-12)"
        )
    Lt = last.T.to(device)
    left = torch.linalg.qr(Lt, mode="reduced").R if Lt.shape[0] > Lt.shape[1] else Lt
    del Lt
    norms = []
    for prev in prevs:
        y = left @ prev.to(device)
        lam = torch.linalg.eigvalsh(y @ y.T)[-1]
        norms.append(math.sqrt(max(float(lam), 0.0)))
    return norms


def nuclear_norm(fp: Any, factors: bool = False) -> float:
    """‖ΔW‖_* (N-LoRA Figure 3). Low-rank: with B = Q_B R_B and Aᵀ = Q_A R_A, ΔW = Q_B (s·R_B R_Aᵀ) Q_Aᵀ,
    so the singular values are those of the r×r core; otherwise from the dense ΔW. ``factors``: without α/r."""
    if isinstance(fp, LowRank):
        core = _scale(fp, factors) * (_r_factor_b(fp) @ _r_factor(fp).T)
        return float(torch.linalg.svdvals(core).sum())
    return float(torch.linalg.svdvals(fp.dense().double().reshape(fp.shape[0], -1)).sum())


def nuclear_norms(footprints: Sequence[TaskFootprint], factors: bool = False) -> list[dict[str, float]]:
    """‖ΔW_t‖_* per task and layer (the per-layer plot of N-LoRA's Figure 3)."""
    return [{name: nuclear_norm(fp, factors) for name, fp in sorted(task.items())} for task in footprints]


def mean_nuclear_norm(
    footprints: Sequence[TaskFootprint] | None, factors: bool = False, first: bool = False
) -> float | None:
    """Mean of ‖ΔW_t‖_* over tasks and layers (Figure 3's dashed line, averaged over tasks too); ``first``:
    over the layers of the first task only, as N-LoRA §3.3 reports it (6.80 for O-LoRA, 0.14 for N-LoRA)."""
    values = [
        v
        for task in nuclear_norms(list(footprints or [])[:1] if first else footprints or [], factors)
        for v in task.values()
    ]
    return sum(values) / len(values) if values else None
