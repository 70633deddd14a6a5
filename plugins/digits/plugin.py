from __future__ import annotations

import functools

from clbench import hookimpl
from clbench.specs import StreamSpec

from .presets import PERMUTED, QUICK
from .streams import DigitsConfig, PermutedDigits, SplitDigits, SplitDigitsCIL


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [
        StreamSpec("permuted-digits", PermutedDigits, DigitsConfig,
                   "sklearn digits, each task under a fixed pixel permutation (10 tasks; quick: 5), one shared head "
                   "(domain-incremental)", presets={"quick": dict(PERMUTED)}),
        StreamSpec("permuted-digits-til", functools.partial(PermutedDigits, multi_head=True), DigitsConfig,
                   "permuted-digits with one head per task (task-incremental: the task identity is given at test "
                   "time)", presets={"quick": dict(PERMUTED)}),
        StreamSpec("split-digits", SplitDigits, DigitsConfig,
                   "5 two-class tasks of sklearn digits (0/1 ... 8/9), one head per task (task-incremental)",
                   presets={"quick": dict(QUICK)}),
        StreamSpec("split-digits-cil", SplitDigitsCIL, DigitsConfig,
                   "split-digits class-incremental: one head over the ten digits, unseen digits masked, no task "
                   "identity at test time", presets={"quick": dict(QUICK)}),
    ]
