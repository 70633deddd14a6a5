from __future__ import annotations

from dataclasses import dataclass

from clbench_plugins._shared.partition import check_partition

from clbench.config import bounded, setting


@dataclass(frozen=True)
class PackNetConfig:
    """PackNet (Mallya & Lazebnik, CVPR 2018) as the LPS paper runs it (Wang et al. 2021, §V-A).

    Each task trains the free weights, keeps the ``alpha`` share of each pruned layer with the largest
    magnitudes (the rest is released for later tasks), retrains the kept ones and freezes them.
    ``alpha`` is a share of the *whole layer* (LPS Table I's convention), so both methods get the same
    capacity per task. Ranges are checked when the config is built (plan time, before any cell runs);
    capacity and projection-vs-layer checks need the model and run in ``setup``, before training.
    """

    alpha: tuple[float, ...] = setting((0.1,), help=(
        "share of each layer a task keeps; LPS Table I (permuted MNIST: 10%); one value or one per layer"))
    alpha_first: float = bounded(0.0, ge=0, le=1, help=(
        "task 1's share when > 0; LPS Table I split CIFAR: 50% for n = 1"))
    projection: tuple[str, ...] = setting(("irregular",), help=(
        "PackNet prunes by magnitude, entry by entry (PackNet §3)"))
    train_epochs: int = bounded(0, ge=0, help="0: train.epochs; PackNet §4 trains then prunes")
    retrain_epochs: int = bounded(0, ge=0, help=(
        "0: half of train.epochs (at least 1); PackNet §4 retrains the kept weights"))

    def __post_init__(self) -> None:
        check_partition("packnet", self.alpha, self.alpha_first, self.projection,
                        {"train_epochs": self.train_epochs, "retrain_epochs": self.retrain_epochs})
