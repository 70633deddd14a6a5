"""Registers LoTA and LoTTO. The paper's other baselines are existing methods under other names:
``fft`` = ``seqft`` (full fine-tuning in sequence) and ``lora`` = ``seqlora`` (plugins/seqlora)."""

from __future__ import annotations

from clbench_plugins._shared.masked.presets import OWN_LR, PAPER_PRESETS
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import LoTAConfig, LoTTOConfig
from .method import LoTA
from .presets import LOTTO_QUICK_STREAMS, QUICK

_QUICK_LOTA = tuned("lota", {"quick": dict(QUICK), **PAPER_PRESETS})
_QUICK_LOTTO = tuned("lotto", {**{f"quick/{s}": dict(QUICK) for s in LOTTO_QUICK_STREAMS}, **PAPER_PRESETS})


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("lota", LoTA, LoTAConfig, "lottery ticket adaptation: mask from a dense run's task vector",
                   footprint_kind="masked", presets=_QUICK_LOTA, tune=OWN_LR),
        MethodSpec("lotto", LoTA, LoTTOConfig, "LoTA with masks disjoint from earlier tasks'",
                   footprint_kind="masked", presets=_QUICK_LOTTO, tune=OWN_LR),
    ]
