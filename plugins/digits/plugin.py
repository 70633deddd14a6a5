from __future__ import annotations

import functools

from clbench import hookimpl
from clbench.specs import StreamSpec

from .streams import DigitsConfig, PermutedDigits, SplitDigits, SplitDigitsCIL

# Quick-profile settings: small enough that every method runs on all three orders in seconds.
# Order 1 with the profile's three seeds (0, 1, 2): seeds separate methods within the five-minute budget; the other
# orders run with --orders 1,2,3. The learning rate is each method's (its quick preset, docs/tuning.md).
_QUICK = {"model": "mlp", "orders": ["1"], "train.epochs": 3, "train.batch_size": 32,
          "train.lr": 0.05, "train.momentum": 0.9, "train.optimizer": "sgd"}
# Five permutations, as split-digits has five tasks: the quick default's 276 cells took 10 min 54 s on 2 cores with
# ten, 2 min 47 s for its digits cells with five (AMD EPYC, 2026-11-27); --set stream.tasks=10 restores the ten.
_PERMUTED = {**_QUICK, "stream.tasks": 5}


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [
        StreamSpec("permuted-digits", PermutedDigits, DigitsConfig,
                   "sklearn digits, each task under a fixed pixel permutation (10 tasks; quick: 5), one shared head "
                   "(domain-incremental)", presets={"quick": dict(_PERMUTED)}),
        StreamSpec("permuted-digits-til", functools.partial(PermutedDigits, multi_head=True), DigitsConfig,
                   "permuted-digits with one head per task (task-incremental: the task identity is given at test "
                   "time)", presets={"quick": dict(_PERMUTED)}),
        StreamSpec("split-digits", SplitDigits, DigitsConfig,
                   "5 two-class tasks of sklearn digits (0/1 ... 8/9), one head per task (task-incremental)",
                   presets={"quick": dict(_QUICK)}),
        StreamSpec("split-digits-cil", SplitDigitsCIL, DigitsConfig,
                   "split-digits class-incremental: one head over the ten digits, unseen digits masked, no task "
                   "identity at test time", presets={"quick": dict(_QUICK)}),
    ]
