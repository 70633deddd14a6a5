"""A small model at a GPU's speed: splits kept on the device, step losses read in batches, fused optimizers.

Each changes no number: the CPU tests check that directly (the same batches, the same losses, the same divergence
step); the CUDA tests run where a GPU is (the device lease) and are skipped elsewhere."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from clbench import data as clbench_data
from clbench import testing
from clbench._core.optim import make_optimizer
from clbench.data import Split, Stream, TaskData, TaskInfo, batches
from clbench.hookspecs import hookimpl
from clbench.method import Method, Phase
from clbench.specs import ExecutorContext, MethodSpec, Workers

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

NO_WORKERS = Workers(start=lambda *a: None, run=lambda cell: None, run_one=lambda *a: None)  # none is started


class NaNAtStep(Method):
    """The loss becomes NaN at the 7th step of the second task (one epoch of the tiny stream is 4 steps)."""

    steps = 0

    def loss_terms(self, batch: Any, logits: Any) -> dict[str, torch.Tensor]:
        if batch.task != self.ctx.order[1]:
            return {}
        self.steps += 1
        return {"boom": logits.sum() * float("nan")} if self.steps >= 7 else {}


class NaNPlugin:
    @hookimpl
    def clbench_add_methods(self):
        return [MethodSpec("nan-at-step", NaNAtStep)]


@pytest.mark.parametrize("sync", [1, 5, 64])
def test_losses_read_in_batches_name_the_exact_step_of_a_non_finite_loss(tmp_path, sync):
    [r] = testing.run(testing.registry(NaNPlugin()), tmp_path, "nan-at-step",
                      sets={"train.sync_every": [sync], "train.epochs": [3]})
    assert r.status == "diverged"
    assert (r.divergence["index"], r.divergence["epoch"], r.divergence["step"]) == (1, 2, 12 + 7)

@pytest.mark.slow
def test_reading_the_losses_in_batches_changes_no_number(tmp_path):
    regs = testing.registry()
    kw = {"stream": "permuted-digits", "profile": "quick", "orders": ["1"]}
    [every] = testing.run(regs, tmp_path / "1", "ewc", sets={"train.sync_every": [1]}, **kw)
    [batched] = testing.run(regs, tmp_path / "7", "ewc", sets={"train.sync_every": [7]}, **kw)
    assert batched.accuracy_matrix == every.accuracy_matrix
    assert batched.config_hash == every.config_hash  # not part of the identity
    losses = [[t[p]["loss"] for p in t["phases"]] for r in (every, batched) for t in r.timings["tasks"]]
    assert losses[: len(losses) // 2] == losses[len(losses) // 2:]  # the epochs' mean losses, to the last bit


def test_fused_is_asked_for_only_on_cuda_parameters():
    phase = Phase("train", 1, 1e-3, "adam")
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(3))], phase, fused=True)
    assert not opt.defaults.get("fused")  # CPU parameters: the foreach implementation, as before


def _stream(n: int = 50) -> Stream:
    class S(Stream):
        def load(self, info: TaskInfo) -> TaskData:
            g = torch.Generator().manual_seed(0)
            split = Split(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g))
            return TaskData(info, split, split)

    return S("s", [TaskInfo("a", ("x", "y")), TaskInfo("b", ("x", "y"))], {"1": ["a", "b"]})


def test_splits_go_to_the_device_only_while_they_fit(monkeypatch):
    stream = _stream()  # each split: 50 × 4 float32 + 50 int64 = 1,200 bytes
    monkeypatch.setattr(clbench_data, "_device_memory", lambda device: 10_000)
    meta = torch.device("meta")
    assert stream.on_device("a", "train", meta, 0.2).x.device.type == "meta"  # 1,200 ≤ 2,000
    assert stream.on_device("b", "train", meta, 0.2).x.device.type == "cpu"  # 2,400 > 2,000: kept on the host
    assert stream.on_device("b", "train", meta, 0.0).x.device.type == "cpu"  # train.device_data=0: never
    assert stream.on_device("a", "train", torch.device("cpu"), 0.2) is stream.data("a").train


@cuda
def test_device_batches_are_the_host_batches():
    stream = _stream(1000)
    host = stream.data("a").train
    on_gpu = stream.on_device("a", "train", torch.device("cuda"), 0.25)
    assert on_gpu.x.is_cuda
    pairs = zip(batches(host, 64, "a", torch.Generator().manual_seed(3)),
                batches(on_gpu, 64, "a", torch.Generator().manual_seed(3)), strict=True)
    for h, d in pairs:
        assert d.x.is_cuda and torch.equal(h.x, d.x.cpu()) and torch.equal(h.y, d.y.cpu())


@cuda
def test_a_fused_optimizer_steps_cuda_parameters():
    phase = Phase("train", 1, 1e-3, "adam")
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(3, device="cuda"))], phase, fused=True)
    assert opt.defaults["fused"]


def test_tiny_models_run_on_the_cpu_of_a_gpu_machine(monkeypatch):
    """On a machine with a GPU, `train.device=auto` places a model under TINY_PARAMETERS on the CPU (and `--jobs
    auto` then runs one cell a core); a larger model, or an explicit device, is left where it was."""
    from pathlib import Path

    from clbench._core.placement import TINY_PARAMETERS, _parameters_on_meta
    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec.local import LocalExecutor, usable_cpus

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    regs = testing.registry()

    def plan(**sets: Any) -> list[Any]:
        req = RunRequest(profile="quick", methods="seqft", streams=["split-digits"], orders=["1"], seeds=[0, 1, 2],
                         sets={k.replace("__", "."): [v] for k, v in sets.items()}, out=Path("unused"))
        return make_plan(regs, req).cells

    # the quick MLP on split-digits, counted on the meta device: 64·256 + 256·256 weights, their biases, and five
    # 2-way heads, far below the line
    small = plan()
    assert _parameters_on_meta(regs, small[0]) == 64 * 256 + 256 + 256 * 256 + 256 + 5 * (256 * 2 + 2) < TINY_PARAMETERS
    assert {c.placed for c in small} == {"cpu"} and {c.device_type for c in small} == {"cpu"}
    auto = ExecutorContext(worker=NO_WORKERS, options={"jobs": "auto"})
    assert LocalExecutor(auto).workers(small) == min(usable_cpus(), 3)
    # 64·2048 + 2048·2048 + … > 2 M: stays on the GPU, one cell at a time
    large = plan(model__hidden=[2048, 2048])
    assert _parameters_on_meta(regs, large[0]) == 64 * 2048 + 2048 + 2048 * 2048 + 2048 + 5 * (2048 * 2 + 2)
    assert {c.placed for c in large} == {""} and {c.device_type for c in large} == {"cuda"}
    assert LocalExecutor(auto).workers(large) == 1
    # an explicit device is the user's choice
    assert {c.placed for c in plan(train__device="cuda")} == {""}
    # placement is not part of a cell's identity: the same hash as the cell planned on a machine without a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert [c.placed for c in plan()] == ["", "", ""]
    assert [c.config_hash for c in plan()] == [c.config_hash for c in small]
