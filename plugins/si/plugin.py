from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import SIConfig
from .method import SI

# paper-lps (LPS Table II's "IS" column): the LPS paper gives no SI setting; Zenke et al.'s own permuted-MNIST values
PRESETS = {"paper-lps/permuted-mnist": {"c": 0.1, "xi": 1e-3},
           # quick: learning rates and c chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md)
           "quick/permuted-digits": {"train.lr": 0.0125, "c": 0.1},  # 0.025/0.1 and 0.0125/1's doubled runs diverged
           "quick/permuted-digits-til": {"train.lr": 0.0125, "c": 1.0},  # 0.05/0.1 and 0.025/1's doubled runs diverged
           "quick/split-digits": {"train.lr": 0.0125, "c": 10.0},
           "quick/split-digits-cil": {"train.lr": 0.0125, "c": 0.1}}  # 0.025/1 and 0.0125/1's doubled runs diverged


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("si", SI, SIConfig, "synaptic intelligence: path-integral importance (Zenke et al. 2017)",
                       footprint_kind="dense", composable=True, presets=PRESETS)]
