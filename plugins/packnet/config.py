from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PackNetConfig:
    """PackNet (Mallya & Lazebnik, CVPR 2018) as the LPS paper runs it (Wang et al. 2021, §V-A).

    Each task trains the free weights, keeps the ``alpha`` share of each pruned layer with the largest
    magnitudes (the rest is released for later tasks), retrains the kept ones and freezes them.
    ``alpha`` is a share of the *whole layer* (LPS Table I's convention), so both methods get the same
    capacity per task; range and capacity are checked before training.
    """

    alpha: tuple[float, ...] = (0.1,)  # share of each layer a task keeps; LPS Table I (permuted MNIST: 10%); one value or one per layer
    alpha_first: float = 0.0  # task 1's share when > 0; LPS Table I split CIFAR: 50% for n = 1
    projection: tuple[str, ...] = ("irregular",)  # PackNet prunes by magnitude, entry by entry (PackNet §3)
    train_epochs: int = 0  # 0: train.epochs; PackNet §4 trains then prunes
    retrain_epochs: int = 0  # 0: half of train.epochs (at least 1); PackNet §4 retrains the kept weights
