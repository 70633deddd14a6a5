"""The built-in streams whose tasks are all scored on the same test examples in the same order, each task transforming
them its own way (``clbench_add_test_sets``): the permuted and rotated MNIST and digits streams. The verdict rule's
bootstrap resamples their test examples once for all tasks, as their errors correlate (an image one task gets wrong,
another task's permutation or rotation of it often does too). Declared apart from the streams' own specs, as
``sharding`` declares methods: a declaration reaches no cell's numbers, so the streams' code (and every result it
made) is unchanged. tests/test_verdicts.py checks the bootstrap's spread on such a stream."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import TestSetSpec

SHARED = ("permuted-digits", "permuted-digits-til", "permuted-mnist", "permuted-mnist-dil", "perm-mnist", "rot-mnist")


@hookimpl
def clbench_add_test_sets() -> list[TestSetSpec]:
    return [TestSetSpec(stream) for stream in SHARED]
