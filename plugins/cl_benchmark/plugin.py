"""The CL-benchmark text streams (``standard``, ``long``, offline ``cl-quick``) and the ``smol``,
``paper-t5`` and ``paper-llama`` profiles."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import ProfileSpec, StreamSpec

from .presets import (
    CLAIMS_PROFILES,
    LONG_PRESETS,
    PAPER_PROFILES,
    QUICK_PRESETS,
    SMOL_PROFILE,
    STANDARD_PRESETS,
)
from .streams import CLBenchmarkConfig, QuickConfig, long_stream, quick_stream, standard_stream


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    return [
        StreamSpec("standard", standard_stream, CLBenchmarkConfig,
                   "CL benchmark, 4 text-classification tasks (dbpedia, amazon, yahoo, agnews), orders 1-3; "
                   "needs stream.data_dir (or CLBENCH_DATA_DIR) or stream.source=hub", presets=STANDARD_PRESETS, tags=frozenset({"text"})),
        StreamSpec("long", long_stream, CLBenchmarkConfig,
                   "CL benchmark, 15 tasks (SC, TC, NLI, QQP, BoolQA, MultiRC, WiC, COPA), orders 4-6; "
                   "needs stream.data_dir (or CLBENCH_DATA_DIR) or stream.source=hub", presets=LONG_PRESETS, tags=frozenset({"text"})),
        StreamSpec("cl-quick", quick_stream, QuickConfig,
                   "offline subset of the CL benchmark shipped in the package: dbpedia, amazon, yelp (for yahoo), "
                   "agnews, ~300 train / ~150 test a task", presets=QUICK_PRESETS, tags=frozenset({"text"})),
    ]


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [SMOL_PROFILE, *CLAIMS_PROFILES, *PAPER_PROFILES]
