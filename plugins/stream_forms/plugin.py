"""Streams made from other plugins' streams by a form the core knows (``clbench_add_stream_forms``):
``split-cifar10-100-cil``, the LPS paper's CIFAR-10 then CIFAR-100 tasks (``split-cifar10-100``, task-incremental, one
head a task) as one class-incremental problem over their 60 classes. Declared apart from the base stream's plugin, as
``test_sets`` declares streams: the base's code, and every result it made, is unchanged."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import StreamFormSpec


@hookimpl
def clbench_add_stream_forms() -> list[StreamFormSpec]:
    return [
        StreamFormSpec(
            "split-cifar10-100-cil",
            "split-cifar10-100",
            description="split-cifar10-100 class-incremental: all of CIFAR-10, then CIFAR-100 in tasks of 10 classes, "
            "one head over every class (named task/class), no task identity at test time; --data-dir or the hub",
        )
    ]
