from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import SIConfig
from .method import SI

# paper-lps (LPS Table II's "IS" column): the LPS paper gives no SI setting; Zenke et al.'s own permuted-MNIST values
PRESETS = {"paper-lps/permuted-mnist": {"c": 0.1, "xi": 1e-3}}  # quick: `clbench tune` (docs/tuning.md)


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("si", SI, SIConfig, "synaptic intelligence: path-integral importance (Zenke et al. 2017)",
                       footprint_kind="dense", composable=True, presets=tuned("si", PRESETS),
                       tune={"c": (0.01, 10.0)})]
