"""Low-rank footprint metrics (OO, AWOM, GSR, ACR, nuclear norm, ‖A_T‖) against dense computations."""

from __future__ import annotations

import math

import pytest
import torch

from clbench import metrics as m
from clbench.footprints import Dense, LowRank


def lowrank_stream(tasks: int = 4, out: int = 24, inp: int = 20, r: int = 3, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [{name: LowRank(torch.randn(r, inp, generator=g), torch.randn(out, r, generator=g), 4.0)
             for name in ("l0.q", "l0.v")} for _ in range(tasks)]


def dense64(fp: LowRank) -> torch.Tensor:
    return fp.B.double() @ fp.A.double() * fp.scale


def as_dense(fps: list[dict]) -> list[dict]:
    return [{n: Dense(fp.dense()) for n, fp in t.items()} for t in fps]


def test_awom_lowrank_equals_largest_singular_value_of_dense_product() -> None:
    fps = lowrank_stream()
    eq8 = transposed = 0.0
    for name in ("l0.q", "l0.v"):
        wt = dense64(fps[-1][name])
        for prev in fps[:-1]:
            eq8 += float(torch.linalg.svdvals(wt @ dense64(prev[name]).T)[0])  # out × out
            transposed += float(torch.linalg.svdvals(wt.T @ dense64(prev[name]))[0])  # in × in
    assert m.adapter_weight_overlap(fps) == pytest.approx(eq8, rel=1e-9)
    assert m.adapter_weight_overlap(fps, "transposed") == pytest.approx(transposed, rel=1e-9)
    assert eq8 != pytest.approx(transposed)


def test_oo_equals_entrywise_sum() -> None:
    fps = lowrank_stream()
    expected = 0.0
    for name in ("l0.q", "l0.v"):
        At = fps[-1][name].A.double()
        for prev in fps[:-1]:
            Ai = prev[name].A.double()
            expected += sum(float(Ai[a] @ At[b]) ** 2 for a in range(Ai.shape[0]) for b in range(At.shape[0]))
    assert m.orthogonal_overlap(fps) == pytest.approx(expected, rel=1e-9)
    assert m.last_adapter_norm(fps) == pytest.approx(
        math.sqrt(sum(float(fps[-1][n].A.double().norm()) ** 2 for n in ("l0.q", "l0.v"))))
    assert m.last_adapter_norm(as_dense(fps)) is None


def test_nuclear_norm_lowrank_equals_dense() -> None:
    fps = lowrank_stream(tasks=2)
    for task in fps:
        for fp in task.values():
            dense = float(torch.linalg.matrix_norm(dense64(fp), ord="nuc"))
            assert m.nuclear_norm(fp) == pytest.approx(dense, rel=1e-9)
    per_layer = m.nuclear_norms(fps)
    assert m.mean_nuclear_norm(fps) == pytest.approx(sum(sum(t.values()) for t in per_layer) / 4)
    # N-LoRA §3.3: the first task's layers only; without α/r (= 4) every norm is 4× smaller
    first = [float(torch.linalg.matrix_norm(dense64(fp), ord="nuc")) for fp in fps[0].values()]
    assert m.mean_nuclear_norm(fps, first=True) == pytest.approx(sum(first) / 2, rel=1e-9)
    assert m.mean_nuclear_norm(fps, factors=True, first=True) == pytest.approx(sum(first) / 8, rel=1e-9)
    assert m.mean_nuclear_norm(fps) != pytest.approx(m.mean_nuclear_norm(fps, first=True))


@pytest.mark.parametrize("seed", range(5))
def test_lowrank_abs_max_is_exact(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(4, 300, generator=g)
    B = torch.randn(500, 4, generator=g) * torch.rand(500, 1, generator=g) ** 4  # uneven row norms
    fp = LowRank(A, B, 2.0)
    assert m.abs_max(fp) == pytest.approx(float(fp.dense().abs().max()), rel=1e-6)


@pytest.mark.parametrize("kind", ["equal-norms", "one-big-row", "zero"])
def test_lowrank_abs_max_is_exact_when_the_bound_prunes_nothing_or_everything(kind: str) -> None:
    g = torch.Generator().manual_seed(0)
    A = torch.randn(4, 700, generator=g)
    A = A / A.norm(dim=0)  # every column the same norm: the Cauchy–Schwarz bound prunes no column
    B = torch.randn(900, 4, generator=g)
    if kind == "equal-norms":
        B = B / B.norm(dim=1, keepdim=True)
    elif kind == "one-big-row":
        B[417] *= 1e3
    else:
        B.zero_()
    fp = LowRank(A, B, 0.5)
    assert m.abs_max(fp) == pytest.approx(float(fp.dense().abs().max()), rel=1e-6)


def test_scan_of_lowrank_equals_dense_route() -> None:
    fps = lowrank_stream(tasks=5, seed=3)
    # make some tasks sparse-ish so the collision rate is not trivially 1
    for t in fps:
        for fp in t.values():
            fp.B[fp.B.abs() < 0.8] = 0.0
    dense = as_dense(fps)
    for tol in (1e-3, 0.1, 0.3):
        assert m.collision_rate(fps, tol) == pytest.approx(m.collision_rate(dense, tol), rel=1e-9)
    assert m.generalized_sparsity_rate(fps) == pytest.approx(m.generalized_sparsity_rate(dense), rel=1e-6)
    assert 0.0 < m.collision_rate(fps, 0.1) < 1.0


def test_sampled_estimator_is_close_and_labelled() -> None:
    fps = lowrank_stream(tasks=4, out=64, inp=64, seed=4)
    exact = m.scan(fps, 0.2)
    sampled = m.scan(fps, 0.2, samples=20000)
    assert exact.samples == 0 and sampled.samples == 20000
    assert sampled.collision_rate() == pytest.approx(exact.collision_rate(), rel=0.05)
    assert sampled.sparsity_rate() == pytest.approx(exact.sparsity_rate(), rel=0.05)
    with pytest.raises(ValueError, match="low-rank"):
        m.scan(as_dense(fps), 0.2, samples=100)


def test_sampled_estimator_covering_the_matrix_is_exact() -> None:
    fps = lowrank_stream(tasks=3, out=40, inp=50, seed=5)
    exact, whole = m.scan(fps, 0.2), m.scan(fps, 0.2, samples=40 * 50)
    assert whole.collision_rate() == pytest.approx(exact.collision_rate(), rel=1e-9)
    assert whole.sparsity_rate() == pytest.approx(exact.sparsity_rate(), rel=1e-6)


def test_sampled_estimator_is_unbiased_over_seeds() -> None:
    # rows of very different norms: ‖ΔW‖₁ from a plain grid average is ~8 % off per draw here (whole rows
    # of large norm come in or stay out); the ratio estimator's spread is < 1 %
    fps = lowrank_stream(tasks=3, out=300, inp=200, seed=6)
    for t in fps:
        for fp in t.values():
            fp.B.mul_(torch.linspace(0.01, 3.0, fp.B.shape[0]).unsqueeze(1))
    exact = m.scan(fps, 0.05)
    runs = [m.scan(fps, 0.05, samples=900, seed=s) for s in range(40)]
    for get, spread in ((m.FootprintScan.sparsity_rate, 0.02), (m.FootprintScan.collision_rate, 0.15)):
        truth = float(get(exact))  # type: ignore[arg-type]
        errors = torch.tensor([float(get(r)) - truth for r in runs], dtype=torch.float64)  # type: ignore[arg-type]
        assert 0 < float(errors.std()) < spread * truth
        assert abs(float(errors.mean())) < 4 * float(errors.std()) / len(runs) ** 0.5


def test_gsr_and_acr_share_one_scan() -> None:
    inp = m.MetricInput(matrix=[[1.0, 2.0], [3.0, 4.0]], footprints=lowrank_stream(tasks=2))
    first = inp.footprint_scan()
    assert inp.footprint_scan() is first and len(inp.cache) == 1
