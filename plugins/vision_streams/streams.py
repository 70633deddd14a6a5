"""The LPS paper's two benchmark streams (Wang et al., §V-A, Table I).

* ``permuted-mnist``: 10 tasks, each all of MNIST under a fixed pixel permutation (task ``p0`` is the
  identity); 10 classes per task, one head per task in the paper's multi-head setting.
* ``permuted-mnist-dil``: the same tasks with one shared 10-way head (domain-incremental: no task identity).
* ``split-mnist``: 5 tasks of two digits (0/1, 2/3, ...), one 2-way head per task (task-incremental);
  ``split-mnist-cil`` the same tasks class-incremental: one head over the ten digits, unseen digits masked
  (:meth:`clbench.model.CLModel.see_labels`), no task identity at test time.
* ``split-cifar10-100``: 6 tasks: all of CIFAR-10, then 5 tasks of 10 consecutive CIFAR-100 classes
  (0–9, …, 40–49), as "Following [6]" (Zenke et al.).

Data come from ``data_dir`` (``--data-dir``; formats in :mod:`.loaders`) or, when it is empty, from the
hub by name through ``datasets``. A validation split (``val_fraction`` of train, stratified, fixed
seed) is carved for any selection; the test split is never used for one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from clbench.config import bounded, setting
from clbench.data import Split, Stream, TaskData, TaskInfo, stratified_split
from clbench.errors import ConfigError

from . import loaders

SPLIT_SEED = 4321
DIGITS = tuple(str(d) for d in range(10))


@dataclass(frozen=True)
class PermutedMNISTConfig:
    data_dir: str = setting("", help='a folder holding the four MNIST idx files; "": the hub (hub_name)')
    hub_name: str = "ylecun/mnist"
    tasks: int = bounded(10, ge=1, le=100, help="LPS Table I: 10 tasks")
    val_fraction: float = bounded(0.1, gt=0, lt=1, help=(
        'held out of train for selection; §V-A tunes "using a validation set"'))
    train_limit: int = bounded(0, ge=0, help=(
        ">0: the first N training examples per task (CPU runs); 0: all 60,000 − val"))

    def __post_init__(self) -> None:
        _check_common(self.val_fraction, self.train_limit)
        if not 1 <= self.tasks <= 100:
            raise ConfigError(f"stream.tasks={self.tasks} must lie in [1, 100]")


@dataclass(frozen=True)
class SplitCIFARConfig:
    data_dir: str = setting("", help='a folder with cifar10/ and cifar100/ (numpy or parquet layout); "": the hub')
    cifar10_hub: str = "uoft-cs/cifar10"
    cifar100_hub: str = "uoft-cs/cifar100"
    cifar100_tasks: int = bounded(5, ge=1, le=10, help="LPS Table I: 6 tasks = CIFAR-10 + 5 × 10 CIFAR-100 classes")
    val_fraction: float = bounded(0.1, gt=0, lt=1)
    train_limit: int = bounded(0, ge=0)

    def __post_init__(self) -> None:
        _check_common(self.val_fraction, self.train_limit)
        if not 1 <= self.cifar100_tasks <= 10:
            raise ConfigError(f"stream.cifar100_tasks={self.cifar100_tasks} must lie in [1, 10]")


def _check_common(val_fraction: float, train_limit: int) -> None:
    if not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"stream.val_fraction={val_fraction} must lie in (0, 1)")
    if train_limit < 0:
        raise ConfigError(f"stream.train_limit={train_limit} must be ≥ 0")


def _scaled(x: Tensor) -> Tensor:
    return x.float().div_(255.0)


def _task_data(info: TaskInfo, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor], val_fraction: float,
               limit: int) -> TaskData:
    x, y = train
    fit, val = stratified_split(y, val_fraction, torch.Generator().manual_seed(SPLIT_SEED))
    if limit:
        fit = fit[:limit]
    return TaskData(info, Split(_scaled(x[fit]), y[fit]), Split(_scaled(test[0]), test[1]),
                    Split(_scaled(x[val]), y[val]))


@functools.cache
def _mnist(data_dir: str, hub: str, split: str) -> tuple[Tensor, Tensor]:
    if data_dir:
        return loaders.mnist_from_dir(Path(data_dir), split, root=Path(data_dir))
    return loaders.from_hub(hub, split)


class PermutedMNIST(Stream):
    def __init__(self, config: PermutedMNISTConfig, multi_head: bool = True) -> None:
        names = [f"p{k}" for k in range(config.tasks)]
        rng = torch.Generator().manual_seed(SPLIT_SEED + 1)
        super().__init__(
            name="permuted-mnist" if multi_head else "permuted-mnist-dil",
            tasks=[TaskInfo(n, DIGITS, group="mnist") for n in names],
            orders={"1": names, "2": names[::-1], "3": [names[i] for i in torch.randperm(len(names), generator=rng)]},
            modality="image",
            input_shape=(1, 28, 28),
            multi_head=multi_head,
            provenance=f"MNIST idx files ({config.data_dir or config.hub_name})",
        )
        self.config = config

    @staticmethod
    def permutation(task: str) -> Tensor:
        k = int(task[1:])
        return torch.arange(784) if k == 0 else torch.randperm(784, generator=torch.Generator().manual_seed(SPLIT_SEED + 100 + k))

    def load(self, info: TaskInfo) -> TaskData:
        c = self.config
        perm = self.permutation(info.name)

        def permuted(split: str) -> tuple[Tensor, Tensor]:
            x, y = _mnist(c.data_dir, c.hub_name, split)
            return x.reshape(len(x), -1)[:, perm].reshape(x.shape), y

        return _task_data(info, permuted("train"), permuted("test"), c.val_fraction, c.train_limit)


@dataclass(frozen=True)
class SplitMNISTConfig:
    data_dir: str = setting("", help='a folder holding the four MNIST idx files; "": the hub (hub_name)')
    hub_name: str = "ylecun/mnist"
    val_fraction: float = bounded(0.1, gt=0, lt=1, help="held out of train for selection (stratified, fixed seed)")
    train_limit: int = bounded(0, ge=0, help=">0: the first N training examples per task; 0: all of its two digits")

    def __post_init__(self) -> None:
        _check_common(self.val_fraction, self.train_limit)


PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))


class SplitMNIST(Stream):
    """MNIST in five tasks of two digits, every test image of each (~2,000 a task). Task-incremental: the label is
    the digit's place in its pair, one head per task. ``class_incremental``: the label is the digit, one head over
    the ten digits, those of later tasks masked while a task trains and is scored."""

    def __init__(self, config: SplitMNISTConfig, class_incremental: bool = False) -> None:
        names = [f"{a}-{b}" for a, b in PAIRS]
        if class_incremental:
            tasks = [TaskInfo(f"{a}-{b}", DIGITS, group="mnist", classes=(str(a), str(b))) for a, b in PAIRS]
        else:
            tasks = [TaskInfo(f"{a}-{b}", (str(a), str(b)), group="mnist") for a, b in PAIRS]
        super().__init__(
            name="split-mnist-cil" if class_incremental else "split-mnist",
            tasks=tasks,
            orders={"1": names, "2": names[::-1], "3": [names[i] for i in (1, 4, 0, 3, 2)]},
            modality="image",
            input_shape=(1, 28, 28),
            multi_head=not class_incremental,
            scenario="class-incremental" if class_incremental else "",
            provenance=f"MNIST idx files ({config.data_dir or config.hub_name})",
        )
        self.config = config
        self.class_incremental = class_incremental

    def load(self, info: TaskInfo) -> TaskData:
        c = self.config
        a, b = (int(d) for d in info.name.split("-"))

        def part(split: str) -> tuple[Tensor, Tensor]:
            x, y = _mnist(c.data_dir, c.hub_name, split)
            keep = (y == a) | (y == b)
            return x[keep], (y[keep] if self.class_incremental else (y[keep] == b).long())

        return _task_data(info, part("train"), part("test"), c.val_fraction, c.train_limit)


@functools.cache
def _cifar(data_dir: str, which: str, hub: str, split: str) -> tuple[Tensor, Tensor]:
    if data_dir:
        return loaders.cifar_from_dir(Path(data_dir) / which, split, root=Path(data_dir))
    return loaders.from_hub(hub, split)


class SplitCIFAR10_100(Stream):
    def __init__(self, config: SplitCIFARConfig) -> None:
        tasks = [TaskInfo("cifar10", tuple(str(c) for c in range(10)), group="cifar10")]
        for k in range(config.cifar100_tasks):
            tasks.append(TaskInfo(f"cifar100-{k}", tuple(str(c) for c in range(10 * k, 10 * k + 10)), group="cifar100"))
        names = [t.name for t in tasks]
        super().__init__(
            name="split-cifar10-100",
            tasks=tasks,
            orders={"1": names, "2": names[:1] + names[1:][::-1]},  # CIFAR-10 always first (Table I: n = 1)
            modality="image",
            input_shape=(3, 32, 32),
            multi_head=True,
            provenance=f"CIFAR-10/100 ({config.data_dir or config.cifar10_hub + ', ' + config.cifar100_hub})",
        )
        self.config = config

    def load(self, info: TaskInfo) -> TaskData:
        c = self.config
        which, hub = ("cifar10", c.cifar10_hub) if info.name == "cifar10" else ("cifar100", c.cifar100_hub)
        lo = int(info.labels[0])

        def part(split: str) -> tuple[Tensor, Tensor]:
            x, y = _cifar(c.data_dir, which, hub, split)
            keep = (y >= lo) & (y < lo + 10)
            return x[keep], y[keep] - lo

        return _task_data(info, part("train"), part("test"), c.val_fraction, c.train_limit)
