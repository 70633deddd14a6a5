"""clbench: a plugin-architecture benchmark harness for continual learning.

Everything a plugin author codes against is importable from here (``from clbench import Method, MethodSpec,
hookimpl``) and from the contract modules it lives in (``clbench.method``, ``clbench.data``, ``clbench.specs``,
``clbench.metrics``, ``clbench.model``, ``clbench.config``, ``clbench.errors``, ``clbench.footprints``,
``clbench.distributed``, ``clbench.cell``, ``clbench.hub``); the testing kit is ``clbench.testing``. The harness
itself lives in ``clbench._core``, ``clbench._exec``, ``clbench._tools`` and ``clbench._cli``: not an API.

Names load on first use (PEP 562), so ``import clbench`` stays cheap: torch loads with the first name that
needs it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clbench.hookspecs import hookimpl

try:  # one version source: the installed distribution's metadata (pyproject.toml)
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("clbench")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# name -> the contract module that defines it
_EXPORTS = {
    **dict.fromkeys(("Method", "Phase", "MaskPlan", "CellContext", "StashKey", "derive_seed"), "clbench.method"),
    **dict.fromkeys(("CLModel", "HeadedModel", "StreamInfo"), "clbench.model"),
    **dict.fromkeys(
        (
            "Stream",
            "TaskData",
            "TaskInfo",
            "Split",
            "Batch",
            "batches",
            "stratified_split",
            "confined",
            "read_text",
            "read_records",
            "cache_dir",
            "atomic_write_text",
        ),
        "clbench.data",
    ),
    **dict.fromkeys(
        (
            "MethodSpec",
            "ModelSpec",
            "StreamSpec",
            "MetricSpec",
            "ProfileSpec",
            "ExecutorSpec",
            "OptionSpec",
            "TargetsSpec",
            "Memory",
            "MemorySpec",
            "ShardingSpec",
            "TestSetSpec",
            "EmptyConfig",
            "Workers",
        ),
        "clbench.specs",
    ),
    **dict.fromkeys(("MetricInput",), "clbench.metrics"),
    **dict.fromkeys(("TaskFootprint", "Dense", "Masked", "LowRank"), "clbench.footprints"),
    **dict.fromkeys(("bounded", "setting", "TrainConfig", "MetricsConfig"), "clbench.config"),
    **dict.fromkeys(("ClbenchError", "ConfigError", "DataError", "PluginError", "HubUnreachable"), "clbench.errors"),
    **dict.fromkeys(("Dist",), "clbench.distributed"),
    **dict.fromkeys(("Cell", "Plan", "CellResult", "TEST_PROFILE"), "clbench.cell"),
}

__all__ = ["hookimpl", "__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'clbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and IDEs see of the lazy names above
    from clbench.cell import TEST_PROFILE, Cell, CellResult, Plan
    from clbench.config import MetricsConfig, TrainConfig, bounded, setting
    from clbench.data import (
        Batch,
        Split,
        Stream,
        TaskData,
        TaskInfo,
        atomic_write_text,
        batches,
        cache_dir,
        confined,
        read_records,
        read_text,
        stratified_split,
    )
    from clbench.distributed import Dist
    from clbench.errors import ClbenchError, ConfigError, DataError, HubUnreachable, PluginError
    from clbench.footprints import Dense, LowRank, Masked, TaskFootprint
    from clbench.method import CellContext, Method, Phase, StashKey, derive_seed
    from clbench.metrics import MetricInput
    from clbench.model import CLModel, HeadedModel, StreamInfo
    from clbench.specs import (
        EmptyConfig,
        ExecutorSpec,
        MethodSpec,
        MetricSpec,
        ModelSpec,
        OptionSpec,
        ProfileSpec,
        StreamSpec,
        Workers,
    )
