"""Registers the ``glue-sparse`` stream (Expander-EWC paper, Table 5)."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import StreamSpec

from .streams import GlueConfig, GlueSparse

# paper-expander: RoBERTa-base, 99 % sparsity (§6.2); training settings are not published beyond
# "1-3 epochs" and RMSProp (§5); "encoder" is the HF encoder plugin (plugins/hf), one linear head per task.
PAPER = {"orders": ["1"], "model": "encoder", "model.name_or_path": "FacebookAI/roberta-base", "model.head": "linear",
         "model.train_base": True, "train.epochs": 3,
         "train.batch_size": 32, "train.optimizer": "rmsprop", "train.lr": 1e-5}


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [StreamSpec("glue-sparse", GlueSparse, GlueConfig,
                       "CoLA, RTE, MRPC, STS-B, SST-2, QNLI from a GLUE directory or the HF hub (dev = test)",
                       presets={"paper-expander": PAPER}, tags=frozenset({"text", "requires-data"}))]
