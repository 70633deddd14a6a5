"""Registers LoTA and LoTTO. The paper's other baselines are existing methods under other names:
``fft`` = ``seqft`` (full fine-tuning in sequence) and ``lora`` = ``seqlora`` (plugins/seqlora)."""

from __future__ import annotations

from clbench_plugins._shared.masked.config import PAPER_PRESETS

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import LoTAConfig, LoTTOConfig
from .method import LoTA

# Quick profile: RMSProp as expander-ewc's quick preset, each method's own lr on each stream from the validation
# protocol of scripts/tune_quick.py (docs/tuning.md); 5 % masks for LoTTO so that 10 disjoint masks fit in
# permuted-digits' matrices with room to choose.
_QUICK = {"train.epochs": 1, "calibration_epochs": 1}
_QUICK_LOTA = {"quick": {**_QUICK, "lr": 1e-3}, "quick/permuted-digits": {**_QUICK, "lr": 1e-3},
               "quick/permuted-digits-til": {**_QUICK, "lr": 2e-3}, "quick/split-digits": {**_QUICK, "lr": 1e-3},
               "quick/split-digits-cil": {**_QUICK, "lr": 5e-4},
               **PAPER_PRESETS}
_QUICK_LOTTO = {"quick/permuted-digits": {**_QUICK, "lr": 2e-3, "density": 0.05},
                "quick/permuted-digits-til": {**_QUICK, "lr": 2e-3, "density": 0.05},
                "quick/split-digits": {**_QUICK, "lr": 5e-4},
                "quick/split-digits-cil": {"lr": 5e-4},  # tuned with the stream's own epochs and density, run so
                **PAPER_PRESETS}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("lota", LoTA, LoTAConfig, "lottery ticket adaptation: mask from a dense run's task vector",
                   footprint_kind="masked", presets=_QUICK_LOTA),
        MethodSpec("lotto", LoTA, LoTTOConfig, "LoTA with masks disjoint from earlier tasks'",
                   footprint_kind="masked", presets=_QUICK_LOTTO),
    ]
