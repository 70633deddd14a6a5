"""Registers the ``glue-sparse`` and ``glue-cl`` streams and the ``glue-encoder`` model (Expander-EWC
paper, §6.2 and Table 5)."""

from __future__ import annotations

from clbench_plugins._shared.cl_data import CLBenchmarkConfig

from clbench import hookimpl
from clbench.specs import ModelSpec, StreamSpec

from .model import GlueEncoderConfig, build_glue_encoder
from .presets import PAPER, PAPER_CL
from .streams import GlueConfig, GlueSparse, build_cl


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [StreamSpec("glue-sparse", GlueSparse, GlueConfig,
                       "CoLA, RTE, MRPC, STS-B (regression), SST-2, QNLI from a GLUE directory or the HF hub "
                       "(dev = test)", presets={"paper-expander": PAPER}, tags=frozenset({"text", "requires-data"})),
            StreamSpec("glue-cl", build_cl, CLBenchmarkConfig,
                       "MNLI, QQP, RTE, SST-2, CB, BoolQA from the CL benchmark (stream.data_dir or "
                       "CLBENCH_DATA_DIR); accuracy", presets={"paper-expander": PAPER_CL},
                       tags=frozenset({"text", "requires-data"}))]


@hookimpl
def clbench_add_models() -> list[ModelSpec]:
    return [ModelSpec("glue-encoder", build_glue_encoder, GlueEncoderConfig,
                      "sentence encoder + one linear head per task, raw inputs; one-label tasks (STS-B) are "
                      "regression (MSE); default all-MiniLM-L6-v2", modalities=frozenset({"text"}),
                      provides=frozenset({"lora"}))]
