"""LPS's presets: the quick and bench profiles, and Table I's settings in paper-lps (data:
:func:`clbench._core.provenance.settings_only`)."""

# main.py l.564–571 (warm-up) and l.323–331 (retrain): MultiStepLR, ×0.5 after these epochs of the phase
_RELEASED_LR = {"lr_milestones": [65, 100, 130, 190, 220, 250, 280], "lr_gamma": 0.5}

# Quick profile (digits MLP 64-256-256, the task-incremental streams: one head per task as in the paper);
# warm-up/ADMM/final epochs in the paper's 1:3:1 ratio (Table I), shortened; α such that every task, the last
# included, gets a share.
_QUICK = {"warmup_epochs": 3, "admm_epochs": 3, "retrain_epochs": 2}
QUICK_PRESETS = {
    # train.lr: `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md)
    "quick/permuted-digits-til": {**_QUICK, "alpha": [0.2]},  # five tasks, as split-digits
    "quick/split-digits": {**_QUICK, "alpha": [0.2]},
    # bench (one epoch a task for the others): the paper's 1:3:1 warm-up/ADMM/final ratio, one epoch a phase stage
    "bench": {"warmup_epochs": 1, "admm_epochs": 3, "retrain_epochs": 1, "alpha": [0.2]},  # five tasks at most a stream
    # clbench.testing's tiny profile checks plumbing only (conformance, resume): a few epochs per phase
    "test": {"warmup_epochs": 1, "admm_epochs": 3, "retrain_epochs": 1},
    # paper-lps: Table I values per stream (α, β, warm-up/ADMM/final epochs); optimiser in the stream preset;
    # the released code's learning-rate milestones in the warm-up and retrain phases (the paper gives none)
    "paper-lps/permuted-mnist": {"alpha": [0.1], "beta": [0.9], "warmup_epochs": 30, "admm_epochs": 90,
                                 "retrain_epochs": 30,  # Table I, permuted MNIST: 10%, 90%, 30/90/30
                                 **_RELEASED_LR},  # none fires within 30 epochs: a constant rate, as the code's
    "paper-lps/split-cifar10-100": {"alpha": [0.1], "alpha_first": 0.5, "beta": [0.92], "warmup_epochs": 200,
                                    "admm_epochs": 600, "retrain_epochs": 200,  # Table I, split CIFAR: 50%/10%, 92%, 200/600/200
                                    **_RELEASED_LR},  # 65, 100, 130, 190 fire: each phase ends at 1/16 of its rate
    # paper-lps-tenth (extends paper-lps): a tenth of Table I's epochs a phase, the rest paper-lps's
    "paper-lps-tenth/permuted-mnist": {"warmup_epochs": 3, "admm_epochs": 9, "retrain_epochs": 3},
}
