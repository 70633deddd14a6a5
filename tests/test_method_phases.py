"""A method's own training loops as phases of the harness's step (issue 49): GDumb's retraining on its memory, DGR's
generator. Their steps are counted and budgeted, divergence is caught in them, GDumb's memory keeps every task of a
domain-incremental stream and its batches mix tasks under one shared head."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch
from clbench_plugins.gdumb.config import GDumbConfig
from clbench_plugins.gdumb.method import GDumb

from clbench import testing
from clbench.cell import TEST_PROFILE
from clbench.config import TrainConfig
from clbench.data import Split, Stream, TaskData, TaskInfo
from clbench.hookspecs import hookimpl
from clbench.method import CellContext
from clbench.model import StreamInfo
from clbench.specs import EmptyConfig, StreamSpec
from clbench.testing.tiny import TinyClassIncrementalStream, TinyVectorStream

TASKS, PER_TASK, BATCH = 3, 24, 8


class TinyDomainStream(Stream):
    """Three tasks over the same two labels, each task its own shift of the inputs (a domain-incremental stream, as
    permuted-digits is: one head, the same label set everywhere)."""

    def __init__(self, config: Any = None) -> None:
        names = [f"d{i}" for i in range(TASKS)]
        super().__init__("tiny-dil", [TaskInfo(t, ("a", "b")) for t in names], {"1": names}, modality="vector",
                         input_shape=(4,), multi_head=False, scenario="domain-incremental")

    def load(self, info: TaskInfo) -> TaskData:
        g = torch.Generator().manual_seed(int(info.name[1:]))
        shift = torch.randn(4, generator=g) * 3

        def split(n: int) -> Split:
            y = torch.arange(n) % 2
            return Split(shift + y[:, None] * 2.0 + torch.randn(n, 4, generator=g), y)

        return TaskData(info, split(PER_TASK), split(PER_TASK // 2), split(PER_TASK // 4))


class DomainPlugin:
    @hookimpl
    def clbench_add_streams(self) -> list[StreamSpec]:
        preset = {"orders": ["1"], "train.epochs": 1, "train.batch_size": BATCH, "train.lr": 0.05, "model": "mlp",
                  "model.hidden": [8]}
        return [StreamSpec("tiny-dil", TinyDomainStream, EmptyConfig, "3-task domain-incremental blobs (tests only)",
                           presets={TEST_PROFILE: preset})]


def _gdumb(stream: Stream, memory: int) -> GDumb:
    from clbench_plugins.mlp.model import MLPConfig, build

    order = stream.order("1")
    ctx = CellContext(stream=stream, order=order, train=TrainConfig(batch_size=BATCH), device=torch.device("cpu"),
                      seed=0)
    gdumb = GDumb(GDumbConfig(memory_size=memory, epochs=1), ctx)
    gdumb.setup(build(MLPConfig(hidden=(8,)), StreamInfo.of(stream)))
    return gdumb


def test_gdumb_memory_holds_every_task_of_a_domain_incremental_stream(tmp_path):
    # 12 slots over 3 tasks × 2 labels: a greedy class-balanced memory of (task, label) classes holds 2 of each, so 4
    # a task; keyed by the label alone the first task's 12 examples would fill it and the others be turned away
    gdumb = _gdumb(TinyDomainStream(), 12)
    for index, task in enumerate(gdumb.ctx.order):
        gdumb.before_task(task, index)
        per_task = Counter(t for _, t, _ in gdumb.memory)
        assert [per_task[t] for t in range(index + 1)] == [12 // (index + 1)] * (index + 1)
    labels = Counter((t, int(gdumb.ctx.data(gdumb.ctx.order[t]).train.y[i])) for _, t, i in gdumb.memory)
    assert labels == {(t, label): 2 for t in range(TASKS) for label in (0, 1)}
    # through a whole cell: the result's own report
    [r] = testing.run(testing.registry(DomainPlugin()), tmp_path, "gdumb", "tiny-dil",
                      sets={"gdumb.memory_size": [12], "gdumb.epochs": [1]})
    assert r.status == "complete", r.error
    assert r.scenario == "domain-incremental"
    assert r.report["memory_per_task"] == [4, 4, 4]


def test_gdumb_batches_mix_tasks_under_one_shared_head_and_not_under_one_head_a_task():
    cil = _gdumb(TinyClassIncrementalStream(), 40)
    for index, task in enumerate(cil.ctx.order):
        cil.before_task(task, index)
    [phase] = cil.phases(cil.ctx.order[1], 1)
    assert phase.batches is not None
    epoch = list(phase.batches(0))
    # one epoch is the whole memory once, in batches of the training size ...
    memory = sorted((t, i) for _, t, i in cil.memory)
    rows = {t: cil.ctx.data(cil.ctx.order[t]).train.x for t in range(2)}
    seen = sorted((t, i) for b in epoch for x in b.x
                  for t in range(2) for i in range(len(rows[t])) if torch.equal(rows[t][i], x))
    assert seen == memory and [len(b) for b in epoch[:-1]] == [BATCH] * (len(epoch) - 1)
    # ... and batches hold both tasks' classes (t0: labels 0, 1; t1: 2, 3)
    assert any({0, 1} & set(b.y.tolist()) and {2, 3} & set(b.y.tolist()) for b in epoch)
    assert list(phase.batches(0))[0].y.tolist() == epoch[0].y.tolist()  # the same batches when asked again
    til = _gdumb(TinyVectorStream(), 40)  # one head a task: a batch holds one task's examples, named by it
    for index, task in enumerate(til.ctx.order):
        til.before_task(task, index)
    [phase] = til.phases(til.ctx.order[1], 1)
    assert phase.batches is not None
    for b in phase.batches(0):
        data = til.ctx.data(b.task).train.x
        assert all(any(torch.equal(x, row) for row in data) for x in b.x), b.task


def test_gdumb_and_dgr_count_and_budget_the_steps_of_their_own_phases(tmp_path):
    regs = testing.registry()
    sets = {"gdumb.epochs": [2], "train.epochs": [2]}
    [gdumb, dgr] = testing.run(regs, tmp_path / "epochs", "gdumb,dgr", sets=sets)
    assert gdumb.status == dgr.status == "complete", (gdumb.error, dgr.error)
    # tiny-vector: 64 examples a task, batches of 16; GDumb's memory (200) holds every example seen, a task's own
    # batches each, so task i trains (i + 1) × 4 batches an epoch
    tasks = gdumb.timings["tasks"]
    assert [t["phases"] for t in tasks] == [["memory"], ["memory"]]
    assert [t["memory"]["steps"] for t in tasks] == [2 * math.ceil(64 * (i + 1) / 16) for i in range(2)]
    assert gdumb.report["memory_per_task"] == [64, 64]
    # DGR: the generator trains as many epochs as the solver, on the same batches
    for t in dgr.timings["tasks"]:
        assert t["phases"] == ["train", "generator"]
        assert t["train"]["steps"] == t["generator"]["steps"] == 2 * 64 // 16
        assert t["generator"]["trainable"] == dgr.report["generator_parameters"]
    # under train.steps_per_task the budget is shared among the phases by their epochs
    budget = {**sets, "train.steps_per_task": [6]}
    [gdumb, dgr] = testing.run(regs, tmp_path / "budget", "gdumb,dgr", sets=budget)
    assert [t["memory"]["steps"] for t in gdumb.timings["tasks"]] == [6, 6]
    assert [(t["train"]["steps"], t["generator"]["steps"]) for t in dgr.timings["tasks"]] == [(3, 3), (3, 3)]


def test_a_non_finite_generator_loss_is_reported_as_divergence(tmp_path, monkeypatch):
    from clbench_plugins.dgr import method as dgr

    real = dgr.VAE.loss

    def loss(self: Any, x: torch.Tensor) -> torch.Tensor:
        return real(self, x) * float("nan")

    monkeypatch.setattr(dgr.VAE, "loss", loss)
    [r] = testing.run(testing.registry(), tmp_path, "dgr")
    assert r.status == "diverged"
    assert r.divergence is not None
    # task t0's solver phase took 2 epochs × 4 steps; the generator's first step is the cell's ninth
    assert (r.divergence["phase"], r.divergence["task"], r.divergence["step"]) == ("generator", "t0", 2 * 4 + 1)


def test_the_generator_phase_is_clipped(monkeypatch):
    """train.grad_clip applies to the generator phase's parameters: its gradient reaches the optimizer clipped."""
    from clbench_plugins.dgr.config import DGRConfig
    from clbench_plugins.dgr.method import DGR
    from clbench_plugins.mlp.model import MLPConfig, build

    from clbench._exec.step import train_task

    stream = TinyVectorStream()
    train = TrainConfig(batch_size=16, epochs=1, grad_clip=1e-3)
    ctx = CellContext(stream=stream, order=stream.order("1"), train=train, device=torch.device("cpu"), seed=0)
    method = DGR(DGRConfig(hidden=8, latent_dim=2), ctx)
    model = build(MLPConfig(hidden=(8,)), StreamInfo.of(stream))
    method.setup(model)
    norms: list[float] = []
    step = torch.optim.Adam.step

    def observed(self: torch.optim.Optimizer, *a: Any, **kw: Any) -> Any:
        if any(p is q for g in self.param_groups for p in g["params"] for q in method.generator.parameters()):
            grads = [p.grad for p in method.generator.parameters() if p.grad is not None]
            norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
        return step(self, *a, **kw)

    monkeypatch.setattr(torch.optim.Adam, "step", observed)
    method.before_task("t0", 0)
    stats = train_task(model, method, ctx, 0)
    assert stats.phase("generator").steps == len(norms) == 4
    assert max(norms) <= 1e-3 * (1 + 1e-5)
