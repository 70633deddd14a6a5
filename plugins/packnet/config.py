from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clbench.config import bounded, setting
from clbench.errors import ConfigError

PROJECTIONS = ("irregular", "column", "filter")


def check_shares(setting: str, key: str, values: Iterable[float]) -> None:
    """α and β are shares of a layer: each must lie in (0, 1]. Raised at plan time, before any cell runs."""
    values = list(values)
    if not values:
        raise ConfigError(f"{setting}.{key} is empty: give one value, or one per pruned layer")
    for v in values:
        if not 0.0 < v <= 1.0:
            raise ConfigError(f"{setting}.{key}={v} must lie in (0, 1] (a share of the layer's weights)")


def check_partition(setting: str, alpha: Iterable[float], alpha_first: float, projection: Iterable[str],
                    epochs: dict[str, int]) -> None:
    """The checks that need no model: ranges, projection names, epoch counts (shape checks run in setup)."""
    check_shares(setting, "alpha", alpha)
    if alpha_first != 0.0:
        check_shares(setting, "alpha_first", [alpha_first])
    for kind in projection:
        if kind not in PROJECTIONS:
            raise ConfigError(f"{setting}.projection={kind!r}: choose one of {list(PROJECTIONS)}")
    for key, value in epochs.items():
        if value < 0:
            raise ConfigError(f"{setting}.{key}={value} must be ≥ 0")


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
