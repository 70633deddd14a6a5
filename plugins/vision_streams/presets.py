"""The MNIST and CIFAR streams' presets: paper-lps and bench (data:
:func:`clbench._core.provenance.settings_only`)."""

from __future__ import annotations

# LPS §V-A: "For all experiments, we use a batch size of 128 and Adam as an optimizer with default values
# and initialize the learning rate to 0.001." Epochs per phase live in the methods' paper-lps presets.
PAPER_TRAIN = {"train.batch_size": 128, "train.optimizer": "adam", "train.lr": 1e-3, "orders": ["1"]}
# The bench profile: full MNIST test sets, a small MLP and one epoch a task so that every method that applies runs
# 20 cells a row (seeds 0-9 x orders 1, 2; order 3 is tuning's) and its tuning fits a working session on 2 CPU
# cores. A cell's cost is its arithmetic (the 784-wide first layer), so the model and the permutations are what
# shrink: MLP 2x50 and 3 permutations cost ~0.35x the 2x100, 5-permutation cells (docs/bench.md).
BENCH = {"model": "mlp", "model.hidden": [50, 50], "train.batch_size": 128, "train.optimizer": "adam",
          "train.lr": 1e-3, "train.epochs": 1, "orders": ["1", "2"], "seeds": list(range(10))}
BENCH_PERMUTED = {**BENCH, "stream.tasks": 3}
