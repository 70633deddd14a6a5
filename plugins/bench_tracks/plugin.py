"""The bench profile's tracks that are profiles of their own (``ProfileSpec.extends``): a track whose presets are
tuned on its own budget needs a name for them, and every other preset is the bench profile's. docs/bench.md.

- ``bench-equal-compute``: every task's examples with gradients those of one epoch of plain fine-tuning
  (``train.compute_epochs=1``), learning rates and strengths chosen by ``clbench tune --profile bench-equal-compute``
  on that budget (``plugins/_shared/tuned/bench-equal-compute.json``);
- ``bench-equal-steps``: every method the optimizer steps of one epoch of the stream's mean task a task, SeqFT's own
  budget (``train.steps_per_task``, one value a stream: ``STEPS_PER_TASK``), tuned by ``clbench tune --profile
  bench-equal-steps`` on that budget;
- ``bench-memory-M`` (M = 200, 500): the methods that keep examples, each keeping M in all (``train.memory=M``,
  split across tasks by the method's own rule), tuned by ``clbench tune --profile bench-memory-M`` at that memory."""

from __future__ import annotations

from typing import Any

from clbench import hookimpl
from clbench.specs import ProfileSpec


def track(name: str, description: str, **fields: Any) -> ProfileSpec:
    """A track of the bench profile: its presets over bench's, bench's seeds and orders (the streams' bench presets
    give both: seeds 0-9, orders 1, 2)."""
    return ProfileSpec(name, description, version="1", seeds=(0, 1, 2, 3, 4), extends="bench", **fields)


EQUAL_COMPUTE = track(
    "bench-equal-compute",
    "the bench profile at equal compute: every task's examples with gradients those of one epoch of plain "
    "fine-tuning (train.compute_epochs=1), presets tuned on that budget; CPU, --data-dir as bench",
    sets={"train.compute_epochs": 1.0},
)

# The equal-steps track: every method, every task, the optimizer steps of one epoch of the stream's mean task at
# batch 128 (SeqFT's own budget): 54,000 / 128 -> 422 a permutation; the split pairs' 10,137-11,399 training images
# -> 80-90 steps, 85 on average (tests/test_vision_streams.py computes them from the data).
STEPS_PER_TASK = {"permuted-mnist": 422, "permuted-mnist-dil": 422, "split-mnist": 85, "split-mnist-cil": 85}
BENCH_STREAMS = tuple(STEPS_PER_TASK)

# On the permuted streams every task has 54,000 training images, one epoch of them 422 steps: the methods that train
# each task one epoch at their own budget train it identically at equal steps (the same batches, the same AA).
ONE_EPOCH = ("agem", "dense-ewc", "der", "derpp", "er-ace", "ewc", "expander-ewc", "expander", "gem", "lwf",
             "random-mask-ewc", "replay", "seqft", "si")
TASK_INCREMENTAL_ONE_EPOCH = ("pertask-expander", "pertask-random", "pertaskft", "sm")  # (one head a task)

EQUAL_STEPS = track(
    "bench-equal-steps",
    "the bench profile at equal steps: every method the optimizer steps of one epoch of the stream's mean task a "
    "task (train.steps_per_task, one value a stream), presets tuned on that budget; CPU, --data-dir as bench",
    stream_sets={stream: {"train.steps_per_task": steps} for stream, steps in STEPS_PER_TASK.items()},
    base_tuned={"permuted-mnist": ONE_EPOCH + TASK_INCREMENTAL_ONE_EPOCH, "permuted-mnist-dil": ONE_EPOCH},
)

# the built-in methods that keep examples (MethodSpec.memory: what train.memory budgets)
KEEPING_EXAMPLES = ("replay", "der", "derpp", "er-ace", "gdumb", "icarl", "gem", "agem")
MEMORY_SIZES = (200, 500)
# those that keep 200 in all at their own budget (GEM and A-GEM keep 256 a task), and iCaRL on the class-incremental
# stream, where it runs: the same settings at memory 200
KEEP_200 = ("replay", "der", "derpp", "er-ace", "gdumb")


def equal_memory(size: int) -> ProfileSpec:
    """The bench profile's methods that keep examples, each keeping ``size`` examples in all."""
    return track(
        f"bench-memory-{size}",
        f"the bench profile's methods that keep examples, each keeping {size} in all (train.memory={size}), "
        "presets tuned at that memory; CPU, --data-dir as bench",
        methods=KEEPING_EXAMPLES,
        sets={"train.memory": size},
        base_tuned={s: KEEP_200 + (("icarl",) if s.endswith("-cil") else ()) for s in BENCH_STREAMS} if size == 200 else {},
    )


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [EQUAL_COMPUTE, EQUAL_STEPS, *(equal_memory(m) for m in MEMORY_SIZES)]
