"""The bench profile's tracks that are profiles of their own (``ProfileSpec.extends``): a track whose presets are
tuned on its own budget needs a name for them. ``bench-equal-compute`` is the bench profile at equal compute
(``train.compute_epochs=1``: every task's examples with gradients those of one epoch of plain fine-tuning), its
learning rates and strengths chosen by ``clbench tune --profile bench-equal-compute`` on that budget
(``plugins/_shared/tuned/bench-equal-compute.json``), every other preset the bench profile's. docs/bench.md."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ProfileSpec

EQUAL_COMPUTE = ProfileSpec(
    "bench-equal-compute",
    "the bench profile at equal compute: every task's examples with gradients those of one epoch of plain "
    "fine-tuning (train.compute_epochs=1), presets tuned on that budget; CPU, --data-dir as bench",
    version="1",
    seeds=(0, 1, 2, 3, 4),
    sets={"train.compute_epochs": 1.0},
    extends="bench",
)


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [EQUAL_COMPUTE]
