"""The GLUE streams' paper-expander presets (data:
:func:`clbench._core.provenance.settings_only`)."""

from __future__ import annotations

# Table 5's protocol (§6.2): each task fine-tuned from the same base with its own 99 %-sparse mask, no
# task sequence, no EWC — the per-task masked methods of plugins/pertask ("methods" is what
# `--methods all` means on the stream; the six-task sequence stays available to every CL method).
TABLE5_METHODS = ["pertask-expander", "pertask-random"]
# paper-expander: RoBERTa-base, 99 % sparsity (§6.2; the density is each masked method's preset); training
# settings are not published beyond "1-3 epochs" and "RMSProp with default hyperparameters" (§5); lr 1e-5
# and batch 32 are the usual RoBERTa GLUE settings (not stated in the paper). One linear head per task,
# STS-B a one-output regression head (glue-encoder).
TRAIN = {"model": "glue-encoder", "model.head": "linear", "model.train_base": True, "train.epochs": 3,
         "train.batch_size": 32, "train.optimizer": "rmsprop", "train.lr": 1e-5}
PAPER = {"orders": ["1"], "methods": TABLE5_METHODS, "model.name_or_path": "FacebookAI/roberta-base", **TRAIN}
# The same protocol on the CL benchmark's GLUE-style tasks (offline), MiniLM by default (model.name_or_path "").
PAPER_CL = {"orders": ["1"], "methods": TABLE5_METHODS, **TRAIN}
