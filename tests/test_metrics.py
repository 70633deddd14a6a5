"""Metrics against numbers computed by hand or by a second, dense route."""

from __future__ import annotations

import math

import pytest
import torch

from clbench import footprint_metrics
from clbench import metrics as m
from clbench._core.boundary import compute_metrics
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


def test_learning_incremental_and_forward_metrics_by_hand():
    # LA: diagonal (90 + 80 + 85) / 3; AIA: (90/1 + (70 + 80)/2 + (60 + 75 + 85)/3) / 3 = (90 + 75 + 73.33…) / 3
    assert m.learning_accuracy(A) == pytest.approx(85.0)
    assert m.average_incremental_accuracy(A) == pytest.approx((90 + 75 + 220 / 3) / 3)
    # FWT against the untrained model's row b = (11, 12, 13): ((10 − 12) + (20 − 13)) / 2 = 2.5
    assert m.forward_transfer(A, [11.0, 12.0, 13.0]) == pytest.approx(2.5)
    assert m.forward_transfer(A, None) is None  # a result recorded before b was
    assert m.forward_transfer([[50.0]], [10.0]) is None


def test_fwt_is_na_on_a_class_incremental_stream(tmp_path):
    """A class-incremental learner cannot predict the labels of a task it has not trained (their logits are masked),
    so a[j−1][j] = 0 and FWT would be −mean(b_j) whatever the method: n/a there, as a number elsewhere."""
    from clbench import testing
    from clbench.metrics import MetricInput

    regs = testing.registry()
    cil = [[90.0, 0.0, 0.0], [70.0, 80.0, 0.0], [60.0, 75.0, 85.0]]  # the upper triangle is 0 by construction
    b = [11.0, 12.0, 13.0]
    assert m.forward_transfer(cil, b) == pytest.approx(-(12 + 13) / 2)  # the number the tables printed
    assert m.forward_transfer(cil, b, "class-incremental") is None
    assert m.forward_transfer(A, b, "task-incremental") == pytest.approx(2.5)
    assert m.forward_transfer(A, b, "domain-incremental") == pytest.approx(2.5)
    metrics, _ = compute_metrics(regs.metrics.values(), MetricInput(cil, initial=b, scenario="class-incremental"))
    assert metrics["FWT"] is None and metrics["AA"] == pytest.approx((60 + 75 + 85) / 3)
    metrics, _ = compute_metrics(regs.metrics.values(), MetricInput(A, initial=b, scenario="task-incremental"))
    assert metrics["FWT"] == pytest.approx(2.5)
    # end to end: a class-incremental cell records its scenario and FWT n/a; the task-incremental one a number
    [r] = testing.run(regs, tmp_path / "cil", "seqft", stream="tiny-cil")
    assert r.scenario == "class-incremental" and r.initial_row is not None
    assert r.metrics["FWT"] is None and r.accuracy_matrix[0][1] == 0.0
    [r] = testing.run(regs, tmp_path / "til", "seqft", stream="tiny-vector")
    assert r.metrics["FWT"] == pytest.approx(
        m.forward_transfer(r.accuracy_matrix, r.initial_row))  # type: ignore[arg-type]


def test_normalised_overlaps_are_in_unit_range_and_free_of_scale():
    g = torch.Generator().manual_seed(5)
    fps = [{"q": LowRank(torch.randn(2, 8, generator=g), torch.randn(6, 2, generator=g), 2.0)} for _ in range(3)]
    scaled = [{"q": LowRank(f["q"].A * 10, f["q"].B, 2.0)} for f in fps]
    oo_norm = m.normalised_overlap(fps)
    dense = [f["q"].B.double() @ f["q"].A.double() * 2.0 for f in fps]
    a = [f["q"].A.double() for f in fps]
    expected = sum(float(((x @ a[-1].T) ** 2).sum()) for x in a[:-1]) / sum(
        float((x ** 2).sum() * (a[-1] ** 2).sum()) for x in a[:-1])
    assert oo_norm == pytest.approx(expected) and 0 < oo_norm <= 1
    assert m.normalised_overlap(scaled) == pytest.approx(oo_norm)  # OO grows 10⁴×, its normalised form does not
    awom = m.adapter_weight_overlap(fps)
    norms = [float(torch.linalg.matrix_norm(d, ord=2)) for d in dense]
    assert m.normalised_awom(fps, awom) == pytest.approx(awom / sum(norms[-1] * n for n in norms[:-1]), rel=1e-9)
    assert [m.spectral_norm(f["q"]) for f in fps] == pytest.approx(norms, rel=1e-9)
    assert m.spectral_norm(Dense(dense[0].float())) == pytest.approx(norms[0], rel=1e-6)
    assert 0 < m.normalised_awom(scaled, m.adapter_weight_overlap(scaled)) <= 1


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


def _product(last, other, awom):
    """N-LoRA eq. 8 with its ΔW = A·B (A ∈ R^{d×r}, d the input side): ΔW_paper = ΔW_peftᵀ, so its
    ΔW_Tᵀ ΔW_i is built here from the transposes literally, not from the identity the code uses."""
    if awom == "eq8":
        paper_last, paper_other = last.T, other.T  # PEFT out × in → the paper's in × out
        return paper_last.T @ paper_other
    return last.T @ other


@pytest.mark.parametrize("awom", ["eq8", "transposed"])
@pytest.mark.parametrize("shape", [(30, 12), (12, 30), (16, 16), (6, 3, 2, 2)])
def test_dense_awom_is_the_sum_of_spectral_norms(shape, awom):
    g = torch.Generator().manual_seed(3)
    deltas = [torch.randn(*shape, generator=g) for _ in range(4)]
    flat = [d.double().reshape(shape[0], -1) for d in deltas]
    expected = sum(float(torch.linalg.matrix_norm(_product(flat[-1], d, awom), ord=2)) for d in flat[:-1])
    assert m.adapter_weight_overlap([{"w": Dense(d)} for d in deltas], awom) == pytest.approx(expected, rel=1e-9)
    # metrics.device's torch route (a GPU's; here on the CPU's torch): the same norms, every eigenvalue instead of
    # LAPACK's bisection for the largest
    last, prevs = footprint_metrics._dense_2d(Dense(deltas[-1]), False, awom == "eq8"), [
        footprint_metrics._dense_2d(Dense(d), False, awom == "eq8") for d in deltas[:-1]]
    assert footprint_metrics._spectral_dense_torch(last, prevs, "cpu") == pytest.approx(footprint_metrics._spectral_dense(last, prevs), rel=1e-12)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where no GPU is")
def test_awom_on_a_missing_gpu_is_an_error_naming_the_setting_and_the_other_metrics_stand():
    from clbench_plugins.metrics.plugin import clbench_add_metrics

    from clbench.config import MetricsConfig

    g = torch.Generator().manual_seed(0)
    fps = [{"w": Dense(torch.randn(5, 4, generator=g))} for _ in range(2)]
    inp = m.MetricInput.with_settings(MetricsConfig(device="cuda"), matrix=[[50.0, 0.0], [40.0, 60.0]],
                                      footprints=fps)
    values, errors = compute_metrics(clbench_add_metrics(), inp)
    assert values["AWOM"] is None and "--set metrics.device=cpu" in errors["AWOM"]
    assert values["AA"] == pytest.approx(50.0) and values["GSR"] is not None


def test_awom_forms_differ_and_eq8_sums_over_the_input_index():
    # ΔW_T = e_0 e_0ᵀ (out 0 ← in 0) and ΔW_1 = e_1 e_0ᵀ (out 1 ← in 0): they read the same input and write
    # different outputs. Eq. 8 contracts the input index: ΔW_T ΔW_1ᵀ = e_0 e_1ᵀ, norm 1. The transposed
    # product contracts the output index: ΔW_Tᵀ ΔW_1 = 0.
    t, one = torch.zeros(2, 2), torch.zeros(2, 2)
    t[0, 0], one[1, 0] = 1.0, 1.0
    fps = [{"w": Dense(one)}, {"w": Dense(t)}]
    assert m.adapter_weight_overlap(fps, "eq8") == pytest.approx(1.0)
    assert m.adapter_weight_overlap(fps, "transposed") == 0.0
    lowrank = [{"w": LowRank(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0], [1.0]]))},
               {"w": LowRank(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0], [0.0]]))}]
    assert m.adapter_weight_overlap(lowrank, "eq8") == pytest.approx(1.0)
    assert m.adapter_weight_overlap(lowrank, "transposed") == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="eq8 or transposed"):
        m.adapter_weight_overlap(fps, "paper")


@pytest.mark.parametrize("awom", ["eq8", "transposed"])
def test_lowrank_metrics_match_dense_route(awom):
    g = torch.Generator().manual_seed(2)
    fps = [{"q": LowRank(torch.randn(3, 12, generator=g), torch.randn(10, 3, generator=g), 4.0)} for _ in range(3)]
    dense = [f["q"].B.double() @ f["q"].A.double() * 4.0 for f in fps]
    awom_value = sum(float(torch.linalg.matrix_norm(_product(dense[-1], d, awom), ord=2)) for d in dense[:-1])
    assert m.adapter_weight_overlap(fps, awom) == pytest.approx(awom_value, rel=1e-9)
    # without α/r: each ΔW is 4× smaller, the product 16×
    assert m.adapter_weight_overlap(fps, awom, factors=True) == pytest.approx(awom_value / 16, rel=1e-9)
    dense_fps = [{"q": Dense(d.float())} for d in dense]
    assert m.adapter_weight_overlap(dense_fps, awom) == pytest.approx(awom_value, rel=1e-5)
    assert m.adapter_weight_overlap(dense_fps, awom, factors=True) == pytest.approx(awom_value, rel=1e-5)  # no α/r
    oo = sum(float(((f["q"].A.double() @ fps[-1]["q"].A.double().T) ** 2).sum()) for f in fps[:-1])
    assert m.orthogonal_overlap(fps) == pytest.approx(oo)
    assert m.orthogonal_overlap(dense_fps) is None  # OO needs the down-projections
    gsr = sum(float(d.abs().sum() / d.norm() / math.sqrt(d.numel())) for d in dense) / 3
    assert m.generalized_sparsity_rate(fps) == pytest.approx(gsr, rel=1e-6)


def test_metric_that_raises_is_recorded_not_a_number():
    from clbench.specs import MetricSpec

    def boom(inp):
        raise ValueError("bad")

    values, errors = compute_metrics([MetricSpec("x", boom, "up")], m.MetricInput(matrix=A))
    assert values == {"x": None} and "ValueError: bad" in errors["x"]


def _pooled_acr(tasks, cut):
    """Eq. 10–11 literally: per pair, the fraction of all positions (pooled over layers) non-zero in both."""
    nz = [torch.cat([(d.abs() > cut(t, name)).reshape(-1) for name, d in sorted(task.items())])
          for t, task in enumerate(tasks)]
    pairs = [float((nz[i] & nz[j]).float().mean()) for i in range(len(nz)) for j in range(i + 1, len(nz))]
    return sum(pairs) / len(pairs)


def test_acr_threshold_forms_against_the_pooled_definition():
    g = torch.Generator().manual_seed(4)
    # layer "small" is shrunk as a whole (1e-4 of "big"): per layer it still counts, per task it does not
    tasks = [{"big": torch.randn(5, 4, generator=g), "small": 1e-4 * torch.randn(3, 4, generator=g)} for _ in range(3)]
    fps = [{n: Dense(d) for n, d in t.items()} for t in tasks]
    tau = 1e-2
    per_layer = _pooled_acr(tasks, lambda t, n: tau * float(tasks[t][n].abs().max()))
    per_task = _pooled_acr(tasks, lambda t, n: tau * max(float(d.abs().max()) for d in tasks[t].values()))
    absolute = _pooled_acr(tasks, lambda t, n: 5e-5)
    assert m.collision_rate(fps, tau, acr="layer") == pytest.approx(per_layer)
    assert m.collision_rate(fps, tau, acr="task") == pytest.approx(per_task)
    assert m.collision_rate(fps, 5e-5, acr="absolute") == pytest.approx(absolute)
    assert per_task < per_layer  # the shrunk layer's 12 of 32 positions drop out
    assert m.collision_rate(fps, 0.0, acr="layer") == 1.0  # τ = 0, the literal eq. 11: every entry is non-zero


def test_acr_literal_zero_threshold_and_masks_count_their_support():
    a = torch.tensor([[1e-30, 0.0, 2.0, 0.0]])
    b = torch.tensor([[3.0, 0.0, 1e-20, 0.0]])
    dense = [{"w": Dense(a)}, {"w": Dense(b)}]
    assert m.collision_rate(dense, 0.0) == pytest.approx(2 / 4)  # positions 0 and 2: non-zero in both
    assert m.collision_rate(dense, 1e-3) == 0.0  # relative: 1e-30 and 1e-20 are below τ·max
    # a masked footprint is non-zero where its mask says, whatever its values (an entry can be trained to 0)
    m1, m2 = torch.tensor([[True, True, False, False]]), torch.tensor([[False, True, True, False]])
    masked = [{"w": Masked(m1, torch.tensor([5.0, 0.0]))}, {"w": Masked(m2, torch.tensor([0.0, 7.0]))}]
    assert m.collision_rate(masked, 1e-3) == pytest.approx(1 / 4)


def test_absolute_acr_threshold_follows_the_delta_w_form():
    # ΔW = 4·B·A: B·A ("factors") has entries {1, 2} in each row, the applied update {4, 8}
    A, B = torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0], [1.0]])
    fps = [{"w": LowRank(A, B, 4.0)}, {"w": LowRank(A, B, 4.0)}]
    assert m.collision_rate(fps, 0.75, acr="absolute") == 1.0  # 4 and 8 > 0.75
    assert m.collision_rate(fps, 1.5, acr="absolute") == 1.0
    assert m.collision_rate(fps, 1.5, acr="absolute", factors=True) == pytest.approx(2 / 4)  # only the 2s
    assert m.collision_rate(fps, 2.5, acr="absolute", factors=True) == 0.0
    assert m.collision_rate(fps, 5.0, acr="absolute") == pytest.approx(2 / 4)  # only the 8s
    with pytest.raises(ValueError, match="layer, task or absolute"):
        m.collision_rate(fps, 0.5, acr="global")


def test_footprint_files_hold_safetensors_bytes_and_are_read_back_in_chunks(tmp_path):
    """fps.save writes safetensors' own serialisation and its digest; fps.load hashes the file in chunks and reads it
    tensor by tensor (never the whole file and its tensors at once), back to the same footprints."""
    import hashlib

    from safetensors.torch import save as serialise

    from clbench import footprints as fps

    g = torch.Generator().manual_seed(0)
    footprints = [{"w": fps.Dense(torch.randn(4, 3, generator=g)),
                   "m": fps.Masked.from_delta(torch.randn(5, 2, generator=g), torch.rand(5, 2, generator=g) < 0.5)},
                  {"w": fps.LowRank(torch.randn(2, 3, generator=g), torch.randn(4, 2, generator=g), 0.5)}]
    path = tmp_path / "footprints.safetensors"
    digest = fps.save(footprints, path)
    data = serialise(fps.to_tensors(footprints))
    assert path.read_bytes() == data
    assert digest == {"file": path.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    loaded = fps.load(path, digest)
    assert all(torch.equal(loaded[t][n].dense(), fp.dense()) for t, task in enumerate(footprints) for n, fp in task.items())


def test_footprint_files_are_written_tensor_by_tensor_as_safetensors_lays_them_out():
    """_write_safetensors gives safetensors' own bytes for every dtype it names (its tensor order is safetensors'
    dtype order, then the name), and never holds the file in memory: writing 32 MB of footprints allocates a few
    KB of Python memory, where safetensors' serialiser allocates the whole file (what this measurement would see)."""
    import io
    import tracemalloc

    from safetensors.torch import save as serialise

    from clbench import footprints as fps

    g = torch.Generator().manual_seed(1)
    tensors = {name: torch.randn(3, 2, generator=g).to(dtype) for name, dtype in
               [("f32", torch.float32), ("f64", torch.float64), ("bf16", torch.bfloat16), ("f16", torch.float16)]}
    tensors |= {"i64": torch.arange(3), "i32": torch.arange(4, dtype=torch.int32), "u8": torch.arange(5).to(torch.uint8),
                "bool": torch.tensor([True, False]), "empty": torch.zeros(0), "b": torch.ones(2), "été": torch.ones(1),
                "strided": torch.randn(4, 4, generator=g)[:, 1]}
    out = io.BytesIO()
    sha, size = fps._write_safetensors(tensors, out)
    assert out.getvalue() == serialise({k: v.contiguous() for k, v in tensors.items()}) and size == len(out.getvalue())

    big = {"0\x1fw\x1fdense\x1fdelta": torch.randn(8 << 20, generator=g)}  # 32 MB

    class Sink:  # counts bytes, keeps none
        def write(self, data): return len(data)

    def peak(write) -> int:
        tracemalloc.start()
        try:
            write()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(lambda: fps._write_safetensors(big, Sink())) < 1 << 20
    assert peak(lambda: serialise(big)) > 32 << 20
