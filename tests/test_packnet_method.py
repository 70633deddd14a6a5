"""PackNet and the shared partition code: projections against numpy, frozen old tasks, task-aware
evaluation, disjoint masked footprints (ACR exactly 0), resume, and settings errors before training."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from clbench_plugins._shared.partition import keep_mask, pack, topk_positions, unpack
from clbench_plugins.mlp.model import MLPConfig, build
from clbench_plugins.packnet.config import PackNetConfig
from clbench_plugins.packnet.method import PackNet
from torch import nn

from clbench import footprints, testing
from clbench._exec.evaluation import evaluate
from clbench._exec.step import train_task
from clbench.cell import FOOTPRINT_FILE
from clbench.config import TrainConfig
from clbench.errors import ConfigError
from clbench.footprints import Masked
from clbench.method import CellContext
from clbench.metrics import MetricInput, scan
from clbench.model import HeadedModel, StreamInfo

pytestmark = pytest.mark.usefixtures("one_thread")


def make_cell(method_cls, config, tasks: int = 2, hidden=(32, 32), multi_head: bool | None = None,
              train: TrainConfig | None = None):
    stream = testing.TinyVectorStream(tasks=tasks, n=64)
    order = [t.name for t in stream.tasks]
    ctx = CellContext(stream=stream, order=order, train=train or TrainConfig(epochs=2, batch_size=16, lr=0.05),
                      device=torch.device("cpu"), seed=0)
    torch.manual_seed(0)
    model = build(MLPConfig(hidden=hidden, multi_head=multi_head), StreamInfo.of(stream, multi_head))
    method = method_cls(config, ctx)
    method.setup(model)
    return method, model, ctx


def run_task(method, model, ctx, index: int) -> None:
    method.before_task(ctx.order[index], index)
    train_task(model, method, ctx, index)
    method.after_task(ctx.order[index], index)


# --------------------------------------------------------------------------- projections
def test_irregular_projection_keeps_the_largest_free_entries():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(6, 7, generator=g)
    free = torch.rand(6, 7, generator=g) > 0.3
    got = keep_mask(w, free, 9, "irregular")
    vals = np.where(free.numpy(), np.abs(w.numpy()), -np.inf).ravel()
    want = np.zeros(42, bool)
    want[np.argsort(-vals)[:9]] = True
    assert np.array_equal(got.numpy().ravel(), want)


def test_column_and_filter_projections_choose_whole_free_units_by_l2_norm():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(4, 3, 2, 2, generator=g)  # conv: GEMM view 4 × 12
    free = torch.ones_like(w, dtype=torch.bool)
    free[:, 0, 0, 0] = False  # column 0 is not fully free
    mat = w.reshape(4, 12).numpy()
    col = keep_mask(w, free, 3, "column").reshape(4, 12).numpy()
    norms = np.linalg.norm(mat, axis=0)
    norms[0] = -np.inf
    assert set(np.nonzero(col.all(axis=0))[0]) == set(np.argsort(-norms)[:3]) and col.sum() == 12
    free = torch.ones_like(w, dtype=torch.bool)
    free[1, 2, 1, 1] = False  # row 1 is not fully free
    row = keep_mask(w, free, 2, "filter").reshape(4, 12).numpy()
    rnorms = np.linalg.norm(mat, axis=1)
    rnorms[1] = -np.inf
    rows = set(np.nonzero(row.any(axis=1))[0])
    assert rows == set(np.argsort(-rnorms)[:2]) and not row[1].any()


def test_masks_round_trip_bit_packed():
    mask = torch.rand(37, 11) > 0.5
    bits = pack(mask)
    assert bits.dtype == torch.uint8 and bits.numel() == (37 * 11 + 7) // 8
    assert torch.equal(unpack(bits, (37, 11)), mask)
    assert int(topk_positions(torch.arange(10.0), torch.ones(10, dtype=torch.bool), 0).sum()) == 0
    few = torch.arange(10) < 3
    assert torch.equal(topk_positions(torch.arange(10.0), few, 5), few)  # never an ineligible position


def test_selection_is_exact_with_ties_to_the_lowest_index_on_both_paths():
    """The numpy path (CPU) and the kthvalue path (other devices) against a stable argsort."""
    from clbench_plugins._shared.partition import _topk_numpy, _topk_torch

    g = torch.Generator().manual_seed(3)
    cases = [torch.randn(50, 40, generator=g), torch.ones(50, 40),  # all tied: a share mask still at 1
             torch.randint(0, 4, (50, 40), generator=g).float()]  # many ties at the threshold
    eligible = torch.rand(50, 40, generator=g) > 0.3
    for scores in cases:
        for k in (0, 1, 137, int(eligible.sum()), 5000):
            vals = np.where(eligible.numpy(), scores.numpy(), -np.inf).ravel()
            order = np.argsort(-vals, kind="stable")  # descending score, then ascending index
            want = np.zeros(vals.size, bool)
            want[order[:min(k, int(eligible.sum()))]] = True
            for fn in (_topk_numpy, _topk_torch):
                got = fn(scores, eligible, k)
                assert np.array_equal(got.numpy().ravel(), want), (fn.__name__, k)


# --------------------------------------------------------------------------- the method
def test_old_tasks_are_frozen_and_biases_fixed_after_the_first_task():
    method, model, ctx = make_cell(PackNet, PackNetConfig(alpha=(0.3,)))
    run_task(method, model, ctx, 0)
    w0 = {n: p.detach().clone() for n, p in method.layers.items()}
    own0 = {n: (o == 1).clone() for n, o in method.owner.items()}
    biases = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("bias") and "heads" not in n}
    head0 = model.head("t0").weight.detach().clone()
    run_task(method, model, ctx, 1)
    for n, p in method.layers.items():
        counts = np.bincount(method.owner[n].numpy().ravel(), minlength=3)
        assert counts[1] == counts[2] == method.count(n, 0)  # α of the layer each, disjoint
        assert torch.equal(p.detach()[own0[n]], w0[n][own0[n]])
        assert (p.detach()[method.owner[n] == 0] == 0).all()  # released entries are zero
        assert (p.detach()[method.owner[n] == 2] != w0[n][method.owner[n] == 2]).any()
    for n, p in model.named_parameters():
        if n in biases:
            assert torch.equal(p.detach(), biases[n]), n
    assert torch.equal(model.head("t0").weight.detach(), head0)


def test_evaluating_builds_the_task_weights_once_and_restores_them():
    method, model, ctx = make_cell(PackNet, PackNetConfig(alpha=(0.3,)))
    for i in range(2):
        run_task(method, model, ctx, i)
    full = {n: p.detach().clone() for n, p in method.layers.items()}
    with method.evaluating("t0"):
        for n, p in method.layers.items():
            assert torch.equal(p.detach(), full[n] * (method.owner[n] == 1))
    for n, p in method.layers.items():
        assert torch.equal(p.detach(), full[n])
    # task 0's score is the same after task 1 as right after task 0: nothing it uses moved
    x = ctx.data("t0").test.x
    with method.evaluating("t0"):
        a = model(x, "t0")
    method2, model2, ctx2 = make_cell(PackNet, PackNetConfig(alpha=(0.3,)))
    run_task(method2, model2, ctx2, 0)
    with method2.evaluating("t0"):
        b = model2(x, "t0")
    assert torch.allclose(a, b)
    row, _ = evaluate(model, method, ctx.stream, ctx.order, ctx.train, torch.device("cpu"))
    assert len(row) == 2


def _lps(**changes):
    from clbench_plugins.lps.config import LPSConfig
    from clbench_plugins.lps.method import LPS

    base = {"alpha": (0.3,), "beta": (0.6,), "warmup_epochs": 1, "admm_epochs": 2, "rho_stages": 2,
            "retrain_epochs": 1, "rho": 0.5}
    return LPS, LPSConfig(**{**base, **changes})


@pytest.mark.parametrize("which", ["packnet", "lps"])
def test_masked_weights_are_built_once_per_task_evaluation_not_per_forward(which, monkeypatch):
    method_cls, config = (PackNet, PackNetConfig(alpha=(0.3,))) if which == "packnet" else _lps()
    method, model, ctx = make_cell(method_cls, config, tasks=3, hidden=(32, 32))
    for i in range(3):
        run_task(method, model, ctx, i)
    builds, forwards = [], []
    real = method.eval_mask
    monkeypatch.setattr(method, "eval_mask", lambda name, index: builds.append((name, index)) or real(name, index))
    handle = model.register_forward_hook(lambda *_: forwards.append(1))
    train = TrainConfig(eval_batch_size=4)  # 32 test examples per task: 8 forwards per task
    row, _ = evaluate(model, method, ctx.stream, ctx.order, train, torch.device("cpu"))
    handle.remove()
    per_task = math.ceil(len(ctx.data("t0").test) / 4)
    assert len(forwards) == 3 * per_task == 24
    assert sorted(builds) == sorted((n, j) for n in method.layers for j in range(3))  # once per layer and task
    assert len(row) == 3


@pytest.mark.parametrize("which", ["packnet", "lps"])
def test_every_task_the_last_included_is_pruned_and_scored_with_its_own_mask(which):
    method_cls, config = (PackNet, PackNetConfig(alpha=(0.3,))) if which == "packnet" else _lps()
    method, model, ctx = make_cell(method_cls, config, tasks=2)
    for i in range(2):
        run_task(method, model, ctx, i)
    for n in method.layers:  # the last task (index 1) kept exactly its share, like the first
        assert int((method.owner[n] == 2).sum()) == method.count(n, 1) == int((method.owner[n] == 1).sum())
    row, _ = evaluate(model, method, ctx.stream, ctx.order, ctx.train, torch.device("cpu"))
    model.eval()
    for j, task in enumerate(ctx.order):
        # oracle: the functional network with W ⊙ (own_j ∪ share_j) (PackNet: ∪ of tasks ≤ j), head j
        masks = {}
        for n in method.layers:
            own = method.owner[n]
            if which == "packnet":
                masks[n] = (own > 0) & (own <= j + 1)
            else:
                masks[n] = (own == j + 1) | method.shares.get(j, {}).get(n, torch.zeros_like(own, dtype=torch.bool))
        weights = {n: p.detach() * masks[n] for n, p in method.layers.items()}
        split = ctx.data(task).test
        with torch.no_grad():
            pred = torch.func.functional_call(model, weights, (split.x, task)).argmax(-1)
        assert row[j] == pytest.approx(100.0 * float((pred == split.y).float().mean()))
    if which == "lps":
        assert 1 in method.shares and 0 not in method.shares  # the last task has its own share mask


def test_footprints_are_masked_disjoint_and_acr_is_exactly_zero():
    method, model, ctx = make_cell(PackNet, PackNetConfig(alpha=(0.2,)), tasks=3)
    fps = []
    for i in range(3):
        run_task(method, model, ctx, i)
        fps.append(method.footprint(ctx.order[i], i))
    for n in method.layers:
        masks = [fp[n].mask for fp in fps]
        assert all(isinstance(fp[n], Masked) for fp in fps)
        assert not (masks[0] & masks[1]).any() and not (masks[1] & masks[2]).any() and not (masks[0] & masks[2]).any()
        assert torch.equal(fps[2][n].values, method.layers[n].detach()[masks[2]])
    result = scan(fps, 1e-3, 0)
    from clbench._core.boundary import compute_metrics
    from clbench._exec.local import harness_registry

    metrics, _ = compute_metrics(harness_registry().metrics.values(), MetricInput([[0.0] * 3] * 3, fps))
    assert metrics["ACR"] == 0.0 and result is not None


def test_runs_resumes_and_records_masked_footprints(tmp_path):
    regs = testing.registry()
    result = testing.check_method(regs, "packnet", tmp_path)  # kills after task 1, resumes, compares
    a = result.accuracy_matrix
    assert a[1][0] == a[0][0]  # no forgetting by construction
    assert result.metrics["ACR"] == 0.0 and result.metrics["F.Ra"] == 0.0
    assert 0 < result.metrics["Capacity"] <= 1
    saved = footprints.load(next((tmp_path / "a").rglob(FOOTPRINT_FILE)))
    assert footprints.kinds(saved) == {"masked"}


# --------------------------------------------------------------------------- bad settings
@pytest.mark.parametrize(("changes", "needle"), [
    ({"alpha": (0.0,)}, "packnet.alpha=0.0"),
    ({"alpha": (1.5,)}, "packnet.alpha=1.5"),
    ({"alpha_first": -0.2}, "packnet.alpha_first=-0.2"),
    ({"projection": ("diagonal",)}, "packnet.projection='diagonal'"),
    ({"retrain_epochs": -1}, "packnet.retrain_epochs=-1"),
])
def test_out_of_range_settings_fail_when_the_config_is_built(changes, needle):
    """Plan time: the planner builds every cell's config before the first cell runs."""
    with pytest.raises(ConfigError, match=re.escape(needle)):
        PackNetConfig(**changes)


@pytest.mark.parametrize(("changes", "needle"), [
    ({"alpha": (0.6,)}, "packnet.alpha: capacity overrun"),
    ({"alpha": (0.3,), "alpha_first": 0.8}, "packnet.alpha: capacity overrun"),
    ({"projection": ("filter",)}, "packnet.projection='filter' does not fit"),
    ({"alpha": (0.1, 0.1, 0.1)}, "one per pruned layer"),
])
def test_settings_that_need_the_model_fail_in_setup_naming_the_setting(changes, needle):
    config = PackNetConfig(**changes)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        make_cell(PackNet, config)


def test_shared_head_and_weight_decay_are_refused():
    with pytest.raises(ConfigError, match="model.multi_head"):
        make_cell(PackNet, PackNetConfig(), multi_head=False)
    with pytest.raises(ConfigError, match="train.weight_decay"):
        make_cell(PackNet, PackNetConfig(), train=TrainConfig(weight_decay=1e-4))


def test_filter_projection_fits_a_conv_layer():
    info = StreamInfo("s", tuple(testing.TinyVectorStream().tasks), "image", (1, 4, 4), True)
    model = HeadedModel(nn.Sequential(nn.Conv2d(1, 8, 3), nn.Flatten()), 8 * 4, info)
    stream = testing.TinyVectorStream()
    ctx = CellContext(stream=stream, order=["t0", "t1"], train=TrainConfig(), device=torch.device("cpu"), seed=0)
    method = PackNet(PackNetConfig(alpha=(0.25,), projection=("filter",)), ctx)
    method.setup(model)
    assert method.count("backbone.0.weight", 0) == 2  # 2 of 8 filters per task
