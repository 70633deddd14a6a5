"""The built-in methods that run with their model's weights sharded over the ranks (``clbench_add_sharding``: what
``train.shard=full`` allows). Declared apart from the methods' own specs, as ``memory_budgets`` declares their
memory: a declaration reaches no cell's numbers, so the methods' code (and every result it made) is unchanged.

Each reads the weights only through the model's forward and backward, and keeps no copy, anchor, mask or per-weight
state of its own: SeqFT; joint training (every task's data, the same step); replay (a buffer of examples, drawn as
in one process). tests/test_shard.py holds each to the one-process numbers on two gloo ranks."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ShardingSpec

SHARDABLE = ("seqft", "joint", "replay")


@hookimpl
def clbench_add_sharding() -> list[ShardingSpec]:
    return [ShardingSpec(method) for method in SHARDABLE]
