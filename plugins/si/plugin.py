from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import SIConfig
from .method import SI

# paper-lps (LPS Table II's "IS" column): the LPS paper gives no SI setting; Zenke et al.'s own permuted-MNIST values
PRESETS = {"paper-lps/permuted-mnist": {"c": 0.1, "xi": 1e-3}}  # quick: `clbench tune` (docs/tuning.md)
# The tuning range of c: Zenke et al. use 0.1 (permuted MNIST) to 1 (split MNIST), but the surrogate's scale is set
# by Ω = Σ ω/(Δ² + ξ), which grows with the learning rate: on quick split-digits-cil at its tuned lr (0.0026, mean Ω
# 0.025) c ≤ 1 left every seed's accuracy matrix as at c = 0, c = 100 moved it (AA 14.8 → 19.6 over 3 seeds) and
# c = 1000 diverged. 0.1–1000 holds the paper's values and the strengths at which the penalty acts.
C_RANGE = (0.1, 1000.0)


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("si", SI, SIConfig, "synaptic intelligence: path-integral importance (Zenke et al. 2017)",
                       footprint_kind="dense", composable=True, presets=tuned("si", PRESETS),
                       tune={"c": C_RANGE})]
