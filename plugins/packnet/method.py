"""PackNet: train the free weights, prune to the task's share by magnitude, retrain the kept ones, freeze."""

from __future__ import annotations

import torch
from clbench_plugins._shared.partition import PartitionMethod, keep_mask

from clbench.method import Phase

from .config import PackNetConfig


class PackNet(PartitionMethod):
    setting = "packnet"
    config: PackNetConfig

    def phases(self, task: str, index: int) -> list[Phase]:
        epochs = self.config.train_epochs or self.ctx.train.epochs
        retrain = self.config.retrain_epochs or max(1, epochs // 2)
        return [self.base_phase("train", epochs), self.base_phase("retrain", retrain)]

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        if phase.name == "retrain":
            self.prune(index)

    def prune(self, index: int) -> None:
        """Keep the largest free entries (the task's share), zero the rest; only kept entries retrain."""
        with torch.no_grad():
            for n, p in self.layers.items():
                self.kept[n] = keep_mask(p, self.free(n), self.count(n, index), self.kind[n])
                p.masked_fill_(self.free(n) & ~self.kept[n], 0.0)
        self.set_trainable(self.kept)
