"""Metrics against numbers computed by hand or by a second, dense route."""

from __future__ import annotations

import math

import pytest
import torch

from clbench import metrics as m
from clbench.footprints import Dense, LowRank, Masked

A = [
    [90.0, 10.0, 5.0],
    [70.0, 80.0, 20.0],
    [60.0, 75.0, 85.0],
]


def test_accuracy_matrix_metrics_by_hand():
    assert m.average_accuracy(A) == pytest.approx((60 + 75 + 85) / 3)
    # F.Ra: task 0: max(90, 70) − 60 = 30; task 1: max(80) − 75 = 5 → 17.5
    assert m.forgetting_rate(A) == pytest.approx(17.5)
    # BWT: (60 − 90 + 75 − 80) / 2 = −17.5
    assert m.backward_transfer(A) == pytest.approx(-17.5)
    assert m.unseen_task_score(A) == 20.0
    assert m.forgetting_rate([[50.0]]) is None and m.backward_transfer([[50.0]]) is None


def test_forgetting_uses_best_earlier_score_not_first():
    a = [[40.0, 0.0, 0.0], [70.0, 50.0, 0.0], [65.0, 50.0, 90.0]]
    assert m.forgetting_rate(a) == pytest.approx(((70 - 65) + (50 - 50)) / 2)
    assert m.backward_transfer(a) == pytest.approx(((65 - 40) + 0) / 2)


def _pairwise_acr(dense, tol):
    nz = [(d.abs() > tol * d.abs().max()) for d in dense]
    T = len(nz)
    crs = [float((nz[i] & nz[j]).float().mean()) for i in range(T) for j in range(i + 1, T)]
    return sum(crs) / len(crs)


def test_collision_rate_matches_pairwise_definition():
    g = torch.Generator().manual_seed(0)
    dense = [torch.randn(6, 5, generator=g) * (torch.rand(6, 5, generator=g) > 0.5) for _ in range(4)]
    fps = [{"w": Dense(d)} for d in dense]
    assert m.collision_rate(fps) == pytest.approx(_pairwise_acr(dense, m.DEFAULT_TOLERANCE))


def test_collision_rate_by_hand_and_disjoint_masks():
    m1 = torch.tensor([[1, 1, 0, 0]], dtype=torch.bool)
    m2 = torch.tensor([[0, 1, 1, 0]], dtype=torch.bool)
    fps = [{"w": Masked(m1, torch.ones(2))}, {"w": Masked(m2, torch.ones(2))}]
    assert m.collision_rate(fps) == pytest.approx(1 / 4)  # one shared position of four
    disjoint = [{"w": Masked(m1, torch.ones(2))}, {"w": Masked(~m1, torch.ones(2))}]
    assert m.collision_rate(disjoint) == 0.0


def test_collision_rate_streams_chunks(monkeypatch):
    g = torch.Generator().manual_seed(1)
    dense = [torch.randn(50, 7, generator=g) * (torch.rand(50, 7, generator=g) > 0.3) for _ in range(3)]
    expected = _pairwise_acr(dense, 1e-3)
    monkeypatch.setattr(m, "CHUNK_ELEMENTS", 7 * 4)  # 4 rows per chunk, 13 chunks
    assert m.collision_rate([{"w": Dense(d)} for d in dense]) == pytest.approx(expected)


def test_sparsity_ratio_bounds_and_value():
    one_hot = torch.zeros(4, 4)
    one_hot[1, 2] = 3.0
    assert m.sparsity_ratio(Dense(one_hot)) == pytest.approx(1 / 4)  # 1/sqrt(mn): the sparsest
    flat = torch.ones(4, 4)
    assert m.sparsity_ratio(Dense(flat)) == pytest.approx(1.0)  # the densest
    x = torch.tensor([[3.0, -4.0], [0.0, 0.0]])
    assert m.sparsity_ratio(Dense(x)) == pytest.approx((7 / 5) / 2)
    assert m.sparsity_ratio(Dense(torch.zeros(3, 3))) is None


@pytest.mark.parametrize("shape", [(30, 12), (12, 30), (6, 3, 2, 2)])
def test_dense_awom_is_the_sum_of_spectral_norms(shape):
    g = torch.Generator().manual_seed(3)
    deltas = [torch.randn(*shape, generator=g) for _ in range(4)]
    flat = [d.double().reshape(shape[0], -1) for d in deltas]
    expected = sum(float(torch.linalg.matrix_norm(flat[-1].T @ d, ord=2)) for d in flat[:-1])
    assert m.adapter_weight_overlap([{"w": Dense(d)} for d in deltas]) == pytest.approx(expected, rel=1e-9)


def test_lowrank_metrics_match_dense_route():
    g = torch.Generator().manual_seed(2)
    fps = [{"q": LowRank(torch.randn(3, 12, generator=g), torch.randn(10, 3, generator=g), 4.0)} for _ in range(3)]
    dense = [f["q"].B.double() @ f["q"].A.double() * 4.0 for f in fps]
    awom = sum(float(torch.linalg.matrix_norm(dense[-1].T @ d, ord=2)) for d in dense[:-1])
    assert m.adapter_weight_overlap(fps) == pytest.approx(awom, rel=1e-9)
    dense_fps = [{"q": Dense(d.float())} for d in dense]
    assert m.adapter_weight_overlap(dense_fps) == pytest.approx(awom, rel=1e-5)
    oo = sum(float(((f["q"].A.double() @ fps[-1]["q"].A.double().T) ** 2).sum()) for f in fps[:-1])
    assert m.orthogonal_overlap(fps) == pytest.approx(oo)
    assert m.orthogonal_overlap(dense_fps) is None  # OO needs the down-projections
    gsr = sum(float(d.abs().sum() / d.norm() / math.sqrt(d.numel())) for d in dense) / 3
    assert m.generalized_sparsity_rate(fps) == pytest.approx(gsr, rel=1e-6)


def test_metric_that_raises_is_recorded_not_a_number():
    from clbench.specs import MetricSpec

    def boom(inp):
        raise ValueError("bad")

    values, errors = m.compute_metrics([MetricSpec("x", boom, "up")], m.MetricInput(matrix=A))
    assert values == {"x": None} and "ValueError: bad" in errors["x"]
