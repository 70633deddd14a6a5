"""Sharded data parallelism (`--nproc N --set train.shard=full`, clbench._exec.shard): two gloo ranks on the CPU,
each holding half of every weight, give one process's numbers at the same global batch for every method declared
to run sharded (ShardingSpec); every other method, and a sharded cell on one process, is refused before a cell
starts.

One process with train.grad_accum=2 runs the same two micro-batches a step as the two ranks. The summed gradient
is bit-identical (each rank's is its micro-batch's scaled by 2, the world size; FSDP's reduce-scatter averages the
two, and (2a + 2b) / 2 is a + b exactly in floating point, what the accumulating process sums); gradient clipping,
on here, takes its norm over each rank's shard and then over the ranks, a sum in another order, so the weights
agree to float32 rounding: footprints within 1e-5 relative, matrices within 1e-3 percentage points. Each rank held
half of every weight (checked by hand: the local shards of tiny-vector's MLP first layer are 8 × 8 of 16 × 8)."""

from __future__ import annotations

import pytest
import torch

from clbench import footprints as fps
from clbench import testing
from clbench._core.plan import make_plan
from clbench._exec.executors import execute
from clbench._exec.session import build_model, build_stream
from clbench.cell import CHECKPOINT_FILE, FOOTPRINT_FILE
from clbench.errors import ClbenchError
from clbench.testing.running import _request

SHARDED = {"train.shard": ["full"]}
CLIPPED = {"train.grad_clip": [0.05]}  # clipping on: its norm is over every rank's shard of every gradient


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Each shardable method's cell on two sharded ranks, and on one process accumulating two micro-batches."""
    regs = testing.registry()
    methods = sorted(m for m in regs.methods if regs.methods.get(m).shardable)
    assert methods == ["joint", "replay", "seqft"]
    root = tmp_path_factory.mktemp("shard")
    two = testing.run(regs, root / "n2", ",".join(methods), sets={**SHARDED, **CLIPPED}, nproc=2)
    one = testing.run(regs, root / "n1k2", ",".join(methods), sets={"train.grad_accum": [2], **CLIPPED})
    return {r.method: r for r in two}, {r.method: r for r in one}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["joint", "replay", "seqft"])
def test_a_sharded_cell_gives_one_processs_numbers(pairs, method):
    two, one = pairs[0][method], pairs[1][method]
    assert two.status == one.status == "complete", (two.error, one.error)
    assert two.config["train"]["shard"] == "full" and two.config["nproc"] == 2
    for a, b in zip(two.accuracy_matrix, one.accuracy_matrix, strict=True):
        assert a == pytest.approx(b, abs=1e-3)
    sharded = fps.load(two.path.parent / FOOTPRINT_FILE, two.footprints)
    whole = fps.load(one.path.parent / FOOTPRINT_FILE, one.footprints)
    for task_a, task_b in zip(sharded, whole, strict=True):  # each task's ΔW, gathered whole from the shards
        assert task_a.keys() == task_b.keys()
        for name in task_a:
            torch.testing.assert_close(task_a[name].delta, task_b[name].delta, rtol=1e-5, atol=1e-8)


class KillAfterFirstTask(testing.KillAfterTask):
    """Loaded by the ranks by name (``rank_plugins``): rank 0's observer interrupts the cell after task 1."""

    def __init__(self) -> None:
        super().__init__(0)


@pytest.mark.slow
def test_a_killed_sharded_cell_resumes_from_whole_weights_to_the_uninterrupted_numbers(pairs, tmp_path):
    """The checkpoint after task 1 holds every weight whole (the unsharded model's shapes, gathered from the two
    ranks' halves); the rerun resumes from it, sharded again, and ends where the uninterrupted sharded cell did."""
    regs = testing.registry()
    sets = {**SHARDED, **CLIPPED, "train.checkpoint_every_s": [0]}
    plan = make_plan(regs, _request(tmp_path, "seqft", "tiny-vector", sets=sets))
    ranks = ["clbench.testing:TinyPlugin", f"{__name__}:{KillAfterFirstTask.__name__}"]
    with pytest.raises(KeyboardInterrupt):
        execute(plan, regs, progress=False, options={"nproc": 2, "rank_plugins": ranks})
    [checkpoint] = tmp_path.rglob(CHECKPOINT_FILE)
    saved = torch.load(checkpoint, weights_only=True)
    assert saved["done"] == 1
    [cell] = plan.cells
    whole = build_model(regs, cell, build_stream(regs, cell)).state_dict()
    assert saved["model"] and {n: t.shape for n, t in saved["model"].items()} == {n: whole[n].shape for n in saved["model"]}
    [resumed] = testing.run(regs, tmp_path, "seqft", sets=sets, nproc=2)
    straight = pairs[0]["seqft"]
    assert resumed.status == "complete" and resumed.config["train"]["shard"] == "full"
    assert resumed.timings["tasks"][0] == saved["timings"][0]  # task 1 came from the checkpoint, not run again
    assert resumed.accuracy_matrix == straight.accuracy_matrix
    assert resumed.footprints["sha256"] == straight.footprints["sha256"]
    assert not checkpoint.exists()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["replay", "seqft"])
def test_one_rank_with_its_shards_in_host_memory_gives_one_processs_numbers(pairs, method, tmp_path):
    """train.shard=offload on one rank (--nproc 1: the world of one that FSDP2 needs, a process of its own) keeps the
    shards, their gradients and the optimizer's state in host memory; its numbers are one process's at the same
    batch: the same two micro-batches a step, the gradient clipped over the one shard."""
    regs = testing.registry()
    sets = {"train.shard": ["offload"], "train.grad_accum": [2], **CLIPPED}
    [offloaded] = testing.run(regs, tmp_path, method, sets=sets, nproc=1)
    one = pairs[1][method]
    assert offloaded.status == "complete", offloaded.error
    assert offloaded.config["train"]["shard"] == "offload" and "nproc" not in offloaded.config
    for a, b in zip(offloaded.accuracy_matrix, one.accuracy_matrix, strict=True):
        assert a == pytest.approx(b, abs=1e-3)
    for task_a, task_b in zip(
        fps.load(offloaded.path.parent / FOOTPRINT_FILE, offloaded.footprints),
        fps.load(one.path.parent / FOOTPRINT_FILE, one.footprints),
        strict=True,
    ):
        for name in task_a:
            torch.testing.assert_close(task_a[name].delta, task_b[name].delta, rtol=1e-5, atol=1e-8)


def test_offloaded_shards_hold_the_optimizers_state_in_host_memory_and_step_it_there():
    """FSDP2's CPUOffloadPolicy, as shard_model applies it: every shard is a host tensor, so the optimizer's moments
    are created there; the step equals an unsharded model's (a world of one rank, gloo)."""
    import os
    import socket

    import torch.distributed as dist

    from clbench._exec.shard import shard_model

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model, plain = (_bf16_mlp().float() for _ in range(2))
        shard_model(model, offload=True)
        x, y = (t.float() if t.is_floating_point() else t for t in _examples())
        for m in (model, plain):
            opt = torch.optim.Adam(m.parameters(), lr=0.01)
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            if m is model:
                moments = [v for state in opt.state.values() for v in state.values() if v.dim()]
        locals_ = [p.to_local() for p in model.parameters()]
        assert {str(p.device) for p in locals_} == {str(m.device) for m in moments} == {"cpu"}
        assert len(moments) == 2 * len(locals_)  # Adam's two moments of every shard
        for sharded, whole in zip(model.parameters(), plain.parameters(), strict=True):
            torch.testing.assert_close(sharded.full_tensor(), whole.detach(), rtol=0, atol=0)
        # on the CPU every tensor is a host tensor anyway: what tells offloading from not is the unit's policy
        for unit in (model[0], model[2]):
            assert type(unit._get_fsdp_state()._fsdp_param_group.offload_policy).__name__ == "CPUOffloadPolicy"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(("method", "stream"), [("ewc", "tiny-vector"), ("derpp", "tiny-vector"), ("olora", "tiny-text")])
def test_a_method_not_declared_shardable_is_refused_before_a_cell_starts(tmp_path, method, stream):
    """A regulariser (EWC's anchor and Fisher), a replay method that stores logits (DER++) and a LoRA method (O-LoRA's
    merges and earlier adapters) read or copy whole weights: refused sharded and offloaded, naming the method."""
    regs = testing.registry()
    for sets, nproc in ((SHARDED, 2), ({"train.shard": ["offload"]}, 1)):
        shard = sets["train.shard"][0]
        with pytest.raises(ClbenchError, match=f"train.shard={shard}: method '{method}' is not declared to run with "
                                               "its model's weights sharded"):
            testing.run(regs, tmp_path, method, stream, sets=sets, nproc=nproc)
    assert not any(tmp_path.rglob("result.json"))


def test_a_sharded_cell_on_one_process_is_refused_unless_offloaded(tmp_path):
    regs = testing.registry()
    with pytest.raises(ClbenchError, match=r"train.shard=full shards the model over ranks.*\(train.shard=offload\)"):
        testing.run(regs, tmp_path, "seqft", sets=SHARDED)
    assert not any(tmp_path.rglob("result.json"))


def _mixed_precision_rank(rank: int, world: int, port: int, out: str) -> None:
    """One rank of a bfloat16 MLP sharded with float32 masters: one SGD step on its half of 6 examples."""
    import os

    import torch.distributed as dist

    from clbench._exec.shard import compute_precision, shard_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = _bf16_mlp()
        compute = compute_precision(model, fp32_masters=True)
        model.to(torch.float32)
        shard_model(model, compute)
        x, y = _examples()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        mine = slice(rank * 3, rank * 3 + 3)
        loss = torch.nn.functional.cross_entropy(model(x[mine]).float(), y[mine], reduction="sum") / 6
        (loss * world).backward()  # as clbench's sharded step scales a rank's loss (clbench._exec.shard)
        opt.step()
        full = [p.full_tensor() for p in model.parameters()]
        if rank == 0:
            torch.save({"dtypes": [str(p.dtype) for p in model.parameters()], "weights": full}, out)
    finally:
        dist.destroy_process_group()


def _bf16_mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(torch.bfloat16)


def _examples() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    return x, torch.randint(0, 4, (6,), generator=torch.Generator().manual_seed(2))


def test_low_precision_weights_with_masters_shard_as_float32_computed_in_their_precision(tmp_path):
    """bfloat16 weights with train.fp32_masters: the shards are the float32 masters, the forward and backward run in
    bfloat16. Against one process (bfloat16 weights, float32 masters stepped by SGD from the two micro-batches'
    gradients summed in bfloat16) the masters agree to bfloat16's rounding of the gradient."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "rank0.pt"
    mp.spawn(_mixed_precision_rank, args=(2, port, str(out)), nprocs=2)
    got = torch.load(out, weights_only=True)
    assert set(got["dtypes"]) == {"torch.float32"}  # the shards are the masters
    ref = _bf16_mlp()
    masters = [p.detach().float().clone() for p in ref.parameters()]
    x, y = _examples()
    for k in range(2):
        part = slice(k * 3, k * 3 + 3)
        (torch.nn.functional.cross_entropy(ref(x[part]).float(), y[part], reduction="sum") / 6).backward()
    with torch.no_grad():
        for m, p in zip(masters, ref.parameters(), strict=True):
            m -= 0.1 * p.grad.float()
    start = [p.float() for p in _bf16_mlp().parameters()]
    moved = max((m - b).abs().max().item() for m, b in zip(masters, start, strict=True))
    diff = max((a - m).abs().max().item() for a, m in zip(got["weights"], masters, strict=True))
    assert diff < 1e-2 * moved  # the step itself moved the weights by `moved`; the two differ by bf16 rounding
    assert diff > 0  # (float32 sums of the gradients, not bfloat16 ones: not the same bits)


def test_a_sharding_declaration_must_name_a_method_and_only_once():
    from clbench import hookimpl
    from clbench.errors import PluginError
    from clbench.specs import ShardingSpec

    class Declares:
        def __init__(self, *specs):
            self.specs = list(specs)

        @hookimpl
        def clbench_add_sharding(self):
            return self.specs

    with pytest.raises(PluginError, match="which no plugin registers — did you mean 'seqft'"):
        testing.registry(Declares(ShardingSpec("seqtf")))
    with pytest.raises(PluginError, match="sharding 'seqft' is registered twice"):
        testing.registry(Declares(ShardingSpec("seqft")))  # plugins/sharding declares it already
    regs = testing.registry(Declares(ShardingSpec("ewc")))
    assert regs.methods.get("ewc").shardable and not testing.registry().methods.get("ewc").shardable


def test_the_memory_plan_of_a_sharded_cell_is_a_ranks(tmp_path):
    """The plan of a cell at train.shard=full over N ranks: 1/N of the one-process weights, gradients and optimizer
    state, plus the largest module's own weights whole (and their gradients); the rest as one process's."""
    import dataclasses

    from clbench._core.cells import RunRequest
    from clbench._core.plan import make_plan
    from clbench._exec import memory
    from clbench._exec.session import build_model, build_stream

    regs = testing.registry()
    one, = make_plan(regs, RunRequest(methods="seqft", streams=["tiny-vector"], profile="test", out=tmp_path)).cells
    sharded, = make_plan(regs, RunRequest(methods="seqft", streams=["tiny-vector"], profile="test", out=tmp_path,
                                          sets={"train.shard": ["full"]})).cells
    four = dataclasses.replace(sharded, nproc=4)  # as `clbench run --nproc 4 --dry-run` plans it
    whole, rank = memory.estimate(regs, one), memory.estimate(regs, four)
    model = build_model(regs, one, build_stream(regs, one))
    unit = max(sum(p.numel() * 4 for p in m.parameters(recurse=False)) for m in model.modules())  # float32 bytes
    assert unit == whole.unit == 16 * 8 * 4 + 16 * 4  # tiny-vector's MLP: its first layer, 16 × 8 and a bias
    assert rank.terms["weights"] == -(-whole.terms["weights"] // 4) + unit
    assert rank.terms["gradients"] == -(-whole.terms["gradients"] // 4) + unit
    assert rank.terms["optimizer"] == -(-whole.terms["optimizer"] // 4)
    assert {k: rank.terms[k] for k in ("method", "activations", "evaluation")} == {
        k: whole.terms[k] for k in ("method", "activations", "evaluation")
    }
    moved = sum(rank.terms[k] - whole.terms[k] for k in ("weights", "gradients", "optimizer"))
    assert rank.peak == whole.peak + moved < whole.peak
    assert any("per rank of 4 (train.shard=full)" in n for n in rank.notes)


def test_the_memory_plan_of_an_offloaded_cell_puts_the_shards_on_the_host(tmp_path):
    """train.shard=offload: the device keeps the largest unit's whole weights and gradients while it computes, the
    method's state, activations and evaluation as one process's; host memory holds 1/N of one process's weights,
    gradients and optimizer state (on one rank, all of them); the peak moves by the device terms' change."""
    from clbench._core.cells import RunRequest
    from clbench._exec import memory

    regs = testing.registry()
    one, offloaded = (
        make_plan(regs, RunRequest(methods="seqft", streams=["tiny-vector"], profile="test", out=tmp_path,
                                   sets=sets)).cells[0]
        for sets in ({}, {"train.shard": ["offload"]})
    )
    whole, rank = memory.estimate(regs, one), memory.estimate(regs, offloaded)
    unit = 16 * 8 * 4 + 16 * 4  # tiny-vector's MLP: its first layer, 16 × 8 and a bias, float32
    assert (rank.terms["weights"], rank.terms["gradients"], rank.terms["optimizer"]) == (unit, unit, 0)
    assert rank.host == sum(whole.terms[k] for k in ("weights", "gradients", "optimizer")) > 0
    assert whole.host == 0
    for k in ("method", "activations", "evaluation"):
        assert rank.terms[k] == whole.terms[k]
    moved = sum(rank.terms[k] - whole.terms[k] for k in ("weights", "gradients", "optimizer"))
    assert rank.peak == max(whole.peak + moved, whole.terms["weights"])
    assert any("train.shard=offload" in n and "in host memory" in n for n in rank.notes)
    assert "host (offloaded)" in memory.memory_table([(offloaded, rank)], None)


@pytest.mark.slow
def test_clbench_verify_reruns_an_offloaded_cell_in_its_group_of_one(tmp_path):
    """`clbench verify` reruns a train.shard=offload cell as it ran (a rank process of its own, the group FSDP2
    needs) and gets its numbers back exactly."""
    from clbench._tools.verify import rerun

    regs = testing.registry()
    sets = {"train.shard": ["offload"], "train.epochs": [1]}
    [cell] = testing.run(regs, tmp_path / "run", "seqft", "split-digits", profile="quick", orders=["1"], sets=sets,
                         nproc=1)
    assert cell.status == "complete", cell.error
    [again] = rerun(regs, [cell], tmp_path / "again")
    assert again.accuracy_matrix == cell.accuracy_matrix
