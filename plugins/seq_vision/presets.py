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

# paper-prompt-vit: the prompt papers' Split CIFAR-100 (10 tasks of 10 classes, natural order) on a pretrained
# ViT-B/16, each row with its released code's settings (read at: google-research/l2p dd8836e (L2P configs at
# 8cfb210), JH-LEE-KR/l2p-pytorch f7bc994, JH-LEE-KR/dualprompt-pytorch 7eb457d, GT-RIPL/CODA-Prompt 6417d4f).
# Their code feeds images in [0, 1] (no normalisation), trains the prompts and a linear head over every class with
# the logits outside the current task masked (train.head=task), Adam (0.9, 0.999) reset each task. The Google-
# derived codes scale the lr by the global batch / 256 (official runs: 8 devices): L2P 0.03 × 128/256, DualPrompt
# 0.03 × 192/256; CODA does not scale.
PROMPT_PROTOCOL = {"model": "vit-b16", "stream.normalise": False, "train.head": "task", "train.optimizer": "adam",
                   "orders": ["1"]}
IN21K = "timm/vit_base_patch16_224.orig_in21k"  # the official code's imagenet21k/ViT-B_16.npz
IN21K_FT_IN1K = "timm/vit_base_patch16_224.augreg_in21k_ft_in1k"  # Mammoth's; CODA's code takes timm's default
CIFAR_ROWS = {
    "l2p": {"model.weights": IN21K, "train.lr": 0.03 * 128 / 256, "train.batch_size": 128, "train.epochs": 5,
            "train.grad_clip": 1.0, "l2p.pool_size": 10, "l2p.length": 5, "l2p.top_k": 5, "l2p.key_lambda": 0.1,
            "l2p.init": "uniform"},
    "dualprompt": {"model.weights": IN21K, "train.lr": 0.03 * 192 / 256, "train.batch_size": 192, "train.epochs": 5,
                   "train.grad_clip": 1.0, "dualprompt.g_length": 5, "dualprompt.e_length": 5,
                   "dualprompt.pool_size": 10, "dualprompt.key_lambda": 1.0},
    "coda-prompt": {"model.weights": IN21K_FT_IN1K, "train.lr": 0.001, "train.batch_size": 128, "train.epochs": 20,
                    "coda-prompt.pool_size": 100, "coda-prompt.length": 8, "coda-prompt.ortho_mu": 0.0},
}
# ImageNet-R: DualPrompt's configs/imr_dualprompt.py (E-prompts of 20, lr 0.005 × 192/256, 50 epochs) and CODA's
# (50 epochs); L2P's code has no ImageNet-R config (its number is DualPrompt's rerun): L2P's CIFAR settings with
# DualPrompt's 50 epochs
PROMPT_ROWS = {
    "seq-cifar100": CIFAR_ROWS,
    "imagenet-r": {
        "l2p": {**CIFAR_ROWS["l2p"], "train.epochs": 50},
        "dualprompt": {**CIFAR_ROWS["dualprompt"], "train.lr": 0.005 * 192 / 256, "train.epochs": 50,
                       "dualprompt.e_length": 20},
        "coda-prompt": {**CIFAR_ROWS["coda-prompt"], "train.epochs": 50},
    },
}
