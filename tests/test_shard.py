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
from clbench.cell import FOOTPRINT_FILE
from clbench.errors import ClbenchError

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


def test_a_method_not_declared_shardable_is_refused_before_a_cell_starts(tmp_path):
    regs = testing.registry()
    with pytest.raises(ClbenchError, match="method 'ewc' is not declared to run with its model's weights sharded"):
        testing.run(regs, tmp_path, "ewc", sets=SHARDED, nproc=2)
    with pytest.raises(ClbenchError, match="train.shard=full shards the model over ranks"):
        testing.run(regs, tmp_path, "seqft", sets=SHARDED)
    assert not any(tmp_path.rglob("result.json"))


def test_sharding_keeps_float32_weights():
    from clbench._exec.shard import shard_model
    from clbench.errors import ConfigError

    with pytest.raises(ConfigError, match="keeps float32 weights; this model has torch.bfloat16 weights"):
        shard_model(torch.nn.Linear(2, 2).to(torch.bfloat16))


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
