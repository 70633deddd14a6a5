from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DERConfig, DERPPConfig
from .method import DER

# Quick learning rates and α: chosen by the validation protocol of scripts/tune_quick.py (docs/tuning.md).
DER_PRESETS = {"quick/permuted-digits": {"train.lr": 0.05, "alpha": 1.0},
               "quick/permuted-digits-til": {"train.lr": 0.05, "alpha": 0.1},
               "quick/split-digits": {"train.lr": 0.0125, "alpha": 1.0},
               "quick/split-digits-cil": {"train.lr": 0.05, "alpha": 1.0}}
DERPP_PRESETS = {"quick/permuted-digits": {"train.lr": 0.05, "alpha": 0.3},
                 "quick/permuted-digits-til": {"train.lr": 0.05, "alpha": 0.1},
                 "quick/split-digits": {"train.lr": 0.05, "alpha": 1.0},
                 "quick/split-digits-cil": {"train.lr": 0.05, "alpha": 1.0}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("der", DER, DERConfig, "dark experience replay: logits of a reservoir buffer (Buzzega 2020)",
                   footprint_kind="dense", presets=DER_PRESETS),
        MethodSpec("derpp", DER, DERPPConfig, "DER++: replay of logits and labels (Buzzega 2020)",
                   footprint_kind="dense", presets=DERPP_PRESETS),
    ]
