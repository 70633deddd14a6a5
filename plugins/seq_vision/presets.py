"""The DER paper's settings for its Seq-CIFAR-10 and Seq-TinyImageNet columns (Buzzega et al., NeurIPS 2020, Table
2), as its code gives them: Mammoth at tag ``neurips2020`` (commit cb9a36d), ``utils/best_args.py``, read by
``--load_best_args``; data (:func:`clbench._core.provenance.settings_only`). ``-1``: a method without a buffer.
Mammoth's JOINT reads the ``sgd`` entry."""

from __future__ import annotations

BUFFERS = (200, 500, 5120)
TASKS = {"seq-cifar10": 5, "seq-tinyimg": 10}  # GEM and A-GEM keep buffer_size // tasks examples of each finished task

# batch 32, SGD, 50 (CIFAR-10) and 100 (TinyImageNet) epochs a task; no GEM on TinyImageNet (Table 2: "–").
# iCaRL's minibatch_size 0 on CIFAR-10: its exemplars join the task's data.
BEST_ARGS: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
BEST_ARGS["seq-cifar10"] = {
    "sgd": {-1: {"lr": 0.1, "batch_size": 32, "n_epochs": 50}},
    "ewc_on": {-1: {"lr": 0.03, "e_lambda": 10, "gamma": 1.0, "batch_size": 32, "n_epochs": 50}},
    "si": {-1: {"lr": 0.03, "c": 0.5, "xi": 1.0, "batch_size": 32, "n_epochs": 50}},
    "lwf": {-1: {"lr": 0.01, "alpha": 3.0, "softmax_temp": 2.0, "batch_size": 32, "n_epochs": 50, "wd_reg": 0.0005}},
    "er": {b: {"lr": 0.1, "minibatch_size": 32, "batch_size": 32, "n_epochs": 50} for b in BUFFERS},
    "gem": {b: {"lr": 0.03, "gamma": 0.5, "batch_size": 32, "n_epochs": 50} for b in BUFFERS},
    "agem": {b: {"lr": 0.03, "minibatch_size": 32, "batch_size": 32, "n_epochs": 50} for b in BUFFERS},
    "icarl": {200: {"lr": 0.1, "minibatch_size": 0, "softmax_temp": 2.0, "wd_reg": 0.00001, "batch_size": 32,
                    "n_epochs": 50},
              500: {"lr": 0.1, "minibatch_size": 0, "softmax_temp": 2.0, "wd_reg": 0.00001, "batch_size": 32,
                    "n_epochs": 50},
              5120: {"lr": 0.03, "minibatch_size": 0, "softmax_temp": 2.0, "wd_reg": 0.00001, "batch_size": 32,
                     "n_epochs": 50}},
    "der": {b: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.3, "batch_size": 32, "n_epochs": 50} for b in BUFFERS},
    "derpp": {200: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.1, "beta": 0.5, "batch_size": 32, "n_epochs": 50},
              500: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.2, "beta": 0.5, "batch_size": 32, "n_epochs": 50},
              5120: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.1, "beta": 1.0, "batch_size": 32, "n_epochs": 50}},
}
BEST_ARGS["seq-tinyimg"] = {
    "sgd": {-1: {"lr": 0.03, "batch_size": 32, "n_epochs": 100}},
    "ewc_on": {-1: {"lr": 0.03, "e_lambda": 25, "gamma": 1.0, "batch_size": 32, "n_epochs": 100}},
    "si": {-1: {"lr": 0.03, "c": 0.5, "xi": 1.0, "batch_size": 32, "n_epochs": 100}},
    "lwf": {-1: {"lr": 0.01, "alpha": 1.0, "softmax_temp": 2.0, "batch_size": 32, "n_epochs": 100, "wd_reg": 0.0005}},
    "er": {200: {"lr": 0.1, "minibatch_size": 32, "batch_size": 32, "n_epochs": 100},
           500: {"lr": 0.03, "minibatch_size": 32, "batch_size": 32, "n_epochs": 100},
           5120: {"lr": 0.1, "minibatch_size": 32, "batch_size": 32, "n_epochs": 100}},
    "agem": {b: {"lr": 0.01, "minibatch_size": 32, "batch_size": 32, "n_epochs": 100} for b in BUFFERS},
    "icarl": {b: {"lr": 0.03, "minibatch_size": 32, "softmax_temp": 2.0, "wd_reg": 0.00001, "batch_size": 32,
                  "n_epochs": 100} for b in BUFFERS},
    "der": {b: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.1, "batch_size": 32, "n_epochs": 100} for b in BUFFERS},
    "derpp": {200: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.1, "beta": 1.0, "batch_size": 32, "n_epochs": 100},
              500: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.2, "beta": 0.5, "batch_size": 32, "n_epochs": 100},
              5120: {"lr": 0.03, "minibatch_size": 32, "alpha": 0.1, "beta": 0.5, "batch_size": 32,
                     "n_epochs": 100}},
}
