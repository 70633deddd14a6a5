"""The digits streams' quick presets (data:
:func:`clbench._core.provenance.settings_only`)."""

from __future__ import annotations

# Quick-profile settings: small enough that every method runs on all three orders in seconds.
# Order 1 with the profile's three seeds (0, 1, 2): seeds separate methods within the five-minute budget; the other
# orders run with --orders 1,2,3. The learning rate is each method's (its quick preset, docs/tuning.md).
QUICK = {"model": "mlp", "orders": ["1"], "train.epochs": 3, "train.batch_size": 32,
          "train.lr": 0.05, "train.momentum": 0.9, "train.optimizer": "sgd"}
# Five permutations, as split-digits has five tasks: the quick default's 276 cells took 10 min 54 s on 2 cores with
# ten, 2 min 47 s for its digits cells with five (AMD EPYC, 2026-11-27); --set stream.tasks=10 restores the ten.
PERMUTED = {**QUICK, "stream.tasks": 5}
