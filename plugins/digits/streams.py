"""Streams on scikit-learn's digits images (1,797 real 8×8 scans; shipped with scikit-learn, offline).

* ``permuted-digits``: 10 tasks; task k sees every image through a fixed pixel permutation (task
  ``p0`` is the identity). One shared 10-way head (domain-incremental: no task identity at test time).
* ``permuted-digits-til``: the same tasks with one 10-way head per task (task-incremental: the task identity
  picks the head, a mask or an adapter at test time), the setting of the LPS paper's comparison (§III).
* ``split-digits``: 5 two-class tasks (0/1, 2/3, ...); task-incremental with one head per task.

The train/test split is fixed (stratified, seed 1234), independent of the run seed, so every method
and seed sees the same data; a validation split is carved from train for methods that select.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from clbench.config import bounded
from clbench.data import Split, Stream, TaskData, TaskInfo, stratified_split
from clbench.errors import ConfigError

SPLIT_SEED = 1234
DIGIT_LABELS = tuple(str(d) for d in range(10))


@dataclass(frozen=True)
class DigitsConfig:
    test_fraction: float = bounded(0.3, gt=0, lt=1)
    val_fraction: float = bounded(0.1, gt=0, lt=1)
    tasks: int = bounded(10, ge=1, le=100, help="permuted-digits only: how many permutations")

    def __post_init__(self) -> None:
        for name in ("test_fraction", "val_fraction"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise ConfigError(f"stream.{name}={getattr(self, name)} must lie in (0, 1)")
        if not 1 <= self.tasks <= 100:
            raise ConfigError(f"stream.tasks={self.tasks} must lie in [1, 100]")


@functools.cache
def _splits(test_fraction: float, val_fraction: float) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    from sklearn.datasets import load_digits  # imported here: sklearn costs ~2 s at start-up

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # N × 1 × 8 × 8 in [0, 1]
    y = torch.tensor(digits.target, dtype=torch.long)
    g = torch.Generator().manual_seed(SPLIT_SEED)
    train_idx, test_idx = stratified_split(y, test_fraction, g)
    fit_idx, val_idx = stratified_split(y[train_idx], val_fraction, g)
    return {
        "train": (x[train_idx][fit_idx], y[train_idx][fit_idx]),
        "val": (x[train_idx][val_idx], y[train_idx][val_idx]),
        "test": (x[test_idx], y[test_idx]),
    }


class PermutedDigits(Stream):
    def __init__(self, config: DigitsConfig, multi_head: bool = False) -> None:
        names = [f"p{k}" for k in range(config.tasks)]
        rng = torch.Generator().manual_seed(SPLIT_SEED + 1)
        shuffled = [names[i] for i in torch.randperm(len(names), generator=rng).tolist()]
        super().__init__(
            name="permuted-digits-til" if multi_head else "permuted-digits",
            tasks=[TaskInfo(n, DIGIT_LABELS, group="digits") for n in names],
            orders={"1": names, "2": names[::-1], "3": shuffled},
            modality="image",
            input_shape=(1, 8, 8),
            multi_head=multi_head,
            provenance="scikit-learn load_digits (UCI optdigits test set, 1,797 images)",
        )
        self.config = config

    def permutation(self, task: str) -> torch.Tensor:
        k = int(task[1:])
        if k == 0:
            return torch.arange(64)
        return torch.randperm(64, generator=torch.Generator().manual_seed(SPLIT_SEED + 100 + k))

    def load(self, info: TaskInfo) -> TaskData:
        perm = self.permutation(info.name)
        parts = {}
        for split, (x, y) in _splits(self.config.test_fraction, self.config.val_fraction).items():
            parts[split] = Split(x.reshape(len(x), -1)[:, perm].reshape(x.shape), y)
        return TaskData(info, parts["train"], parts["test"], parts["val"])


class SplitDigits(Stream):
    PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))

    def __init__(self, config: DigitsConfig) -> None:
        names = [f"{a}-{b}" for a, b in self.PAIRS]
        super().__init__(
            name="split-digits",
            tasks=[TaskInfo(f"{a}-{b}", (str(a), str(b)), group="digits") for a, b in self.PAIRS],
            orders={"1": names, "2": names[::-1], "3": [names[i] for i in (1, 4, 0, 3, 2)]},
            modality="image",
            input_shape=(1, 8, 8),
            multi_head=True,
            provenance="scikit-learn load_digits (UCI optdigits test set, 1,797 images)",
        )
        self.config = config

    def load(self, info: TaskInfo) -> TaskData:
        a, b = (int(c) for c in info.labels)
        parts = {}
        for split, (x, y) in _splits(self.config.test_fraction, self.config.val_fraction).items():
            keep = (y == a) | (y == b)
            parts[split] = Split(x[keep], (y[keep] == b).long())
        return TaskData(info, parts["train"], parts["test"], parts["val"])


class SplitDigitsCIL(Stream):
    """split-digits, class-incremental: the same five tasks of two digits, one head over all ten digits and no task
    identity at test time. While task k trains and is scored, the logits of the digits of later tasks are masked
    (:meth:`clbench.model.CLModel.see_labels`: the head grows with the classes seen, the common convention)."""

    def __init__(self, config: DigitsConfig) -> None:
        pairs = SplitDigits.PAIRS
        names = [f"{a}-{b}" for a, b in pairs]
        digits = tuple(str(d) for d in range(10))
        super().__init__(
            name="split-digits-cil",
            tasks=[TaskInfo(f"{a}-{b}", digits, group="digits", classes=(str(a), str(b))) for a, b in pairs],
            orders={"1": names, "2": names[::-1], "3": [names[i] for i in (1, 4, 0, 3, 2)]},
            modality="image",
            input_shape=(1, 8, 8),
            multi_head=False,
            scenario="class-incremental",
            provenance="scikit-learn load_digits (UCI optdigits test set, 1,797 images)",
        )
        self.config = config

    def load(self, info: TaskInfo) -> TaskData:
        a, b = (int(c) for c in info.classes)
        parts = {}
        for split, (x, y) in _splits(self.config.test_fraction, self.config.val_fraction).items():
            keep = (y == a) | (y == b)
            parts[split] = Split(x[keep], y[keep].long())  # the digit itself: its index among the ten
        return TaskData(info, parts["train"], parts["test"], parts["val"])
