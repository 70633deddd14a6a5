"""PackNet's presets: the quick and bench profiles, and paper-lps (data:
:func:`clbench._core.provenance.settings_only`)."""

# Quick profile (digits MLP 64-256-256): the task-incremental streams (one head per task, the paper's multi-head
# setting, LPS §III); α such that every task of the stream, the last included, gets the same share.
QUICK_PRESETS = {
    # train.lr: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md)
    "quick/permuted-digits-til": {"alpha": [0.2]},  # five tasks, as split-digits
    "quick/split-digits": {"alpha": [0.2]},
    # bench: train and retrain one epoch each (LPS's warm-up and final phases there)
    "bench": {"train_epochs": 1, "retrain_epochs": 1, "alpha": [0.2]},  # five tasks at most a stream: every one a share
    # paper-lps: the same per-task share as LPS (Table I α); train/retrain epochs = LPS warm-up/final (the
    # paper gives none for PackNet; it runs the authors' code with "the recommended hyperparameters")
    "paper-lps/permuted-mnist": {"alpha": [0.1], "train_epochs": 30, "retrain_epochs": 30},
    "paper-lps/split-cifar10-100": {"alpha": [0.1], "alpha_first": 0.5, "train_epochs": 200, "retrain_epochs": 200},
    # paper-lps-tenth (extends paper-lps): a tenth of those epochs, the rest paper-lps's
    "paper-lps-tenth/permuted-mnist": {"train_epochs": 3, "retrain_epochs": 3},
}
