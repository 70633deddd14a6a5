"""Registers permuted-mnist, split-cifar10-100, the CifarNet model and the ``paper-lps`` profile."""

from __future__ import annotations

import functools

from clbench import hookimpl
from clbench.specs import ModelSpec, ProfileSpec, StreamSpec

from .model import CifarNetConfig
from .model import build as build_cifarnet
from .presets import BENCH, BENCH_PERMUTED, PAPER_TRAIN
from .streams import (
    PermutedMNIST,
    PermutedMNISTConfig,
    SplitCIFAR10_100,
    SplitCIFARConfig,
    SplitMNIST,
    SplitMNISTConfig,
)


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [
        StreamSpec("permuted-mnist", PermutedMNIST, PermutedMNISTConfig,
                   "10 tasks of MNIST under fixed pixel permutations (LPS Table I); --data-dir or the hub",
                   presets={"paper-lps": {**PAPER_TRAIN, "model": "mlp",
                                          "model.hidden": [2000, 2000],  # §V-A: two hidden layers of 2000, ReLU
                                          "model.multi_head": True},  # §III, Fig. 1: one head per task
                            "bench": dict(BENCH_PERMUTED)},
                   tags=frozenset({"image"})),
        StreamSpec("permuted-mnist-dil", functools.partial(PermutedMNIST, multi_head=False), PermutedMNISTConfig,
                   "permuted-mnist with one shared head (domain-incremental: no task identity at test time)",
                   presets={"bench": dict(BENCH_PERMUTED)}, tags=frozenset({"image"})),
        StreamSpec("split-mnist", SplitMNIST, SplitMNISTConfig,
                   "MNIST in 5 tasks of two digits, one head per task (task-incremental); --data-dir or the hub",
                   presets={"bench": dict(BENCH)}, tags=frozenset({"image"})),
        StreamSpec("split-mnist-cil", functools.partial(SplitMNIST, class_incremental=True), SplitMNISTConfig,
                   "split-mnist class-incremental: one head over the ten digits, unseen digits masked, no task "
                   "identity at test time", presets={"bench": dict(BENCH)}, tags=frozenset({"image"})),
        StreamSpec("split-cifar10-100", SplitCIFAR10_100, SplitCIFARConfig,
                   "CIFAR-10, then 5 tasks of 10 CIFAR-100 classes (LPS Table I); --data-dir or the hub",
                   presets={"paper-lps": {**PAPER_TRAIN, "model": "cifarnet",  # §V-A: Keras' CIFAR-10 network
                                          "model.multi_head": True}},
                   tags=frozenset({"image"})),
    ]


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [ModelSpec("cifarnet", build_cifarnet, CifarNetConfig,
                      "Keras' CIFAR-10 CNN (4 convs, fc 512) as in the LPS code; one head per task",
                      modalities=frozenset({"image"}), provides=frozenset({"multi-head"}))]


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    # Table II's columns: SM, EWC, IS (SI), LwF, DGR, GEM, PackNet, LPS; SeqFT beside them
    return [
        ProfileSpec("paper-lps", "LPS/PackNet Table II: permuted MNIST (2×2000 MLP) and split CIFAR-10/100 "
                    "(CifarNet); Adam 1e-3, batch 128; GPU or a long CPU run",
                    version="1", seeds=(0,), methods=("lps", "packnet", "ewc", "si", "lwf", "dgr", "gem", "sm", "seqft"),
                    streams=("permuted-mnist", "split-cifar10-100")),
        ProfileSpec("bench", "full MNIST test sets in three scenarios, every method that applies, 10 cells a row "
                    "(seeds 0-4 x orders 1, 2), CPU; --data-dir with the MNIST idx files or the hub",
                    version="1", seeds=(0, 1, 2, 3, 4)),
    ]
