"""Registers Expander-EWC and its two ablations; they share one class and differ only in settings."""

from __future__ import annotations

from clbench_plugins._shared.masked.config import (
    DenseEWCConfig,
    ExpanderEWCConfig,
    ExpanderOnlyConfig,
    RandomMaskEWCConfig,
)
from clbench_plugins._shared.masked.method import ExpanderEWC
from clbench_plugins._shared.masked.presets import EWC_TUNE, OWN_LR, PAPER_PRESETS
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .presets import QUICK, QUICK_STREAMS


def presets(method: str) -> dict[str, dict[str, object]]:
    """The method's presets: the quick ones and its tuned values, then the paper profiles' (``expander``: without
    EWC's keys)."""
    drop = ("lambda", "fisher_samples") if method == "expander" else ()
    quick = {f"quick/{stream}": dict(QUICK) for stream in QUICK_STREAMS}
    return tuned(method, {k: {kk: vv for kk, vv in v.items() if kk not in drop}
                          for k, v in {**quick, **PAPER_PRESETS}.items()})


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("expander-ewc", ExpanderEWC, ExpanderEWCConfig,
                   "expander-graph sparse masks per task + damped-Fisher EWC (Algorithm 1)",
                   footprint_kind="masked", presets=presets("expander-ewc"), tune=EWC_TUNE),
        MethodSpec("random-mask-ewc", ExpanderEWC, RandomMaskEWCConfig,
                   "ablation: equally sparse uniform random masks + the same EWC",
                   footprint_kind="masked", presets=presets("random-mask-ewc"), tune=EWC_TUNE,
                   tags=frozenset({"ablation"})),
        MethodSpec("expander", ExpanderEWC, ExpanderOnlyConfig,
                   "ablation: expander masks without EWC (λ = 0)",
                   footprint_kind="masked", presets=presets("expander"), tune=OWN_LR, tags=frozenset({"ablation"})),
        MethodSpec("dense-ewc", ExpanderEWC, DenseEWCConfig,
                   "ablation: Algorithm 1 without masks (every coordinate trains; same damped-Fisher EWC, RMSProp)",
                   footprint_kind="masked", presets=presets("dense-ewc"), tune=EWC_TUNE,
                   tags=frozenset({"ablation"})),
    ]
