"""The DER paper's settings (Buzzega et al., NeurIPS 2020, Table 2, MNIST columns), as its code gives them: Mammoth
at tag ``neurips2020`` (commit cb9a36d), ``utils/best_args.py`` (identical for MNIST in every 2020-21 commit), read
by ``--load_best_args``; data (:func:`clbench._core.provenance.settings_only`). ``-1``: a method without a buffer.
Mammoth's JOINT reads the ``sgd`` entry; GDumb is not in the 2020 code, nor in Table 2."""

from __future__ import annotations

BUFFERS = (200, 500, 5120)
# tasks of each dataset: GEM and A-GEM keep buffer_size // tasks examples of each finished task (Mammoth gem.py)
TASKS = {"seq-mnist": 5, "perm-mnist": 20, "rot-mnist": 20}

BEST_ARGS = {
    "seq-mnist": {
        "sgd": {-1: {"lr": 0.03, "batch_size": 10}},
        "ewc_on": {-1: {"lr": 0.03, "e_lambda": 90, "gamma": 1.0, "batch_size": 10}},
        "si": {-1: {"lr": 0.1, "c": 1.0, "xi": 0.9, "batch_size": 10}},
        "lwf": {-1: {"lr": 0.03, "alpha": 1, "softmax_temp": 2.0, "batch_size": 10, "wd_reg": 0.0005}},
        "er": {200: {"lr": 0.01, "minibatch_size": 10, "batch_size": 10},
               500: {"lr": 0.1, "minibatch_size": 10, "batch_size": 10},
               5120: {"lr": 0.1, "minibatch_size": 10, "batch_size": 10}},
        "gem": {200: {"lr": 0.01, "gamma": 1.0, "batch_size": 10},
                500: {"lr": 0.03, "gamma": 0.5, "batch_size": 10},
                5120: {"lr": 0.1, "gamma": 1.0, "batch_size": 10}},
        "agem": {b: {"lr": 0.1, "minibatch_size": 128, "batch_size": 10} for b in BUFFERS},
        "icarl": {b: {"lr": 0.1, "minibatch_size": 10, "wd_reg": 0, "batch_size": 10} for b in BUFFERS},
        "der": {200: {"lr": 0.03, "minibatch_size": 10, "alpha": 0.2, "batch_size": 10},
                500: {"lr": 0.03, "minibatch_size": 128, "alpha": 1.0, "batch_size": 10},
                5120: {"lr": 0.1, "minibatch_size": 128, "alpha": 0.5, "batch_size": 10}},
        "derpp": {200: {"lr": 0.03, "minibatch_size": 128, "alpha": 0.2, "beta": 1.0, "batch_size": 10},
                  500: {"lr": 0.03, "minibatch_size": 10, "alpha": 1.0, "beta": 0.5, "batch_size": 10},
                  5120: {"lr": 0.1, "minibatch_size": 64, "alpha": 0.2, "beta": 0.5, "batch_size": 10}},
    },
    "perm-mnist": {
        "sgd": {-1: {"lr": 0.2, "batch_size": 128}},
        "ewc_on": {-1: {"lr": 0.1, "e_lambda": 0.7, "gamma": 1.0, "batch_size": 128}},
        "si": {-1: {"lr": 0.1, "c": 0.5, "xi": 1.0, "batch_size": 128}},
        "er": {b: {"lr": 0.2, "minibatch_size": 128, "batch_size": 128} for b in BUFFERS},
        "gem": {b: {"lr": 0.1, "gamma": 0.5, "batch_size": 128} for b in BUFFERS},
        "agem": {b: {"lr": 0.1, "minibatch_size": 128, "batch_size": 128} for b in BUFFERS},
        "der": {200: {"lr": 0.2, "minibatch_size": 128, "alpha": 1.0, "batch_size": 128},
                500: {"lr": 0.2, "minibatch_size": 128, "alpha": 1.0, "batch_size": 128},
                5120: {"lr": 0.2, "minibatch_size": 128, "alpha": 0.5, "batch_size": 128}},
        "derpp": {200: {"lr": 0.1, "minibatch_size": 128, "alpha": 1.0, "beta": 1.0, "batch_size": 128},
                  500: {"lr": 0.2, "minibatch_size": 128, "alpha": 1.0, "beta": 0.5, "batch_size": 128},
                  5120: {"lr": 0.2, "minibatch_size": 128, "alpha": 0.5, "beta": 1.0, "batch_size": 128}},
    },
    "rot-mnist": {
        "sgd": {-1: {"lr": 0.2, "batch_size": 128}},
        "ewc_on": {-1: {"lr": 0.1, "e_lambda": 0.7, "gamma": 1.0, "batch_size": 128}},
        "si": {-1: {"lr": 0.1, "c": 1.0, "xi": 1.0, "batch_size": 128}},
        "er": {b: {"lr": 0.2, "minibatch_size": 128, "batch_size": 128} for b in BUFFERS},
        "gem": {b: {"lr": 0.01, "gamma": 0.5, "batch_size": 128} for b in BUFFERS},
        "agem": {200: {"lr": 0.1, "minibatch_size": 128, "batch_size": 128},
                 500: {"lr": 0.3, "minibatch_size": 128, "batch_size": 128},
                 5120: {"lr": 0.3, "minibatch_size": 128, "batch_size": 128}},
        "der": {200: {"lr": 0.2, "minibatch_size": 128, "alpha": 1.0, "batch_size": 128},
                500: {"lr": 0.2, "minibatch_size": 128, "alpha": 0.5, "batch_size": 128},
                5120: {"lr": 0.2, "minibatch_size": 128, "alpha": 0.5, "batch_size": 128}},
        "derpp": {200: {"lr": 0.1, "minibatch_size": 128, "alpha": 1.0, "beta": 0.5, "batch_size": 128},
                  500: {"lr": 0.2, "minibatch_size": 128, "alpha": 0.5, "beta": 1.0, "batch_size": 128},
                  5120: {"lr": 0.2, "minibatch_size": 128, "alpha": 0.5, "beta": 0.5, "batch_size": 128}},
    },
}

# Mammoth's model name -> clbench's method
METHODS = {"sgd": "seqft", "ewc_on": "ewc", "si": "si", "lwf": "lwf", "er": "replay", "gem": "gem", "agem": "agem",
           "icarl": "icarl", "der": "der", "derpp": "derpp", "joint": "joint"}
