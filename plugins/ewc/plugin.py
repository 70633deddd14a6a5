from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import EWCConfig
from .method import EWC


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("ewc", EWC, EWCConfig, "elastic weight consolidation, diagonal Fisher (Kirkpatrick 2017)",
                       footprint_kind="dense", composable=True,
                       presets={"quick/permuted-digits": {"lambda": 10.0}, "quick/split-digits": {"lambda": 1000.0}})]
