"""The LoRA family on the tiny text model: merging, penalties, composition, per-task adapters, resume."""

from __future__ import annotations

import json

import pytest
import torch
from clbench_plugins._shared.lora.adapters import ADAPTERS, Adapters
from clbench_plugins._shared.lora.config import LoRAConfig
from clbench_plugins._shared.lora.sequential import SeqLoRA, SeqLoRAConfig
from clbench_plugins.nlora.config import NLoRAConfig
from clbench_plugins.nlora.method import NLoRA
from clbench_plugins.olora.config import OLoRAConfig
from clbench_plugins.olora.method import OLoRA
from clbench_plugins.pertask.config import PerTaskConfig
from clbench_plugins.pertask.method import PerTask
from torch import nn

from clbench import footprints as fps
from clbench import metrics as m
from clbench import testing
from clbench._core.composite import CompositeMethod
from clbench.cell import FOOTPRINT_FILE, RESULT_FILE
from clbench.config import TrainConfig
from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import CellContext
from clbench.model import StreamInfo
from clbench.testing.method_checks import _check_resume

LORA_METHODS = ["seqlora", "inclora", "olora", "nlora", "mtl", "pertask"]


def tiny() -> tuple[testing.TinyTextModel, CellContext]:
    stream = testing.TinyTextStream()
    torch.manual_seed(0)
    model = testing.TinyTextModel(StreamInfo.of(stream), dim=16)
    ctx = CellContext(stream=stream, order=stream.order("1"), train=TrainConfig(), device=torch.device("cpu"),
                      seed=0)
    return model, ctx


def randomise(adapters: Adapters, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for A, B in adapters.current().values():
            A.copy_(torch.randn(A.shape, generator=g))
            B.copy_(torch.randn(B.shape, generator=g) * 0.1)


TEXTS = ["alpha beta omega", "gamma delta", "sigma kappa theta alpha"]


def test_merged_forward_equals_unmerged() -> None:
    model, _ = tiny()
    adapters = Adapters(model, LoRAConfig())
    randomise(adapters, 1)
    model.eval()
    live = model(TEXTS, "w0")
    layer = model.blocks[0]["q"]
    before = layer.weight.detach().clone()
    expected_w = before + 4.0 * layer.lora_B.detach() @ layer.lora_A.detach()
    adapters.finish_task(0, merge=True)
    assert all(float(A.detach().abs().sum()) == 0 for A, _ in adapters.current().values()), "live adapter reset"
    torch.testing.assert_close(model(TEXTS, "w0"), live, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.weight.detach(), expected_w)
    fp = adapters.footprint(0)["blocks.0.q.weight"]
    torch.testing.assert_close(fp.dense(), layer.weight.detach() - before, rtol=1e-5, atol=1e-6)
    assert fp.scale == 32 / 8


def test_lora_forward_is_the_lora_formula() -> None:
    model, _ = tiny()
    adapters = Adapters(model, LoRAConfig(dropout=0.0))
    randomise(adapters, 2)
    layer = model.blocks[0]["q"]
    x = torch.randn(5, 16)
    expected = x @ (layer.weight + 4.0 * layer.lora_B @ layer.lora_A).T + layer.bias
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


def test_only_the_adapter_trains() -> None:
    model, ctx = tiny()
    method = OLoRA(OLoRAConfig(), ctx)
    method.setup(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"blocks.{i}.{m}.lora_{x}" for i in range(2) for m in "qv" for x in "AB"}
    assert {id(p) for p in method.parameters(model, method.phases("w0", 0)[0])} == {
        id(p) for n, p in model.named_parameters() if p.requires_grad}


def _two_tasks(method: OLoRA | NLoRA | CompositeMethod, model: nn.Module) -> None:
    method.before_task("w0", 0)
    randomise(method.ctx.stash[ADAPTERS], 3)
    method.after_task("w0", 0)
    method.before_task("w1", 1)
    randomise(method.ctx.stash[ADAPTERS], 4)


def test_olora_terms_match_a_loop_over_entries() -> None:
    model, ctx = tiny()
    method = OLoRA(OLoRAConfig(lambda1=0.5, lambda2=0.1), ctx)
    method.setup(model)
    _two_tasks(method, model)
    batch = Batch(TEXTS, torch.zeros(3, dtype=torch.long), "w1")
    terms = method.loss_terms(batch, torch.zeros(3, 2))
    prev = method.adapters.history[0]
    orth = l2 = 0.0
    for name, (A, B) in method.adapters.current().items():
        A, B = A.detach(), B.detach()
        Ap = prev[name][0]
        orth += sum(abs(float(Ap[i] @ A[j])) for i in range(Ap.shape[0]) for j in range(A.shape[0]))
        l2 += float(A.pow(2).sum().sqrt() + B.pow(2).sum().sqrt())
    assert float(terms["orth"].detach()) == pytest.approx(0.5 * orth, rel=1e-5)
    assert float(terms["l2"].detach()) == pytest.approx(0.1 * l2, rel=1e-5)
    paper = OLoRA(OLoRAConfig(lambda1=1.0, penalty="paper"), ctx)
    paper.setup(model)
    sq = sum(float(((prev[n][0] @ A.detach().T) ** 2).sum()) for n, (A, _) in method.adapters.current().items())
    assert float(paper.loss_terms(batch, torch.zeros(3, 2))["orth"].detach()) == pytest.approx(sq, rel=1e-5)


def test_olora_has_no_orthogonality_term_on_the_first_task() -> None:
    model, ctx = tiny()
    method = OLoRA(OLoRAConfig(), ctx)
    method.setup(model)
    method.before_task("w0", 0)
    assert method.loss_terms(Batch(TEXTS, torch.zeros(3, dtype=torch.long), "w0"), torch.zeros(3, 2)) == {}


def test_nlora_code_and_paper_forms() -> None:
    model, ctx = tiny()
    code = NLoRA(NLoRAConfig(lambda_=0.4), ctx)
    code.setup(model)
    code.before_task("w0", 0)
    randomise(code.adapters, 5)
    batch = Batch(TEXTS, torch.zeros(3, dtype=torch.long), "w0")
    pairs = [(A.detach(), B.detach()) for A, B in code.adapters.current().values()]
    # code: the r×r product A_w·B_w; paper: ΔW = B_w·A_w (out×in), each entry Σ_k B[a,k]·A[k,b]
    rr = sum(abs(float(A[i] @ B[:, j])) for A, B in pairs for i in range(8) for j in range(8))
    dense = sum(abs(float(B[a] @ A[:, b])) for A, B in pairs for a in range(16) for b in range(16))
    assert float(code.loss_terms(batch, torch.zeros(3, 2))["l1"].detach()) == pytest.approx(0.4 * rr, rel=1e-5)
    paper = NLoRA(NLoRAConfig(penalty="paper", lambda_paper=0.01), ctx)
    paper.setup(model)
    assert float(paper.loss_terms(batch, torch.zeros(3, 2))["l1"].detach()) == pytest.approx(0.01 * dense, rel=1e-5)
    per_task = NLoRA(NLoRAConfig(lambda_=0.4, lambda_per_task={"w0": 1.2}), ctx)
    per_task.setup(model)
    assert float(per_task.loss_terms(batch, torch.zeros(3, 2))["l1"].detach()) == pytest.approx(1.2 * rr, rel=1e-5)


def test_nlora_code_form_refuses_non_square_targets() -> None:
    model, ctx = tiny()
    model.blocks[0]["q"] = nn.Sequential()  # not a Linear: a clear error
    with pytest.raises(ConfigError, match="not an nn.Linear"):
        NLoRA(NLoRAConfig(), ctx).setup(model)
    model, ctx = tiny()
    model.blocks[1]["v"] = nn.Linear(16, 24)
    with pytest.raises(ConfigError, match="nlora.penalty=code"):
        NLoRA(NLoRAConfig(), ctx).setup(model)


def test_olora_plus_nlora_adds_both_terms_on_one_adapter() -> None:
    model, ctx = tiny()
    parts = [("olora", OLoRA(OLoRAConfig(lambda1=0.5, lambda2=0.1), ctx)), ("nlora", NLoRA(NLoRAConfig(), ctx))]
    composite = CompositeMethod(parts, ctx)
    composite.setup(model)
    assert parts[0][1].adapters is parts[1][1].adapters, "both parts act on the same adapters"
    _two_tasks(composite, model)
    assert len(parts[0][1].adapters.history) == 1, "a task is recorded (and merged) once, not once per part"
    batch = Batch(TEXTS, torch.zeros(3, dtype=torch.long), "w1")
    terms = composite.loss_terms(batch, torch.zeros(3, 2))
    assert set(terms) == {"olora.orth", "olora.l2", "nlora.l1"}
    alone_o = parts[0][1].loss_terms(batch, torch.zeros(3, 2))
    alone_n = parts[1][1].loss_terms(batch, torch.zeros(3, 2))
    assert float(terms["olora.orth"].detach()) == pytest.approx(float(alone_o["orth"].detach()))
    assert float(terms["nlora.l1"].detach()) == pytest.approx(float(alone_n["l1"].detach()))
    assert len(composite.parameters(model, composite.phases("w1", 1)[0])) == 8


def test_pertask_scores_each_task_with_its_own_adapter() -> None:
    model, ctx = tiny()
    method = PerTask(PerTaskConfig(), ctx)
    method.setup(model)
    model.eval()
    base = model(TEXTS, "w0")
    outputs = []
    for i, task in enumerate(ctx.order):
        method.before_task(task, i)
        randomise(method.adapters, 10 + i)
        outputs.append(model(TEXTS, task))
        method.after_task(task, i)
    for task, out in zip(ctx.order, outputs, strict=True):
        with method.evaluating(task):
            torch.testing.assert_close(model(TEXTS, task), out)
    torch.testing.assert_close(model(TEXTS, "w1"), outputs[1])  # the live adapter is restored after
    method.adapters.history.pop()  # pretend w1 is not trained yet: the bare base model
    with method.evaluating("w1"):
        torch.testing.assert_close(model(TEXTS, "w0"), base)


def test_seqlora_increment_footprint_is_the_difference_of_snapshots() -> None:
    model, ctx = tiny()
    method = SeqLoRA(SeqLoRAConfig(footprint="increment"), ctx)
    method.setup(model)
    for i, task in enumerate(ctx.order):
        method.before_task(task, i)
        if i == 1:
            assert float(method.adapters.current()["blocks.0.q"][0].detach().abs().sum()) > 0, "not reset between tasks"
        randomise(method.adapters, 20 + i) if i == 0 else _nudge(method.adapters)
        method.after_task(task, i)
    snap = method.adapters.footprint
    inc = method.footprint("w1", 1)["blocks.1.v.weight"]
    assert inc.A.shape[0] == 16  # rank 2r
    torch.testing.assert_close(inc.dense(), snap(1)["blocks.1.v.weight"].dense() - snap(0)["blocks.1.v.weight"].dense())


def _nudge(adapters: Adapters) -> None:
    with torch.no_grad():
        for A, B in adapters.current().values():
            A.mul_(1.1)
            B.add_(0.05)


@pytest.mark.parametrize("method", ["olora+nlora", "seqlora", "pertask"])
def test_resumed_run_equals_uninterrupted(method: str, tmp_path) -> None:
    regs = testing.registry()
    [reference] = testing.run(regs, tmp_path / "a", method, "tiny-text", fail_fast=True)
    assert reference.status == "complete", reference.error
    for key in ("OO", "AWOM", "GSR", "ACR"):
        assert reference.metrics[key] is not None, key
    _check_resume(regs, method, "tiny-text", tmp_path / "b", reference)


def test_bad_settings_fail_before_training() -> None:
    with pytest.raises(ConfigError, match="rank"):
        LoRAConfig(rank=0)
    with pytest.raises(ConfigError, match="olora.lambda1"):
        OLoRAConfig(lambda1=-1.0)


def test_metric_settings_reach_the_result_and_match_the_saved_footprints(tmp_path) -> None:
    regs = testing.registry()
    sets = {"metrics.tolerance": [0.2], "metrics.samples": [40], "metrics.acr": ["task"],
            "metrics.awom": ["transposed"], "metrics.delta_w": ["factors"]}
    [cell] = testing.run(regs, tmp_path, "nlora", "tiny-text", sets=sets, fail_fast=True)
    assert cell.status == "complete", cell.error
    directory = tmp_path / "tiny-text" / "nlora" / f"order-{cell.order}" / "seed-0"
    saved = json.loads((directory / RESULT_FILE).read_text())
    assert saved["config"]["metrics"] == {"tolerance": 0.2, "samples": 40, "acr": "task", "awom": "transposed",
                                          "delta_w": "factors", "device": "cpu"}
    footprints = fps.load(directory / FOOTPRINT_FILE)
    # the runner draws the sampled grid with the scan's default seed, so the same call gives the same numbers
    scan = m.scan(footprints, 0.2, samples=40, acr="task", factors=True)
    assert cell.metrics["ACR"] == pytest.approx(scan.collision_rate())
    assert cell.metrics["ACR"] != pytest.approx(m.collision_rate(footprints, 0.2, samples=40))  # the per-layer cut
    assert cell.metrics["GSR"] == pytest.approx(scan.sparsity_rate())
    assert cell.metrics["AWOM"] == pytest.approx(m.adapter_weight_overlap(footprints, "transposed", factors=True))
    assert cell.metrics["AWOM"] != pytest.approx(m.adapter_weight_overlap(footprints))
    assert cell.metrics["NucNorm.1"] == pytest.approx(m.mean_nuclear_norm(footprints, factors=True, first=True))
