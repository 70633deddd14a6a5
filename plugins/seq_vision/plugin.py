"""Registers the class-incremental image streams (:mod:`.streams`: Seq-CIFAR-10, Seq-CIFAR-100 in 10 and 20 tasks,
Seq-TinyImageNet, each with its task-incremental twin) and the DER paper's Table 2 profiles on them:
``paper-der-cifar`` (buffer 200 and the rows without a buffer), ``paper-der-cifar-500`` and ``paper-der-cifar-5120``,
each row with the settings Mammoth's best_args give it and the paper's numbers beside it (docs/parity.md).
They train ResNet-18 for 50 (CIFAR-10) and 100 (TinyImageNet) epochs a task: GPU profiles."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from clbench_plugins._shared import mammoth

from clbench import hookimpl
from clbench.specs import ProfileSpec, StreamSpec

from .presets import BEST_ARGS, PROMPT_PROTOCOL, PROMPT_ROWS, TASKS
from .streams import STREAMS, SeqVision, VisionConfig

# Mammoth's protocol on these datasets: its ResNet-18 with one fixed head over every class from the first task,
# torch's default initialisation, plain SGD (no momentum, no weight decay, no schedule in the 2020 code), the
# tasks in their natural order; lr, batch size and epochs come with each row
PROTOCOL = {"model": "resnet18", "train.head": "full", "train.init": "model", "train.optimizer": "sgd",
            "train.momentum": 0.0, "orders": ["1"]}
PAPER_STREAMS = {"seq-cifar10": "seq-cifar10", "seq-cifar10-til": "seq-cifar10", "seq-tinyimg": "seq-tinyimg",
                 "seq-tinyimg-til": "seq-tinyimg"}
PROFILES = {"paper-der-cifar": 200, "paper-der-cifar-500": 500, "paper-der-cifar-5120": 5120}
PROMPT_STREAMS = tuple(PROMPT_ROWS)  # paper-prompt-vit's: Split CIFAR-100 and ImageNet-R


def rows(buffer: int, with_unbuffered: bool) -> dict[str, dict[str, dict[str, Any]]]:
    return mammoth.rows(BEST_ARGS, TASKS, PAPER_STREAMS, buffer, with_unbuffered)


@functools.cache
def targets(profile: str) -> dict[str, Any]:
    return dict(json.loads(resources.files(__package__).joinpath(f"{profile}.targets.json").read_text("utf-8")))


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    # a -til twin is the paper's Task-IL column: its profiles set train.scoring=task (elsewhere, --set it)
    specs = []
    for stream in [*STREAMS, *(s for s in PAPER_STREAMS if s not in STREAMS)]:
        dataset, classes, tasks = STREAMS[stream.removesuffix("-til")]
        til = stream.endswith("-til")
        presets = {p: {**PROTOCOL, **({"train.scoring": "task"} if til else {}),
                       "methods": sorted(rows(b, p == "paper-der-cifar")[stream])}
                   for p, b in PROFILES.items()} if stream in PAPER_STREAMS else {}
        if stream in PROMPT_STREAMS:
            presets["paper-prompt-vit"] = {**PROMPT_PROTOCOL, "methods": sorted(PROMPT_ROWS[stream])}
        what = (f"{dataset} in {tasks} tasks of {classes // tasks} classes, " + (
            "the same runs scored task-incremental (each task among its own classes) under its profiles' "
            "train.scoring=task" if til else "class-incremental: one head over every class"))
        specs.append(StreamSpec(stream, functools.partial(SeqVision, name=stream, dataset=dataset, classes=classes,
                                                          tasks=tasks), VisionConfig,
                                f"{what}; augmented as Mammoth's; "
                                + ("--data-dir (CODA-Prompt's split)" if dataset == "imagenet-r"
                                   else "--data-dir or the hub"), presets=presets,
                                tags=frozenset({"image"})))
    return specs


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [
        ProfileSpec(profile, f"the DER paper's Table 2, Seq-CIFAR-10 and Seq-TinyImageNet columns, buffer {buffer}"
                    + (" and the rows without a buffer" if profile == "paper-der-cifar" else "")
                    + ": ResNet-18, each row with its code's best_args, 5 seeds; GPU (docs/parity.md)",
                    version="1", seeds=(0, 1, 2, 3, 4), streams=tuple(PAPER_STREAMS),
                    rows=rows(buffer, profile == "paper-der-cifar"), targets=targets(profile))
        for profile, buffer in PROFILES.items()
    ] + [
        ProfileSpec("paper-prompt-vit", "L2P, DualPrompt and CODA-Prompt on Split CIFAR-100 and ImageNet-R (10 tasks "
                    "each) with a pretrained ViT-B/16, each row with its released code's settings; the papers' "
                    "numbers beside them; 5 seeds, GPU (docs/vision.md, docs/parity.md)", version="1",
                    seeds=(0, 1, 2, 3, 4), streams=PROMPT_STREAMS, requires_gpu=True,
                    rows={s: {m: dict(v) for m, v in rows.items()} for s, rows in PROMPT_ROWS.items()},
                    targets=targets("paper-prompt-vit"))
    ]
